"""The two reference points every comparison needs: no retrieval, and one retrieval with the question."""

from __future__ import annotations

from quco.engine.context import RunContext
from quco.engine.method import Decision, Method, Shape
from quco.trigger_record import TriggerRecord


class WoRAG(Method):
    name = "wo-rag"
    description = "No retrieval: the model answers from its parameters in one pass."
    SHAPE = Shape(single_pass=True, retriever=False)


class SRRAG(Method):
    name = "sr-rag"
    description = "Single-round retrieval: top-k passages for the question, then one pass."
    SHAPE = Shape(single_pass=True)

    def before(self, question: str, ctx: RunContext) -> Decision:
        always = TriggerRecord.decide("always", "always", 0.0, [None], "question", param="")
        return Decision(True, [question], reason="single-round retrieval always retrieves", triggers=[always])
