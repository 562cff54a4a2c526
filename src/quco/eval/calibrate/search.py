"""Choose a trigger's threshold θ on one split of questions and write it into the config.

The evaluation then runs on other questions, so θ is never tuned on the data it is judged on (the flaw the
review of 2501.09292 names). Two targets:

- ``rate``: one pass that never retrieves records the score U of every check; θ is the cut whose share of
  checks with U > θ is closest to the target retrieval rate (rate per check, predicted from that pass).
- ``em``: θ candidates at several rates from that pass are each run on the split; the best exact match wins
  (ties: fewer retrievals per question).

It works for any thresholded parameter whose decisions emit trigger records (``--param``; default
``threshold``): FLARE, DRAGIN, ETC and the black-box triggers (``threshold``), QuCo-RAG's stage 1
(``entity_threshold``) and stage 2 (``cooccurrence_threshold``, ``head_threshold``), DTR
(``uncertainty_threshold``). A decision fires when its most extreme score crosses θ (the largest for "above",
the smallest for "below"), so that score stands for the decision.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from quco.errors import ConfigError, QucoError
from quco.eval.calibrate.exact import margin
from quco.trigger_record import TriggerRecord, crosses

log = logging.getLogger(__name__)

DEFAULT_RATES = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass
class Candidate:
    """One θ run on the calibration split."""

    threshold: float
    em: float
    retrieval_rate: float  # fired checks / checks
    retrievals_per_question: float
    llm_calls_per_question: float


@dataclass
class CalibrationResult:
    threshold: float
    target: str
    questions: int
    scores: list[float]  # U of every check in the never-retrieving pass
    predicted_rate: float  # share of those scores that fire at θ
    candidates: list[Candidate] = field(default_factory=list)
    param: str = "threshold"  # the method parameter θ is for
    # Target 'em': how many questions separate the choice from the runner-up (quco.eval.calibrate.exact.Margin)
    margin: Any = None


# -- pure choices --------------------------------------------------------------------------------------------


def _oriented(rule: str) -> float:
    """+1 where higher scores fire (above, abs_above, at_least), -1 where lower ones do (below)."""
    if rule in ("above", "abs_above", "at_least"):
        return 1.0
    if rule == "below":
        return -1.0
    raise QucoError(f"cannot calibrate a trigger with rule '{rule}'; it has no threshold")


def threshold_for_rate(scores: Sequence[float], rate: float, rule: str = "above") -> float:
    """θ whose share of ``scores`` that fire is closest to ``rate`` (ties: the θ that fires less).

    Candidates are the distinct scores themselves (θ = a score fires on those beyond it) and one beyond the
    most extreme score (fires on all).
    """
    if not scores:
        raise QucoError("no decision was scored on the calibration questions; nothing to calibrate")
    if not 0.0 <= rate <= 1.0:
        raise QucoError(f"target rate must be between 0 and 1, got {rate}")
    sign = _oriented(rule)
    values = sorted({sign * float(s) for s in scores})  # in the orientation where higher fires
    below = values[0] - max(1.0, abs(values[0]))
    best, best_gap = below, abs(1.0 - rate)
    for v in values:
        gap = abs(fire_rate(scores, sign * v, rule) - rate)
        if gap <= best_gap + 1e-12:
            best, best_gap = v, gap
    return sign * best


def check_score(record: TriggerRecord) -> float:
    """The score that decides a recorded decision: it fires at some candidate iff this one crosses θ."""
    values = record.known_scores()
    if record.rule == "abs_above":
        return max(abs(v) for v in values)
    return max(values) if _oriented(record.rule) > 0 else min(values)


def fire_rate(scores: Sequence[float], threshold: float, rule: str = "above") -> float:
    return sum(crosses(s, threshold, rule) for s in scores) / len(scores) if scores else 0.0


def best_candidate(candidates: Sequence[Candidate]) -> Candidate:
    """Highest EM; among equals, the one that retrieves least per question."""
    if not candidates:
        raise QucoError("no threshold candidate was evaluated")
    return max(candidates, key=lambda c: (round(c.em, 9), -c.retrievals_per_question))


# -- writing the config --------------------------------------------------------------------------------------


def _yaml_float(value: float) -> str:
    return repr(float(value)) if math.isfinite(value) else (".inf" if value > 0 else "-.inf")


def write_threshold(path: str | Path, threshold: float, note: str, param: str = "threshold") -> None:
    """Set ``params.<param>`` in a YAML config, keeping the rest of the file (and its comments) as it is."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        data = yaml.safe_load(text) if text.strip() else {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    line = f"{param}: {_yaml_float(threshold)}  # {note}"
    key_line = re.compile(rf"^(?P<indent>[ \t]+){re.escape(param)}:[^\n]*$", re.MULTILINE)
    params = data.get("params")
    params_block = re.search(r"^params:[ \t]*(#.*)?$", text, re.MULTILINE)
    if isinstance(params, dict) and param in params and params_block:
        start = params_block.end()
        nxt = re.search(r"^\S", text[start + 1 :], re.MULTILINE)
        end = start + 1 + nxt.start() if nxt else len(text)
        block = key_line.sub(lambda m: m.group("indent") + line, text[start:end], count=1)
        text = text[:start] + block + text[end:]
    elif isinstance(params, dict) and params_block:
        text = text[: params_block.end()] + f"\n  {line}" + text[params_block.end() :]
    elif params is None and not params_block:
        text = text.rstrip("\n") + ("\n" if text.strip() else "") + f"params:\n  {line}\n"
    else:
        raise ConfigError(f"cannot place params.{param} in {path}: write 'params:' as a block mapping")
    check = yaml.safe_load(text)
    if not math.isclose(float(check["params"][param]), threshold, rel_tol=1e-12, abs_tol=0.0):
        raise ConfigError(f"could not write params.{param} into {path}")  # pragma: no cover - guard
    path.write_text(text, encoding="utf-8")


