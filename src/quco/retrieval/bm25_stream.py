"""A BM25 index built in bounded memory, written in bm25s's on-disk format.

bm25s builds its score matrix from every document's token ids held in Python lists, and then sorts all
(document, term, score) triples at once: memory grows with the corpus (about 3 GB per million 100-word
passages). This builder produces the same files, byte for byte in their arrays, in three passes over disk:

1. **Tokens.** Documents arrive one at a time and are buffered in chunks. Each chunk is reduced to its
   (document, term, term frequency) triples, which are appended to spill files, and the term's document
   frequency is counted. Memory: one chunk.
2. **Scores.** With the number of documents, the mean length and the document frequencies known, each chunk
   of triples is scored with bm25s's own scoring functions and appended to the bucket of its term. A bucket is
   a range of terms holding at most ``bucket_entries`` scores (one term more, for a term that needs more).
3. **Columns.** Each bucket is read, sorted stably by term (documents stay in order) and appended to the
   score matrix's ``data`` and ``indices`` arrays: the matrix is written column after column, in order.

Memory stays that of one chunk or one bucket plus the per-term and per-document arrays (8 bytes per document),
whatever the number of documents. Disk: the spill (8 bytes per triple) until pass 2 ends, the buckets (12 bytes
per triple) until pass 3 has written them; the index itself takes 8 bytes per triple.
The arithmetic is bm25s's: the same functions, the same operand types, so every score is the float32 bm25s
computes. ``tests/test_retrieval.py`` compares both builds array by array.
"""

from __future__ import annotations

import json
import shutil
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import bm25s
import numpy as np
from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer
from tqdm import tqdm

from quco.retrieval.store import write_npy_header

DATA_NAME = "data.csc.index.npy"
INDICES_NAME = "indices.csc.index.npy"
INDPTR_NAME = "indptr.csc.index.npy"
VOCAB_NAME = "vocab.index.json"
PARAMS_NAME = "params.index.json"
NONOCCURRENCE_NAME = "nonoccurrence_array.index.npy"
EMPTY_TOKEN = ""  # bm25s adds it to the vocabulary, after the last term; it has no column

DEFAULT_CHUNK_DOCS = 50_000
DEFAULT_BUCKET_ENTRIES = 16_000_000  # 12 bytes each on disk; about 40 bytes each while a bucket is sorted
_READ_BLOCK = 4_000_000  # triples read at once in pass 2
_SPILL = ("terms", "tf", "lengths", "nnz")  # pass 1's files: int32 each, per triple (terms, tf) or document
_BUCKET = np.dtype([("term", "<i4"), ("doc", "<i4"), ("score", "<f4")])


@dataclass
class _Chunk:
    docs: int
    entries: int


