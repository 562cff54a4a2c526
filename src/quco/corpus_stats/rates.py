"""Counts as corpus-relative rates (occurrences per billion tokens), so thresholds transfer between indexes.

QuCo-RAG's thresholds were set on the 4.6-trillion-token OLMo-2 index; an entity seen 20 times there is far
rarer than one seen 20 times in a 10-million-token local index. A threshold given as a rate is converted to
the count it means on the index at hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from quco.corpus_stats.base import CountResult

# Token counts of the hosted indexes, from the Infini-gram API documentation (used when the API is the backend).
HOSTED_INDEX_TOKENS: dict[str, int] = {
    "v4_olmo-2-0325-32b-instruct_llama": 4_610_629_088_477,
    "v4_olmo-2-1124-13b-instruct_llama": 4_610_749_614_285,
    "v4_olmoe-0125-1b-7b-instruct_llama": 4_610_737_979_121,
    "v4_dolma-v1_7_llama": 2_604_642_372_173,
    "v4_rpj_llama_s4": 1_385_942_948_192,
}
QUCO_REFERENCE_TOKENS = HOSTED_INDEX_TOKENS["v4_olmo-2-0325-32b-instruct_llama"]


def per_billion(count: int, total_tokens: int) -> float:
    return count * 1e9 / total_tokens


def count_for_rate(rate_per_billion: float, total_tokens: int) -> float:
    """The count on an index of ``total_tokens`` tokens that corresponds to ``rate_per_billion``."""
    return rate_per_billion * total_tokens / 1e9


@dataclass(frozen=True)
class CountThreshold:
    """ "Rare" means below ``absolute`` occurrences, or below ``per_billion`` occurrences per 10^9 tokens.

    With both given the rate wins when the index size is known (it transfers across corpora); the absolute
    count is the fallback. ``describe`` returns both sides for the trace.
    """

    absolute: float | None = None
    per_billion: float | None = None

    @classmethod
    def from_reference(cls, count: float, reference_tokens: int = QUCO_REFERENCE_TOKENS) -> CountThreshold:
        """A published absolute threshold, re-expressed as a rate on the index it was set on."""
        return cls(absolute=count, per_billion=per_billion(int(count), reference_tokens) if count else 0.0)

    def limit(self, total_tokens: int | None) -> float:
        """The absolute count this threshold means on an index of ``total_tokens`` tokens."""
        if self.per_billion is not None and total_tokens:
            return count_for_rate(self.per_billion, total_tokens)
        if self.absolute is not None:
            return self.absolute
        raise ValueError("threshold has no absolute count and the index size is unknown")

    def is_below(self, result: CountResult) -> bool | None:
        """True/False for an answered lookup; None when the lookup failed (the unknown-policy decides)."""
        if result.status != "ok" or result.count is None:
            return None
        return result.count < self.limit(result.total_tokens)

    def describe(self, result: CountResult) -> dict[str, float | int | None]:
        """Both views for the trace: the count and its rate, and the limit in each unit."""
        limit = self.limit(result.total_tokens)
        return {
            "count": result.count,
            "per_billion": None if result.per_billion is None else round(result.per_billion, 6),
            "limit_count": round(limit, 6) if math.isfinite(limit) else limit,
            "limit_per_billion": self.per_billion,
            "total_tokens": result.total_tokens,
        }
