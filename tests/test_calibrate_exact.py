"""``quco calibrate --target em --from-run``: the EM of every stage-1 threshold, exactly, from two recorded runs.

The runs are real ``quco eval`` run directories (the eval runner's own code) over real retrieval, corpus
statistics and text tools, with a scripted generator whose answer depends on whether passages are in its prompt;
the real default model runs the same eval path in ``test_eval_integration.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from quco.cli import app
from quco.config import load_config
from quco.errors import QucoError
from quco.eval.calibrate.exact import calibrate_from_runs
from quco.eval.run.runner import EvalOptions, Questions, run_eval
from quco.eval.runs.store import load_run
from test_engine import ScriptedGenerator, build_real_parts, make_pipeline

N = 6


@pytest.fixture(scope="module")
def real_parts(tmp_path_factory: pytest.TempPathFactory, small_hotpot_corpus: Path):  # noqa: ANN201
    return build_real_parts(tmp_path_factory.mktemp("idx"), small_hotpot_corpus)


@dataclass
class ReadsPassages(ScriptedGenerator):
    """Answers "yes" when passages are in its prompt and "no" closed-book, for ever."""

    def generate(self, prompt: str, **kw: object):  # noqa: ANN201
        self.responses = [
            "So the answer is yes." if "Background passages" in prompt else "So the answer is no."
        ]
        return super().generate(prompt, **kw)


def _run(real_parts, root: Path, name: str, threshold: float, **params: object) -> Path:  # noqa: ANN001
    pipe, _ = make_pipeline(real_parts, "quco", [], entity_threshold=threshold, **params)
    pipe.parts.generator = ReadsPassages([])
    run_eval(pipe, "hotpotqa", Questions(limit=N), EvalOptions(out_dir=root / name, progress=False))
    return root / name


@pytest.fixture(scope="module")
def runs(real_parts, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:  # noqa: ANN001
    root = tmp_path_factory.mktemp("runs")
    return {
        "always": _run(real_parts, root, "always", math.inf),
        "never": _run(real_parts, root, "never", 0.0),
    }


def test_every_threshold_from_two_runs_equals_a_run_at_that_threshold(
    real_parts, runs, tmp_path: Path
) -> None:
    exact = calibrate_from_runs([runs["always"], runs["never"]], "entity_threshold")
    scored = sorted({q.score for q in exact.questions if q.score is not None})
    assert len(scored) >= 3 and exact.rule == "below" and exact.dataset == "hotpotqa"
    assert exact.span == f"0:{N}"
    assert all(c.covered for c in exact.candidates)  # both outcomes of every question are recorded
    n_scored = sum(q.score is not None for q in exact.questions)
    assert exact.candidates[0].fired == 0 and exact.candidates[-1].fired == n_scored
    middle = scored[len(scored) // 2]  # fires on the questions scored below it
    run = load_run(_run(real_parts, tmp_path, "middle", middle))
    cand = next(c for c in exact.candidates if c.threshold == middle)
    assert cand.em == pytest.approx(sum(r.em for r in run.records) / N)
    assert cand.f1 == pytest.approx(sum(r.f1 for r in run.records) / N)
    retrievals = [r.trace["counters"]["retrievals"] for r in run.records]
    assert cand.retrievals_per_question == pytest.approx(sum(retrievals) / N)
    assert cand.fired == sum(x > 0 for x in retrievals)
    assert not exact.disagreements
    # A middle run covers part of both outcomes: with the always-run it covers every threshold above its own.
    part = calibrate_from_runs([runs["always"], tmp_path / "middle"], "entity_threshold")
    covered = [c.threshold for c in part.candidates if c.covered]
    assert middle in covered and all(t >= middle for t in covered)


def test_the_choice_is_the_best_em_within_the_retrieval_budget(runs) -> None:
    # without a margin required, the best EM, ties broken by fewer retrievals
    exact = calibrate_from_runs([runs["always"], runs["never"]], "entity_threshold", min_margin=0.0)
    best = max(c.em for c in exact.candidates)
    assert exact.chosen.em == best
    fewest = min(c.retrievals_per_question for c in exact.candidates if c.em == best)
    assert exact.chosen.retrievals_per_question == fewest
    # by default, a choice that fires always or never must beat every split by 3% of the questions (1 of 6 here)
    kept = calibrate_from_runs([runs["always"], runs["never"]], "entity_threshold")
    m = kept.margin
    assert m is not None and m.needed == 1 and m.best == exact.chosen
    if m.best_shape != "split" and m.split_margin is not None and m.split_margin < 1:
        assert kept.chosen is m.best_split and 0 < kept.chosen.fired < max(c.fired for c in kept.candidates)
    else:
        assert kept.chosen == exact.chosen
    capped = calibrate_from_runs([runs["always"], runs["never"]], "entity_threshold", max_retrievals=0.0)
    assert capped.chosen.retrievals_per_question == 0.0 and capped.chosen.fired == 0


def test_runs_that_differ_in_more_than_the_threshold_or_a_stage_two_param_are_refused(
    real_parts, runs, tmp_path: Path
) -> None:
    other = _run(real_parts, tmp_path, "other", 0.0, sentence_query="full_triplet")
    with pytest.raises(QucoError, match="sentence_query"):
        calibrate_from_runs([runs["always"], other], "entity_threshold")
    with pytest.raises(QucoError, match="during generation"):
        calibrate_from_runs([runs["always"]], "cooccurrence_threshold")
    with pytest.raises(QucoError, match="no recorded decision"):
        calibrate_from_runs([runs["always"]], "threshold")


def test_the_command_prints_every_threshold_and_writes_the_best(runs, tmp_path: Path) -> None:
    config = tmp_path / "quco.yaml"
    config.write_text("method: quco\nparams:\n  entity_threshold: 100000  # published\n", "utf-8")
    args = ["calibrate", "-c", str(config), "--param", "entity_threshold", "--target", "em"]
    args += ["--from-run", str(runs["always"]), "--from-run", str(runs["never"])]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    exact = calibrate_from_runs([runs["always"], runs["never"]], "entity_threshold")
    assert "<- chosen" in result.output and f"{len(exact.candidates)} of" in result.output
    text = config.read_text("utf-8")
    note = exact.margin.note()
    assert f"calibrated: best EM{', ' + note if note else ''} on hotpotqa questions 0:{N}" in text
    assert "calibration questions" in result.output and "published shape" in result.output
    assert load_config(config).params["entity_threshold"] == exact.chosen.threshold
    missing = CliRunner().invoke(app, ["calibrate", "-c", str(config), "--target", "em", "--from-run", "x"])
    assert missing.exit_code == 2 and "--param" in missing.output


def _cand(threshold: float, fired: int, em: float, retrievals: float = 1.0):  # noqa: ANN202
    from quco.eval.calibrate.exact import ExactCandidate

    return ExactCandidate(threshold, fired, True, em, em, retrievals, 1.0)


def _shape(c) -> str:  # noqa: ANN001
    return "never" if c.fired == 0 else "always" if c.fired == 100 else "split"


def test_a_change_of_the_rules_shape_needs_three_questions_in_a_hundred() -> None:
    """The HotpotQA calibration's numbers: always firing won by 1 question of 100 over the best split (EM 26 against
    25), so the split is kept and the report says so; by 5 questions, always firing would stand."""
    from quco.eval.calibrate.exact import margin

    split, later_split = _cand(7470.2, 75, 0.25, 1.36), _cand(284881, 99, 0.25, 1.55)
    never = _cand(0, 0, 0.20, 0.96)
    ranked = [_cand(math.inf, 100, 0.26, 1.54), split, later_split, never]
    m = margin(ranked, 100, _shape)
    assert (m.best_shape, m.margin, m.split_margin, m.needed) == ("always", 1, 1, 3)
    assert m.kept_shape and m.chosen is split and "published shape kept" in m.note()
    text = "\n".join(m.lines("entity_threshold"))
    assert "ahead of the runner-up entity_threshold=7470.2 by 1 of 100 calibration questions" in text
    assert "always is 1 of 100 questions ahead of the best threshold of the published shape" in text
    assert "fewer than 3: too few to change the rule's shape, so the published shape is kept" in text
    m = margin([_cand(math.inf, 100, 0.30), split, never], 100, _shape)
    assert not m.kept_shape and m.chosen.threshold == math.inf and m.note() == ""
    assert "the rule's shape changes to always" in "\n".join(m.lines("entity_threshold"))
    m = margin([split, _cand(math.inf, 100, 0.24), never], 100, _shape)  # a split won: nothing to keep
    assert m.chosen is split and m.margin == 1 and "keeps the published shape" in m.lines("x")[1]
    m = margin([never], 100, _shape)  # within a budget of 0 retrievals only "never" is left
    assert m.chosen is never and m.margin is None and "stands" in m.lines("x")[1]
