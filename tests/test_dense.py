"""Dense retrieval with the bundled all-MiniLM-L6-v2 on real HotpotQA paragraphs: build, load, search, reuse."""

from __future__ import annotations

import functools
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from quco.errors import CorpusFormatError, QucoError
from quco.retrieval import Retriever
from quco.retrieval.dense import (
    EMBEDDINGS_NAME,
    MANIFEST_NAME,
    DenseIndexError,
    DenseRetriever,
    Embedder,
    build_dense_index,
    ensure_dense_index,
    index_dense,
)

N_QUESTIONS = 20  # the 10 context paragraphs of each of the first N dev questions (~200 passages)


@functools.cache
def _embedder() -> Embedder:
    return Embedder()


@functools.cache
def shared_dense_index(root: str, data: str) -> tuple[Path, Path]:
    """(corpus file, index dir): the paragraphs of the first dev questions, embedded once per test session.

    A plain cache rather than a fixture so that test_dtr.py can share the same build.
    """
    rows = [json.loads(line) for line in (Path(data) / "hotpotqa" / "hotpot_dev_0_300_unified.jsonl").open()]
    Path(root).mkdir(parents=True, exist_ok=True)
    corpus = Path(root) / "hotpot_dense.jsonl"
    seen: set[str] = set()
    with corpus.open("w", encoding="utf-8") as fh:
        for row in rows[:N_QUESTIONS]:
            for para in row["context_paragraphs"]:
                if para["title"] not in seen:
                    seen.add(para["title"])
                    fh.write(
                        json.dumps({"id": f"p{len(seen)}", "title": para["title"], "text": para["text"]})
                        + "\n"
                    )
    index_dir = Path(root) / "dense-index"
    build_dense_index(corpus, index_dir, _embedder(), progress=False)
    return corpus, index_dir


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, data_root: Path) -> tuple[Path, Path]:
    return shared_dense_index(str(tmp_path_factory.getbasetemp() / "dense-shared"), str(data_root))


@pytest.fixture(scope="module")
def dense(built: tuple[Path, Path]) -> DenseRetriever:
    return DenseRetriever.load(built[1], embedder=_embedder())


def test_build_writes_a_complete_verified_index(built: tuple[Path, Path], dense: DenseRetriever) -> None:
    corpus, index_dir = built
    n_lines = sum(1 for _ in corpus.open())
    manifest = json.loads((index_dir / MANIFEST_NAME).read_text())
    assert manifest["passages"] == n_lines == len(dense) > 150
    assert manifest["dim"] == dense.dim == 384
    assert "all-MiniLM-L6-v2" in manifest["model_identity"]
    emb = np.load(index_dir / EMBEDDINGS_NAME, mmap_mode="r")
    assert emb.dtype == np.float32 and emb.shape == (n_lines, 384)
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-4)
    assert isinstance(dense.embeddings, np.memmap)  # loaded memory-mapped, not copied
    assert isinstance(dense, Retriever)
    assert not list(index_dir.parent.glob(".dense-index.building-*"))  # no temporary build left behind


def test_search_finds_gold_paragraphs_of_real_questions(
    dense: DenseRetriever, hotpot_dev: list[dict]
) -> None:
    hits_at_3 = 0
    questions = hotpot_dev[:N_QUESTIONS]
    results = dense.search([q["question"] for q in questions], 3)
    for row, hits in zip(questions, results, strict=True):
        assert len(hits) == 3
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        gold = {p["title"] for p in row["context_paragraphs"] if p["is_supporting"]}
        hits_at_3 += bool(gold & {h.title for h in hits})
    # Question 0 ("Were Scott Derrickson and Ed Wood of the same nationality?") finds Ed Wood first.
    assert results[0][0].title in {"Ed Wood", "Scott Derrickson"}
    assert hits_at_3 >= 0.8 * len(questions)


def test_similarities_match_search_scores(dense: DenseRetriever, hotpot_dev: list[dict]) -> None:
    question = hotpot_dev[1]["question"]
    hits = dense.search([question], 5)[0]
    sims = dense.similarities(dense.encode_queries([question]), [h.id for h in hits])
    assert sims.shape == (1, 5)
    assert np.allclose(sims[0], [h.score for h in hits], atol=1e-5)
    # and against a direct recomputation from freshly encoded text
    vec = dense.embedder.encode([question])[0]
    row = dense.row_of(hits[0].id)
    assert abs(float(vec @ dense.embeddings[row]) - hits[0].score) < 1e-5
    with pytest.raises(KeyError, match="not in the dense index"):
        dense.row_of("no-such-id")


def test_edge_queries(dense: DenseRetriever) -> None:
    res = dense.search(["", "   ", "Ed Wood"], 2)
    assert res[0] == [] and res[1] == [] and len(res[2]) == 2
    assert len(dense.search(["Ed Wood"], 10_000)[0]) == len(dense)  # k above the corpus size
    assert dense.search(["Ed Wood"], 0) == [[]]
    with pytest.raises(TypeError):
        dense.search("Ed Wood", 3)  # type: ignore[arg-type]


def test_ensure_reuses_and_refuses_a_foreign_index(built: tuple[Path, Path], tmp_path: Path) -> None:
    corpus, index_dir = built
    retriever, reused = ensure_dense_index(corpus, index_dir, _embedder(), progress=False)
    assert reused and len(retriever) > 0
    other = tmp_path / "other.jsonl"
    other.write_text(corpus.read_text().splitlines()[0] + "\n")
    with pytest.raises(DenseIndexError, match="was built from"):
        ensure_dense_index(other, index_dir, _embedder(), progress=False)


def test_damaged_or_partial_index_is_refused(built: tuple[Path, Path], tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(built[1], copy)
    (copy / MANIFEST_NAME).unlink()
    with pytest.raises(DenseIndexError, match="may be partial"):
        DenseRetriever.load(copy, embedder=_embedder())
    shutil.rmtree(copy)
    shutil.copytree(built[1], copy)
    emb = np.load(copy / EMBEDDINGS_NAME)
    np.save(copy / EMBEDDINGS_NAME, emb[:-1])
    with pytest.raises(DenseIndexError, match="inconsistent"):
        DenseRetriever.load(copy, embedder=_embedder())
    with pytest.raises(DenseIndexError, match="no dense index"):
        DenseRetriever.load(tmp_path / "missing", embedder=_embedder())


def test_failed_build_leaves_nothing(data_root: Path, tmp_path: Path) -> None:
    pool = data_root / "hotpotqa" / "corpus" / "hotpot_dev_first500_pooled_paragraphs.jsonl.gz"
    with gzip.open(pool, "rt", encoding="utf-8") as fh:
        lines = [next(fh) for _ in range(3)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[0] + "{not json\n" + lines[1])
    out = tmp_path / "idx"
    with pytest.raises(CorpusFormatError, match="line 2"):
        build_dense_index(bad, out, _embedder(), progress=False)
    assert not out.exists() and not list(tmp_path.glob(".idx.*"))
    # skipping bad lines is an explicit choice, and the report says what was skipped
    report = index_dense(bad, out, _embedder(), progress=False, on_error="skip")
    assert report.passages_indexed == 2 and report.skipped == 1 and not report.reused
    assert report.skipped_lines[0].line == 2
    assert index_dense(bad, out, _embedder(), progress=False, on_error="skip").reused


def test_missing_model_directory_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(QucoError, match="embedding model directory not found"):
        Embedder(str(tmp_path / "no-model-here"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(QucoError, match="cannot load embedding model"):
        Embedder(str(tmp_path / "empty"))
