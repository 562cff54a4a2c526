"""The one build path (``storage.ensure_built``): reuse on a matching manifest, rebuild on a mismatch, and a
build that fails halfway leaves no half artefact, on real small builds (a BM25 index, a converted file)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from quco import storage
from quco.errors import CorpusFormatError
from quco.paths import data_dir
from quco.retrieval.bm25 import BM25Params, BM25Retriever, ensure_index

HOTPOT_CORPUS = "hotpotqa/corpus/hotpot_dev_first500_pooled_paragraphs.jsonl.gz"


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("QUCO_CACHE_DIR", str(cache))
    return cache


@pytest.fixture(scope="module")
def lines() -> list[str]:
    with gzip.open(data_dir() / HOTPOT_CORPUS, "rt", encoding="utf-8") as fh:
        return [next(fh).rstrip("\n") for _ in range(120)]


def _siblings(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _write_words(words: list[str]):
    """A real little build: a directory with a data file and its manifest, written last."""

    def write(tmp: Path) -> None:
        (tmp / "words.txt").write_text("\n".join(words), encoding="utf-8")
        for n, word in enumerate(words):
            if word == "CRASH":
                raise RuntimeError(f"disk on fire after {n} words")
        storage.write_json(tmp / storage.MANIFEST_NAME, {"format": "words", "words": len(words)})

    return write


def _reusable(words: int):
    def reusable(directory: Path) -> bool:
        manifest = directory / storage.MANIFEST_NAME
        return manifest.is_file() and json.loads(manifest.read_text())["words"] == words

    return reusable


def _load(directory: Path) -> str:
    return (directory / "words.txt").read_text(encoding="utf-8")


def test_ensure_built_reuses_a_match_rebuilds_a_mismatch_and_survives_a_crash(tmp_path: Path):
    target = tmp_path / "out" / "words"
    got, reused = storage.ensure_built(target, _write_words(["a", "b"]), reusable=_reusable(2), load=_load)
    assert (got, reused) == ("a\nb", False)
    assert _siblings(target.parent) == ["words"]
    # a matching manifest is reused: the writer is never called
    got, reused = storage.ensure_built(target, _write_words(["never"]), reusable=_reusable(2), load=_load)
    assert (got, reused) == ("a\nb", True)
    # a mismatch is rebuilt in place
    got, reused = storage.ensure_built(
        target, _write_words(["x", "y", "z"]), reusable=_reusable(3), load=_load
    )
    assert (got, reused) == ("x\ny\nz", False)
    # force rebuilds even a match
    _, reused = storage.ensure_built(
        target, _write_words(["x", "y", "z"]), reusable=_reusable(3), load=_load, force=True
    )
    assert not reused
    # a crash halfway leaves the previous artefact whole and nothing beside it
    with pytest.raises(RuntimeError, match="disk on fire after 1 words"):
        storage.ensure_built(
            target, _write_words(["p", "CRASH", "q"]), reusable=_reusable(3), load=_load, force=True
        )
    assert _load(target) == "x\ny\nz" and _siblings(target.parent) == ["words"]
    # a first build that crashes leaves no target at all
    fresh = tmp_path / "out" / "fresh"
    with pytest.raises(RuntimeError):
        storage.ensure_built(fresh, _write_words(["CRASH"]), reusable=_reusable(1), load=_load)
    assert not fresh.exists() and _siblings(target.parent) == ["words"]


def test_ensure_built_removes_what_killed_builds_left(tmp_path: Path):
    target = tmp_path / "words"
    killed = tmp_path / ".words.building-99999-deadbeef"
    killed.mkdir()
    (killed / "words.txt").write_text("half", encoding="utf-8")
    old_layout = tmp_path / ".words.tmp-12345"
    old_layout.write_text("half", encoding="utf-8")
    storage.ensure_built(
        target, _write_words(["a"]), reusable=_reusable(1), load=_load, stale=(".{name}.tmp-*",)
    )
    assert _siblings(tmp_path) == ["cache", "words"]


def test_ensure_built_of_one_file_replaces_it_atomically(tmp_path: Path):
    target = tmp_path / "model.bin"

    def write(tmp: Path) -> None:
        tmp.write_bytes(b"weights")

    def crash(tmp: Path) -> None:
        tmp.write_bytes(b"wei")
        raise KeyboardInterrupt

    path, reused = storage.ensure_built(
        target, write, reusable=lambda p: p.is_file(), load=lambda p: p, file=True
    )
    assert path == target and not reused and target.read_bytes() == b"weights"
    with pytest.raises(KeyboardInterrupt):
        storage.ensure_built(target, crash, reusable=lambda p: False, load=lambda p: p, file=True)
    assert target.read_bytes() == b"weights" and _siblings(tmp_path) == ["cache", "model.bin"]
    _, reused = storage.ensure_built(
        target, crash, reusable=lambda p: p.is_file(), load=lambda p: p, file=True
    )
    assert reused


def test_bm25_index_through_the_build_path(lines: list[str], tmp_path: Path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(lines[:80]) + "\n", encoding="utf-8")
    out = tmp_path / "idx"
    first, reused = ensure_index(corpus, out, progress=False)
    assert not reused and len(first) == 80
    built_at = first.manifest["built_at"]
    again, reused = ensure_index(corpus, out, progress=False)
    assert reused and again.manifest["built_at"] == built_at  # the manifest matches: reused, not rebuilt
    other, reused = ensure_index(corpus, out, params=BM25Params(k1=0.9), progress=False)
    assert not reused and other.manifest["params"]["k1"] == 0.9  # other parameters: rebuilt in place
    # a corpus that breaks halfway through the build leaves the index as it was, and nothing beside it
    corpus.write_text(
        "\n".join(lines[:40]) + "\n{not json\n" + "\n".join(lines[40:80]) + "\n", encoding="utf-8"
    )
    with pytest.raises(CorpusFormatError, match="line 41: invalid JSON"):
        ensure_index(corpus, out, params=BM25Params(k1=0.9), progress=False, force=True)
    assert len(BM25Retriever.load(out)) == 80 and _siblings(tmp_path) == ["c.jsonl", "cache", "idx"]


def test_file_sha256_remembered_follows_the_file(tmp_path: Path):
    import hashlib
    import os

    path = tmp_path / "f.bin"
    storage.write_text_atomic(path, "first")
    assert storage.file_sha256(path) == hashlib.sha256(b"first").hexdigest()
    assert storage.file_sha256(path, remember=True) == storage.file_sha256(path)
    storage.write_text_atomic(path, "second")
    os.utime(path, ns=(2, 2))  # another mtime: the remembered digest no longer applies
    assert storage.file_sha256(path, remember=True) == hashlib.sha256(b"second").hexdigest()
    assert _siblings(tmp_path) == ["cache", "f.bin"]  # the temporary file of each write is gone
