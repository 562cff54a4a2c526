"""QuCo-RAG's loop with chance for its trigger: the control that says what the corpus statistics are worth.

Everything is QuCo-RAG's (prompts, the continuation scanned sentence by sentence, chatty and negation
filtering, the first-sentence keep rule with the remainder re-checked, the queries) except the two decisions:

- stage 1 retrieves with the question with probability ``p_stage1`` (a draw per question);
- stage 2 flags each judged sentence with probability ``p_stage2`` (a draw per sentence, counted over the
  question); a flagged sentence's claims are extracted for the queries (head + relation, as QuCo-RAG's), and
  a sentence without a claim is its own query. No corpus lookup is made.

``match_run`` (a QuCo-RAG run) sets both to that run's firing rates: stage 1 per question, stage 2 per judged
sentence, read from its trigger records. The draws are ``sha256(seed, question, stage, index)``, so a run is
reproducible and independent of question order.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from pydantic import Field

from quco.engine.context import RunContext
from quco.engine.method import Decision
from quco.methods.quco import QuCoParams, QuCoRAG, Verdict
from quco.signals.chance import StageRate, stage_rate, step_candidates, uniform_draw
from quco.signals.record import TriggerRecord

log = logging.getLogger(__name__)


class QuCoRandomParams(QuCoParams):
    p_stage1: float = Field(0.5, ge=0, le=1)  # probability of retrieving with the question before generating
    p_stage2: float = Field(0.1, ge=0, le=1)  # probability of flagging each judged sentence
    seed: int = 0
    match_run: str | None = (
        None  # a QuCo-RAG run (its directory) whose firing rates become p_stage1, p_stage2
    )


class QuCoRandom(QuCoRAG):
    name = "quco-random"
    description = (
        "QuCo-RAG's loop with random stage-1 and stage-2 decisions (the firing-rate-matched control)."
    )
    Params = QuCoRandomParams
    SHAPE = replace(QuCoRAG.SHAPE, corpus_stats=False)

    params: QuCoRandomParams

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        self.p1, self.p2 = self.params.p_stage1, self.params.p_stage2  # replaced by a matched run's in setup

    def _matched(self) -> tuple[StageRate, StageRate]:
        from quco.eval.runs import load_traces  # the run-file reader; it imports nothing of the engine

        traces = load_traces(self.params.match_run)
        return stage_rate(traces, "before"), stage_rate(traces, "generate")

    def matched_rates(self) -> dict[str, float] | None:
        if not self.params.match_run:
            return None
        stage1, stage2 = self._matched()
        return {"p_stage1": stage1.per_step, "p_stage2": stage2.per_candidate}

    def setup(self, parts: Any) -> None:
        if not self.params.match_run:
            return
        stage1, stage2 = self._matched()
        self.p1, self.p2 = stage1.per_step, stage2.per_candidate
        log.info(
            "quco-random: p_stage1 = %.4f (%d of %d questions), p_stage2 = %.4f (%d of %d sentences) from %s",
            self.p1, stage1.fired, stage1.steps, self.p2, stage2.fired, stage2.candidates, self.params.match_run,
        )  # fmt: skip

    def _draw(self, question: str, stage: str, index: int) -> float:
        return uniform_draw(self.params.seed, question, index, stage)

    def before(self, question: str, ctx: RunContext) -> Decision | None:
        p = self.params
        if not p.stage1:
            return None
        record = TriggerRecord.decide(
            "draw",
            "below",
            self.p1,
            [self._draw(question, "stage1", 0)],
            "question",
            param="p_stage1",
            seed=p.seed,
        )
        if not record.fired:
            return Decision(False, reason=f"draw {record.scores[0]:g} >= p = {self.p1:g}", triggers=[record])
        query = question
        if p.question_query == "key_terms":
            with ctx.timed("extraction"):
                query = " ".join(
                    ctx.parts.text.entities.question_entities(question, ctx.llm_call("extractor"))
                )
        return Decision(
            True, [query], reason=f"draw {record.scores[0]:g} < p = {self.p1:g}", triggers=[record]
        )

    def _offset(self, ctx: RunContext) -> int:
        """Judged sentences of the question's earlier checks (draws are indexed over the whole question)."""
        return sum(step_candidates(s) for s in ctx.trace.steps if s.stage == "generate" and s.triggers)

    def _judge(self, sentence: str, question: str, index: int, ctx: RunContext) -> Verdict:
        """A draw decides; only a flagged sentence's claims are extracted, for the queries."""
        u = self._draw(question, "stage2", self._offset(ctx) + index)
        if TriggerRecord.decide("draw", "below", self.p2, [u], "sentence").fired_at is None:
            return Verdict({}, draw=u)
        with ctx.timed("extraction"):
            triplets = ctx.parts.text.triplets.triplets(sentence, ctx.llm_call("extractor"))
        queries = self._queries(triplets, sentence, question) if triplets else [sentence]
        detail = {"claims": [{"triplet": t.as_list()} for t in triplets]}
        return Verdict(detail, queries=queries, reason=f"draw {round(u, 6):g} < p = {self.p2:g}", draw=u)

    def _records(self, verdicts: list[Verdict], question: str, ctx: RunContext) -> list[TriggerRecord]:
        start = self._offset(ctx)
        draws = [v.draw for v in verdicts]
        candidates = list(range(start, start + len(draws)))
        record = TriggerRecord.decide(
            "draw",
            "below",
            self.p2,
            draws,
            "sentence",
            param="p_stage2",
            seed=self.params.seed,
            candidates=candidates,
        )
        return [record]
