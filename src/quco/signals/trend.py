"""ETC's signal: the trend of word entropies, not their level (Li et al., AAAI-26; pkuserc/ETC).

As coded in the ETC repository:
- a word's entropy is the max over its sub-tokens; only content words take part;
- first-order difference s1[i] = H[i] - H[j], j the nearest earlier content word;
- second-order difference s2[i] = s1[i] - s1[j], j the nearest earlier word (index >= 1) with s1 != 0;
- dynamic smoothing over the words with s2 != 0: with E the running mean of those s2 values and
  M' the previous word's raw s2, w = |M' - E| / (|s2 - E| + |M' - E|), alpha = 0.9 + 0.1 w,
  M = alpha * s2 + (1 - alpha) * M';
- per sentence, each word's attention score (the largest attention the word pays to any generated word)
  is normalised to sum to the sentence length, and value = attention x M; a word whose value exceeds the
  threshold (or whose |value| does, with ``thres_abs``) flags the sentence from that word on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_EPS = 1e-10  # the published code's guard against division by zero


def entropy_differences(entropies: Sequence[float], content: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """First- and second-order differences of word entropies (zero where undefined)."""
    h = np.asarray(entropies, dtype=np.float64)
    n = h.size
    s1 = np.zeros(n)
    s2 = np.zeros(n)
    for i in range(1, n):
        if not content[i]:
            continue
        for j in range(i - 1, -1, -1):
            if content[j]:
                s1[i] = h[i] - h[j]
                break
    for i in range(2, n):
        if not content[i]:
            continue
        for j in range(i - 1, 0, -1):
            if s1[j] != 0:
                s2[i] = s1[i] - s1[j]
                break
    return s1, s2


def smooth_second_order(s2: Sequence[float]) -> np.ndarray:
    """ETC's dynamically smoothed second-order difference M (zero where s2 is zero)."""
    arr = np.asarray(s2, dtype=np.float64)
    m = np.zeros(arr.size)
    count = 0
    total = 0.0
    prev = 0.0
    for i in range(2, arr.size):
        if arr[i] == 0:
            continue
        count += 1
        total += arr[i]
        mean = total / count
        num = abs(prev - mean)
        den = abs(arr[i] - mean) + num
        w = num / den if den > 0 else 0.0
        alpha = 0.9 + 0.1 * w
        m[i] = alpha * arr[i] + (1 - alpha) * prev
        prev = float(arr[i])
    return m


def sentence_values(max_attention: Sequence[float], smoothed: Sequence[float]) -> np.ndarray:
    """Per word of one sentence: attention normalised to the sentence length, times M."""
    att = np.asarray(max_attention, dtype=np.float64)
    if att.size == 0:
        return att
    norm = att * att.size / (att.sum() + _EPS)
    return norm * np.asarray(smoothed, dtype=np.float64)


def word_attention(
    attention: np.ndarray, query_words: Sequence[Sequence[int]], key_words: Sequence[Sequence[int]]
) -> np.ndarray:
    """Word-to-word attention: mean over the query word's tokens of the sum over the key word's tokens."""
    att = np.asarray(attention, dtype=np.float64)
    out = np.zeros((len(query_words), len(key_words)))
    for a, q in enumerate(query_words):
        if not q:
            continue
        rows = att[list(q)]
        for b, k in enumerate(key_words):
            if k:
                out[a, b] = float(rows[:, list(k)].sum(axis=1).mean())
    return out


def max_attention_to_new(attention: np.ndarray, new_words: Sequence[Sequence[int]]) -> np.ndarray:
    """Per generated word: the largest share of its attention that goes to any one generated word.

    Rows are normalised by the word's whole attention mass (all positions), as the published code divides by
    the sum over all words of the context.
    """
    att = np.asarray(attention, dtype=np.float64)
    w2w = word_attention(att, new_words, new_words)
    mass = np.array([float(att[list(q)].sum(axis=1).mean()) if q else 0.0 for q in new_words])
    if w2w.size == 0:
        return np.zeros(len(new_words))
    return (w2w / (mass[:, None] + _EPS)).max(axis=1)
