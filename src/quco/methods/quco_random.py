"""QuCo-RAG's loop with chance for its trigger: the control that says what the corpus statistics are worth.

Everything is QuCo-RAG's (prompts, the continuation scanned sentence by sentence, chatty and negation
filtering, the claims extracted from every judged sentence, the first-sentence keep rule with the remainder
re-checked, the queries) except the two decisions:

- stage 1 retrieves with the question with probability ``p_stage1`` (a draw per question in which QuCo-RAG's
  extractor finds an entity: a question without one is never drawn for, as QuCo-RAG can never retrieve for it);
- stage 2 flags each claim of a judged sentence with probability ``p_claim`` (a draw per claim) where QuCo-RAG
  would count it. A sentence fires when any of its claims is flagged, and queries as QuCo-RAG does: one query
  per flagged claim, in the configured form (``sentence_query``). A sentence without a claim is never drawn for,
  as QuCo-RAG can never flag it. No corpus lookup is made.

``match_run`` (a QuCo-RAG run) sets both to that run's rates: stage 1 per question with an entity, stage 2 per
claim judged (flagged claims over the claims of the sentences its checks judged, from the claim records of its
traces). The evaluation reads that run and builds the control with the rates (``quco.eval.run.matched``). The draws
are ``sha256(seed, question, stage, position)``, so a run is reproducible and independent of question order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import Field, model_validator

from quco.engine.context import RunContext
from quco.engine.method import Decision, Matched
from quco.methods.quco import QuCoParams, QuCoRAG, Verdict
from quco.methods.random_trigger import unmatched
from quco.signals.chance import uniform_draw
from quco.trace import as_trace
from quco.trigger_record import TriggerRecord, step_fired_at


class QuCoRandomParams(QuCoParams):
    # probability of retrieving with the question before generating, for a question with an entity
    p_stage1: float = Field(0.5, ge=0, le=1)
    p_claim: float = Field(0.1, ge=0, le=1)  # probability of flagging each claim of a judged sentence
    seed: int = 0
    match_run: str | None = None  # a QuCo-RAG run (its directory) whose rates become p_stage1, p_claim

    @model_validator(mode="before")
    @classmethod
    def _no_sentence_chance(cls, data: Any) -> Any:
        if isinstance(data, dict) and "p_stage2" in data:
            raise ValueError(
                "p_stage2 (a chance per judged sentence, any sentence) was replaced by p_claim (a chance per "
                "claim, drawn only for sentences with claims, with QuCo-RAG's queries for the flagged ones); "
                "set p_claim, and run again a control recorded with p_stage2"
            )
        return data


@dataclass(frozen=True)
class QuestionRate:
    """How often a QuCo-RAG run's stage 1 retrieved for a question in which it found an entity."""

    questions: int  # questions whose stage 1 found at least one entity
    fired: int
    without_entities: int  # questions whose stage 1 found none (it cannot retrieve for them)

    @property
    def per_question(self) -> float:
        return self.fired / self.questions if self.questions else 0.0


def question_rate(traces: Iterable[Any]) -> QuestionRate:
    """Stage-1 retrievals over the questions with an entity, from the entities and records of the before steps."""
    questions = fired = without = 0
    for t in traces:
        for step in as_trace(t).steps:
            if step.stage != "before" or not step.triggers:
                continue
            if not (step.signals or {}).get("entities"):
                without += 1
                continue
            questions += 1
            fired += step_fired_at(step.triggers) is not None
    return QuestionRate(questions, fired, without)


@dataclass(frozen=True)
class ClaimRate:
    """How often a QuCo-RAG run flagged a claim its stage 2 judged."""

    claims: int  # claims of the judged sentences
    flagged: int

    @property
    def per_claim(self) -> float:
        return self.flagged / self.claims if self.claims else 0.0


def claim_rate(traces: Iterable[Any]) -> ClaimRate:
    """Flagged claims over judged claims, from the claim records QuCo-RAG's checks leave in their signals."""
    claims = flagged = 0
    for t in traces:
        for step in as_trace(t).steps:
            if step.stage != "generate":
                continue
            for sentence in (step.signals or {}).get("sentences", []):
                for claim in sentence.get("claims", []):
                    claims += 1
                    flagged += bool(claim.get("flagged"))
    return ClaimRate(claims, flagged)


