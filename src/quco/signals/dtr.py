"""DTR's two decisions as pure functions: whether to retrieve (UGT), and which passages to keep (AIS).

UGT (uncertainty-guided triggering): u = mean of -log p over the tokens of a greedy short answer, the end
token excluded; u >= threshold means the model is unsure, so retrieve. AIS (adaptive information selection)
scores a passage by how close it is to both the question (s1) and the pseudo-passage (s2).

Three AIS scores exist, because DTR's paper and its published code disagree:
``cos_sum`` is the paper's cos(theta1 + theta2), ``sum`` is the code's default s1 + s2, and
``weighted_angle`` is the code's optional -(alpha*theta1 + (1 - alpha)*theta2) with alpha from the angle
between question and pseudo-passage. All angles are in radians.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

AisScore = Literal["cos_sum", "sum", "weighted_angle"]
AIS_SCORES: tuple[str, ...] = ("cos_sum", "sum", "weighted_angle")

# alpha = ALPHA_SLOPE * theta0 + ALPHA_INTERCEPT (theta0 in radians), the published fit.
ALPHA_SLOPE = 0.05848
ALPHA_INTERCEPT = 0.45520


def mean_nll(logprobs: Sequence[float], *, drop_last: bool = False) -> float:
    """Mean negative log-likelihood of an answer's tokens.

    ``drop_last`` removes a trailing end token (EOS) when the backend reported one; quco's generators leave
    the end token out of ``Generation.logprobs`` already. An answer with no tokens has no evidence of
    confidence, so its uncertainty is infinite (it always triggers retrieval).
    """
    values = list(logprobs[:-1] if drop_last and logprobs else logprobs)
    if not values:
        return math.inf
    return -sum(values) / len(values)


@dataclass(frozen=True)
class TriggerDecision:
    retrieve: bool
    uncertainty: float
    threshold: float
    tokens: int


def ugt_decision(logprobs: Sequence[float], threshold: float, *, drop_last: bool = False) -> TriggerDecision:
    """Retrieve iff the answer's mean NLL reaches ``threshold``; a threshold <= 0 always retrieves."""
    n = len(logprobs) - (1 if drop_last and logprobs else 0)
    u = mean_nll(logprobs, drop_last=drop_last)
    return TriggerDecision(
        retrieve=threshold <= 0 or u >= threshold, uncertainty=u, threshold=threshold, tokens=n
    )


def _clip(s: float) -> float:
    return min(1.0, max(-1.0, float(s)))


def ais_alpha(s0: float) -> float:
    """Weight of the question angle in ``weighted_angle``: grows with the question/pseudo-passage angle."""
    return ALPHA_SLOPE * math.acos(_clip(s0)) + ALPHA_INTERCEPT


def ais_score(s1: float, s2: float, kind: AisScore = "cos_sum", s0: float | None = None) -> float:
    """AIS score of one passage from its cosine to the question (``s1``) and to the pseudo-passage (``s2``).

    ``s0`` (cosine between question and pseudo-passage) is needed by ``weighted_angle`` only. Cosines are
    clipped to [-1, 1] first, since float dot products of unit vectors can overshoot slightly.
    """
    s1, s2 = _clip(s1), _clip(s2)
    if kind == "cos_sum":
        # cos(t1 + t2) = cos t1 cos t2 - sin t1 sin t2, with sin t = sqrt(1 - cos^2 t) for t in [0, pi]
        return s1 * s2 - math.sqrt(1.0 - s1 * s1) * math.sqrt(1.0 - s2 * s2)
    if kind == "sum":
        return s1 + s2
    if kind == "weighted_angle":
        if s0 is None:
            raise ValueError("the weighted_angle score needs s0, the question/pseudo-passage cosine")
        alpha = ais_alpha(s0)
        return -(alpha * math.acos(s1) + (1.0 - alpha) * math.acos(s2))
    raise ValueError(f"unknown AIS score {kind!r}; use one of {', '.join(AIS_SCORES)}")


def ais_select(
    s1: Sequence[float], s2: Sequence[float], k: int, kind: AisScore = "cos_sum", s0: float | None = None
) -> tuple[list[int], list[float]]:
    """(positions of the ``k`` best candidates, all candidates' scores); ties keep candidate order."""
    if len(s1) != len(s2):
        raise ValueError(f"s1 has {len(s1)} values but s2 has {len(s2)}")
    scores = [ais_score(a, b, kind, s0) for a, b in zip(s1, s2, strict=True)]
    order = sorted(range(len(scores)), key=lambda i: -scores[i])  # sorted() is stable
    return order[: max(0, k)], scores
