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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quco.errors import QucoError
from quco.signals.record import TriggerRecord, crosses

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


def _differences(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    keys = sorted(set(a) | set(b))
    out: list[str] = []
    for k in keys:
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += _differences(va, vb, f"{prefix}{k}.")
        elif va != vb:
            out.append(f"{prefix}{k}")
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
    from quco.eval.runs import load_run

    if len(run_dirs) < 1:
        raise QucoError(
            "give at least one run (--from-run), usually two: one where the decision always fires"
        )
    runs = [load_run(d) for d in run_dirs]
    base = _strip(runs[0].config.get("pipeline") or {}, param)
    for run in runs[1:]:
        diff = _differences(base, _strip(run.config.get("pipeline") or {}, param))
        if diff:
            raise QucoError(
                f"{run.dir} was recorded with another configuration than {runs[0].dir} "
                f"(besides {param}: {', '.join(diff)}); the runs must differ only in the threshold"
            )
    for key in ("dataset", "prompt", "answer_protocol"):
        seen = {repr(r.config.get(key)) for r in runs}
        if len(seen) > 1:
            raise QucoError(f"the runs differ in their {key.replace('_', ' ')}: {' / '.join(sorted(seen))}")
    questions: dict[str, Question] = {}
    rule, disagreements = "", []
    for run in runs:
        for rec in run.records:
            trace = rec.get("trace")
            if rec.get("error") or not trace:
                raise QucoError(
                    f"{run.dir}: question {rec.get('id')} was recorded with an error; re-run it first "
                    "(`quco eval --retry-errors`)"
                )
            record = _decision(trace, param)
            qid = str(rec["id"])
            score = _score(record) if record else None
            forced = bool(record and record.forced)
            q = questions.setdefault(qid, Question(qid, int(rec.get("index") or 0), score, forced))
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
                float(rec.get("em") or 0.0),
                float(rec.get("f1") or 0.0),
                float(counters.get("retrievals", 0)),
                float(sum(calls.values()) if isinstance(calls, dict) else calls or 0),
                str(rec.get("prediction") or ""),
            )
            seen = q.outcomes.get(fired)
            if seen is not None and seen.prediction != outcome.prediction:
                disagreements.append(qid)
            q.outcomes.setdefault(fired, outcome)
    if not rule:
        raise QucoError(f"no recorded decision for '{param}' in the runs; is it the right --param?")
    name = str((runs[0].config.get("dataset") or {}).get("name") or "")
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


def choose(cands: Sequence[ExactCandidate], max_retrievals: float | None = None) -> ExactCandidate:
    """Highest EM among the covered candidates within the retrieval budget; ties: fewer retrievals, then F1."""
    usable = [
        c
        for c in cands
        if c.covered and (max_retrievals is None or c.retrievals_per_question <= max_retrievals + 1e-9)
    ]
    if not usable:
        raise QucoError(
            "no threshold is covered by the runs"
            + (f" within {max_retrievals:g} retrievals per question" if max_retrievals is not None else "")
            + ": record one run where the decision always fires and one where it never does"
        )
    return max(usable, key=lambda c: (round(c.em, 9), -round(c.retrievals_per_question, 9), c.f1))


def calibrate_from_runs(
    run_dirs: Sequence[str | Path], param: str, max_retrievals: float | None = None
) -> ExactCalibration:
    questions, rule, disagreements, dataset = collect(run_dirs, param)
    cands = candidates(questions, rule)
    chosen = choose(cands, max_retrievals)
    runs = [str(d) for d in run_dirs]
    return ExactCalibration(param, rule, questions, cands, chosen, runs, disagreements, dataset)
