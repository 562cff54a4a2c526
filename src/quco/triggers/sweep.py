"""Threshold sweeps from recorded traces, without running the model again.

Each check records the score of every candidate point it examined (``signals["trigger"]``). At another
threshold the decision of a recorded step is recomputed exactly. A re-run would follow the recorded run up to
and including the first step whose decision changes; after that the text, and so the later signals, differ.
``TraceReplay.exact_steps`` says how many leading steps are therefore certain; later ones are estimates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from quco.triggers.decide import first_crossing


@dataclass(frozen=True)
class StepDecision:
    step: int  # index of the step in the trace
    fire: bool
    at: int | None  # candidate index where it fires
    recorded_fire: bool
    recorded_at: int | None

    @property
    def changed(self) -> bool:
        return (self.fire, self.at) != (self.recorded_fire, self.recorded_at)


@dataclass
class TraceReplay:
    question: str
    threshold: float
    decisions: list[StepDecision] = field(default_factory=list)

    @property
    def exact_steps(self) -> int:
        """Leading decisions a re-run at this threshold is certain to make (through the first change)."""
        for i, d in enumerate(self.decisions):
            if d.changed:
                return i + 1
        return len(self.decisions)

    @property
    def retrievals(self) -> int:
        """Retrieving checks at this threshold (exact for the first ``exact_steps``, estimated after)."""
        return sum(d.fire for d in self.decisions)


def decide(trigger: dict[str, Any], threshold: float | None = None) -> tuple[bool, int | None]:
    """The decision a recorded trigger makes at ``threshold`` (its own threshold if None)."""
    t = trigger["threshold"] if threshold is None else threshold
    at = first_crossing(trigger.get("scores") or [], t, trigger["rule"])
    return at is not None, at


def _as_dict(trace: Any) -> dict[str, Any]:
    return trace if isinstance(trace, dict) else trace.to_dict()


def replay(trace: Any, threshold: float) -> TraceReplay:
    """Re-decide every recorded check of one trace at a new threshold."""
    d = _as_dict(trace)
    out = TraceReplay(question=d.get("question", ""), threshold=threshold)
    for step in d.get("steps") or []:
        trigger = (step.get("signals") or {}).get("trigger")
        if not isinstance(trigger, dict):
            continue
        fire, at = decide(trigger, threshold)
        rec_fire, rec_at = decide(trigger)
        out.decisions.append(StepDecision(step["index"], fire, at, rec_fire, rec_at))
    return out


@dataclass(frozen=True)
class SweepPoint:
    threshold: float
    questions: int
    retrievals_per_question: float  # retrieving checks per question (replayed)
    exact_share: float  # share of replayed decisions that are certain (see ``TraceReplay.exact_steps``)


def sweep(traces: Iterable[Any], thresholds: Sequence[float]) -> list[SweepPoint]:
    """Replayed retrieval rate per threshold over a set of traces."""
    dicts = [_as_dict(t) for t in traces]
    points: list[SweepPoint] = []
    for t in thresholds:
        replays = [replay(d, t) for d in dicts]
        n = len(replays)
        total = sum(len(r.decisions) for r in replays)
        exact = sum(r.exact_steps for r in replays)
        points.append(
            SweepPoint(
                threshold=t,
                questions=n,
                retrievals_per_question=sum(r.retrievals for r in replays) / n if n else 0.0,
                exact_share=exact / total if total else 1.0,
            )
        )
    return points
