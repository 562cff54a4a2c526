"""The two reference points every comparison needs: no retrieval, and one retrieval with the question."""

from __future__ import annotations

from typing import ClassVar

from quco.engine.context import RunContext
from quco.engine.method import Decision, Method


class WoRAG(Method):
    name: ClassVar[str] = "wo-rag"
    description: ClassVar[str] = "No retrieval: the model answers from its parameters in one pass."
    uses_retriever: ClassVar[bool] = False
    single_pass: ClassVar[bool] = True


class SRRAG(Method):
    name: ClassVar[str] = "sr-rag"
    description: ClassVar[str] = "Single-round retrieval: top-k passages for the question, then one pass."
    single_pass: ClassVar[bool] = True

    def before(self, question: str, ctx: RunContext) -> Decision:
        return Decision(retrieve=True, queries=[question], reason="single-round retrieval always retrieves")
