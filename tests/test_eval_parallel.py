"""`quco eval --workers N` on the llamacpp backend: worker processes, each with its own pipeline.

The answers do not depend on the number of workers (the backend's reproducible mode makes each answer a
function of its question), so a run with two worker processes records exactly what one process records.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from quco.config import load_config
from quco.eval.run.executors import WorkerError
from quco.eval.run.runner import EvalOptions, Questions, run_eval
from quco.eval.runs.store import RESULTS_FILE
from quco.machine import usable_cores

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _records(path: Path) -> dict[str, dict[str, Any]]:
    lines = (path / RESULTS_FILE).read_text("utf-8").splitlines()
    return {r["id"]: r for r in map(json.loads, lines)}


def test_usable_cores() -> None:
    assert 1 <= usable_cores() <= (os.cpu_count() or 1)


@pytest.mark.model
def test_worker_processes_record_what_one_process_records(tmp_path: Path, small_hotpot_corpus: Path) -> None:
    cfg = load_config(
        CONFIGS / "hotpotqa/flare.yaml",
        overrides={
            "generator.backend": "llamacpp",
            "generator.threads": 1,
            "retriever.corpus": str(small_hotpot_corpus),
            "retriever.index_dir": str(tmp_path / "bm25"),
            "prompt.fewshot": 2,
            "generation.max_new_tokens": 24,
        },
    )
    one = run_eval(
        cfg, "hotpotqa", Questions(limit=4), EvalOptions(out_dir=tmp_path / "one", workers=1, progress=False)
    )
    two = run_eval(
        cfg, "hotpotqa", Questions(limit=4), EvalOptions(out_dir=tmp_path / "two", workers=2, progress=False)
    )
    assert (one.completed, one.errors, two.completed, two.errors) == (4, 0, 4, 0)
    assert one.config_hash == two.config_hash  # the number of workers is not part of a run's identity
    a, b = _records(tmp_path / "one"), _records(tmp_path / "two")
    assert a.keys() == b.keys()
    for qid in a:
        ta, tb = a[qid]["trace"], b[qid]["trace"]
        assert a[qid]["prediction"] == b[qid]["prediction"]
        assert [(s["decision"], s["draft"], s["queries"]) for s in ta["steps"]] == [
            (s["decision"], s["draft"], s["queries"]) for s in tb["steps"]
        ]
        assert ta["counters"]["prompt_tokens"] == tb["counters"]["prompt_tokens"]
        assert ta["counters"]["generated_tokens"] == tb["counters"]["generated_tokens"]
        sent, evaluated = (
            ta["counters"]["prompt_tokens"]["main"],
            ta["counters"]["prompt_tokens_evaluated"]["main"],
        )
        assert 0 < evaluated <= sent
    # A worker process answers one question at a time: its CPU seconds are that question's.
    assert all(r["cpu_seconds"] > 0 and isinstance(r["load"], float) for r in b.values())


@pytest.mark.model
def test_a_worker_that_cannot_build_its_pipeline_stops_the_run(tmp_path: Path) -> None:
    cfg = load_config(
        CONFIGS / "hotpotqa/sr-rag.yaml",
        overrides={"generator.backend": "llamacpp", "retriever.corpus": str(tmp_path / "missing.jsonl")},
    )
    with pytest.raises(WorkerError, match="could not build its pipeline.*missing.jsonl"):
        run_eval(
            cfg,
            "hotpotqa",
            Questions(limit=2),
            EvalOptions(out_dir=tmp_path / "run", workers=2, progress=False),
        )
    assert not (tmp_path / "run" / RESULTS_FILE).exists() or not _records(tmp_path / "run")
