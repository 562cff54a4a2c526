"""The random trigger's draws, and the firing rates of another run to match.

A "fewer retrievals, similar accuracy" claim needs a control that retrieves just as often at random
points. The draws are a hash of (seed, question, candidate index): reproducible, and independent of the
order in which questions are answered or of how many run in parallel. The rates are computed from the typed
trigger records of traces; reading a run's files is ``quco.eval.runs.store``'s job.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from quco.trace import Step, as_trace
from quco.trigger_record import consulted, judges, step_fired_at


def uniform_draw(seed: int, question: str, index: int, stage: str = "") -> float:
    """A number in [0, 1) fixed by (seed, question, candidate index), and by ``stage`` when given."""
    key = f"{seed}\x1f{question}\x1f{index}" if not stage else f"{seed}\x1f{question}\x1f{stage}\x1f{index}"
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def step_candidates(step: Step) -> int:
    """Candidate points a check consulted: up to the one that fired (the rest of that draft is discarded),
    else all it scored; 1 for a check without a trigger record."""
    return consulted(step.triggers) if step.triggers else 1


@dataclass(frozen=True)
class StageRate:
    """How often one stage fired: per step of that stage and per candidate point it consulted."""

    stage: str  # "before" or "generate"
    steps: int  # steps of this stage with a trigger record
    fired: int  # of those, steps whose records fired
    candidates: int  # candidate points consulted by those steps
    queries: int = 0  # retrieval queries the fired steps issued

    @property
    def per_step(self) -> float:
        return _ratio(self.fired, self.steps)

    @property
    def per_firing(self) -> float:
        """Retrieval queries per fired step (QuCo-RAG's stage 2: one per flagged claim of the sentence)."""
        return _ratio(self.queries, self.fired)

    @property
    def per_candidate(self) -> float:
        return _ratio(self.fired, self.candidates)


def stage_rate(traces: Iterable[Any], stage: str) -> StageRate:
    """Firing rate of the trigger records of one stage ("before" or "generate") over ``traces``."""
    steps = fired = candidates = queries = 0
    for t in traces:
        for step in as_trace(t).steps:
            if step.stage != stage or not judges(step.triggers):
                continue  # no trigger, or a fixed schedule
            steps += 1
            candidates += consulted(step.triggers)
            if step_fired_at(step.triggers) is not None:
                fired += 1
                queries += len(step.queries)
    return StageRate(stage, steps, fired, candidates, queries)


@dataclass(frozen=True)
class RetrievalRate:
    """How often a run retrieved: per question, per check (generate step), per candidate point."""

    questions: int
    retrievals: int  # all retrieval queries (counters.retrievals)
    check_retrievals: int  # generate steps that retrieved (the runtime trigger fired)
    checks: int  # generate steps with a check
    candidates: int  # candidate points examined by the checks

    per_question = property(lambda self: _ratio(self.retrievals, self.questions))
    per_check = property(lambda self: _ratio(self.check_retrievals, self.checks))
    per_candidate = property(lambda self: _ratio(self.check_retrievals, self.candidates))


def retrieval_rate(traces: Iterable[Any]) -> RetrievalRate:
    """The observed retrieval rate of a list of traces (``Trace`` objects or their dicts)."""
    questions = retrievals = fired = checks = candidates = 0
    for t in traces:
        trace = as_trace(t)
        questions += 1
        retrievals += trace.counters.retrievals
        for step in trace.steps:
            if step.stage != "generate" or not step.draft:
                continue
            checks += 1
            candidates += step_candidates(step)
            if step.decision == "retrieve":
                fired += 1
    return RetrievalRate(questions, retrievals, fired, checks, candidates)
