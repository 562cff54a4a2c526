"""EM at every threshold of a pre-generation decision, exactly, from recorded runs.

A decision taken once per question before generation (QuCo-RAG's stage 1, DTR's direct-or-retrieve) splits each
question's answer into two fixed outcomes: the one when it fires and the one when it does not. Greedy decoding
makes each outcome deterministic, so two ``quco eval`` runs of the same config on the calibration questions, one
with the threshold at which every such decision fires and one at which none does, give the exact EM, F1 and
cost of *every* threshold, where ``quco calibrate --target em`` runs the model once per candidate. Any set of runs
that holds, for each question, the outcome a threshold needs will do (an earlier run at some threshold covers
part of both).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quco.errors import QucoError
from quco.trigger_record import TriggerRecord, crosses

# Run settings that may differ between the runs (they do not change an answer) besides the threshold itself.
_FREE_KEYS = ("threads", "concurrency", "timeout_s", "max_retries")


@dataclass(frozen=True)
class Outcome:
    """One question's recorded answer under one decision."""

    em: float
    f1: float
    retrievals: float
    llm_calls: float
    prediction: str


@dataclass
class Question:
    """A calibration question: its decision's score, whether it is forced, and the outcomes recorded."""

    qid: str
    index: int  # position in the dataset
    score: float | None
    forced: bool
    outcomes: dict[bool, Outcome] = field(default_factory=dict)


@dataclass(frozen=True)
class ExactCandidate:
    threshold: float
    fired: int  # questions whose decision fires at this threshold
    covered: bool  # every question's needed outcome is recorded
    em: float = math.nan
    f1: float = math.nan
    retrievals_per_question: float = math.nan
    llm_calls_per_question: float = math.nan


# A choice must beat the alternatives by at least this share of the calibration questions (3 of 100) to move the
# rule away from its published shape (see ``Margin``).
MIN_MARGIN = 0.03


@dataclass(frozen=True)
class Margin:
    """How many calibration questions separate the best threshold from the runner-up, and whether that is enough.

    The published rule retrieves for some questions and not others (a split). Firing on every question that can
    fire ("always") or on none ("never") changes the rule's shape: QuCo-RAG's stage 1 becomes SR-RAG's first
    step, or disappears. Such a choice stands only when it beats the best split by at least ``MIN_MARGIN`` of the
    questions; otherwise the best split is kept, and the report says so. Candidates are any objects with
    ``threshold`` and ``em`` (``ExactCandidate``, ``quco.eval.calibrate.search.Candidate``).
    """

    best: Any  # the highest EM within the budget
    runner_up: Any | None  # the next in the ranking
    questions: int  # calibration questions
    margin: int | None  # questions the best answers right beyond the runner-up
    best_shape: str  # "always", "never" or "split"
    best_split: Any | None  # the best threshold of the published shape, when the best is not one
    split_margin: int | None  # questions the best answers right beyond the best split
    needed: int  # questions a change of shape must win by

    @property
    def kept_shape(self) -> bool:
        """The best choice changed the rule's shape on too few questions, so the best split is kept."""
        return (
            self.best_shape != "split"
            and self.best_split is not None
            and self.split_margin is not None
            and self.split_margin < self.needed
        )

    @property
    def chosen(self) -> Any:
        return self.best_split if self.kept_shape else self.best

    def note(self) -> str:
        """A few words for the config's calibration note when the shape was kept ("" otherwise)."""
        if not self.kept_shape:
            return ""
        return (
            f"published shape kept ({self.best_shape} was ahead by {self.split_margin} of {self.questions})"
        )

    def lines(self, param: str) -> list[str]:
        """The report: the margin over the runner-up, and the shape decision when there was one."""
        n = self.questions
        out = []
        if self.runner_up is None or self.margin is None:
            out.append(f"{param}: no runner-up within the budget; the margin is unknown")
        else:
            out.append(
                f"{param}={self.best.threshold:g} ({self.best_shape}) is ahead of the runner-up "
                f"{param}={self.runner_up.threshold:g} by {self.margin} of {n} calibration questions "
                f"(EM {100 * self.best.em:.1f} against {100 * self.runner_up.em:.1f})"
            )
        if self.best_shape == "split":
            out.append(
                "the choice keeps the published shape of the rule (it fires on some questions, not all)"
            )
        elif self.best_split is None or self.split_margin is None:
            out.append(
                f"no threshold of the published shape was evaluated within the budget; {self.best_shape} stands"
            )
        elif self.kept_shape:
            out.append(
                f"{self.best_shape} is {self.split_margin} of {n} questions ahead of the best threshold of the "
                f"published shape ({param}={self.best_split.threshold:g}, EM {100 * self.best_split.em:.1f}), "
                f"fewer than {self.needed}: too few to change the rule's shape, so the published shape is kept: "
                f"{param}={self.best_split.threshold:g}"
            )
        else:
            out.append(
                f"{self.best_shape} is {self.split_margin} of {n} questions ahead of the best threshold of the "
                f"published shape ({param}={self.best_split.threshold:g}), at least {self.needed}: the rule's "
                f"shape changes to {self.best_shape}"
            )
        return out


