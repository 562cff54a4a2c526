"""Fast, exact corpus tokenization for index builds: each distinct whitespace chunk is tokenized once.

BERT's normaliser and pre-tokenizer treat whitespace as a hard boundary, so a document's WordPiece ids are the
concatenation of the ids of its whitespace-separated chunks. A corpus repeats its chunks: one 8,000-article
Wikipedia shard has 20.3M chunks but only 0.9M distinct ones. :class:`CorpusEncoder` therefore sends each
distinct chunk through the real tokenizer once (many chunks joined into one call) and keeps its ids in a
table; a document then costs one C-level dict lookup per chunk and a numpy gather, never a Python loop over
tokens. The ids are identical to the tokenizer's own (the tests compare them on real and adversarial text).

Python's ``str.split`` also splits at a few control characters (VT, FF, U+001C-U+001F, NEL) that BERT's
normaliser deletes instead; those are deleted first, exactly as the normaliser would. Tokenizers whose
pre-tokenizer does not split at whitespace (byte-level BPE, for instance) are encoded document by document.
"""

from __future__ import annotations

import json
import logging
import os
import re
import unicodedata
from collections.abc import Sequence
from itertools import chain, filterfalse

import numpy as np

from quco.corpus_stats.tokenizer import IndexTokenizer

log = logging.getLogger(__name__)

# Characters str.split() treats as whitespace but BERT's clean_text deletes (Unicode category Cc).
_SPLIT_BUT_DELETED = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
DEFAULT_MAX_CHUNKS = 4_000_000  # distinct chunks kept (about 0.5 GB); the table restarts when full


def chunk_safe(tokenizer: IndexTokenizer) -> bool:
    """True when whitespace-separated chunks can be tokenized independently with identical results."""
    if tokenizer.json_text is None:
        return False
    spec = json.loads(tokenizer.json_text)
    normalizer = spec.get("normalizer") or {}
    pre = spec.get("pre_tokenizer") or {}
    return (
        normalizer.get("type") == "BertNormalizer"
        and bool(normalizer.get("clean_text", False))
        and pre.get("type") == "BertPreTokenizer"
        # added tokens are matched in the raw text; only whitespace-free special tokens keep chunks independent
        and all(
            t.get("special", False) and not any(c.isspace() for c in t.get("content", ""))
            for t in spec.get("added_tokens") or []
        )
    )


class CorpusEncoder:
    """Encodes batches of documents to numpy id arrays; exact, and fast on text that repeats its words."""

    def __init__(
        self, tokenizer: IndexTokenizer, max_chunks: int = DEFAULT_MAX_CHUNKS, parallel: int | None = None
    ) -> None:
        self.tokenizer = tokenizer
        # New chunks go to the tokenizer in this many strings at once (its Rust side encodes them in parallel).
        self.parallel = max(1, parallel or min(4, os.cpu_count() or 1))
        self.dtype = tokenizer.np_dtype
        self.max_chunks = max_chunks
        self.chunked = chunk_safe(tokenizer)
        self._reset()
        self.chunks_seen = 0
        self.chunks_tokenized = 0

    def _reset(self) -> None:
        self._row: dict[str, int] = {}
        self._flat = np.zeros(0, dtype=self.dtype)  # ids of all known chunks, back to back
        self._start = np.zeros(0, dtype=np.int64)  # per row: where its ids start in _flat
        self._len = np.zeros(0, dtype=np.int64)  # per row: how many ids

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text (no special tokens), as arrays of the index's token dtype."""
        if not texts:
            return []
        if self.tokenizer.json_text is None:  # UTF-8 bytes after NFC; 0xFF (the separator) never occurs
            return [
                np.frombuffer(unicodedata.normalize("NFC", t).encode("utf-8"), dtype=np.uint8) for t in texts
            ]
        if not self.chunked:
            return [np.asarray(ids, dtype=self.dtype) for ids in self.tokenizer.encode_batch(texts)]
        lists = [
            (_SPLIT_BUT_DELETED.sub("", t) if _SPLIT_BUT_DELETED.search(t) else t).split() for t in texts
        ]
        chunks = list(chain.from_iterable(lists))
        self.chunks_seen += len(chunks)
        # (not set.difference_update(dict): that walks the whole table, however small the batch)
        unknown = set(filterfalse(self._row.__contains__, set(chunks)))
        if unknown:
            if len(self._row) + len(unknown) > self.max_chunks:
                self._reset()
                unknown = set(chunks)
            self._add(list(unknown))
        rows = np.fromiter(map(self._row.__getitem__, chunks), dtype=np.int64, count=len(chunks))
        lens = self._len[rows]
        ends = np.cumsum(lens)
        total = int(ends[-1]) if len(ends) else 0
        # Position k of the batch's tokens comes from _flat[start(row) + k - first token of that chunk].
        gather = np.repeat(self._start[rows] - (ends - lens), lens) + np.arange(total, dtype=np.int64)
        tokens = self._flat[gather]
        chunk_ends = np.cumsum(np.fromiter(map(len, lists), dtype=np.int64, count=len(lists)))
        token_ends = np.concatenate(([0], ends))[chunk_ends]
        return np.split(tokens, token_ends[:-1])

    def _add(self, chunks: list[str]) -> None:
        """Tokenize new chunks (joined by spaces, in a few parallel calls) and append their ids to the table."""
        assert self.tokenizer._tok is not None
        groups = [chunks[i :: self.parallel] for i in range(min(self.parallel, len(chunks)))]
        encodings = self.tokenizer._tok.encode_batch([" ".join(g) for g in groups], add_special_tokens=False)
        ordered: list[str] = []
        all_ids, all_lens = [], []
        for group, enc in zip(groups, encodings, strict=True):
            sizes = np.fromiter(map(len, group), dtype=np.int64, count=len(group))
            char_starts = np.cumsum(sizes + 1) - (sizes + 1)
            ids = np.asarray(enc.ids, dtype=self.dtype)
            starts = np.fromiter(chain.from_iterable(enc.offsets), dtype=np.int64, count=2 * len(ids))[::2]
            owner = np.searchsorted(char_starts, starts, side="right") - 1
            all_lens.append(np.bincount(owner, minlength=len(group)).astype(np.int64))
            all_ids.append(ids)
            ordered.extend(group)
        lens = np.concatenate(all_lens)
        base = len(self._flat)
        self._start = np.concatenate([self._start, base + np.cumsum(lens) - lens])
        self._len = np.concatenate([self._len, lens])
        self._flat = np.concatenate([self._flat, *all_ids])
        first = len(self._row)
        self._row.update(zip(ordered, range(first, first + len(ordered)), strict=True))
        self.chunks_tokenized += len(ordered)
