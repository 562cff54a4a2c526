"""ROUGE-L F1 between two texts, tokenised as the ``rouge-score`` package does (with its Porter stemming).

Written here so the lexical-similarity estimator needs no extra dependency: lower-case, every run of
characters outside [a-z0-9] becomes a space, tokens longer than three characters are Porter-stemmed.
The stemmer is PyStemmer's "porter" (the original algorithm); rouge-score uses NLTK's variant of it, which
stems a few rare words differently.
"""

from __future__ import annotations

import re
from functools import lru_cache

_NON_ALNUM = re.compile(r"[^a-z0-9]+")


@lru_cache(maxsize=1)
def _stemmer():  # noqa: ANN202 - Stemmer.Stemmer
    import Stemmer

    return Stemmer.Stemmer("porter")


@lru_cache(maxsize=4096)
def _stem(word: str) -> str:
    return _stemmer().stemWord(word)


def rouge_tokens(text: str) -> list[str]:
    """Tokens as ROUGE compares them."""
    words = _NON_ALNUM.sub(" ", text.lower()).split()
    return [_stem(w) if len(w) > 3 else w for w in words]


def lcs_length(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence (one row of the dynamic programme at a time)."""
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l(reference: str, candidate: str) -> float:
    """ROUGE-L F1 (symmetric in its arguments); 0 when either text has no token."""
    ref, cand = rouge_tokens(reference), rouge_tokens(candidate)
    if not ref or not cand:
        return 0.0
    lcs = lcs_length(ref, cand)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(cand), lcs / len(ref)
    return 2 * precision * recall / (precision + recall)
