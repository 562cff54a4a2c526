"""The trigger record: what every method's decision looked at, and the one threshold rule, live and in replay.

Every decision point a method has (QuCo-RAG's two stages, DTR's answer NLL, FLARE's sentences, a black-box
check, a random draw) emits a ``TriggerRecord``: the score of each candidate point it examined, in order (a
sentence, the question, a sampled step), the rule and threshold it compared them with, and where it fired.
Scores are rounded before they are compared, so the value in the trace is exactly the value that was
compared, and a replay at the same threshold reaches the same decision.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Rule = Literal["above", "abs_above", "below", "at_least", "always"]
RULES: tuple[str, ...] = ("above", "abs_above", "below", "at_least", "always")
DIGITS = 6  # scores are recorded (and compared) at this precision


def score(value: float) -> float:
    """A score as recorded: a finite float rounded to ``DIGITS`` (NaN would not survive JSON)."""
    v = float(value)
    if math.isnan(v):
        return 0.0
    if math.isinf(v):
        return 1e300 if v > 0 else -1e300
    return round(v, DIGITS)


def crosses(value: float | None, threshold: float, rule: str) -> bool:
    """Whether one candidate's score makes the trigger fire (a candidate without a score never does)."""
    if rule == "always":
        return True
    if value is None:
        return False
    if rule == "above":
        return value > threshold
    if rule == "abs_above":
        return abs(value) > threshold
    if rule == "below":
        return value < threshold
    if rule == "at_least":
        return value >= threshold
    raise ValueError(f"unknown trigger rule '{rule}'; known: {', '.join(RULES)}")


def first_crossing(
    scores: Sequence[float | None], threshold: float, rule: str, forced: Iterable[int] = ()
) -> int | None:
    """Index of the first candidate that fires (its score crosses, or it is ``forced``), or None."""
    always = set(forced)
    for i, s in enumerate(scores):
        if i in always or crosses(s, threshold, rule):
            return i
    return None


@dataclass
class TriggerRecord:
    """One decision point of a method, in a form every tool reads the same way.

    ``signal`` names what the score measures; ``unit`` what one candidate point is (``sentence``,
    ``question``, ``step``, ``chunk``); ``param`` the method parameter that holds ``threshold`` (what
    ``quco calibrate`` and sweeps change). ``scores`` has one entry per candidate, None where there was nothing
    to score. ``forced`` lists candidates that fire at any threshold (a count that could not be looked up, under
    the unknown-policy "retrieve"). ``fired_at`` is the decision: the first candidate that fired, or None.
    ``detail`` holds a few method-specific facts (the aggregate, the seed, whether a unit was the last).
    """

    signal: str
    rule: str
    threshold: float
    scores: list[float | None]
    unit: str
    fired_at: int | None = None
    param: str = "threshold"
    forced: list[int] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decide(
        cls,
        signal: str,
        rule: str,
        threshold: float,
        scores: Sequence[float | None],
        unit: str,
        *,
        param: str = "threshold",
        forced: Iterable[int] = (),
        **detail: Any,
    ) -> TriggerRecord:
        """Round the scores and decide: the record of a live check."""
        if rule not in RULES:
            raise ValueError(f"unknown trigger rule '{rule}'; known: {', '.join(RULES)}")
        recorded = [None if s is None else score(s) for s in scores]
        pinned = sorted(set(forced))
        return cls(
            signal,
            rule,
            threshold,
            recorded,
            unit,
            first_crossing(recorded, threshold, rule, pinned),
            param,
            pinned,
            dict(detail),
        )

    @property
    def fired(self) -> bool:
        return self.fired_at is not None

    def at(self, threshold: float | None = None) -> int | None:
        """Where this record fires at ``threshold`` (its own when None)."""
        t = self.threshold if threshold is None else threshold
        return first_crossing(self.scores, t, self.rule, self.forced)

    def consulted(self) -> int:
        """Candidate points the decision looked at: up to the one that fired (the rest is discarded), else all."""
        return self.fired_at + 1 if self.fired_at is not None else len(self.scores)

    def known_scores(self) -> list[float]:
        return [s for s in self.scores if s is not None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "signal": self.signal,
            "rule": self.rule,
            "threshold": self.threshold,
            "scores": list(self.scores),
            "unit": self.unit,
            "fired_at": self.fired_at,
            "param": self.param,
            "forced": list(self.forced),
            "detail": dict(self.detail),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TriggerRecord:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


def step_fired_at(records: Sequence[TriggerRecord], thresholds: dict[str, float] | None = None) -> int | None:
    """Where a step with these records fires: the earliest candidate any of them fires at.

    ``thresholds`` maps a parameter name to a threshold to use instead of the recorded one (a replay).
    """
    points = [r.at((thresholds or {}).get(r.param)) for r in records]
    hits = [p for p in points if p is not None]
    return min(hits) if hits else None


def judges(records: Sequence[TriggerRecord]) -> bool:
    """Whether a step with these records judged anything: a fixed schedule ("always", FS-RAG's) reads nothing."""
    return any(r.rule != "always" for r in records)


def consulted(records: Sequence[TriggerRecord]) -> int:
    """Candidate points a step with these records looked at (they share one candidate list)."""
    if not records:
        return 0
    at = step_fired_at(records)
    return at + 1 if at is not None else max(len(r.scores) for r in records)
