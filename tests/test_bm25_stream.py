"""The streaming BM25 build writes what bm25s's in-memory build writes, array for array, and searches the same."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from quco.paths import data_dir
from quco.retrieval import BM25Params, BM25Retriever
from quco.retrieval import bm25 as bm25_module
from quco.retrieval.bm25_stream import (
    DATA_NAME,
    INDICES_NAME,
    INDPTR_NAME,
    NONOCCURRENCE_NAME,
    PARAMS_NAME,
    VOCAB_NAME,
    StreamingBM25Builder,
)
from quco.retrieval.store import BLOB_NAME, OFFSETS_NAME

HOTPOT_CORPUS = "hotpotqa/corpus/hotpot_dev_first500_pooled_paragraphs.jsonl.gz"
HOTPOT_DEV = "hotpotqa/hotpot_dev_0_300_unified.jsonl"


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUCO_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def small_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many chunks and many buckets on a small corpus, so that every boundary is crossed."""
    monkeypatch.setattr(
        bm25_module,
        "StreamingBM25Builder",
        functools.partial(StreamingBM25Builder, chunk_docs=333, bucket_entries=5_000),
    )


def _assert_same_index(a: Path, b: Path) -> None:
    for name in (DATA_NAME, INDICES_NAME, INDPTR_NAME, NONOCCURRENCE_NAME):
        if not (a / "bm25" / name).exists():
            assert not (b / "bm25" / name).exists(), name
            continue
        x, y = np.load(a / "bm25" / name), np.load(b / "bm25" / name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert np.array_equal(x, y), f"{name} differs at {np.flatnonzero(x != y)[:5]}"
    for name in (VOCAB_NAME, PARAMS_NAME):
        assert json.loads((a / "bm25" / name).read_text()) == json.loads((b / "bm25" / name).read_text()), (
            name
        )
    for name in (BLOB_NAME, OFFSETS_NAME):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    assert (ma["builder"], mb["builder"]) == ("bm25s", "streaming")
    for key in ("passages", "vocabulary", "params", "fingerprint"):
        assert ma[key] == mb[key], key


def test_streaming_build_equals_bm25s_on_the_hotpot_pool(small_buckets: None, tmp_path: Path) -> None:
    corpus = str(data_dir() / HOTPOT_CORPUS)
    old = BM25Retriever.build(corpus, tmp_path / "old", progress=False, builder="bm25s")
    new = BM25Retriever.build(corpus, tmp_path / "new", progress=False)
    _assert_same_index(tmp_path / "old", tmp_path / "new")
    with (data_dir() / HOTPOT_DEV).open(encoding="utf-8") as fh:
        questions = [json.loads(line)["question"] for line in fh][:100]
    for q, a, b in zip(questions, old.search(questions, 10), new.search(questions, 10), strict=True):
        assert [(p.id, p.score) for p in a] == [(p.id, p.score) for p in b], q
        assert a, q


@pytest.mark.parametrize("method", ["bm25+", "robertson", "atire"])
def test_streaming_build_equals_bm25s_for_other_methods(
    small_buckets: None, tmp_path: Path, method: str
) -> None:
    rows = [{"id": str(i), "title": f"T{i % 7}", "text": f"alpha beta{i % 13} gamma{i % 5} " * (1 + i % 4)}
            for i in range(1500)]  # fmt: skip
    rows.append({"id": "stop", "title": "", "text": "the of and a"})  # a passage without a single term
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    params = BM25Params(k1=1.5, b=0.6, method=method)
    BM25Retriever.build(corpus, tmp_path / "old", params=params, progress=False, builder="bm25s")
    BM25Retriever.build(corpus, tmp_path / "new", params=params, progress=False)
    _assert_same_index(tmp_path / "old", tmp_path / "new")


def test_unknown_builder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown BM25 builder"):
        BM25Retriever.build(str(data_dir() / HOTPOT_CORPUS), tmp_path / "x", builder="fast")  # type: ignore[arg-type]