@dataclass
class StreamingBM25Builder:
    """Feed documents' token ids with :meth:`add`, then :meth:`finish` writes the index into a directory.

    Term ids are the vocabulary's ids (0..V-1, as :class:`quco.retrieval.bm25._VocabBuilder` assigns them);
    ``bm25`` is an unindexed ``bm25s.BM25`` carrying the parameters (k1, b, method, dtypes).
    """

    bm25: bm25s.BM25
    work_dir: Path
    chunk_docs: int = DEFAULT_CHUNK_DOCS
    bucket_entries: int = DEFAULT_BUCKET_ENTRIES
    num_docs: int = 0
    total_length: int = 0
    _tokens: array = field(default_factory=lambda: array("i"))
    _lengths: array = field(default_factory=lambda: array("i"))
    _df: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _chunks: list[_Chunk] = field(default_factory=list)
    _files: dict[str, IO[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.chunk_docs < 1 or self.bucket_entries < 1:
            raise ValueError("chunk_docs and bucket_entries must be positive")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for name in _SPILL:
            self._files[name] = (self.work_dir / f"{name}.bin").open("wb")

    # -- pass 1 -------------------------------------------------------------------------------------------

    def add(self, token_ids: list[int]) -> None:
        """One document's token ids, in order, repeats included (their count is the term frequency)."""
        self._tokens.extend(token_ids)
        self._lengths.append(len(token_ids))
        if len(self._lengths) >= self.chunk_docs:
            self._flush()

    def _flush(self) -> None:
        n = len(self._lengths)
        if not n:
            return
        lengths = np.frombuffer(self._lengths, dtype=np.int32)
        tokens = np.frombuffer(self._tokens, dtype=np.int32).astype(np.int64)
        doc = np.repeat(np.arange(n, dtype=np.int64), lengths)
        keys, tf = np.unique((doc << 32) | tokens, return_counts=True)  # sorted by (document, term)
        terms = (keys & 0xFFFFFFFF).astype(np.int32)
        nnz = np.bincount(keys >> 32, minlength=n).astype(np.int32)
        terms.tofile(self._files["terms"])
        tf.astype(np.int32).tofile(self._files["tf"])
        lengths.tofile(self._files["lengths"])
        nnz.tofile(self._files["nnz"])
        counts = np.bincount(terms)
        if len(counts) > len(self._df):
            self._df = np.concatenate([self._df, np.zeros(len(counts) - len(self._df), dtype=np.int64)])
        self._df[: len(counts)] += counts
        self.num_docs += n
        self.total_length += int(lengths.sum())
        self._chunks.append(_Chunk(n, len(terms)))
        self._tokens = array("i")
        self._lengths = array("i")

    # -- passes 2 and 3 -----------------------------------------------------------------------------------

    def finish(
        self,
        out_dir: Path,
        vocab: dict[str, int],
        progress: Callable[[Iterable[Any], str, int], Iterable[Any]],
    ) -> int:
        """Write the bm25s index of everything added into ``out_dir``; returns the number of documents.

        ``vocab`` maps each term to its id (the empty token is added, as bm25s does); ``progress`` wraps an
        iterable with a progress bar (description, total).
        """
        self._flush()
        for fh in self._files.values():
            fh.close()
        n_vocab = len(vocab)
        if len(self._df) > n_vocab:
            raise ValueError(f"token ids reach {len(self._df) - 1} but the vocabulary has {n_vocab} terms")
        df = np.zeros(n_vocab, dtype=np.int64)
        df[: len(self._df)] = self._df
        if self.num_docs == 0:
            raise ValueError("no documents to index")
        out_dir.mkdir(parents=True, exist_ok=True)
        # bm25s: avg_doc_len = np.array(lengths).mean(), an exact integer sum divided by the count
        avg_doc_len = np.float64(self.total_length) / self.num_docs
        idf64 = self._idf(df)
        idf = idf64.astype(self.bm25.dtype)
        nonoccurrence = self._nonoccurrence(df, idf64, avg_doc_len)
        indptr = np.zeros(n_vocab + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        buckets = self._score_into_buckets(idf, nonoccurrence, avg_doc_len, indptr, progress)
        for name in _SPILL:  # pass 3 reads the buckets only
            (self.work_dir / f"{name}.bin").unlink()
        self._write_columns(out_dir, buckets, indptr, progress)
        np.save(out_dir / INDPTR_NAME, indptr)
        if nonoccurrence is not None:
            np.save(out_dir / NONOCCURRENCE_NAME, nonoccurrence)
        self._write_metadata(out_dir, vocab)
        shutil.rmtree(self.work_dir, ignore_errors=True)
        return self.num_docs

    def _idf(self, df: np.ndarray) -> np.ndarray:
        """bm25s's idf of every term, computed by its own function (Python floats, as bm25s does)."""
        compute = _select_idf_scorer(self.bm25.idf_method)
        out = np.zeros(len(df), dtype=np.float64)
        for start in range(0, len(df), 1 << 20):
            block = df[start : start + (1 << 20)].tolist()
            out[start : start + len(block)] = [compute(d, N=self.num_docs) if d else 0.0 for d in block]
        return out

    def _nonoccurrence(self, df: np.ndarray, idf64: np.ndarray, avg_doc_len: np.float64) -> np.ndarray | None:
        """BM25L and BM25+ subtract a per-term score for documents without the term (bm25s's array)."""
        if self.bm25.method not in self.bm25.methods_requiring_nonoccurrence:
            return None
        tfc = _select_tfc_scorer(self.bm25.method)(
            tf_array=0,
            l_d=avg_doc_len,
            l_avg=avg_doc_len,
            k1=self.bm25.k1,
            b=self.bm25.b,
            delta=self.bm25.delta,
        )
        return np.where(df != 0, idf64 * tfc, 0.0).astype(self.bm25.dtype)

    def _spill_chunks(self):
        """(first document, lengths, nnz per document, terms, term frequencies) per spilled chunk."""
        lengths_all = np.fromfile(self.work_dir / "lengths.bin", dtype=np.int32)
        nnz_all = np.fromfile(self.work_dir / "nnz.bin", dtype=np.int32)
        with (self.work_dir / "terms.bin").open("rb") as ft, (self.work_dir / "tf.bin").open("rb") as ff:
            first = 0
            for chunk in self._chunks:
                terms = np.fromfile(ft, dtype=np.int32, count=chunk.entries)
                tf = np.fromfile(ff, dtype=np.int32, count=chunk.entries)
                sl = slice(first, first + chunk.docs)
                yield first, lengths_all[sl], nnz_all[sl], terms, tf
                first += chunk.docs

    def _score_into_buckets(
        self,
        idf: np.ndarray,
        nonoccurrence: np.ndarray | None,
        avg_doc_len: np.float64,
        indptr: np.ndarray,
        progress: Callable[[Iterable[Any], str, int], Iterable[Any]],
    ) -> list[tuple[int, int, Path]]:
        """Pass 2: every triple scored and appended to its term range's bucket; [(first term, end, path)]."""
        bucket_of_term = indptr[:-1] // self.bucket_entries  # by where the term's column starts
        starts = np.flatnonzero(np.diff(bucket_of_term, prepend=-1))  # first term of each bucket
        ends = np.append(starts[1:], len(bucket_of_term))
        paths = [self.work_dir / f"bucket-{i:05d}.bin" for i in range(len(starts))]
        bucket_id = np.zeros(len(bucket_of_term), dtype=np.int32)
        bucket_id[starts] = 1
        bucket_id = np.cumsum(bucket_id) - 1
        tfc_fn = _select_tfc_scorer(self.bm25.method)
        k1, b, delta = self.bm25.k1, self.bm25.b, self.bm25.delta
        handles = [p.open("wb") for p in paths]
        try:
            for first, lengths, nnz, terms, tf in progress(
                self._spill_chunks(), "BM25 scores", len(self._chunks)
            ):
                # the operands bm25s uses: float32 term frequencies, integer lengths, a float64 mean
                l_d = np.repeat(lengths.astype(np.int64), nnz)
                tfc = tfc_fn(
                    tf_array=tf.astype(self.bm25.dtype), l_d=l_d, l_avg=avg_doc_len, k1=k1, b=b, delta=delta
                )
                scores = idf[terms] * tfc
                if nonoccurrence is not None:
                    scores -= nonoccurrence[terms]
                rec = np.empty(len(terms), dtype=_BUCKET)
                rec["term"] = terms
                rec["doc"] = np.repeat(np.arange(first, first + len(lengths), dtype=np.int32), nnz)
                rec["score"] = scores  # rounded to float32 here, as bm25s stores its scores
                owner = bucket_id[terms]
                order = np.argsort(owner, kind="stable")
                rec, owner = rec[order], owner[order]
                cuts = np.flatnonzero(np.diff(owner)) + 1
                for part in np.split(rec, cuts):
                    if len(part):
                        part.tofile(handles[int(bucket_id[part["term"][0]])])
        finally:
            for fh in handles:
                fh.close()
        return [(int(s), int(e), p) for s, e, p in zip(starts, ends, paths, strict=True)]

    def _write_columns(
        self,
        out_dir: Path,
        buckets: list[tuple[int, int, Path]],
        indptr: np.ndarray,
        progress: Callable[[Iterable[Any], str, int], Iterable[Any]],
    ) -> None:
        """Pass 3: each bucket sorted by term (stable: documents stay ascending) and appended column-wise."""
        nnz = int(indptr[-1])
        with (out_dir / DATA_NAME).open("wb") as fd, (out_dir / INDICES_NAME).open("wb") as fi:
            write_npy_header(fd, np.dtype(self.bm25.dtype), nnz)
            write_npy_header(fi, np.dtype(self.bm25.int_dtype), nnz)
            for start, end, path in progress(buckets, "BM25 columns", len(buckets)):
                rec = np.fromfile(path, dtype=_BUCKET)
                expected = int(indptr[end] - indptr[start])
                if len(rec) != expected:
                    raise RuntimeError(
                        f"bucket of terms {start}..{end - 1} holds {len(rec)} scores, not {expected}"
                    )
                rec = rec[np.argsort(rec["term"], kind="stable")]
                rec["score"].astype(self.bm25.dtype).tofile(fd)
                rec["doc"].astype(self.bm25.int_dtype).tofile(fi)
                path.unlink()

    def _write_metadata(self, out_dir: Path, vocab: dict[str, int]) -> None:
        """``vocab.index.json`` (with bm25s's empty token) and ``params.index.json``, as ``BM25.save`` writes."""
        full = dict(vocab)
        if EMPTY_TOKEN not in full:
            full[EMPTY_TOKEN] = max(full.values(), default=-1) + 1
        with (out_dir / VOCAB_NAME).open("w", encoding="utf-8") as fh:
            fh.write(json.dumps(full, ensure_ascii=False))
        bm = self.bm25
        params = {
            "k1": bm.k1,
            "b": bm.b,
            "delta": bm.delta,
            "method": bm.method,
            "idf_method": bm.idf_method,
            "dtype": bm.dtype,
            "int_dtype": bm.int_dtype,
            "num_docs": self.num_docs,
            "version": bm25s.__version__,
            "backend": getattr(bm, "backend", "numpy"),
        }
        with (out_dir / PARAMS_NAME).open("w") as fh:
            json.dump(params, fh, indent=4)


def tqdm_progress(enabled: bool) -> Callable[[Iterable[Any], str, int], Iterable[Any]]:
    """A ``progress`` for :meth:`StreamingBM25Builder.finish`: a tqdm bar, or none."""

    def wrap(items: Iterable[Any], desc: str, total: int) -> Iterable[Any]:
        return tqdm(items, desc=desc, total=total, disable=not enabled)

    return wrap
