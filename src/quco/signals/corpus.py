"""QuCo-RAG's corpus-count rules, as pure functions of the counts: stage 1 (question entities) and stage 2 (claims).

- Stage 1: the question's entities are counted; their **mean** count below the threshold means the question
  asks about rare knowledge. The score of the one candidate (the question) is that mean (or, as an option of
  ours, the lowest count).
- Stage 2: each judged sentence's claims are counted: a 3-tuple by the co-occurrence of head and tail, a 2-tuple
  by its head's count. A claim below its threshold flags the sentence. Two records cover a sentence, one per
  kind: its score is the lowest co-occurrence (or head count) among its claims of that kind.

A count that could not be looked up has no value; under the unknown-policy "retrieve" it fires whatever the
threshold (``TriggerRecord.forced``), under "keep" it is ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from quco.corpus_stats.base import CountResult
from quco.trigger_record import TriggerRecord

COOCCURRENCE = "cooccurrence"
HEAD_COUNT = "head_count"


def count_value(result: CountResult, unit: str) -> float | None:
    """The number a threshold in ``unit`` ("count" or "per_billion") is compared with; None if unknown."""
    if result.status != "ok" or result.count is None:
        return None
    if unit == "per_billion":
        return result.per_billion
    return float(result.count)


def count_record(result: CountResult) -> dict[str, Any]:
    """What the trace shows about one lookup."""
    rec: dict[str, Any] = {"query": result.query, "count": result.count, "status": result.status}
    if not result.exact:
        rec["exact"] = False
    if result.per_billion is not None:
        rec["per_billion"] = round(result.per_billion, 4)
    if result.cached:
        rec["cached"] = True
    if result.status != "ok":
        rec["error"] = result.error
    return rec


@dataclass(frozen=True)
class EntityRarity:
    """Stage 1's verdict on the question."""

    record: TriggerRecord
    score: float | None  # the mean (or lowest) count of the entities that were counted
    unknown: int  # entities whose count could not be looked up
    reason: str


def entity_rarity(
    values: Sequence[float | None],
    threshold: float,
    unit: str,
    unknown_retrieves: bool,
    aggregate: str = "mean",
) -> EntityRarity:
    """Stage 1 from the entities' values (None: unknown); an empty ``values`` means no entity was found.

    ``aggregate`` is how the known values become the one score compared with the threshold: their mean (the
    published rule) or their minimum (the rarest entity decides; an option of ours).
    """
    if aggregate not in ("mean", "min"):
        raise ValueError(f"unknown entity aggregate '{aggregate}'; use 'mean' or 'min'")
    known = [v for v in values if v is not None]
    unknown = len(values) - len(known)
    score = (sum(known) / len(known) if aggregate == "mean" else min(known)) if known else None
    forced = [0] if unknown and unknown_retrieves else []
    record = TriggerRecord.decide(
        f"{aggregate}_entity_count",
        "below",
        threshold,
        [score],
        "question",
        param="entity_threshold",
        forced=forced,
        count_unit=unit,
    )
    if not values:
        reason = "no entities found in the question"
    elif forced:
        reason = f"{unknown} entity count(s) unknown; policy: retrieve"
    elif score is None:
        reason = "no entity count available; policy: keep"
    elif record.fired:
        reason = f"{aggregate} entity count {score:g} < {threshold:g}"
    else:
        reason = f"{aggregate} entity count {score:g} >= {threshold:g}"
    return EntityRarity(record, score, unknown, reason)


@dataclass(frozen=True)
class Claim:
    """One counted claim of a sentence: its kind, its value in the threshold's unit (None: unknown)."""

    kind: str  # COOCCURRENCE (a 3-tuple) or HEAD_COUNT (a 2-tuple)
    value: float | None


def claim_flagged(claim: Claim, threshold: float, unknown_retrieves: bool) -> bool:
    return unknown_retrieves if claim.value is None else claim.value < threshold


def claim_records(
    sentences: Sequence[Sequence[Claim]],
    cooccurrence_threshold: float,
    head_threshold: float,
    unit: str,
    unknown_retrieves: bool,
) -> list[TriggerRecord]:
    """Stage 2's two records over the judged sentences: the lowest co-occurrence, the lowest head count."""
    records = []
    for kind, signal, threshold, param in (
        (COOCCURRENCE, "min_cooccurrence", cooccurrence_threshold, "cooccurrence_threshold"),
        (HEAD_COUNT, "min_head_count", head_threshold, "head_threshold"),
    ):
        scores: list[float | None] = []
        forced: list[int] = []
        for i, claims in enumerate(sentences):
            of_kind = [c for c in claims if c.kind == kind]
            known = [c.value for c in of_kind if c.value is not None]
            scores.append(min(known) if known else None)
            if unknown_retrieves and len(known) < len(of_kind):
                forced.append(i)
        records.append(
            TriggerRecord.decide(
                signal, "below", threshold, scores, "sentence", param=param, forced=forced, count_unit=unit
            )
        )
    return records
