"""FLARE's signal: how unsure the model was of each token it chose, aggregated per sentence.

As in the DRAGIN/QuCo code (``TokenRAG``): a token's uncertainty is 1 - p(token); a sentence's score is the
mean, max or min of its tokens' uncertainties; the sentence is flagged when the score exceeds the threshold,
and the query is the sentence with its over-threshold tokens removed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

Aggregate = Literal["avg", "max", "min"]


def token_uncertainty(logprobs: Sequence[float]) -> np.ndarray:
    """1 - p for each token, from its log-probability."""
    return 1.0 - np.exp(np.asarray(logprobs, dtype=np.float64))


def aggregate(values: Sequence[float] | np.ndarray, how: str) -> float:
    """Mean, max or min of a sentence's token uncertainties (the published ``sentence_solver``)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return 0.0
    if how == "avg":
        return float(arr.mean())
    if how == "max":
        return float(arr.max())
    if how == "min":
        return float(arr.min())
    raise ValueError(f"unknown aggregate '{how}'; use avg, max or min")


def masked_text(
    text: str, spans: Sequence[tuple[int, int]], drop: Sequence[bool], start: int, end: int
) -> str:
    """``text[start:end]`` with the characters of the dropped tokens removed, whitespace squeezed.

    ``spans`` are the tokens' character spans in ``text``; a dropped token that straddles the boundary is
    removed only where it overlaps.
    """
    keep = [True] * (end - start)
    for (a, b), d in zip(spans, drop, strict=True):
        if not d:
            continue
        for i in range(max(a, start), min(b, end)):
            keep[i - start] = False
    kept = "".join(ch if k else " " for ch, k in zip(text[start:end], keep, strict=True))
    return " ".join(kept.split())
