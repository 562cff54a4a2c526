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
from quco.eval.calibrate_exact import calibrate_from_runs
from quco.eval.runner import run_eval
from quco.eval.runs import load_run
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
    run_eval(pipe, "hotpotqa", limit=N, out_dir=root / name, progress=False)
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
    assert cand.em == pytest.approx(sum(r["em"] for r in run.records) / N)
    assert cand.f1 == pytest.approx(sum(r["f1"] for r in run.records) / N)
    retrievals = [r["trace"]["counters"]["retrievals"] for r in run.records]
    assert cand.retrievals_per_question == pytest.approx(sum(retrievals) / N)
    assert cand.fired == sum(x > 0 for x in retrievals)
    assert not exact.disagreements
    # A middle run covers part of both outcomes: with the always-run it covers every threshold above its own.
    part = calibrate_from_runs([runs["always"], tmp_path / "middle"], "entity_threshold")
    covered = [c.threshold for c in part.candidates if c.covered]
    assert middle in covered and all(t >= middle for t in covered)


def test_the_choice_is_the_best_em_within_the_retrieval_budget(runs) -> None:
    exact = calibrate_from_runs([runs["always"], runs["never"]], "entity_threshold")
    best = max(c.em for c in exact.candidates)
    assert exact.chosen.em == best
    fewest = min(c.retrievals_per_question for c in exact.candidates if c.em == best)
    assert exact.chosen.retrievals_per_question == fewest
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
    assert f"calibrated: best EM on hotpotqa questions 0:{N}" in text
    assert load_config(config).params["entity_threshold"] == exact.chosen.threshold
    missing = CliRunner().invoke(app, ["calibrate", "-c", str(config), "--target", "em", "--from-run", "x"])
    assert missing.exit_code == 2 and "--param" in missing.output