# -- running -------------------------------------------------------------------------------------------------


def _set_threshold(pipe: Any, param: str, threshold: float) -> None:
    pipe.method.params = pipe.method.params.model_copy(update={param: threshold})


# The rule each thresholded parameter is compared with (ETC's abs_above orients like above).
PARAM_RULES = {
    "threshold": "above",
    "entity_threshold": "below",
    "cooccurrence_threshold": "below",
    "head_threshold": "below",
    "uncertainty_threshold": "at_least",
}


def _never(param: str) -> float:
    """A threshold at which ``param``'s rule never fires."""
    return math.inf if _oriented(PARAM_RULES[param]) > 0 else -math.inf


@dataclass
class _Pass:
    candidate: Candidate
    scores: list[float]
    rule: str


def _run(pipe: Any, examples: Sequence[Any], param: str, threshold: float) -> _Pass:
    """Answer ``examples`` with θ for ``param``; the candidate's numbers and the scores of every decision."""
    from quco.eval.score.metrics import score_prediction

    _set_threshold(pipe, param, threshold)
    em = fired = checks = retrievals = calls = 0.0
    scores: list[float] = []
    rule = ""
    for ex in examples:
        trace = pipe.answer(ex.question)
        em += score_prediction(trace.prediction, ex.answers, ex.kind, ex.dataset).em
        for step in trace.steps:
            for record in step.triggers:
                if record.param != param or not record.known_scores():
                    continue
                rule = record.rule
                scores.append(check_score(record))
                checks += 1
                fired += record.fired
        retrievals += trace.counters.retrievals
        calls += trace.counters.total_llm_calls
    n = max(1, len(examples))
    cand = Candidate(threshold, em / n, fired / checks if checks else 0.0, retrievals / n, calls / n)
    return _Pass(cand, scores, rule)


def thresholded_params(method: Any) -> list[str]:
    """The parameters of a method that hold a trigger threshold (calibratable)."""
    return [k for k in PARAM_RULES if k in type(method.params).model_fields]


