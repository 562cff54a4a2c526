"""FLARE: retrieve when the model was unsure of the tokens of a sentence it is about to commit to.

Default (``mode: regenerate``), as the DRAGIN/QuCo-RAG code runs FLARE (``TokenRAG``): draft a continuation
from exemplars + question + text (no passages); score each sentence by the mean (max, min) of 1 - p over its
tokens; at the first sentence whose score exceeds the threshold, keep the sentences before it, retrieve with
that sentence minus its over-threshold tokens, regenerate with the passages and keep the whole regeneration.
Two slips of that code are not reproduced: it kept only ``sentences[:i-1]`` before the flagged sentence, and
its token windows overlapped by one token; the fixed DRAGIN code keeps ``sentences[:i]``, as here.

``mode: look_ahead`` is the original FLARE loop (Jiang et al. 2023; FlashRAG's pipeline): retrieve with the
question first, then write one tentative sentence at a time with the latest passages; if it is unsure, retrieve
with the sentence (low-confidence tokens masked) and regenerate that sentence.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import numpy as np
from pydantic import Field

from quco.engine.context import RunContext
from quco.engine.method import Check, Decision, Draft, Method, MethodParams, Shape
from quco.llm.base import Capability
from quco.signals.probability import aggregate, masked_text, token_uncertainty
from quco.signals.spans import candidate_sentences, locate, token_spans, tokens_by_sentence
from quco.trigger_record import TriggerRecord, score


class FlareParams(MethodParams):
    # A sentence is flagged when its aggregated 1 - p exceeds this. Published 0.06-0.4; QuCo-RAG's configs
    # use 0.1 (2WikiMultihopQA) and 0.08 (HotpotQA) for OLMo-2 and Qwen.
    threshold: float = Field(0.1, ge=0, le=1)
    aggregate: Literal["avg", "max", "min"] = "avg"  # the published ``sentence_solver``
    query: Literal["masked", "forward_all"] = "masked"  # masked: the sentence minus over-threshold tokens
    mode: Literal["regenerate", "look_ahead"] = "regenerate"
    # The DRAGIN/QuCo TokenRAG also scores the sentence that states the answer.
    scan_answer_sentence: bool = True


class FLARE(Method):
    name = "flare"
    description = "FLARE: retrieve when a sentence's token probabilities are low (masked query)."
    Params = FlareParams
    SHAPE = Shape(
        keep_rule="all",
        draft_logprobs=True,
        draft_docs="none",
        needs=frozenset({Capability.TEXT, Capability.LOGPROBS}),
    )

    params: FlareParams

    @property
    def shape(self) -> Shape:
        if self.params.mode == "look_ahead":  # one tentative sentence at a time, with the latest passages
            return replace(self.SHAPE, unit="sentence", keep_rule="first_sentence", draft_docs="latest")
        return self.SHAPE

    def before(self, question: str, ctx: RunContext) -> Decision | None:
        if self.params.mode == "look_ahead":
            always = TriggerRecord.decide("always", "always", 0.0, [None], "question", param="")
            return Decision(
                True,
                [question],
                reason="look-ahead FLARE starts by retrieving with the question",
                triggers=[always],
            )
        return None

    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        p = self.params
        gen = draft.generation
        if gen is None or gen.logprobs is None:
            return Check.accept(draft.text, "no token probabilities for this text")
        sentences = draft.sentences
        per_sentence = tokens_by_sentence(gen.text, gen.tokens, sentences)
        unc = token_uncertainty(gen.logprobs)
        candidates: list[dict[str, Any]] = []
        for si, sentence, toks in candidate_sentences(sentences, per_sentence, not p.scan_answer_sentence):
            candidates.append(
                {
                    "sentence": si,
                    "text": sentence,
                    "tokens": [gen.tokens[i] for i in toks],
                    "uncertainty": [score(unc[i]) for i in toks],
                    "score": aggregate(unc[toks], p.aggregate),
                }
            )
        record = TriggerRecord.decide(
            "token_uncertainty",
            "above",
            p.threshold,
            [c["score"] for c in candidates],
            "sentence",
            aggregate=p.aggregate,
        )
        for c in candidates:
            c["score"] = score(c["score"])
        signals: dict[str, Any] = {"sentences": candidates}
        at = record.fired_at
        if at is None:
            return Check.accept(
                draft.text,
                f"no sentence's {p.aggregate} token uncertainty exceeds {p.threshold:g}",
                signals,
                record,
            )
        flagged = candidates[at]
        si = flagged["sentence"]
        keep = " ".join(sentences[:si])
        if p.query == "masked":
            span = locate(gen.text, sentences)[si]
            start, end = span if span is not None else (0, len(gen.text))
            toks = per_sentence[si]
            drop = np.zeros(len(gen.tokens), dtype=bool)
            drop[toks] = np.array(flagged["uncertainty"]) > p.threshold
            query = masked_text(gen.text, token_spans(gen.tokens), drop.tolist(), start, end)
            if not query:  # every token was unsure: nothing is left to mask around
                query = sentences[si]
                signals["query_fallback"] = "every token over the threshold; the whole sentence is the query"
        else:
            query = " ".join(s for s in (question, draft.prefix, keep) if s)
        signals["flagged_sentence"] = sentences[si]
        return Check.retrieve(
            keep,
            [query],
            f"sentence {si}: {p.aggregate} token uncertainty {flagged['score']:g} > {p.threshold:g}",
            signals,
            record,
        )
