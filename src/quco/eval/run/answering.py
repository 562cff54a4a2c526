"""Answer one question of an evaluation and score it: what every executor (inline, threads, processes) runs.

An answer is timed (wall and, when the process is not shared with other questions, CPU seconds), an exception
is recorded with its question rather than stopping the run, and the outcome becomes a ``Record``.
"""

from __future__ import annotations

import functools
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from quco.answer import AnswerProtocol
from quco.datasets import Example
from quco.errors import QucoError
from quco.eval.runs.records import Record
from quco.eval.score.metrics import score_prediction
from quco.machine import cpu_name, load_average
from quco.trace import Trace

log = logging.getLogger(__name__)

AnswerFn = Callable[[str], Trace]


@dataclass
class Outcome:
    example: Example
    position: int
    trace: Trace | None = None
    prediction: str = ""
    reprompted: bool = False
    error: str | None = None
    error_traceback: str | None = None
    seconds: float = 0.0
    cpu_seconds: float | None = None  # CPU time of this process, all its threads; None if it was shared
    load: float | None = None  # the machine's 1-minute load average when the question ended
    cpu: str = ""  # the processor that answered it (quco.machine.cpu_name)

    def record(self) -> Record:
        """The outcome scored, as ``results.jsonl`` records it."""
        ex = self.example
        rec = Record(
            id=ex.id,
            index=ex.meta.get("index", self.position),
            question=ex.question,
            gold=list(ex.answers),
            kind=ex.kind,
        )
        if self.error is None:
            score = score_prediction(self.prediction, ex.answers, ex.kind, ex.dataset)
            rec.prediction, rec.answer, rec.missing = self.prediction, score.answer, score.missing
            rec.reprompted, rec.em, rec.f1 = self.reprompted, score.em, round(score.f1, 6)
        else:
            rec.missing = True
            rec.error, rec.error_traceback = self.error, self.error_traceback
        rec.seconds, rec.cpu_seconds, rec.load, rec.cpu = self.seconds, self.cpu_seconds, self.load, self.cpu
        rec.meta = {k: v for k, v in ex.meta.items() if k != "index"}
        rec.trace = self.trace.to_dict() if self.trace is not None else None
        return rec


def answer_one(
    answer_fn: AnswerFn, example: Example, position: int, *, shared_process: bool = False
) -> Outcome:
    """Answer one question, timing it. ``shared_process``: other questions run on threads of this process at
    the same time, so its CPU time is not this question's alone (and is not recorded)."""
    out = Outcome(example, position)
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        trace = answer_fn(example.question)
        if not isinstance(trace, Trace):
            raise TypeError(f"the answer function returned {type(trace).__name__}, expected a quco Trace")
        out.trace = trace
        out.prediction = trace.prediction
        out.reprompted = any(s.stage == "after" and s.decision == "reprompt" for s in trace.steps)
    except Exception as exc:  # recorded, and the run goes on
        out.error = f"{type(exc).__name__}: {exc}"
        out.error_traceback = traceback.format_exc(limit=8)
        log.warning("question %s failed: %s", example.id, out.error)
    out.seconds = round(time.perf_counter() - start, 4)
    if not shared_process:
        out.cpu_seconds = round(time.process_time() - cpu_start, 4)
    out.load = load_average()
    out.cpu = cpu_name()
    return out


def finish_recorded(
    pipe: Any,
    recorded: Record,
    protocol: AnswerProtocol,
    example: Example,
    position: int,
    *,
    shared_process: bool = False,
) -> Outcome:
    """--traces-from: finish a recorded trace under this run's protocol; its seconds add to the recorded."""
    trace = Trace.from_dict(recorded.trace or {})
    outcome = answer_one(
        lambda _q: pipe.finish(trace, protocol), example, position, shared_process=shared_process
    )
    outcome.seconds = round(recorded.seconds + outcome.seconds, 4)
    cpu = recorded.cpu_seconds
    outcome.cpu_seconds = (
        round(float(cpu) + outcome.cpu_seconds, 4)
        if isinstance(cpu, int | float) and outcome.cpu_seconds is not None
        else None
    )
    first = recorded.cpu
    if isinstance(first, str) and first and first != outcome.cpu:  # its seconds come from both machines
        outcome.cpu = f"{first}, then {outcome.cpu}"
    return outcome


@dataclass
class Answerer:
    """Answers the questions of one run: afresh with ``answer_fn``, or (``--traces-from``) by finishing a
    recorded trace with the pipeline's answer protocol."""

    answer_fn: AnswerFn
    pipe: Any  # the Pipeline, or None for an answer function
    protocol: AnswerProtocol
    shared_process: bool = False

    @classmethod
    def of(
        cls, answer_fn: AnswerFn, pipe: Any, protocol: AnswerProtocol, shared_process: bool = False
    ) -> Answerer:
        """The answerer of a built target: a pipeline answers under ``protocol``; a bare function cannot
        re-prompt, so a protocol that does is refused for it."""
        if pipe is not None:
            answer_fn = functools.partial(pipe.answer, protocol=protocol)
        elif protocol.reprompt:
            raise QucoError("the answer re-prompt needs a pipeline's generator; pass a config or a Pipeline")
        return cls(answer_fn, pipe, protocol, shared_process)

    def __call__(self, position: int, example: Example, recorded: Record | None = None) -> Outcome:
        if recorded is not None:
            return finish_recorded(
                self.pipe, recorded, self.protocol, example, position, shared_process=self.shared_process
            )
        return answer_one(self.answer_fn, example, position, shared_process=self.shared_process)