def calibrate(
    config: Any,
    dataset: str = "hotpotqa",
    offset: int = 0,
    limit: int = 100,
    target: str = "rate",
    rate: float = 0.5,
    rates: Sequence[float] = DEFAULT_RATES,
    overrides: dict[str, Any] | None = None,
    progress: bool = False,
    param: str | None = None,
) -> CalibrationResult:
    """Choose θ for ``param`` on questions ``offset .. offset+limit-1`` of ``dataset`` (nothing is written).

    ``config`` is a YAML path, a ``PipelineConfig``, or a built ``Pipeline`` (reused, e.g. to calibrate
    several targets on one loaded model; its method's threshold is changed in place).
    """
    from quco.config import PipelineConfig, load_config
    from quco.datasets import load_dataset
    from quco.pipeline import Pipeline

    if target not in ("rate", "em"):
        raise QucoError(f"unknown calibration target '{target}'; use 'rate' or 'em'")
    if isinstance(config, Pipeline):
        pipe = config
    else:
        cfg = config if isinstance(config, PipelineConfig) else load_config(config, overrides=overrides)
        pipe = Pipeline.from_config(cfg, progress=progress)
    available = thresholded_params(pipe.method)
    param = param or ("threshold" if "threshold" in available else None)
    if param is None or param not in available:
        names = ", ".join(available) or "none"
        raise QucoError(
            f"method '{pipe.method.name}' has no parameter '{param or 'threshold'}' to calibrate; "
            f"pass --param with one of: {names}"
        )
    examples = load_dataset(dataset, limit=limit, offset=offset)
    if not examples:
        raise QucoError(f"no questions selected from {dataset} (offset {offset}, limit {limit})")
    log.info("scoring every decision of %d questions with %s never firing", len(examples), param)
    never = _run(pipe, examples, param, _never(param))
    scores, rule = never.scores, never.rule or PARAM_RULES[param]
    if target == "rate":
        theta = threshold_for_rate(scores, rate, rule)
        return CalibrationResult(
            theta, "rate", len(examples), scores, fire_rate(scores, theta, rule), param=param
        )
    cands: list[Candidate] = []
    thetas = {threshold_for_rate(scores, r, rule) for r in rates}
    for theta in sorted(thetas, key=lambda t: -_oriented(rule) * t):
        if fire_rate(scores, theta, rule) == 0.0:  # fires nowhere: the same run as the pass above
            cands.append(
                Candidate(theta, never.candidate.em, 0.0, 0.0, never.candidate.llm_calls_per_question)
            )
            continue
        log.info("evaluating %s = %g", param, theta)
        cands.append(_run(pipe, examples, param, theta).candidate)
    best_candidate(cands)  # an error when there is none
    ranked = sorted(cands, key=lambda c: (round(c.em, 9), -c.retrievals_per_question), reverse=True)

    def shape_of(c: Candidate) -> str:
        r = fire_rate(scores, c.threshold, rule)
        return "never" if r == 0.0 else "always" if r == 1.0 else "split"

    m = margin(ranked, len(examples), shape_of)
    return CalibrationResult(
        m.chosen.threshold,
        "em",
        len(examples),
        scores,
        fire_rate(scores, m.chosen.threshold, rule),
        cands,
        param=param,
        margin=m,
    )


# -- from a recorded pass -------------------------------------------------------------------------------------

# Parameters that decide which samples a black-box check draws: a recorded pass can stand in for another
# config's pass only when these (and the generator, prompt and generation settings) are the same.
_SAMPLING_PARAMS = ("n_samples", "temperature", "top_p", "top_k", "seed", "sentence_tokens", "sample_stop")


