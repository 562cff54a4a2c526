"""The bench scripts: each one loads and describes its arguments, and the stage-1 bench reproduces a recorded
run's own decisions from its scores; the run-retrieval bench counts what recorded runs found."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHES = sorted((ROOT / "bench").glob("bench_*.py"))


def load_bench(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def run_bench(
    path: Path, args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> str:
    module = load_bench(path)
    monkeypatch.setattr(sys, "argv", [path.name, *args])
    try:
        module.main()
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr().err
    return capsys.readouterr().out


def test_there_are_bench_scripts() -> None:
    assert len(BENCHES) >= 10


@pytest.mark.parametrize("path", BENCHES, ids=lambda p: p.stem)
def test_every_bench_script_loads_and_describes_its_arguments(
    path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = run_bench(path, ["--help"], capsys, monkeypatch)
    assert out.startswith("usage:"), out[:200]
    assert load_bench(path).__doc__, f"{path.name} has no docstring saying what it measures"


def test_stage1_bench_reproduces_the_runs_own_decisions(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the committed PubMedQA rows (calibrated threshold, fires on most but not all questions), the bench's
    split at the run's threshold holds exactly the questions whose stage 1 the run recorded as retrieving."""
    runs = ROOT / "results" / "headline" / "pubmedqa"
    retrieved = scored = 0
    with (runs / "quco" / "results.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            before = json.loads(line)["trace"]["steps"][0]
            if (
                before["stage"] == "before"
                and before["triggers"]
                and before["triggers"][0]["scores"][0] is not None
            ):
                scored += 1
                retrieved += before["decision"] == "retrieve"
    assert 0 < retrieved < scored
    out = run_bench(
        ROOT / "bench" / "bench_stage1_detection.py",
        [
            "--run", str(runs / "quco"),
            "--closed-book", str(runs / "wo-rag"),
            "--open-book", str(runs / "sr-rag"),
            "--boot", "200",
        ],
        capsys,
        monkeypatch,
    )  # fmt: skip
    assert f"{scored} questions with a stage-1 score" in out
    assert f"({retrieved} q), kept" in out
    assert f"({scored - retrieved} q); difference" in out
    assert "AUROC of rarity for a wrong closed-book answer: 0." in out


def _gold_hits(run_dir: Path, gold: dict[str, set[str]], key: str) -> int:
    """Questions of a recorded run whose retrieved passages (``key``: their id or title) hold all the gold."""
    hits = 0
    with (run_dir / "results.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            got = {p[key] for step in rec["trace"]["steps"] for p in step.get("retrieved") or []}
            hits += gold[str(rec["id"])] <= got
    return hits


def test_run_retrieval_bench_counts_the_gold_each_run_found(
    data_root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On committed headline rows, the questions whose retrieved passages hold every gold passage, counted here
    from the raw data files: PubMedQA's own abstract is the n-th PQA-L record of the pool (haystack id
    ``pubmedqa-pool:<n>``); HotpotQA's gold are the titles of the paragraphs flagged as supporting."""
    pqal = json.loads((data_root / "pubmedqa/ori_pqal_0_300.json").read_text(encoding="utf-8"))
    own = {pmid: {f"pubmedqa-pool:{n}"} for n, pmid in enumerate(pqal, 1)}
    runs = ROOT / "results" / "headline" / "pubmedqa"
    expected = [_gold_hits(runs / name, own, "id") for name in ("sr-rag", "flare")]
    assert expected[0] > expected[1] > 0
    out = run_bench(
        ROOT / "bench" / "bench_run_retrieval.py",
        ["--dataset", "pubmedqa", str(runs / "sr-rag"), str(runs / "flare"), "--boot", "200"],
        capsys,
        monkeypatch,
    )
    assert [f"all gold found {100 * k / 200:5.1f}% ({k}/200)" in out for k in expected] == [True, True]
    assert "all gold found vs SR-RAG: -" in out

    with (data_root / "hotpotqa/hotpot_dev_0_300_unified.jsonl").open(encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    titles = {r["_id"]: {p["title"] for p in r["context_paragraphs"] if p["is_supporting"]} for r in rows}
    runs = ROOT / "results" / "headline" / "hotpotqa"
    k = _gold_hits(runs / "sr-rag", titles, "title")
    assert 0 < k < 200
    out = run_bench(
        ROOT / "bench" / "bench_run_retrieval.py",
        ["--dataset", "hotpotqa", str(runs / "sr-rag"), "--boot", "200"],
        capsys,
        monkeypatch,
    )
    assert f"all gold found {100 * k / 200:5.1f}% ({k}/200)" in out


@pytest.mark.model
def test_hidden_states_bench_compares_the_two_engines(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the default model: llama.cpp's states are bit-identical without reuse and in reverse order, and agree
    with transformers' (cosine near 1, EigenScores and attention close)."""
    import re

    out = run_bench(
        ROOT / "bench" / "bench_hidden_states.py",
        ["--model", "gemma3-270m", "--samples", "4", "--hf"],
        capsys,
        monkeypatch,
    )
    assert "layer 9 of 18" in out and "in reverse order: True" in out, out
    low = float(re.search(r"cosine ([0-9.]+)-", out).group(1))
    scores = [float(x) for x in re.findall(r"EigenScore from \S+ states: (-?[0-9.]+)", out)]
    att = re.search(r"\|difference\| max ([0-9.]+).*correlates at ([0-9.]+)", out)
    assert low > 0.999 and len(scores) == 2 and abs(scores[0] - scores[1]) < 0.05 * abs(scores[1]), out
    assert att and float(att.group(1)) < 0.05 and float(att.group(2)) > 0.99, out
