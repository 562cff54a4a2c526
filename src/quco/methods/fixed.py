"""FL-RAG and FS-RAG: retrieve on a fixed schedule, with the text just written as the query.

As in DRAGIN's ``FixLengthRAG``: retrieve with the question, generate one unit (``fix_length`` tokens for
FL-RAG, one sentence for FS-RAG) with the passages, then retrieve with that unit and generate the next one,
until the answer is stated or the token budget is spent. No retrieval follows the last unit, because no
generation would use it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from quco.answer import has_answer
from quco.engine.context import RunContext
from quco.engine.loop import join_text
from quco.engine.method import Check, Decision, Draft, Method, MethodParams
from quco.triggers.decide import trigger_record


class FixedParams(MethodParams):
    pass


class FixLengthParams(FixedParams):
    # Tokens per chunk. DRAGIN's FL-RAG configs omit it; QuCo-RAG's configs set 32.
    fix_length: int = Field(32, ge=1)


class _FixedSchedule(Method):
    keep_rule = "draft"  # passages inform the next unit; nothing is regenerated

    def before(self, question: str, ctx: RunContext) -> Decision:
        return Decision(
            retrieve=True,
            queries=[question],
            reason="a fixed-schedule method retrieves with the question first",
        )

    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        text = join_text(draft.prefix, draft.text)
        budget = ctx.parts.config.generation.max_new_tokens
        final = ""
        if has_answer(text):
            final = "the answer is stated"
        elif ctx.count_tokens(text) >= budget:
            final = f"the token budget ({budget}) is spent"
        signals: dict[str, Any] = {"unit": self.unit}
        if final:
            signals["trigger"] = trigger_record("always", 0.0, [], final=True)
            return Check(fire=False, keep=draft.text, signals=signals, reason=f"last unit: {final}")
        signals["trigger"] = trigger_record("always", 0.0, [1.0])
        return Check(
            fire=True,
            keep=draft.text,
            queries=[draft.text],
            signals=signals,
            reason=f"fixed schedule: retrieve after every {self._unit_name}",
        )

    _unit_name: ClassVar[str] = ""


class FLRAG(_FixedSchedule):
    name: ClassVar[str] = "fl-rag"
    description: ClassVar[str] = (
        "Fixed-length retrieval: retrieve every N tokens with the last chunk as query."
    )
    Params: ClassVar[type[MethodParams]] = FixLengthParams
    unit = "tokens"
    _unit_name = "chunk of fix_length tokens"

    params: FixLengthParams

    def unit_tokens(self, ctx: RunContext) -> int:
        return self.params.fix_length


class FSRAG(_FixedSchedule):
    name: ClassVar[str] = "fs-rag"
    description: ClassVar[str] = "Fixed-sentence retrieval: retrieve after every sentence with it as query."
    Params: ClassVar[type[MethodParams]] = FixedParams
    unit = "sentence"
    _unit_name = "sentence"
