"""Shared fixtures: the evaluation data directory, real HotpotQA questions and a small real corpus."""

from __future__ import annotations

import os

# OpenMP's busy-waiting makes torch 10x slower when the cores are shared; set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import gzip
import json
from pathlib import Path

import pytest

from quco.paths import data_dir


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = data_dir()
    if not (root / "hotpotqa").is_dir():
        raise RuntimeError(f"evaluation data not found at {root}; set QUCO_DATA_DIR")
    return root


@pytest.fixture(scope="session")
def hotpot_dev(data_root: Path) -> list[dict]:
    path = data_root / "hotpotqa" / "hotpot_dev_0_300_unified.jsonl"
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="session")
def hotpot_pool_path(data_root: Path) -> Path:
    return data_root / "hotpotqa" / "corpus" / "hotpot_dev_first500_pooled_paragraphs.jsonl.gz"


@pytest.fixture(scope="session")
def small_hotpot_corpus(tmp_path_factory: pytest.TempPathFactory, hotpot_dev: list[dict]) -> Path:
    """The gold and distractor paragraphs of the first 30 HotpotQA dev questions, as a JSONL corpus."""
    out = tmp_path_factory.mktemp("corpus") / "hotpot30.jsonl"
    seen: set[str] = set()
    with out.open("w", encoding="utf-8") as fh:
        for row in hotpot_dev[:30]:
            for para in row["context_paragraphs"]:
                if para["title"] in seen:
                    continue
                seen.add(para["title"])
                fh.write(
                    json.dumps({"id": f"p{len(seen)}", "title": para["title"], "text": para["text"]}) + "\n"
                )
    return out


def read_jsonl_gz(path: Path, limit: int | None = None) -> list[dict]:
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if limit is not None and i >= limit:
                break
            rows.append(json.loads(line))
    return rows
