"""Counts from local Infini-gram indexes (one or several directories, each with one or more shards).

Three co-occurrence semantics.
- "window" is the engine's CNF count, as the hosted API computes it: for each occurrence of the rarer phrase,
  the nearest occurrence of the other on each side within ``max_diff_tokens``; spans that straddle a document
  separator are discarded, so a true pair is lost whenever the far-side neighbour lies in another document
  (stack.md §1).
- "window_exact" is what that rule approximates: occurrences of the rarer phrase with the other one starting
  within ``max_diff_tokens`` tokens of it in the same document. Positions come from the suffix-array ranges; a
  very frequent other phrase is found by reading the tokens around the rare one instead.
- "document" counts the documents that contain both phrases, exactly: the suffix-array rank range of each
  phrase gives its corpus positions, ``offset.N`` maps positions to documents, and the two document sets are
  intersected. When one side is much more frequent, its documents are not enumerated; instead the few documents
  of the rare side are scanned for it (same answer, less work).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from quco.corpus_stats.base import CountResult, Phrase, answer
from quco.corpus_stats.build import Manifest, StatsIndexError, check_index_path
from quco.corpus_stats.phrases import aliases, describe, describe_pair, drop_extensions
from quco.corpus_stats.tokenizer import TOKENIZER_FILE, IndexTokenizer
from quco.corpus_stats.windows import near_same_document

log = logging.getLogger(__name__)

Cooccurrence = Literal["document", "window", "window_exact"]
BACKEND = "infini-gram-local"
# Scan the rare side's documents instead of enumerating the frequent side when the frequent side has more
# occurrences than this many times the tokens to scan.
SCAN_RATIO = 4


@dataclass
class _Shard:
    """Memory maps of one shard: tokens, suffix array and document start offsets."""

    doc_base: int  # global id of this shard's first document
    ds: np.ndarray  # token ids incl. one separator before each document
    sa: np.ndarray  # suffix array, raw bytes (ptr_size bytes per rank, little-endian byte pointers)
    ptr_size: int
    starts: np.ndarray  # token position of each document's separator (sorted)

    def pointers(self, start: int, end: int, width: int) -> np.ndarray:
        """Token positions of suffix-array ranks [start, end)."""
        raw = self.sa[start * self.ptr_size : end * self.ptr_size]
        if self.ptr_size in (4, 8):
            ptrs = raw.view("<u4" if self.ptr_size == 4 else "<u8").astype(np.int64)
        else:
            buf = np.zeros((end - start, 8), dtype=np.uint8)
            buf[:, : self.ptr_size] = raw.reshape(-1, self.ptr_size)
            ptrs = buf.view("<u8").reshape(-1).astype(np.int64)
        return ptrs // width

    def doc_of(self, positions: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, positions, side="right") - 1


def _shard_files(index_dir: Path, role: str) -> list[Path]:
    # Mirror the engine: every entry whose full path contains the role word, sorted by full path.
    return sorted((p for p in index_dir.iterdir() if role in str(p)), key=str)


class LocalInfiniGram:
    """``CorpusStats`` over local Infini-gram index directories built by :func:`build_local_index`."""

    name = BACKEND

    def __init__(
        self,
        index_dir: str | Path | Sequence[str | Path],
        cooccurrence: Cooccurrence = "document",
        max_diff_tokens: int = 1000,
        max_clause_freq: int = 500000,
        *,
        load_to_ram: bool = False,
        prefetch: bool = False,
    ) -> None:
        from infini_gram.engine import InfiniGramEngine

        dirs = [index_dir] if isinstance(index_dir, (str, Path)) else list(index_dir)
        if not dirs:
            raise StatsIndexError("no index directory given; pass at least one")
        if cooccurrence not in ("document", "window", "window_exact"):
            raise StatsIndexError(
                f"cooccurrence must be 'document', 'window' or 'window_exact', not {cooccurrence!r}"
            )
        if max_diff_tokens <= 0 or max_clause_freq <= 0:
            raise StatsIndexError("max_diff_tokens and max_clause_freq must be positive integers")
        self.dirs = [Path(d).expanduser().resolve() for d in dirs]
        for d in self.dirs:
            check_index_path(d)
            if not d.is_dir():
                raise StatsIndexError(
                    f"index directory {d} does not exist; build it first (quco index stats)"
                )
        self.manifests = [Manifest.read(d) for d in self.dirs]
        first = self.manifests[0]
        for d, m in zip(self.dirs[1:], self.manifests[1:], strict=True):
            if m.tokenizer_sha256 != first.tokenizer_sha256:
                raise StatsIndexError(
                    f"index {d} uses tokenizer {m.tokenizer}, unlike {self.dirs[0]} ({first.tokenizer}); "
                    "indexes opened together must share one tokenizer"
                )
        json_text = None
        if first.tokenizer != "bytes":
            tok_path = self.dirs[0] / TOKENIZER_FILE
            if not tok_path.is_file():
                raise StatsIndexError(f"index {self.dirs[0]} has no {TOKENIZER_FILE}; rebuild it")
            json_text = tok_path.read_text(encoding="utf-8")
        self.tokenizer = IndexTokenizer(first.tokenizer, json_text, first.token_dtype, first.vocab_size)
        if self.tokenizer.sha256 != first.tokenizer_sha256:
            raise StatsIndexError(
                f"{TOKENIZER_FILE} in {self.dirs[0]} differs from its manifest; rebuild the index"
            )

        self.cooccurrence: Cooccurrence = cooccurrence
        self.max_diff_tokens = int(max_diff_tokens)
        self.max_clause_freq = int(max_clause_freq)
        self.index = ",".join(d.name for d in self.dirs)
        self.total_tokens: int | None = sum(m.token_count for m in self.manifests)
        self.doc_count = sum(m.doc_count for m in self.manifests)
        self._width = np.dtype(self.tokenizer.np_dtype).itemsize
        self._shards = self._open_shards()

        vocab = {"u8": 255, "u16": 65535, "u32": 2**32 - 1}[first.token_dtype]
        # The engine's default prefetching issues a tree of madvise(WILLNEED) calls at every step of every
        # binary search; meant for indexes read from slow disks, it made ``count`` 50x slower at 90M tokens
        # than at 2M (docs/corpus_stats.md). The page cache holds an index this size, so it is off by default.
        depths = {} if prefetch else {"ds_prefetch_depth": 0, "sa_prefetch_depth": 0, "od_prefetch_depth": 0}
        self.engine = InfiniGramEngine(
            [str(d) for d in self.dirs],
            eos_token_id=0,
            vocab_size=vocab,
            version=4,
            token_dtype=first.token_dtype,
            load_to_ram=load_to_ram,
            max_clause_freq=self.max_clause_freq,
            max_diff_tokens=self.max_diff_tokens,
            **depths,
        )

    def _open_shards(self) -> list[_Shard]:
        shards: list[_Shard] = []
        base = 0
        for d, m in zip(self.dirs, self.manifests, strict=True):
            ds_paths = _shard_files(d, "tokenized")
            sa_paths = [p for p in _shard_files(d, "table") if "tokenized" not in str(p)]
            od_paths = [
                p for p in _shard_files(d, "offset") if "tokenized" not in str(p) and "table" not in str(p)
            ]
            if not (len(ds_paths) == len(sa_paths) == len(od_paths) == len(m.shards)):
                raise StatsIndexError(
                    f"index {d} is incomplete: shard files do not match its manifest; rebuild it"
                )
            for ds_p, sa_p, od_p, info in zip(ds_paths, sa_paths, od_paths, m.shards, strict=True):
                ds = np.memmap(ds_p, dtype=self.tokenizer.np_dtype, mode="r")
                sa = np.memmap(sa_p, dtype=np.uint8, mode="r")
                starts = np.fromfile(od_p, dtype="<u8").astype(np.int64) // self._width
                if (
                    len(starts) != info["docs"]
                    or len(ds) != info["docs"] + info["tokens"]
                    or len(sa) % len(ds)
                ):
                    raise StatsIndexError(
                        f"shard {ds_p.name} of {d} does not match its manifest; rebuild the index"
                    )
                shards.append(_Shard(base, ds, sa, len(sa) // len(ds), starts))
                base += len(starts)
        return shards

    # ------------------------------------------------------------------ helpers

    def _result(
        self, query: str, count: int | None, started: float, exact: bool = True, error: str | None = None
    ) -> CountResult:
        return answer(self, query, started, count, exact=exact, error=error)

    def _encode(self, phrase: Phrase) -> list[tuple[int, ...]]:
        """Alias set -> disjoint token sequences; raises ValueError when nothing countable is left."""
        items = aliases(phrase)
        if not items:
            raise ValueError("empty phrase")
        seqs = [tuple(self.tokenizer.encode(a)) for a in items]
        seqs = [s for s in seqs if s]
        if not seqs:
            raise ValueError(
                f"phrase {describe(phrase)!r} has no tokens under tokenizer {self.tokenizer.name}"
            )
        return drop_extensions(seqs)

    def _ranges(self, seq: tuple[int, ...]) -> list[tuple[int, int]]:
        res = self.engine.find(list(seq))
        if "error" in res:
            raise RuntimeError(res["error"])
        return [(int(s), int(e)) for s, e in res["segment_by_shard"]]

    def _docs(self, ranges_per_alias: list[list[tuple[int, int]]]) -> np.ndarray:
        """Sorted global ids of documents containing any alias."""
        parts = []
        for ranges in ranges_per_alias:
            for shard, (s, e) in zip(self._shards, ranges, strict=True):
                if e > s:
                    parts.append(shard.doc_of(shard.pointers(s, e, self._width)) + shard.doc_base)
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.concatenate(parts))

    def _doc_tokens(self, docs: np.ndarray) -> int:
        total = 0
        for shard in self._shards:
            local = (
                docs[(docs >= shard.doc_base) & (docs < shard.doc_base + len(shard.starts))] - shard.doc_base
            )
            if len(local):
                ends = np.append(shard.starts[1:], len(shard.ds))
                total += int((ends[local] - shard.starts[local]).sum())
        return total

    def _filter_docs_containing(self, docs: np.ndarray, seqs: list[tuple[int, ...]]) -> np.ndarray:
        """The subset of ``docs`` that contain any of ``seqs``, found by scanning their tokens."""
        kept = []
        for shard in self._shards:
            local = (
                docs[(docs >= shard.doc_base) & (docs < shard.doc_base + len(shard.starts))] - shard.doc_base
            )
            if not len(local):
                continue
            ends = np.append(shard.starts[1:], len(shard.ds))
            starts, lens = shard.starts[local], ends[local] - shard.starts[local]
            cum = np.concatenate(([0], np.cumsum(lens)[:-1]))
            idx = np.arange(int(lens.sum())) - np.repeat(cum, lens) + np.repeat(starts, lens)
            toks = np.asarray(shard.ds[idx])  # each document keeps its leading separator: no match spans two
            found = np.zeros(len(local), dtype=bool)
            for seq in seqs:
                n = len(toks) - len(seq) + 1
                if n <= 0:
                    continue
                mask = toks[:n] == seq[0]
                for j in range(1, len(seq)):
                    mask &= toks[j : n + j] == seq[j]
                found[np.searchsorted(cum, np.flatnonzero(mask), side="right") - 1] = True
            kept.append(local[found] + shard.doc_base)
        return np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)

    # ------------------------------------------------------------------ token-level queries (also used by the server)

    def count_ids(self, seqs: list[tuple[int, ...]]) -> tuple[int, bool]:
        """Occurrences of any of the token sequences -> (count, approx)."""
        total, approx = 0, False
        for seq in drop_extensions([tuple(s) for s in seqs]):
            res = self.engine.count(list(seq))
            if "error" in res:
                raise RuntimeError(res["error"])
            total += int(res["count"])
            approx = approx or bool(res.get("approx", False))
        return total, approx

    def count_cnf_ids(
        self,
        clauses: list[list[tuple[int, ...]]],
        cooccurrence: Cooccurrence | None = None,
        max_diff_tokens: int | None = None,
        max_clause_freq: int | None = None,
    ) -> tuple[int, bool]:
        """An AND of OR-clauses -> (count, approx): spans within a window, or documents containing all clauses."""
        clauses = [drop_extensions([tuple(s) for s in c]) for c in clauses]
        if len(clauses) == 1:
            return self.count_ids(clauses[0])
        mode = cooccurrence or self.cooccurrence
        if mode == "window_exact":
            return self._window_exact(clauses, max_diff_tokens or self.max_diff_tokens), False
        if mode == "window":
            cnf = [[list(s) for s in c] for c in clauses]
            res = self.engine.count_cnf(
                cnf, max_clause_freq or self.max_clause_freq, max_diff_tokens or self.max_diff_tokens
            )
            if "error" in res:
                raise RuntimeError(res["error"])
            return int(res["count"]), bool(res["approx"])
        return self._doc_count(clauses), False

    def _positions(self, shard_index: int, ranges_per_alias: list[list[tuple[int, int]]]) -> np.ndarray:
        """Sorted token positions (within one shard) where any alias starts."""
        shard = self._shards[shard_index]
        parts = [
            shard.pointers(*r[shard_index], self._width)
            for r in ranges_per_alias
            if r[shard_index][1] > r[shard_index][0]
        ]
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.concatenate(parts))

    def _near_by_scan(
        self, shard: _Shard, rare: np.ndarray, seqs: list[tuple[int, ...]], max_diff: int
    ) -> np.ndarray:
        """Per rare position: whether a seq starts within ``max_diff`` tokens of it in the same document, found by
        reading the tokens around it (cheaper than listing a very frequent phrase's positions)."""
        doc = np.searchsorted(shard.starts, rare, side="right") - 1
        ends = np.append(shard.starts[1:], len(shard.ds))
        lo = np.maximum(rare - max_diff, shard.starts[doc] + 1)
        hi = np.minimum(rare + max_diff + 1, ends[doc])  # window of start positions [lo, hi)
        lens = hi - lo
        cum = np.concatenate(([0], np.cumsum(lens)))
        idx = np.repeat(lo - cum[:-1], lens) + np.arange(int(cum[-1]))
        found = np.zeros(len(rare), dtype=bool)
        last = len(shard.ds) - 1
        for seq in seqs:
            mask = idx + len(seq) <= np.repeat(ends[doc], lens)  # the match ends before the next document
            for j, tok in enumerate(seq):
                mask &= np.asarray(shard.ds[np.minimum(idx + j, last)]) == tok
            found[np.searchsorted(cum, np.flatnonzero(mask), side="right") - 1] = True
        return found

    def _clause_infos(self, clauses: list[list[tuple[int, ...]]]) -> list[tuple[int, Any, Any]] | None:
        """(occurrences, token sequences, suffix-array ranges) of each clause, rarest first; None as soon as
        one clause never occurs."""
        infos = []
        for seqs in clauses:
            ranges = [self._ranges(s) for s in seqs]
            n = sum(e - s for r in ranges for s, e in r)
            if n == 0:
                return None
            infos.append((n, seqs, ranges))
        infos.sort(key=lambda x: x[0])
        return infos

    def _window_exact(self, clauses: list[list[tuple[int, ...]]], max_diff: int) -> int:
        """Occurrences of the rarest clause with every other clause starting within ``max_diff`` tokens of it in
        the same document: the paper's window, without the engine's document-boundary artefact."""
        infos = self._clause_infos(clauses)
        if infos is None:
            return 0
        total = 0
        for si, shard in enumerate(self._shards):
            rare = self._positions(si, infos[0][2])
            keep = np.ones(len(rare), dtype=bool)
            for _n, seqs, ranges in infos[1:]:
                if not keep.any():
                    break
                here = sum(r[si][1] - r[si][0] for r in ranges)
                if here > SCAN_RATIO * len(rare) * (2 * max_diff + 1):
                    keep &= self._near_by_scan(shard, rare, seqs, max_diff)
                else:
                    keep &= near_same_document(rare, self._positions(si, ranges), shard.starts, max_diff)
            total += int(np.count_nonzero(keep))
        return total

    def _doc_count(self, clauses: list[list[tuple[int, ...]]]) -> int:
        """Documents containing every clause; starts from the rarest and narrows the candidate set."""
        infos = self._clause_infos(clauses)
        if infos is None:
            return 0
        docs = self._docs(infos[0][2])
        for n, seqs, ranges in infos[1:]:
            if not docs.size:
                break
            if n > SCAN_RATIO * self._doc_tokens(docs):
                docs = self._filter_docs_containing(docs, seqs)
            else:
                docs = np.intersect1d(docs, self._docs(ranges), assume_unique=True)
        return int(docs.size)

    # ------------------------------------------------------------------ CorpusStats

    def count(self, phrase: Phrase) -> CountResult:
        started = time.perf_counter()
        query = describe(phrase)
        try:
            total, approx = self.count_ids(self._encode(phrase))
            return self._result(query, total, started, exact=not approx)
        except Exception as exc:  # a failed lookup is reported, never raised (base.py contract)
            log.warning("count(%s) failed: %s", query, exc)
            return self._result(query, None, started, error=f"{type(exc).__name__}: {exc}")

    def cooccur(self, a: Phrase, b: Phrase) -> CountResult:
        started = time.perf_counter()
        query = describe_pair(a, b)
        try:
            count, approx = self.count_cnf_ids([self._encode(a), self._encode(b)])
            return self._result(query, count, started, exact=not approx)
        except Exception as exc:
            log.warning("cooccur(%s) failed: %s", query, exc)
            return self._result(query, None, started, error=f"{type(exc).__name__}: {exc}")

    def count_many(self, phrases: Sequence[Phrase]) -> list[CountResult]:
        return [self.count(p) for p in phrases]

    def cooccur_many(self, pairs: Sequence[tuple[Phrase, Phrase]]) -> list[CountResult]:
        return [self.cooccur(a, b) for a, b in pairs]

    def documents_with(self, phrase: Phrase) -> np.ndarray:
        """Global ids of the documents containing ``phrase`` (for inspection and tests)."""
        return self._docs([self._ranges(s) for s in self._encode(phrase)])

    def __repr__(self) -> str:
        return (
            f"LocalInfiniGram({self.index!r}, docs={self.doc_count}, tokens={self.total_tokens}, "
            f"tokenizer={self.tokenizer.name}, cooccurrence={self.cooccurrence})"
        )