def scores_from_run(run_dir: str | Path, config: Any) -> tuple[list[float], int, str]:
    """U of every check of a recorded never-retrieving black-box pass, re-scored with ``config``'s estimator.

    The pass is a ``quco eval`` run of any black-box config with ``params.threshold=.inf`` and recorded samples.
    Without retrieval the text, and so every check's seeded samples, do not depend on the estimator or the
    similarity: one sampling pass calibrates them all. Returns the scores, the number of questions answered
    without error, and the run's question span as START:END (or "recorded" when it was a sample).
    """
    from quco.config import PipelineConfig, load_config
    from quco.eval.runs.store import load_run
    from quco.methods.blackbox import BlackBoxParams, BlackBoxRAG

    cfg = config if isinstance(config, PipelineConfig) else load_config(config)
    run = load_run(run_dir)
    if cfg.method != "blackbox" or run.method != "blackbox":
        raise QucoError(
            f"--from-run re-scores recorded black-box samples; the config's method is '{cfg.method}' and "
            f"the run's is '{run.method}'"
        )
    recorded = PipelineConfig.model_validate(run.config.pipeline)
    ours, theirs = BlackBoxParams.model_validate(cfg.params), BlackBoxParams.model_validate(recorded.params)
    differ = [k for k in _SAMPLING_PARAMS if getattr(ours, k) != getattr(theirs, k)]
    differ += [k for k in ("generator", "prompt", "generation") if getattr(cfg, k) != getattr(recorded, k)]
    if differ:
        raise QucoError(
            f"the run in {run_dir} drew its samples differently from this config ({', '.join(differ)} "
            "differ); record a pass with the same settings"
        )
    method = BlackBoxRAG(cfg.params)
    scores: list[float] = []
    questions = 0
    for rec in run.records:
        if rec.error:
            continue
        questions += 1
        for step in (rec.trace or {}).get("steps", []):
            if step.get("decision") == "retrieve":
                raise QucoError(
                    f"the run in {run_dir} retrieved (question {rec.id}): record the calibration pass "
                    "with --set params.threshold=.inf so that no check fires"
                )
            samples = (step.get("signals") or {}).get("samples")
            if step.get("stage") == "generate" and samples:
                scores.append(method.score_recorded([str(x) for x in samples]))
    if not scores:
        raise QucoError(
            f"no recorded samples in {run_dir}: run the pass with params.record_samples=true "
            "(the default) and at least one question"
        )
    sel = run.config.selection
    start = sel.offset if sel is not None else 0
    span = f"{start}:{start + len(run.records)}" if sel is None or not sel.sample else "recorded"
    return scores, questions, span


def rate_from_runs(
    config: Path, runs: Sequence[Path], rate: float, overrides: dict[str, Any]
) -> tuple[CalibrationResult, str]:
    """θ for a target rate from recorded never-retrieving black-box passes, and the questions they cover."""
    from quco.config import load_config

    cfg = load_config(config, overrides=overrides)
    scores: list[float] = []
    n_questions, spans = 0, []
    for run_dir in runs:
        part, answered, span = scores_from_run(run_dir, cfg)
        scores += part
        n_questions += answered
        spans.append(f"{span} (recorded pass {run_dir.name})")
    theta = threshold_for_rate(scores, rate)
    return CalibrationResult(theta, "rate", n_questions, scores, fire_rate(scores, theta)), ", ".join(spans)


def em_from_runs(
    console: Any, runs: Sequence[Path], param: str | None, max_retrievals: float | None
) -> tuple[CalibrationResult, str, str]:
    """θ of best EM from recorded runs of a pre-generation decision; prints every candidate it covers."""
    from quco.eval.calibrate.exact import calibrate_from_runs

    if not param:
        raise QucoError("--target em --from-run needs --param (e.g. entity_threshold)")
    exact = calibrate_from_runs(runs, param, max_retrievals)
    if exact.disagreements:
        log.warning(
            "%d question(s) answered differently in two runs under the same decision (%s): the first "
            "recording is used",
            len(exact.disagreements),
            ", ".join(exact.disagreements[:5]),
        )
    n = len(exact.questions)
    best = exact.margin.best if exact.margin is not None else exact.chosen
    for c in exact.candidates:
        if not c.covered:
            continue
        mark = "  <- chosen" if c is exact.chosen else ""
        if c is best and c is not exact.chosen:
            mark = "  <- best EM (a change of shape on too few questions)"
        console.print(
            f"θ={c.threshold:<12.6g} fires {c.fired:>3}/{n}  EM={100 * c.em:5.1f}  F1={100 * c.f1:5.1f}  "
            f"retrievals/q={c.retrievals_per_question:.2f}  LLM calls/q={c.llm_calls_per_question:.2f}{mark}"
        )
    covered = sum(c.covered for c in exact.candidates)
    console.print(f"{covered} of {len(exact.candidates)} distinct decision sets covered by the runs")
    if exact.margin is not None:
        for line in exact.margin.lines(param):
            console.print(line, highlight=False, soft_wrap=True)
    scores = [q.score for q in exact.questions if q.score is not None]
    result = CalibrationResult(
        exact.chosen.threshold,
        "em",
        n,
        scores,
        exact.chosen.fired / n if n else 0.0,
        param=param,
        margin=exact.margin,
    )
    return result, exact.span, exact.dataset