class QuCoRandom(QuCoRAG):
    name = "quco-random"
    description = "QuCo-RAG's loop with random stage-1 and per-claim stage-2 decisions (the matched control)."
    Params = QuCoRandomParams
    SHAPE = replace(QuCoRAG.SHAPE, corpus_stats=False)

    params: QuCoRandomParams

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        self.p1, self.p2 = self.params.p_stage1, self.params.p_claim

    @property
    def match_run(self) -> str | None:
        return self.params.match_run

    def matched(self, traces: Sequence[Any]) -> Matched:
        """A QuCo-RAG run's stage-1 rate per question with an entity and stage-2 rate per judged claim."""
        stage1, claims = question_rate(traces), claim_rate(traces)
        return Matched(
            {"p_stage1": stage1.per_question, "p_claim": claims.per_claim},
            f"stage 1 retrieved for {stage1.fired} of the {stage1.questions} questions with an entity "
            f"({stage1.without_entities} had none), stage 2 flagged {claims.flagged} of {claims.claims} claims",
        )

    def setup(self, parts: Any) -> None:
        unmatched(self)

    def before(self, question: str, ctx: RunContext) -> Decision | None:
        """A draw for a question in which QuCo-RAG's extractor finds an entity (the same extraction call); none
        for a question without one, where QuCo-RAG cannot retrieve."""
        p = self.params
        if not p.stage1:
            return None
        entities = self.question_entities(question, ctx)
        signals: dict[str, Any] = {"entities": entities}
        draw = uniform_draw(p.seed, question, 0, "stage1") if entities else None
        record = TriggerRecord.decide(
            "draw", "below", self.p1, [draw], "question", param="p_stage1", seed=p.seed
        )
        if draw is None:
            return Decision(False, [], signals, "no entities found in the question", triggers=[record])
        if not record.fired:
            return Decision(False, [], signals, f"draw {draw:g} >= p = {self.p1:g}", triggers=[record])
        query = question if p.question_query == "direct" else " ".join(entities)
        return Decision(True, [query], signals, f"draw {draw:g} < p = {self.p1:g}", triggers=[record])

    def _check_number(self, ctx: RunContext) -> int:
        """Checks of the question so far: with the sentence and claim positions, it keys a claim's draw."""
        return sum(1 for s in ctx.trace.steps if s.stage == "generate" and s.triggers)

    def _judge(self, sentence: str, question: str, index: int, ctx: RunContext) -> Verdict:
        """QuCo-RAG's claims for the sentence, each flagged by a draw instead of a count."""
        with ctx.timed("extraction"):
            triplets = ctx.parts.text.triplets.triplets(sentence, ctx.llm_call("extractor"))
        if not triplets:
            return Verdict({"claims": []})
        stage = f"stage2:{self._check_number(ctx)}:{index}"
        records, flagged, draws = [], [], []
        for j, t in enumerate(triplets):
            u = uniform_draw(self.params.seed, question, j, stage)
            hit = TriggerRecord.decide("draw", "below", self.p2, [u], "claim").fired
            records.append({"triplet": t.as_list(), "draw": round(u, 6), "flagged": hit})
            draws.append(u)
            if hit:
                flagged.append(t)
        lowest = min(draws)
        if not flagged:
            return Verdict({"claims": records}, draw=lowest)
        return Verdict(
            {"claims": records},
            queries=self._queries(flagged, sentence, question),
            reason=f"{len(flagged)} of {len(triplets)} claims drawn below p = {self.p2:g}",
            draw=lowest,
        )

    def _records(self, verdicts: list[Verdict], question: str, ctx: RunContext) -> list[TriggerRecord]:
        """One record over the judged sentences: a sentence's score is its lowest claim draw (none without a
        claim), so it fires exactly where a claim was flagged."""
        record = TriggerRecord.decide(
            "min_claim_draw",
            "below",
            self.p2,
            [v.draw for v in verdicts],
            "sentence",
            param="p_claim",
            seed=self.params.seed,
        )
        return [record]
