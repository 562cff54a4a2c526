"""The harness on the real default pipeline (Gemma-3-270m, BM25 and corpus statistics over the HotpotQA
paragraph pool): records, traces, the counted answer re-prompt, resume, and a report rendered in Chromium.
A handful of questions with a small token budget keep this to about a minute."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from quco.config import load_config
from quco.datasets import load_dataset
from quco.eval.render.report import write_report
from quco.eval.run.runner import EvalOptions, Questions, run_eval
from quco.eval.runs.store import RESULTS_FILE, load_run
from quco.eval.score.metrics import score_prediction

pytestmark = pytest.mark.model

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
N = 2
BUDGET = 32


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (path / RESULTS_FILE).read_text("utf-8").splitlines()]


@pytest.fixture(scope="module")
def overrides(tmp_path_factory: pytest.TempPathFactory, hotpot_pool_path: Path) -> dict[str, Any]:
    idx = tmp_path_factory.mktemp("eval_idx")
    return {
        "retriever.corpus": str(hotpot_pool_path),
        "retriever.index_dir": str(idx / "bm25"),
        "corpus_stats.index_dir": str(idx / "stats"),
        "generation.max_new_tokens": BUDGET,
        "prompt.fewshot": 2,  # prompt prefill dominates CPU time; two exemplars keep the format
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, overrides: dict[str, Any]) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eval_runs")
    out = {}
    for method in ("wo-rag", "sr-rag", "quco"):
        cfg = load_config(CONFIGS / f"hotpotqa/{method}.yaml", overrides=overrides)
        summary = run_eval(
            cfg, "hotpotqa", Questions(limit=N), EvalOptions(out_dir=root / method, progress=False)
        )
        assert (summary.completed, summary.errors) == (N, 0)
        out[method] = root / method
    return out


def test_records_hold_scored_answers_and_complete_traces(runs: dict[str, Path]) -> None:
    examples = load_dataset("hotpotqa", limit=N)
    for method, path in runs.items():
        recs = _lines(path)
        assert [r["id"] for r in recs] == [e.id for e in examples]
        for rec, ex in zip(recs, examples, strict=True):
            assert rec["error"] is None
            trace = rec["trace"]
            assert trace["method"] == method and trace["question"] == ex.question
            assert rec["prediction"] == trace["prediction"]
            s = score_prediction(rec["prediction"], ex.answers, ex.kind, ex.dataset)
            assert (rec["answer"], rec["em"], rec["missing"]) == (s.answer, s.em, s.missing)
            counters = trace["counters"]
            assert counters["llm_calls"].get("main", 0) >= 1
            # per call at most the budget (main generations; the answer protocol's re-prompt has its own 128)
            assert counters["generated_tokens"].get("main", 0) <= BUDGET * (1 + len(trace["steps"]))
            assert counters["generated_tokens"].get("answer_reprompt", 0) <= 128
            assert set(counters["seconds"]) <= {"llm", "retrieval", "corpus_stats", "extraction", "other"}
            if method == "sr-rag":
                assert counters["retrievals"] >= 1
            if method == "wo-rag":
                assert counters["retrievals"] == 0
            if method == "quco":
                before = [s for s in trace["steps"] if s["stage"] == "before"]
                assert before and "entities" in before[0]["signals"]


def test_rerun_resumes_without_building_or_repeating(
    runs: dict[str, Path], overrides: dict[str, Any]
) -> None:
    before = (runs["sr-rag"] / RESULTS_FILE).read_bytes()
    cfg = load_config(CONFIGS / "hotpotqa/sr-rag.yaml", overrides=overrides)
    summary = run_eval(
        cfg, "hotpotqa", Questions(limit=N), EvalOptions(out_dir=runs["sr-rag"], progress=False)
    )
    assert (summary.new, summary.resumed) == (0, N)
    assert (runs["sr-rag"] / RESULTS_FILE).read_bytes() == before


def test_answer_reprompt_is_counted(tmp_path: Path, overrides: dict[str, Any]) -> None:
    # Four tokens cannot reach "So the answer is": every question needs the re-prompt.
    cfg = load_config(
        CONFIGS / "hotpotqa/wo-rag.yaml", overrides={**overrides, "generation.max_new_tokens": 4}
    )
    run_eval(
        cfg, "hotpotqa", Questions(limit=2), EvalOptions(out_dir=tmp_path, progress=False)
    )  # HotpotQA: the published protocol
    recs = _lines(tmp_path)
    assert any(r["reprompted"] for r in recs)
    for rec in recs:
        counters = rec["trace"]["counters"]
        if rec["reprompted"]:
            assert counters["llm_calls"]["answer_reprompt"] == 1
            assert counters["generated_tokens"]["answer_reprompt"] >= 1
            assert counters["prompt_tokens"]["answer_reprompt"] > 0
            assert "So the answer is" in rec["prediction"]
            assert any("re-prompted" in n for n in rec["trace"]["notes"])
        else:
            assert "answer_reprompt" not in counters["llm_calls"]
    assert load_run(tmp_path).config.identity["answer_protocol"] == {
        "name": "published",
        "max_new_tokens": 128,
    }


def test_reprompt_from_recorded_traces_equals_a_fresh_reprompted_run(
    tmp_path: Path, overrides: dict[str, Any]
) -> None:
    from quco.errors import QucoError
    from quco.eval.runs.store import RunError

    short = {**overrides, "generation.max_new_tokens": 4}  # too short to state an answer: all re-prompted
    cfg = load_config(CONFIGS / "hotpotqa/wo-rag.yaml", overrides=short)
    run_eval(
        cfg,
        "hotpotqa",
        Questions(limit=2),
        EvalOptions(out_dir=tmp_path / "plain", progress=False, protocol="strict"),
    )
    run_eval(cfg, "hotpotqa", Questions(limit=2), EvalOptions(out_dir=tmp_path / "fresh", progress=False))
    run_eval(
        cfg,
        "hotpotqa",
        Questions(limit=2),
        EvalOptions(out_dir=tmp_path / "reused", progress=False, traces_from=tmp_path / "plain"),
    )
    fresh, reused = _lines(tmp_path / "fresh"), _lines(tmp_path / "reused")
    assert all(r["reprompted"] for r in reused)
    for a, b in zip(fresh, reused, strict=True):
        assert (a["id"], a["prediction"], a["answer"], a["em"]) == (
            b["id"],
            b["prediction"],
            b["answer"],
            b["em"],
        )
        ca, cb = a["trace"]["counters"], b["trace"]["counters"]
        assert ca["llm_calls"] == cb["llm_calls"] == {"main": 1, "answer_reprompt": 1}
        assert ca["generated_tokens"] == cb["generated_tokens"]
    assert load_run(tmp_path / "reused").config.selection.traces_from == str(tmp_path / "plain")
    other = load_config(CONFIGS / "hotpotqa/wo-rag.yaml", overrides={**short, "prompt.fewshot": 1})
    with pytest.raises(RunError, match="different configuration.*fewshot"):
        run_eval(
            other,
            "hotpotqa",
            Questions(limit=2),
            EvalOptions(out_dir=tmp_path / "x", reprompt=True, traces_from=tmp_path / "plain"),
        )
    with pytest.raises(QucoError, match="drop --strict"):
        run_eval(
            cfg,
            "hotpotqa",
            Questions(limit=2),
            EvalOptions(out_dir=tmp_path / "z", protocol="strict", traces_from=tmp_path / "plain"),
        )
    with pytest.raises(RunError, match="made with --strict"):
        run_eval(
            cfg,
            "hotpotqa",
            Questions(limit=2),
            EvalOptions(out_dir=tmp_path / "y", traces_from=tmp_path / "fresh"),
        )


def test_report_of_real_runs_renders_in_chromium(runs: dict[str, Path], tmp_path: Path) -> None:
    html = write_report([runs["wo-rag"], runs["sr-rag"], runs["quco"]], tmp_path / "report.html", n_boot=1000)
    exe = shutil.which("chromium")
    assert exe, "headless Chromium is needed: apt-get install -y chromium"
    dom = subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         "--virtual-time-budget=5000", "--dump-dom", html.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    body = re.search(r"<body[^>]*>", dom)
    assert body
    total = re.search(r'data-images-total="(\d+)"', body.group(0))
    ok = re.search(r'data-images-ok="(\d+)"', body.group(0))
    assert total and ok and int(total.group(1)) >= 3 and ok.group(1) == total.group(1)
    assert dom.count("<summary>traces</summary>") == N
