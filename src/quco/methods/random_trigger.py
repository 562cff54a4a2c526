"""The random trigger: the cost-matched control every "fewer retrievals, similar accuracy" claim needs.

It runs the DRAGIN/FLARE structure with the signal replaced by chance: draft a continuation without
passages; at each candidate point (a sentence) fire with probability ``p``, or on a fixed schedule; on firing,
keep the sentences before, retrieve, regenerate with the passages and keep the first sentence. The draws are a
hash of (seed, question, candidate index), so a run is reproducible and independent of question order.
``match_run`` sets ``p`` to another run's observed retrievals per candidate point, read from its results file.

With ``unit: sentence`` it runs the FLARE / black-box structure instead: draft one sentence (with the latest
passages in the prompt), fire with probability ``p`` at each such check, retrieve with that temporary sentence
and regenerate it. This is the control for the black-box triggers: the same loop, chance for the samples.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from quco.answer import has_answer
from quco.engine.context import RunContext
from quco.engine.method import Check, Draft, Method, MethodParams
from quco.triggers.chance import rate_from_run, step_candidates, uniform_draw
from quco.triggers.decide import trigger_record

log = logging.getLogger(__name__)


class RandomParams(MethodParams):
    p: float = Field(0.25, ge=0, le=1)  # probability of retrieving at each candidate point
    seed: int = 0
    # Another run (its directory or results.jsonl) whose retrievals per candidate point become p.
    match_run: str | None = None
    # A fixed schedule instead of chance: fire at these candidate indices (0-based, counted over the
    # question), or at every N-th candidate (N, 2N, ...).
    schedule: list[int] | None = None
    every: int | None = Field(None, ge=1)
    query: Literal["sentence", "question", "forward_all"] = "sentence"
    scan_answer_sentence: bool = False  # as DRAGIN: the sentence stating the answer is no candidate
    # "continuation": DRAGIN's structure (above); "sentence": the black-box structure, one check per drafted
    # sentence, every sentence a candidate (the answer sentence too), query = the temporary sentence.
    unit: Literal["continuation", "sentence"] = "continuation"
    sentence_tokens: int = Field(64, ge=1)  # token cap of a drafted sentence (unit "sentence")

    @model_validator(mode="after")
    def _one_mode(self) -> RandomParams:
        if self.schedule is not None and self.every is not None:
            raise ValueError("give either schedule or every, not both")
        return self


class RandomTrigger(Method):
    name: ClassVar[str] = "random"
    description: ClassVar[str] = (
        "Random trigger: retrieve at each sentence with probability p (cost-matched control)."
    )
    Params: ClassVar[type[MethodParams]] = RandomParams
    unit = "continuation"
    keep_rule = "first_sentence"
    draft_docs = False

    params: RandomParams
    p: float = 0.0

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        self.p = self.params.p
        if self.params.unit == "sentence":  # the black-box loop (quco.methods.blackbox) without the samples
            self.unit = "sentence"  # type: ignore[misc]
            self.draft_docs = True  # type: ignore[misc]

    def unit_tokens(self, ctx: RunContext) -> int:
        if self.params.unit == "sentence":
            return min(self.params.sentence_tokens, ctx.parts.config.generation.max_new_tokens)
        return super().unit_tokens(ctx)

    def setup(self, parts: Any) -> None:
        if self.params.match_run:
            rate = rate_from_run(self.params.match_run)
            self.p = rate.per_candidate
            log.info(
                "random trigger: p = %.4f, the retrievals per candidate point of %s (%d questions)",
                self.p,
                self.params.match_run,
                rate.questions,
            )

    @property
    def scheduled(self) -> bool:
        return self.params.schedule is not None or self.params.every is not None

    def _on_schedule(self, index: int) -> bool:
        if self.params.every is not None:
            return (index + 1) % self.params.every == 0
        return index in set(self.params.schedule or [])

    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        p = self.params
        sentences = draft.sentences
        scanned = []
        for si, sentence in enumerate(sentences):
            if not p.scan_answer_sentence and p.unit == "continuation" and has_answer(sentence):
                break
            scanned.append(si)
        # Candidate indices continue across the question's checks, so a schedule counts every sentence once.
        offset = sum(
            step_candidates(s.__dict__) for s in ctx.trace.steps if s.stage == "generate" and s.draft
        )
        indices = [offset + j for j in range(len(scanned))]
        if self.scheduled:
            scores = [1.0 if self._on_schedule(i) else 0.0 for i in indices]
            trigger = trigger_record("above", 0.5, scores, mode="schedule", candidates=indices)
        else:
            scores = [uniform_draw(p.seed, question, i) for i in indices]
            trigger = trigger_record("below", self.p, scores, mode="chance", seed=p.seed, candidates=indices)
        signals: dict[str, Any] = {"trigger": trigger}
        at = trigger["fired_at"]
        if at is None:
            return Check(fire=False, keep=draft.text, signals=signals, reason="no candidate point drawn")
        si = scanned[at]
        keep = " ".join(sentences[:si])
        if p.unit == "sentence":  # as the black-box check: drop the temporary sentence, search with it
            keep, query = "", draft.text if p.query == "sentence" else question
        elif p.query == "sentence":
            query = sentences[si]
        elif p.query == "question":
            query = question
        else:
            query = " ".join(s for s in (question, draft.prefix, keep) if s)
        signals["flagged_sentence"] = sentences[si]
        why = "on the schedule" if self.scheduled else f"draw {trigger['scores'][at]:g} < p = {self.p:g}"
        return Check(fire=True, keep=keep, queries=[query], signals=signals, reason=f"sentence {si}: {why}")
