"""Text seams: sentences, question entities and (head, relation, tail) triplets.

Extractors that prompt an LLM receive an ``LLMCall`` from the engine, so that every call is counted in
the trace under the role ``extractor``; rule-based extractors ignore it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# (prompt, max_new_tokens) -> generated text. Supplied by the engine; counts the call.
LLMCall = Callable[[str, int], str]


@dataclass(frozen=True)
class Triplet:
    head: str
    relation: str
    tail: str | None = None  # None for a 2-tuple (a question or an unfinished claim)

    def as_list(self) -> list[str]:
        return [self.head, self.relation] + ([self.tail] if self.tail is not None else [])


@runtime_checkable
class SentenceSplitter(Protocol):
    def split(self, text: str) -> list[str]: ...


@runtime_checkable
class EntityExtractor(Protocol):
    name: str

    def question_entities(self, question: str, llm: LLMCall | None = None) -> list[str]: ...


@runtime_checkable
class TripletExtractor(Protocol):
    name: str

    def triplets(
        self, sentence: str, llm: LLMCall | None = None, context: str | None = None
    ) -> list[Triplet]:
        """Claims of ``sentence``. ``context`` (the question and the text generated before the sentence)
        lets an extractor name who "he", "the film" or "the actress" is; it may be ignored."""
        ...
