"""QuCo-RAG: retrieval decided by pre-training-corpus statistics instead of model confidence.

Stage 1 (before generation): the question's entities are counted in the corpus; if their mean count is
below ``entity_threshold`` the question is rare knowledge, so retrieve with the question.
Stage 2 (after generation): the continuation is scanned sentence by sentence; each sentence's
(head, relation, tail) claims are checked — a 3-tuple whose head and tail never co-occur
(count < ``cooccurrence_threshold``), or a 2-tuple whose head is rare (count < ``head_threshold``), flags the
sentence; retrieval uses "head relation", the model regenerates, the first sentence is kept and the rest is
re-checked without a new call. Defaults are the published code's (see docs/methods.md).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from quco.corpus_stats.base import CountResult
from quco.engine.context import RunContext
from quco.engine.method import Check, Decision, Draft, Method, MethodParams
from quco.text.base import Triplet

# Sentences a chat model adds around an answer; they carry no claim (the published filter).
CHATTY_PHRASES = (
    "happy to help",
    "glad to help",
    "sure,",
    "certainly",
    "i hope this helps",
    "let me know if",
    "feel free to",
    "great question",
)
# A sentence that disclaims knowledge ends the scan and is dropped (the published list).
NEGATION_PHRASES = (
    "does not",
    "not provide",
    "not mention",
    "not available",
    "not include",
    "not specif",
    "not explicitly",
    "not publicly",
    "no information",
)


class QuCoParams(MethodParams):
    # Stage 1: mean corpus count of the question's entities below this => retrieve with the question.
    # Published: 100000 for HotpotQA, 1000 for 2WikiMultihopQA, on a 4.6T-token index.
    entity_threshold: float = 100000
    # "count": thresholds are absolute counts; "per_billion": occurrences per billion tokens of the index,
    # so a threshold set on the hosted index transfers to a local index of another size.
    threshold_unit: Literal["count", "per_billion"] = "count"
    stage1: bool = True
    stage2: bool = True
    question_query: Literal["direct", "key_terms"] = "direct"
    # Stage 2: a 2-tuple's head counted below this is flagged; a 3-tuple's head/tail co-occurrence below
    # this is flagged (published: 20 and 1, i.e. zero co-occurrence).
    head_threshold: float = 20
    cooccurrence_threshold: float = 1
    sentence_query: Literal["head_relation", "full_triplet", "original_sentence"] = "head_relation"
    max_queries: int = Field(-1, ge=-1)  # -1 (or 0): every flagged claim becomes a query
    negation_phrases: list[str] = Field(default_factory=lambda: list(NEGATION_PHRASES))
    chatty_phrases: list[str] = Field(default_factory=lambda: list(CHATTY_PHRASES))


def _value(result: CountResult, unit: str) -> float | None:
    if result.status != "ok" or result.count is None:
        return None
    if unit == "per_billion":
        return result.per_billion
    return float(result.count)


def _record(result: CountResult, unit: str) -> dict[str, Any]:
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


class QuCoRAG(Method):
    name: ClassVar[str] = "quco"
    description: ClassVar[str] = (
        "QuCo-RAG: corpus entity frequency before, entity co-occurrence during generation."
    )
    Params: ClassVar[type[MethodParams]] = QuCoParams
    uses_corpus_stats: ClassVar[bool] = True
    template: ClassVar[str] = "quco"
    unit = "continuation"
    keep_rule = "first_sentence"
    recheck_remainder = True

    params: QuCoParams

    def _unknown_retrieves(self, ctx: RunContext) -> bool:
        return ctx.parts.config.corpus_stats.unknown_policy == "retrieve"

    # -- stage 1 -------------------------------------------------------------------------------------
    def before(self, question: str, ctx: RunContext) -> Decision | None:
        p = self.params
        if not p.stage1:
            return None
        with ctx.timed("extraction"):
            entities = ctx.parts.text.entities.question_entities(question, ctx.llm_call("extractor"))
        entities = list(dict.fromkeys(e for e in entities if e.strip()))
        signals: dict[str, Any] = {
            "entities": entities,
            "threshold": p.entity_threshold,
            "unit": p.threshold_unit,
        }
        if not entities:
            return Decision(False, signals=signals, reason="no entities found in the question")
        results = ctx.count(entities)
        signals["entity_counts"] = [
            _record(r, p.threshold_unit) | {"entity": e} for e, r in zip(entities, results, strict=True)
        ]
        values = [_value(r, p.threshold_unit) for r in results]
        known = [v for v in values if v is not None]
        unknown = len(values) - len(known)
        query = question if p.question_query == "direct" else " ".join(entities)
        if unknown and self._unknown_retrieves(ctx):
            signals["unknown"] = unknown
            return Decision(True, [query], signals, f"{unknown} entity count(s) unknown; policy: retrieve")
        if not known:
            return Decision(False, signals=signals, reason="no entity count available; policy: keep")
        mean = sum(known) / len(known)
        signals["mean_count"] = round(mean, 4)
        if mean < p.entity_threshold:
            return Decision(True, [query], signals, f"mean entity count {mean:g} < {p.entity_threshold:g}")
        return Decision(
            False, signals=signals, reason=f"mean entity count {mean:g} >= {p.entity_threshold:g}"
        )

    # -- stage 2 -------------------------------------------------------------------------------------
    def _query_for(self, t: Triplet, sentence: str) -> str:
        mode = self.params.sentence_query
        if mode == "head_relation":
            return f"{t.head} {t.relation}".strip()
        if mode == "full_triplet":
            return " ".join(t.as_list())
        return sentence

    def _judge(
        self, triplets: list[Triplet], ctx: RunContext
    ) -> tuple[list[dict[str, Any]], list[Triplet], int]:
        """Count every claim; return per-claim records, the flagged claims, and how many were unknown."""
        p = self.params
        pairs = [(t.head, t.tail) for t in triplets if t.tail is not None]
        heads = [t.head for t in triplets if t.tail is None]
        co_results = iter(ctx.cooccur(pairs))
        head_results = iter(ctx.count(heads))
        records, flagged, unknown = [], [], 0
        for t in triplets:
            if t.tail is not None:
                r, threshold, kind = next(co_results), p.cooccurrence_threshold, "cooccurrence"
            else:
                r, threshold, kind = next(head_results), p.head_threshold, "head_count"
            value = _value(r, p.threshold_unit)
            rec = {"triplet": t.as_list(), "kind": kind, "threshold": threshold} | _record(
                r, p.threshold_unit
            )
            if value is None:
                unknown += 1
                rec["flagged"] = self._unknown_retrieves(ctx)
            else:
                rec["flagged"] = value < threshold
            if rec["flagged"]:
                flagged.append(t)
            records.append(rec)
        return records, flagged, unknown

    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        p = self.params
        sentences = [s for s in draft.sentences if not any(c in s.lower() for c in p.chatty_phrases)]
        if not p.stage2:
            return Check(fire=False, keep=" ".join(sentences), reason="stage 2 disabled")
        clear: list[str] = []
        scanned: list[dict[str, Any]] = []
        llm = ctx.llm_call("extractor")
        for sentence in sentences:
            low = sentence.lower()
            if any(n in low for n in p.negation_phrases):
                scanned.append({"sentence": sentence, "negation": True})
                return Check(
                    fire=False,
                    keep=" ".join(clear),
                    signals={"sentences": scanned},
                    reason="a sentence disclaims knowledge; it is dropped and generation ends",
                    stop=True,
                )
            if "the answer is" in low:
                clear.append(sentence)
                scanned.append({"sentence": sentence, "answer": True})
                return Check(
                    fire=False, keep=" ".join(clear), signals={"sentences": scanned}, reason="answer stated"
                )
            with ctx.timed("extraction"):
                triplets = ctx.parts.text.triplets.triplets(sentence, llm)
            records, flagged, unknown = self._judge(triplets, ctx)
            scanned.append({"sentence": sentence, "claims": records})
            if flagged:
                queries = list(dict.fromkeys(self._query_for(t, sentence) for t in flagged))
                if p.max_queries > 0:
                    queries = queries[: p.max_queries]
                first = records[[r["flagged"] for r in records].index(True)]
                why = (
                    f"{first['kind']} of {first['triplet']} = {first['count']} < {first['threshold']:g}"
                    if first["status"] == "ok"
                    else f"count of {first['triplet']} unknown; policy: retrieve"
                )
                return Check(
                    fire=True,
                    keep=" ".join(clear),
                    queries=queries,
                    signals={"sentences": scanned, "flagged_sentence": sentence},
                    reason=why,
                )
            clear.append(sentence)
        return Check(
            fire=False, keep=" ".join(clear), signals={"sentences": scanned}, reason="no claim flagged"
        )
