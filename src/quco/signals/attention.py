"""DRAGIN's signal (RIND) and its attention-based query (the ``real_words`` formulation).

RIND, as coded in ``AttnWeightRAG``: the generated tokens are re-read by the model; each token's attention
score is the largest attention any later position pays it (last layer, averaged over heads); a word's score is
the sum over its sub-tokens, its entropy the mean over them. Within a sentence the attention scores are
normalised to sum to one, and each word's value is ``attention x entropy x number of words``. The sentence is
flagged when any value exceeds the threshold.

The query: the model re-reads question + accepted text + the flagged sentence; for each flagged word, the
attention the position before each of its tokens pays to everything earlier (normalised), averaged over the
word's tokens and summed per word; averaged over the flagged words; the top-k content words by that score,
outside the flagged words, in their original order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def max_attention_received(attention: np.ndarray) -> np.ndarray:
    """Per position: the largest attention any query position pays it (column max of a [seq, seq] map)."""
    return np.asarray(attention, dtype=np.float64).max(axis=0)


def sum_per_group(values: Sequence[float] | np.ndarray, groups: Sequence[Sequence[int]]) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    return np.array([float(arr[list(g)].sum()) if len(g) else 0.0 for g in groups])


def mean_per_group(values: Sequence[float] | np.ndarray, groups: Sequence[Sequence[int]]) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    return np.array([float(arr[list(g)].mean()) if len(g) else 0.0 for g in groups])


def max_per_group(values: Sequence[float] | np.ndarray, groups: Sequence[Sequence[int]]) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    return np.array([float(arr[list(g)].max()) if len(g) else 0.0 for g in groups])


def rind_values(word_attention: Sequence[float], word_entropy: Sequence[float]) -> np.ndarray:
    """DRAGIN's per-word value within one sentence: normalised attention x entropy x sentence length."""
    att = np.asarray(word_attention, dtype=np.float64)
    ent = np.asarray(word_entropy, dtype=np.float64)
    if att.size == 0:
        return att
    total = att.sum()
    norm = att / total if total > 0 else np.zeros_like(att)
    return norm * ent * att.size


def forward_attention(
    attention: np.ndarray, word_tokens: Sequence[Sequence[int]], hit_words: Sequence[int]
) -> np.ndarray:
    """Mean over the hit words of the attention each pays to every word before it (DRAGIN's query scores).

    For each token i of a hit word starting at token r0, the row of position i - 1 over positions [0, r0) is
    normalised to sum to one; the rows are averaged over the word's tokens, then summed per word.
    """
    att = np.asarray(attention, dtype=np.float64)
    n = att.shape[0]
    total = np.zeros(len(word_tokens))
    used = 0
    for w in hit_words:
        toks = list(word_tokens[w])
        if not toks:
            continue
        r0 = toks[0]
        acc = np.zeros(n)
        for i in toks:
            if i == 0 or r0 == 0:
                continue
            row = att[i - 1, :r0]
            s = row.sum()
            if s > 0:
                acc[:r0] += row / s
        acc /= len(toks)
        total += sum_per_group(acc, word_tokens)
        used += 1
    return total / used if used else total


def top_k_in_order(scores: Sequence[float], eligible: Sequence[bool], k: int) -> list[int]:
    """Indices of the k highest-scoring eligible items, returned in their original order."""
    idx = [i for i, ok in enumerate(eligible) if ok]
    idx.sort(key=lambda i: (-float(scores[i]), i))
    return sorted(idx[: max(0, k)])
