"""Threshold sweeps from recorded traces, without running the model again.

Each decision point records the score of every candidate it examined (a ``TriggerRecord``). At another
threshold the decision of a recorded step is recomputed exactly. A re-run would follow the recorded run up to
and including the first step whose decision changes; after that the text, and so the later signals, differ.
``TraceReplay.exact_steps`` says how many leading steps are therefore certain; later ones are estimates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from quco.trace import Trace, as_trace
from quco.trigger_record import step_fired_at


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
        """Retrieving steps at this threshold (exact for the first ``exact_steps``, estimated after)."""
        return sum(d.fire for d in self.decisions)


def trace_params(traces: Iterable[Any]) -> list[str]:
    """The thresholded parameters recorded in ``traces``, most frequent first ("always" rules have none)."""
    seen: Counter[str] = Counter()
    for t in traces:
        for step in as_trace(t).steps:
            seen.update(r.param for r in step.triggers if r.param and r.rule != "always")
    return [p for p, _ in seen.most_common()]


def replay(trace: Trace | dict[str, Any], threshold: float, param: str = "threshold") -> TraceReplay:
    """Re-decide every recorded step that has a record of ``param`` at a new threshold for it."""
    t = as_trace(trace)
    out = TraceReplay(question=t.question, threshold=threshold)
    for step in t.steps:
        if not any(r.param == param for r in step.triggers):
            continue
        at = step_fired_at(step.triggers, {param: threshold})
        rec_at = step_fired_at(step.triggers)
        out.decisions.append(StepDecision(step.index, at is not None, at, rec_at is not None, rec_at))
    return out


@dataclass(frozen=True)
class SweepPoint:
    threshold: float
    questions: int
    retrievals_per_question: float  # retrieving steps per question (replayed)
    exact_share: float  # share of replayed decisions that are certain (see ``TraceReplay.exact_steps``)


def sweep(traces: Iterable[Any], thresholds: Sequence[float], param: str = "threshold") -> list[SweepPoint]:
    """Replayed retrieval rate per threshold of ``param`` over a set of traces."""
    typed = [as_trace(t) for t in traces]
    points: list[SweepPoint] = []
    for th in thresholds:
        replays = [replay(t, th, param) for t in typed]
        n = len(replays)
        total = sum(len(r.decisions) for r in replays)
        exact = sum(r.exact_steps for r in replays)
        points.append(
            SweepPoint(
                threshold=th,
                questions=n,
                retrievals_per_question=sum(r.retrievals for r in replays) / n if n else 0.0,
                exact_share=exact / total if total else 1.0,
            )
        )
    return points
