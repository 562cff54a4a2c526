"""The retriever seam: batched search returning passages with id, title, text and score."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    score: float = 0.0

    def as_context(self) -> str:
        """How a passage appears in a prompt: title, then text."""
        return f"{self.title}: {self.text}" if self.title else self.text


@runtime_checkable
class Retriever(Protocol):
    name: str

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages for each query, best first."""
        ...
