"""Does a trigger catch wrong drafts: the two-group test, the first-draft reading of traces, `quco detection`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from quco.cli import app
from quco.datasets import load_dataset
from quco.eval.run.runner import EvalOptions, Questions, run_eval
from quco.eval.runs.store import load_run
from quco.eval.score.detection import detection, detection_cells, first_draft_checks
from quco.eval.score.stats import auroc, group_difference, proportion_difference, wilson_interval
from quco.trace import Step, Trace
from quco.trigger_record import TriggerRecord

EXAMPLES = load_dataset("hotpotqa", limit=12)
GOLD = {e.question: e.answers[0] for e in EXAMPLES}


def test_group_difference_separates_a_perfect_split_from_none() -> None:
    wrong = [1.0] * 20 + [0.0] * 20
    diff, p = group_difference(wrong, [True] * 20 + [False] * 20, n_boot=2000)
    assert (diff.mean, diff.low, diff.high, diff.n) == (1.0, 1.0, 1.0, 40)
    assert p < 0.001
    # Labels unrelated to the outcome: no difference, and the test says so.
    diff, p = group_difference(wrong, [True, False] * 20, n_boot=2000)
    assert diff.mean == 0.0 and diff.low < 0 < diff.high and p == 1.0
    diff, p = group_difference([1.0, 0.0, 1.0], [True, True, True])
    assert math.isnan(diff.mean) and p == 1.0
    with pytest.raises(ValueError, match="differ in length"):
        group_difference([1.0, 0.0], [True])


def _outcomes(k1: int, n1: int, k2: int, n2: int) -> tuple[list[float], list[bool]]:
    return [1.0] * k1 + [0.0] * (n1 - k1) + [1.0] * k2 + [0.0] * (n2 - k2), [True] * n1 + [False] * n2


@pytest.mark.parametrize(
    ("counts", "low", "high"),
    [
        # Newcombe (1998), "Interval estimation for the difference between independent proportions", method 10
        ((56, 70, 48, 80), 0.0524, 0.3339),
        ((9, 10, 3, 10), 0.1705, 0.8090),
        ((6, 7, 2, 7), 0.0582, 0.8062),
        ((5, 56, 0, 29), -0.0381, 0.1926),
        ((0, 10, 0, 20), -0.1611, 0.2775),
        ((10, 10, 0, 20), 0.6791, 1.0),
    ],
)
def test_proportion_difference_gives_newcombes_score_interval(counts, low, high) -> None:
    values, group = _outcomes(*counts)
    diff, _ = proportion_difference(values, group, n_perm=200)
    k1, n1, k2, n2 = counts
    assert diff.mean == pytest.approx(k1 / n1 - k2 / n2)
    assert (round(diff.low, 4), round(diff.high, 4)) == (low, high)


def test_proportion_difference_stays_wide_where_a_bootstrap_collapses() -> None:
    # 158 of 191 fired drafts wrong, all 5 kept drafts wrong: a bootstrap of the kept group never varies, so
    # its interval leaves 0 out although the labels' permutation finds nothing (p about 0.6).
    values, group = _outcomes(158, 191, 5, 5)
    boot, p_boot = group_difference(values, group, n_boot=2000)
    score, p = proportion_difference(values, group, n_perm=2000)
    assert boot.high < 0 and p > 0.5  # the contradiction this interval removes
    assert score.low < 0 < score.high and p == p_boot
    assert wilson_interval(5, 5)[0] == pytest.approx(0.5655, abs=1e-4)
    with pytest.raises(ValueError, match="yes/no"):
        proportion_difference([0.5, 1.0], [True, False])
    diff, p = proportion_difference([1.0, 0.0], [True, True])
    assert math.isnan(diff.mean) and p == 1.0


def test_auroc_ranks_positives_first_and_counts_ties_half() -> None:
    labels = [True, True, False, False]
    assert auroc([0.9, 0.8, 0.2, 0.1], labels, n_boot=500).mean == 1.0
    assert auroc([0.1, 0.2, 0.8, 0.9], labels, n_boot=500).mean == 0.0
    assert auroc([0.5, 0.5, 0.5, 0.5], labels, n_boot=500).mean == 0.5
    assert auroc([0.9, 0.5, 0.5, 0.1], labels, n_boot=500).mean == pytest.approx(
        0.875
    )  # one tie of four pairs
    iv = auroc([float(i) for i in range(40)], [i % 2 == 0 for i in range(40)], n_boot=2000)
    assert iv.low < 0.5 < iv.high and iv.n == 40
    assert math.isnan(auroc([0.3, 0.4], [True, True]).mean)


def _judge(kind: str):
    """An answerer whose first judged draft is right on even questions; its trigger fires per ``kind``."""

    def answer(question: str) -> Trace:
        i = [e.question for e in EXAMPLES].index(question)
        right = i % 2 == 0
        fire = {"detector": not right, "blind": i % 4 < 2}[kind]
        draft = f"A step. So the answer is {GOLD[question] if right else 'Paris'}."
        if i == 11:
            draft = "A step that never states"  # no answer: counted apart
        record = TriggerRecord("score", "above", 0.5, [0.9 if fire else 0.1], "sentence", 0 if fire else None)
        trace = Trace(question=question, method="flare")
        trace.steps.append(Step(index=0, stage="before", decision="skip"))
        trace.steps.append(Step(index=1, stage="generate", draft=draft, triggers=[record],
                                decision="retrieve" if fire else "keep"))  # fmt: skip
        trace.steps.append(
            Step(index=2, stage="generate", draft="Later. So the answer is Paris.", triggers=[record])
        )
        trace.prediction = f"So the answer is {GOLD[question]}."  # the final answer is not what is tested
        return trace

    answer.method = "flare"  # type: ignore[attr-defined]
    return answer


def test_the_first_judged_draft_is_scored_not_the_final_answer(tmp_path: Path) -> None:
    run_eval(
        _judge("detector"),
        "hotpotqa",
        Questions(limit=12),
        EvalOptions(out_dir=tmp_path / "det", progress=False),
    )
    run = load_run(tmp_path / "det")
    checks = first_draft_checks(run)
    assert len(checks) == 12 and checks[11].wrong is None
    assert [c.wrong for c in checks[:11]] == [i % 2 == 1 for i in range(11)]
    assert all(c.fired == (i % 2 == 1) for i, c in enumerate(checks))
    d = detection(run, n_boot=500)
    assert d is not None
    assert (d.drafts, d.no_answer, d.fired_wrong, d.fired_right, d.kept_wrong, d.kept_right) == (
        12,
        1,
        5,
        0,
        0,
        6,
    )
    assert (d.recall, d.false_alarms, d.difference.mean) == (1.0, 0.0, 1.0)
    cells = detection_cells(d)
    assert cells[:5] == [
        "12 (1 without answer)",
        "45% (5/11)",
        "100% (5/5)",
        "0% (0/6)",
        f"+100.0 [+41.6, +100.0] p={d.p_value:.3f}",  # Newcombe: 5 of 5 against 0 of 6 is not certainty
    ]
    assert d.p_value < 0.05
    # The first score (0.9 where the trigger fired, 0.1 where it kept) ranks every wrong draft first.
    assert d.auroc is not None and (d.auroc.mean, d.auroc.n) == (1.0, 11)
    assert cells[-1] == "1.00 [1.00, 1.00] (n=11)"


def test_quco_detection_prints_each_run_and_names_runs_without_judged_drafts(tmp_path: Path) -> None:
    run_eval(
        _judge("blind"),
        "hotpotqa",
        Questions(limit=12),
        EvalOptions(out_dir=tmp_path / "blind", progress=False),
    )

    def single(question: str) -> Trace:  # decides before generation only, as SR-RAG
        trace = Trace(question=question, method="sr-rag", prediction="So the answer is Paris.")
        trace.steps.append(Step(index=0, stage="before", decision="retrieve"))
        trace.steps.append(Step(index=1, stage="generate", draft="So the answer is Paris."))
        return trace

    single.method = "sr-rag"  # type: ignore[attr-defined]
    run_eval(single, "hotpotqa", Questions(limit=3), EvalOptions(out_dir=tmp_path / "sr", progress=False))
    res = CliRunner().invoke(app, ["detection", str(tmp_path / "blind"), str(tmp_path / "sr"), "--markdown"])
    assert res.exit_code == 0, res.output
    assert "no draft judged during generation" in res.output
    blind = detection(load_run(tmp_path / "blind"))  # the command's 10,000 resamples
    assert blind is not None and blind.fired == 6 and blind.kept == 5
    assert f"| {' | '.join(detection_cells(blind))} |" in res.output.replace("\n", "")
    twice = CliRunner().invoke(
        app, ["detection", str(tmp_path / "blind"), str(tmp_path / "blind"), "--markdown"]
    )
    assert (
        twice.exit_code == 0 and twice.output.count(f"| {tmp_path / 'blind'} | flare |") == 2
    )  # named by path
    bad = CliRunner().invoke(app, ["detection", str(tmp_path / "missing")])
    assert bad.exit_code != 0 and "missing" in bad.output


def test_a_fixed_schedule_judges_no_draft(tmp_path: Path) -> None:
    """FS-RAG retrieves after every sentence whatever it says: its "always" records are no judgement."""

    def fixed(question: str) -> Trace:
        every = TriggerRecord.decide("schedule", "always", 0.0, [None], "sentence", param="")
        trace = Trace(question=question, method="fs-rag", prediction="So the answer is Paris.")
        trace.steps.append(
            Step(index=0, stage="generate", draft="A step.", triggers=[every], decision="retrieve")
        )
        trace.steps.append(Step(index=1, stage="generate", draft="So the answer is Paris.", triggers=[every]))
        return trace

    fixed.method = "fs-rag"  # type: ignore[attr-defined]
    run_eval(fixed, "hotpotqa", Questions(limit=3), EvalOptions(out_dir=tmp_path / "fs", progress=False))
    run = load_run(tmp_path / "fs")
    assert first_draft_checks(run) == [] and detection(run) is None
