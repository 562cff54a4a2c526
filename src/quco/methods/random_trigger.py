"""The random trigger: the cost-matched control every "fewer retrievals, similar accuracy" claim needs.

It runs the DRAGIN/FLARE structure with the signal replaced by chance: draft a continuation without
passages; at each candidate point (a sentence) fire with probability ``p``, or on a fixed schedule; on firing,
keep the sentences before, retrieve, regenerate with the passages and keep the first sentence. The draws are a
hash of (seed, question, candidate index), so a run is reproducible and independent of question order.
``match_run`` sets ``p`` to another run's observed retrievals per candidate point: the evaluation reads that
run's results file and builds the control with that ``p`` (``quco.eval.run.matched``).

With ``unit: sentence`` it runs the FLARE / black-box structure instead: draft one sentence (with the latest
passages in the prompt), fire with probability ``p`` at each such check, retrieve with that temporary sentence
and regenerate it. This is the control for the black-box triggers: the same loop, chance for the samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from pydantic import Field, model_validator

from quco.answer import has_answer
from quco.engine.context import RunContext
from quco.engine.method import Check, Draft, Matched, Method, MethodParams, Shape
from quco.errors import ConfigError
from quco.signals.chance import retrieval_rate, step_candidates, uniform_draw
from quco.trigger_record import TriggerRecord


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
    scan_answer_sentence: bool = True  # as DRAGIN: the sentence stating the answer is a candidate too
    # "continuation": DRAGIN's structure (above); "sentence": the black-box structure, one check per drafted
    # sentence, every sentence a candidate (the answer sentence too), query = the temporary sentence.
    unit: Literal["continuation", "sentence"] = "continuation"
    sentence_tokens: int = Field(64, ge=1)  # token cap of a drafted sentence (unit "sentence")

    @model_validator(mode="after")
    def _one_mode(self) -> RandomParams:
        if self.schedule is not None and self.every is not None:
            raise ValueError("give either schedule or every, not both")
        return self


def unmatched(method: Method) -> None:
    """Refuse to build a control whose ``match_run`` was not turned into its parameter values."""
    if method.match_run:
        raise ConfigError(
            f"method '{method.name}': params.match_run ({method.match_run}) is read by `quco eval`, which builds "
            "the control with that run's rates; elsewhere set the rates in params instead"
        )


class RandomTrigger(Method):
    name = "random"
    description = "Random trigger: retrieve at each sentence with probability p (cost-matched control)."
    Params = RandomParams
    SHAPE = Shape(draft_docs="none")

    params: RandomParams

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        self.p = self.params.p

    @property
    def shape(self) -> Shape:
        if self.params.unit == "sentence":  # the black-box loop (quco.methods.blackbox) without the samples
            return replace(self.SHAPE, unit="sentence", draft_docs="latest", budget="prediction")
        return self.SHAPE

    def unit_tokens(self, ctx: RunContext) -> int:
        if self.params.unit == "sentence":
            return min(self.params.sentence_tokens, ctx.parts.config.generation.max_new_tokens)
        return super().unit_tokens(ctx)

    @property
    def match_run(self) -> str | None:
        return self.params.match_run

    def matched(self, traces: Sequence[Any]) -> Matched:
        """Another run's retrievals per candidate point."""
        rate = retrieval_rate(traces)
        return Matched({"p": rate.per_candidate}, f"{rate.questions} questions")

    def setup(self, parts: Any) -> None:
        unmatched(self)

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
        offset = sum(step_candidates(s) for s in ctx.trace.steps if s.stage == "generate" and s.draft)
        indices = [offset + j for j in range(len(scanned))]
        if self.scheduled:
            scores = [1.0 if self._on_schedule(i) else 0.0 for i in indices]
            record = TriggerRecord.decide(
                "schedule", "above", 0.5, scores, "sentence", param="", mode="schedule", candidates=indices
            )
        else:
            scores = [uniform_draw(p.seed, question, i) for i in indices]
            record = TriggerRecord.decide(
                "draw",
                "below",
                self.p,
                scores,
                "sentence",
                param="p",
                mode="chance",
                seed=p.seed,
                candidates=indices,
            )
        signals: dict[str, Any] = {}
        at = record.fired_at
        if at is None:
            return Check.accept(draft.text, "no candidate point drawn", signals, record)
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
        why = "on the schedule" if self.scheduled else f"draw {record.scores[at]:g} < p = {self.p:g}"
        return Check.retrieve(keep, [query], f"sentence {si}: {why}", signals, record)
