"""The random control of DTR: DTR's loop with UGT's decision replaced by a draw.

Every question gets DTR's direct answer (the same call, so the same cost and the same answer when nothing is
retrieved); a seeded draw then decides, with probability ``p``, to retrieve as DTR does (the pseudo-passage,
both paths, AIS). Only the decisions differ from a DTR run: a control answers "is UGT's uncertainty better
than chance at the same retrieval rate?". ``match_run`` (a DTR run) sets ``p`` to the share of that run's
questions that retrieved.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from quco.engine.context import RunContext
from quco.engine.method import Decision, Matched
from quco.methods.dtr import DTR, DTRParams, as_prediction
from quco.methods.random_trigger import unmatched
from quco.signals.chance import stage_rate, uniform_draw
from quco.trigger_record import TriggerRecord


class DTRRandomParams(DTRParams):
    p: float = Field(0.5, ge=0, le=1)  # probability of retrieving for a question
    seed: int = 0
    match_run: str | None = None  # a DTR run (its directory) whose share of retrieving questions becomes p


class DTRRandom(DTR):
    name = "dtr-random"
    description = "DTR's loop with a random draw in place of UGT's uncertainty (the matched control)."
    Params = DTRRandomParams

    params: DTRRandomParams

    @property
    def match_run(self) -> str | None:
        return self.params.match_run

    def matched(self, traces: Sequence[Any]) -> Matched:
        """A DTR run's share of questions whose decision before generation was to retrieve."""
        rate = stage_rate(traces, "before")
        return Matched({"p": rate.per_step}, f"retrieved for {rate.fired} of {rate.steps} questions")

    def setup(self, parts: Any) -> None:
        unmatched(self)
        super().setup(parts)

    def before(self, question: str, ctx: RunContext) -> Decision:
        p = self.params
        signals: dict[str, Any] = {}
        answer, trig = self.direct_answer(question, ctx, signals)
        signals["answer_nll"] = round(trig.uncertainty, 6)  # recorded, not used
        draw = uniform_draw(p.seed, question, 0)
        record = TriggerRecord.decide("draw", "below", p.p, [draw], "question", param="p", seed=p.seed)
        if not record.fired:
            reason = f"draw {draw:g} >= p = {p.p:g}: answered directly"
            return Decision(
                False, signals=signals, reason=reason, triggers=[record], answer=as_prediction(answer)
            )
        return self.retrieve(question, ctx, signals, f"draw {draw:g} < p = {p.p:g}", record)
