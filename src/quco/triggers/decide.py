"""One threshold rule, used both live and when a run is replayed from its traces.

Every thresholded check records ``signals["trigger"] = {"rule", "threshold", "scores", "fired_at"}``: the
score of each candidate point it examined (a sentence, a draft), in order. The decision is "fire at the first
candidate whose score crosses". Scores are rounded before they are compared, so that the value in the trace is
exactly the value that was compared, and a replay at the same threshold reaches the same decision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

Rule = Literal["above", "abs_above", "below", "always"]
RULES: tuple[str, ...] = ("above", "abs_above", "below", "always")
DIGITS = 6  # scores are recorded (and compared) at this precision


def score(value: float) -> float:
    """A score as recorded: a finite float rounded to ``DIGITS`` (NaN would not survive JSON)."""
    v = float(value)
    if math.isnan(v):
        return 0.0
    if math.isinf(v):
        return 1e300 if v > 0 else -1e300
    return round(v, DIGITS)


def crosses(value: float, threshold: float, rule: str) -> bool:
    """Whether one candidate's score makes the trigger fire."""
    if rule == "above":
        return value > threshold
    if rule == "abs_above":
        return abs(value) > threshold
    if rule == "below":
        return value < threshold
    if rule == "always":
        return True
    raise ValueError(f"unknown trigger rule '{rule}'; known: {', '.join(RULES)}")


def first_crossing(scores: Sequence[float], threshold: float, rule: str) -> int | None:
    """Index of the first candidate that fires, or None."""
    for i, s in enumerate(scores):
        if crosses(s, threshold, rule):
            return i
    return None


def trigger_record(rule: str, threshold: float, scores: Sequence[float], **extra: Any) -> dict[str, Any]:
    """The ``signals["trigger"]`` record of a check (``fired_at`` computed from the recorded scores)."""
    recorded = [score(s) for s in scores]
    rec: dict[str, Any] = {
        "rule": rule,
        "threshold": threshold,
        "scores": recorded,
        "fired_at": first_crossing(recorded, threshold, rule),
    }
    rec.update(extra)
    return rec
