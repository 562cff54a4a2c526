"""The corpus-statistics seam: n-gram counts and co-occurrence counts, each answer self-describing.

``count`` and ``cooccur`` never raise for a failed lookup: they return ``status='unknown'`` with the error,
and the caller applies an explicit policy. A silently skipped check is a defect.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

Phrase = str | Sequence[str]  # one phrase, or a set of aliases counted as OR


@dataclass
class CountResult:
    query: str  # a readable form of what was asked, e.g. "Paris" or "Paris AND France"
    count: int | None  # None when status == "unknown"
    exact: bool = True  # False when the backend subsampled or estimated
    backend: str = ""
    index: str = ""
    seconds: float = 0.0
    status: str = "ok"  # "ok" | "unknown"
    error: str | None = None
    cached: bool = False
    total_tokens: int | None = None  # size of the index, for rates per billion tokens

    @property
    def per_billion(self) -> float | None:
        """Occurrences per billion tokens, so thresholds transfer between corpora of different sizes."""
        if self.count is None or not self.total_tokens:
            return None
        return self.count * 1e9 / self.total_tokens


def answer(
    stats: CorpusStats,
    query: str,
    started: float,
    count: int | None = None,
    *,
    exact: bool = True,
    error: str | None = None,
) -> CountResult:
    """A backend's answer to ``query``, asked at ``started`` (``time.perf_counter()``); unknown with an error."""
    return CountResult(
        query=query,
        count=count,
        exact=exact,
        backend=stats.name,
        index=stats.index,
        seconds=time.perf_counter() - started,
        status="ok" if error is None else "unknown",
        error=error,
        total_tokens=stats.total_tokens,
    )


@runtime_checkable
class CorpusStats(Protocol):
    name: str  # backend name, e.g. "infini-gram-local"
    index: str  # index name or directory
    total_tokens: int | None

    def count(self, phrase: Phrase) -> CountResult: ...

    def cooccur(self, a: Phrase, b: Phrase) -> CountResult: ...

    def count_many(self, phrases: Sequence[Phrase]) -> list[CountResult]: ...

    def cooccur_many(self, pairs: Sequence[tuple[Phrase, Phrase]]) -> list[CountResult]: ...
