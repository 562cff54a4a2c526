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

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from quco.answer import has_answer
from quco.engine.context import RunContext
from quco.engine.method import Check, Decision, Draft, Method, MethodParams
from quco.llm.base import Capability
from quco.triggers.decide import score, trigger_record
from quco.triggers.probability import aggregate, masked_text, token_uncertainty
from quco.triggers.spans import locate, token_spans, tokens_by_sentence


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
    name: ClassVar[str] = "flare"
    description: ClassVar[str] = (
        "FLARE: retrieve when a sentence's token probabilities are low (masked query)."
    )
    Params: ClassVar[type[MethodParams]] = FlareParams
    needs: ClassVar[frozenset[Capability]] = frozenset({Capability.TEXT, Capability.LOGPROBS})
    unit = "continuation"
    keep_rule = "all"
    draft_logprobs = True
    draft_docs = False

    params: FlareParams

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        if self.params.mode == "look_ahead":
            # Instance attributes override the class declaration that the loop reads.
            self.unit = "sentence"
            self.keep_rule = "first_sentence"
            self.draft_docs = True

    def before(self, question: str, ctx: RunContext) -> Decision | None:
        if self.params.mode == "look_ahead":
            return Decision(
                True, [question], reason="look-ahead FLARE starts by retrieving with the question"
            )
        return None

    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        p = self.params
        gen = draft.generation
        if gen is None or gen.logprobs is None:
            return Check(fire=False, keep=draft.text, reason="no token probabilities for this text")
        sentences = draft.sentences
        per_sentence = tokens_by_sentence(gen.text, gen.tokens, sentences)
        unc = token_uncertainty(gen.logprobs)
        candidates: list[dict[str, Any]] = []
        for si, sentence in enumerate(sentences):
            if not p.scan_answer_sentence and has_answer(sentence):
                break
            toks = per_sentence[si]
            if not toks:
                continue
            candidates.append(
                {
                    "sentence": si,
                    "text": sentence,
                    "tokens": [gen.tokens[i] for i in toks],
                    "uncertainty": [score(unc[i]) for i in toks],
                    "score": aggregate(unc[toks], p.aggregate),
                }
            )
        trigger = trigger_record(
            "above", p.threshold, [c["score"] for c in candidates], aggregate=p.aggregate
        )
        for c in candidates:
            c["score"] = score(c["score"])
        signals: dict[str, Any] = {"trigger": trigger, "sentences": candidates}
        at = trigger["fired_at"]
        if at is None:
            return Check(
                fire=False,
                keep=draft.text,
                signals=signals,
                reason=f"no sentence's {p.aggregate} token uncertainty exceeds {p.threshold:g}",
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
        return Check(
            fire=True,
            keep=keep,
            queries=[query],
            signals=signals,
            reason=f"sentence {si}: {p.aggregate} token uncertainty {flagged['score']:g} > {p.threshold:g}",
        )
