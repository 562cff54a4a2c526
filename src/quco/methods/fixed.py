"""FL-RAG and FS-RAG: retrieve on a fixed schedule, with the text just written as the query.

As in DRAGIN's ``FixLengthRAG``: retrieve with the question, generate one unit (``fix_length`` tokens for
FL-RAG, one sentence for FS-RAG) with the passages, then retrieve with that unit and generate the next one,
until the answer is stated or the token budget is spent. No retrieval follows the last unit, because no
generation would use it.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from quco.engine.context import RunContext
from quco.engine.method import Check, Decision, Draft, Method, MethodParams, Shape
from quco.trigger_record import TriggerRecord


class FixedParams(MethodParams):
    pass


class FixLengthParams(FixedParams):
    # Tokens per chunk. DRAGIN's FL-RAG configs omit it; QuCo-RAG's configs set 32.
    fix_length: int = Field(32, ge=1)


class _FixedSchedule(Method):
    Params = FixedParams
    SHAPE = Shape(keep_rule="draft")  # passages inform the next unit; nothing is regenerated
    _unit_name: ClassVar[str] = ""

    def before(self, question: str, ctx: RunContext) -> Decision:
        always = TriggerRecord.decide("schedule", "always", 0.0, [None], "question", param="")
        return Decision(
            retrieve=True,
            queries=[question],
            reason="a fixed-schedule method retrieves with the question first",
            triggers=[always],
        )

    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        unit = self.shape.unit
        if draft.last:  # the loop stops after this unit: no generation would read another retrieval
            record = TriggerRecord.decide("schedule", "always", 0.0, [], unit, param="", final=True)
            return Check.accept(draft.text, f"last unit: {draft.last}", None, record)
        record = TriggerRecord.decide("schedule", "always", 0.0, [None], unit, param="")
        why = f"fixed schedule: retrieve after every {self._unit_name}"
        return Check.retrieve(draft.text, [draft.text], why, {}, record)


class FLRAG(_FixedSchedule):
    name = "fl-rag"
    description = "Fixed-length retrieval: retrieve every N tokens with the last chunk as query."
    Params = FixLengthParams
    SHAPE = Shape(unit="tokens", keep_rule="draft")
    _unit_name = "chunk of fix_length tokens"

    params: FixLengthParams

    def unit_tokens(self, ctx: RunContext) -> int:
        return self.params.fix_length


class FSRAG(_FixedSchedule):
    name = "fs-rag"
    description = "Fixed-sentence retrieval: retrieve after every sentence with it as query."
    SHAPE = Shape(unit="sentence", keep_rule="draft")
    _unit_name = "sentence"