def margin(
    ranked: Sequence[Any], n: int, shape_of: Callable[[Any], str], min_margin: float = MIN_MARGIN
) -> Margin:
    """The margins of ``ranked`` (candidates within the budget, best first) on ``n`` questions."""
    if not ranked:
        raise QucoError("no threshold candidate to choose from")
    best, rest = ranked[0], list(ranked[1:])
    runner = rest[0] if rest else None
    shape = shape_of(best)
    split = next((c for c in rest if shape_of(c) == "split"), None) if shape != "split" else None

    def apart(other: Any) -> int:
        return round((best.em - other.em) * n)

    return Margin(
        best,
        runner,
        n,
        apart(runner) if runner is not None else None,
        shape,
        split,
        apart(split) if split is not None else None,
        math.ceil(min_margin * n - 1e-9),
    )


@dataclass
class ExactCalibration:
    param: str
    rule: str
    questions: list[Question]
    candidates: list[ExactCandidate]
    chosen: ExactCandidate
    runs: list[str]
    disagreements: list[str]  # questions whose two recordings of one decision answered differently
    dataset: str = ""
    margin: Margin | None = None

    @property
    def span(self) -> str:
        """The questions' positions as START:END (END exclusive)."""
        idx = [q.index for q in self.questions]
        return f"{min(idx)}:{max(idx) + 1}" if idx else "0:0"


def _strip(pipeline: dict[str, Any], param: str) -> dict[str, Any]:
    """The pipeline config without the threshold being calibrated and the settings that change no answer."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in pipeline.items()}
    out.get("params", {}).pop(param, None)
    for section in ("generator", "corpus_stats"):
        for key in _FREE_KEYS:
            out.get(section, {}).pop(key, None)
    return out


def _decision(trace: dict[str, Any], param: str) -> TriggerRecord | None:
    """The question's pre-generation record for ``param``; an error when the param decides during generation."""
    found = None
    for step in trace.get("steps", []):
        for raw in step.get("triggers", []) or []:
            if raw.get("param") != param:
                continue
            if step.get("stage") != "before" or raw.get("unit") != "question":
                raise QucoError(
                    f"'{param}' decides during generation (stage '{step.get('stage')}'), so a run does not fix "
                    "its outcome per question; calibrate it with `quco calibrate --target em` instead"
                )
            found = TriggerRecord.from_dict(raw)
            if found.rule == "always":
                raise QucoError(
                    f"a run recorded '{param}' without a score (rule 'always', e.g. DTR at threshold 0, which "
                    "skips the direct answer); record the always-retrieving run at a threshold just above 0"
                )
    return found


def _score(record: TriggerRecord) -> float | None:
    known = record.known_scores()
    if not known:
        return None
    return min(known) if record.rule == "below" else max(known)


def fires(question: Question, threshold: float, rule: str) -> bool:
    return question.forced or crosses(question.score, threshold, rule)


