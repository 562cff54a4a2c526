"""Window co-occurrence on sorted token positions: the engine's CNF rule, and the exact rule it approximates.

Positions are global token positions of phrase starts; ``doc_starts`` are the positions of the document
separators (one before each document), sorted. QuCo-RAG counts a pair as co-occurring within 1,000 tokens; the
engine's CNF count approximates that and drops a true pair when the nearest other-phrase start on the far side
lies in a neighbouring document (stack.md §1). ``window_same_document`` is the rule without that artefact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def positions(tokens: np.ndarray, seqs: Sequence[Sequence[int]]) -> np.ndarray:
    """Sorted start positions of any of ``seqs`` in ``tokens`` (aliases that extend another are not extra
    starts: a position counts once)."""
    found = []
    for seq in seqs:
        n = len(tokens) - len(seq) + 1
        if not len(seq) or n <= 0:
            continue
        hits = np.flatnonzero(tokens[:n] == seq[0])
        for j in range(1, len(seq)):
            hits = hits[tokens[hits + j] == seq[j]]
        found.append(hits)
    if not found:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate(found))


def _neighbours(rare: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each rare position: index of the last ``other`` start before it, and of the first at or after it."""
    right = np.searchsorted(other, rare, side="left")
    return right - 1, right


def window_rule(rare: np.ndarray, other: np.ndarray, doc_starts: np.ndarray, max_diff: int) -> int:
    """The engine's rule: for each rare occurrence take the nearest ``other`` start on each side; keep the span
    (both sides if both are within ``max_diff``) unless it contains a document separator."""
    if not len(rare) or not len(other):
        return 0
    left_i, right_i = _neighbours(rare, other)
    has_left = left_i >= 0
    has_right = right_i < len(other)
    left = np.where(has_left, other[np.clip(left_i, 0, len(other) - 1)], -1)
    right = np.where(has_right, other[np.clip(right_i, 0, len(other) - 1)], -1)
    ok_left = has_left & (left + max_diff >= rare)
    ok_right = has_right & (right <= rare + max_diff)
    lo = np.where(ok_left, left, rare)
    hi = np.where(ok_right, right, rare)
    kept = ok_left | ok_right
    # The engine drops a span [lo, hi) that contains a separator. Match starts are never separators, so that
    # happens exactly when lo and hi fall in different documents.
    doc_lo = np.searchsorted(doc_starts, lo, side="right")
    doc_hi = np.searchsorted(doc_starts, hi, side="right")
    crosses = doc_lo != doc_hi
    return int(np.count_nonzero(kept & ~crosses))


def near_same_document(
    rare: np.ndarray, other: np.ndarray, doc_starts: np.ndarray, max_diff: int
) -> np.ndarray:
    """Per rare position: whether an ``other`` start lies within ``max_diff`` tokens of it in the same document."""
    if not len(rare) or not len(other):
        return np.zeros(len(rare), dtype=bool)
    doc_rare = np.searchsorted(doc_starts, rare, side="right") - 1
    doc_other = np.searchsorted(doc_starts, other, side="right") - 1
    # within the same document, the nearest other start on each side decides
    key_other = doc_other * (1 << 40) + other
    key_rare = doc_rare * (1 << 40) + rare
    right_i = np.searchsorted(key_other, key_rare, side="left")
    left_i = right_i - 1
    n = len(other)
    li, ri = np.clip(left_i, 0, n - 1), np.clip(right_i, 0, n - 1)
    ok_left = (left_i >= 0) & (doc_other[li] == doc_rare) & (other[li] + max_diff >= rare)
    ok_right = (right_i < n) & (doc_other[ri] == doc_rare) & (other[ri] <= rare + max_diff)
    return ok_left | ok_right


def window_same_document(rare: np.ndarray, other: np.ndarray, doc_starts: np.ndarray, max_diff: int) -> int:
    """Rare occurrences with an ``other`` start within ``max_diff`` tokens in the same document."""
    return int(np.count_nonzero(near_same_document(rare, other, doc_starts, max_diff)))