def collect(run_dirs: Sequence[str | Path], param: str) -> tuple[list[Question], str, list[str], str]:
    """Every question of the runs with its score and the outcomes recorded for it; the rule; disagreements;
    the dataset's name."""
    from quco.eval.runs.records import differences
    from quco.eval.runs.store import load_run

    if len(run_dirs) < 1:
        raise QucoError(
            "give at least one run (--from-run), usually two: one where the decision always fires"
        )
    runs = [load_run(d) for d in run_dirs]
    base = _strip(runs[0].config.pipeline or {}, param)
    for run in runs[1:]:
        diff = differences(base, _strip(run.config.pipeline or {}, param))
        if diff:
            raise QucoError(
                f"{run.dir} was recorded with another configuration than {runs[0].dir} "
                f"(besides {param}: {', '.join(diff)}); the runs must differ only in the threshold"
            )
    for key in ("dataset", "prompt", "answer_protocol"):
        seen = {repr(r.config.identity.get(key)) for r in runs}
        if len(seen) > 1:
            raise QucoError(f"the runs differ in their {key.replace('_', ' ')}: {' / '.join(sorted(seen))}")
    questions: dict[str, Question] = {}
    rule, disagreements = "", []
    for run in runs:
        for rec in run.records:
            trace = rec.trace
            if rec.error or not trace:
                raise QucoError(
                    f"{run.dir}: question {rec.id} was recorded with an error; re-run it first "
                    "(`quco eval --retry-errors`)"
                )
            record = _decision(trace, param)
            qid = rec.id
            score = _score(record) if record else None
            forced = bool(record and record.forced)
            q = questions.setdefault(qid, Question(qid, rec.index, score, forced))
            if (q.score, q.forced) != (score, forced):
                raise QucoError(
                    f"question {qid} has score {score} in {run.dir} but {q.score} in another run: the runs "
                    "did not decide on the same evidence"
                )
            if record:
                rule = rule or record.rule
            fired = bool(record and record.fired)
            counters = trace.get("counters", {})
            calls = counters.get("llm_calls", {}) or {}
            outcome = Outcome(
                rec.em,
                rec.f1,
                float(counters.get("retrievals", 0)),
                float(sum(calls.values()) if isinstance(calls, dict) else calls or 0),
                rec.prediction,
            )
            seen = q.outcomes.get(fired)
            if seen is not None and seen.prediction != outcome.prediction:
                disagreements.append(qid)
            q.outcomes.setdefault(fired, outcome)
    if not rule:
        raise QucoError(f"no recorded decision for '{param}' in the runs; is it the right --param?")
    name = runs[0].config.dataset.name or ""
    return list(questions.values()), rule, disagreements, name


def candidates(questions: Sequence[Question], rule: str) -> list[ExactCandidate]:
    """One candidate per distinct decision set, from firing nowhere to firing on every scored question."""
    scores = sorted({q.score for q in questions if q.score is not None})
    low_fires = rule == "below"  # lower scores fire; otherwise higher ones do
    thetas = (scores + [math.inf, -math.inf]) if low_fires else (scores[::-1] + [-math.inf, math.inf])
    seen: set[tuple[bool, ...]] = set()
    out: list[ExactCandidate] = []
    for theta in thetas:
        picks = [(q, fires(q, theta, rule)) for q in questions]
        key = tuple(f for _, f in picks)
        if key in seen:
            continue
        seen.add(key)
        fired = sum(f for _, f in picks)
        if not all(f in q.outcomes for q, f in picks):
            out.append(ExactCandidate(theta, fired, False))
            continue
        got = [q.outcomes[f] for q, f in picks]
        n = len(got)
        out.append(
            ExactCandidate(
                theta,
                fired,
                True,
                sum(o.em for o in got) / n,
                sum(o.f1 for o in got) / n,
                sum(o.retrievals for o in got) / n,
                sum(o.llm_calls for o in got) / n,
            )
        )
    return out


def _usable(cands: Sequence[ExactCandidate], max_retrievals: float | None) -> list[ExactCandidate]:
    return [
        c
        for c in cands
        if c.covered and (max_retrievals is None or c.retrievals_per_question <= max_retrievals + 1e-9)
    ]


def _rank(c: ExactCandidate) -> tuple[float, float, float]:
    return (round(c.em, 9), -round(c.retrievals_per_question, 9), c.f1)


def _best(cands: Sequence[ExactCandidate]) -> ExactCandidate:
    return max(cands, key=_rank)


def choose(cands: Sequence[ExactCandidate], max_retrievals: float | None = None) -> ExactCandidate:
    """Highest EM among the covered candidates within the retrieval budget; ties: fewer retrievals, then F1."""
    usable = _usable(cands, max_retrievals)
    if not usable:
        raise QucoError(
            "no threshold is covered by the runs"
            + (f" within {max_retrievals:g} retrievals per question" if max_retrievals is not None else "")
            + ": record one run where the decision always fires and one where it never does"
        )
    return _best(usable)


def calibrate_from_runs(
    run_dirs: Sequence[str | Path],
    param: str,
    max_retrievals: float | None = None,
    min_margin: float = MIN_MARGIN,
) -> ExactCalibration:
    """The threshold of best EM within the budget, kept to the published shape of the rule unless a change of
    shape wins by at least ``min_margin`` of the questions (``Margin``)."""
    questions, rule, disagreements, dataset = collect(run_dirs, param)
    cands = candidates(questions, rule)
    choose(cands, max_retrievals)  # an error when nothing is covered within the budget
    ranked = sorted(_usable(cands, max_retrievals), key=_rank, reverse=True)
    most = max(c.fired for c in cands)

    def shape_of(c: ExactCandidate) -> str:
        return "never" if c.fired == 0 else "always" if c.fired == most else "split"

    m = margin(ranked, len(questions), shape_of, min_margin)
    runs = [str(d) for d in run_dirs]
    return ExactCalibration(param, rule, questions, cands, m.chosen, runs, disagreements, dataset, m)
