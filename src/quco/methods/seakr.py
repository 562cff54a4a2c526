"""SeaKR: self-aware retrieval from the consistency of the model's hidden states (Yao et al. 2024).

Reimplemented from the paper's description (its code is GPL-3.0; none of it is used here):
- each reasoning step (one sentence, with the passages chosen so far) is sampled ``samples`` times
  (temperature 1.0, top-k 50, top-p 0.9); the EigenScore of the samples' last-token hidden states at a
  middle layer measures the model's uncertainty (``quco.signals.eigen``);
- above the threshold, the step is not trusted: the query is the step's "sure" words (1 - p <= 0.1, or words
  of the question or of the previous step) filtered to content parts of speech; the top passages are read one at
  a time (each added to the passages chosen so far), the step is re-written with each, and the passage whose
  re-written step has the lowest EigenScore is kept, together with that step (self-aware re-ranking);
- a step that states the answer ends the reasoning; so do ``max_docs`` chosen passages, a repeated query and
  a search that finds no new passage.
- the final "self-aware reasoning" stage (``after``, ``final_stage``): the answer is generated twice, once
  continuing the reasoning chain ("... So the answer is") and once from the chosen passages alone, each with its
  EigenScore; the answer with the lower score is kept.
The retrieval and the per-passage re-writing are the loop's (``Shape.per_passage``); SeaKR only chooses.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import replace
from typing import Any, Literal

import numpy as np
from pydantic import Field

from quco.answer import extract_answer, has_answer
from quco.engine.context import RunContext
from quco.engine.method import Check, Choice, Draft, Final, Method, MethodParams, Reading, Shape
from quco.errors import ConfigError
from quco.llm.base import Capability, Generation, Prompt, shared_levels
from quco.prompts import build_prompt
from quco.retrieval.base import Passage
from quco.signals.eigen import eigen_score
from quco.signals.probability import token_uncertainty
from quco.signals.spans import assign, group_by, token_positions
from quco.signals.words import filter_pos
from quco.trigger_record import TriggerRecord, score

log = logging.getLogger(__name__)


class SeaKRParams(MethodParams):
    # A step whose EigenScore exceeds this is not trusted. Published: -6.0 for Llama-2-7B (4096-dim states
    # at layer 15); the scale depends on the model's hidden size, so re-tune it for another model.
    threshold: float = -6.0
    samples: int = Field(20, ge=2)  # sampled continuations per uncertainty estimate
    temperature: float = Field(1.0, gt=0)
    sample_top_k: int = Field(50, ge=0)
    sample_top_p: float = Field(0.9, gt=0, le=1)
    # Hidden layer of the states; None: the middle layer (published: 15 of Llama-2-7B's 32).
    hidden_layer: int | None = None
    alpha: float = Field(1e-3, gt=0)  # regulariser in log det(Z J Z^T + alpha I)
    prob_threshold: float = Field(0.1, ge=0, le=1)  # "sure" words: 1 - p <= this
    max_docs: int = Field(5, ge=1)  # stop once this many passages have been chosen
    rerank: bool = True  # read each retrieved passage separately and keep the least uncertain one
    # Context the hidden states are computed in: the full prompt (faithful) or just question + text so far
    # (much cheaper on CPU: one forward pass per sample either way, but over far fewer tokens).
    hidden_context: Literal["prompt", "question"] = "prompt"
    seed: int = 42
    # The final self-aware reasoning: answer once from the reasoning chain and once from the passages alone,
    # and keep the answer whose sampled answers are more consistent (lower EigenScore).
    final_stage: bool = True
    answer_tokens: int = Field(32, ge=1)  # token cap of a final answer


def _num_layers(generator: Any) -> int | None:
    n = getattr(generator, "num_layers", None)
    if isinstance(n, int):
        return n
    try:
        return int(generator.model.config.get_text_config().num_hidden_layers)
    except (AttributeError, TypeError, ValueError):
        return None


class SeaKR(Method):
    name = "seakr"
    description = "SeaKR: EigenScore of sampled hidden states; sure-word query; uncertainty re-ranking."
    Params = SeaKRParams
    SHAPE = Shape(
        unit="sentence",
        budget="prediction",  # reimplemented from the paper, which gives the steps, not a per-call budget
        keep_rule="draft",  # the per-passage re-writing already wrote the step with the chosen passage
        draft_logprobs=True,
        per_passage=-1,
        needs=frozenset(
            {Capability.TEXT, Capability.LOGPROBS, Capability.SAMPLING, Capability.HIDDEN_STATES}
        ),
    )

    params: SeaKRParams
    layer: int = 0

    @property
    def shape(self) -> Shape:
        """Every new passage is read when re-ranking; only the first one without it."""
        return self.SHAPE if self.params.rerank else replace(self.SHAPE, per_passage=1)

    def setup(self, parts: Any) -> None:
        if self.params.hidden_layer is not None:
            self.layer = self.params.hidden_layer
            return
        reader = parts.analyzer or parts.generator  # the model whose states are read
        n = _num_layers(reader)
        if n is None:
            raise ConfigError(
                f"seakr: cannot tell how many layers generator '{reader.name}' has; "
                "set params.hidden_layer explicitly"
            )
        self.layer = n // 2

    # -- uncertainty -----------------------------------------------------------------------------------
    def _seed(self, question: str, ctx: RunContext, tag: str) -> int:
        key = f"{self.params.seed}\x1f{question}\x1f{len(ctx.trace.steps)}\x1f{tag}"
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")

    def _stops(self, ctx: RunContext) -> list[str]:
        """Samples end with their step, as published: at a newline or at ". "."""
        return list(ctx.parts.config.generation.stop) + ["\n", ". "]

    def _step_of(self, gen: Generation, ctx: RunContext) -> str:
        """The raw text of a generation up to the end of its first sentence (a step is one sentence).

        A sample cut by the stop string ". " lost its period; it is put back, so that the last token whose
        state is read is the end of the step, as when the stop token itself is fed to the model.
        """
        raw = gen.text
        sentences = ctx.parts.text.splitter.split(raw)
        if not sentences:
            return ""
        first = sentences[0]
        at = raw.find(first)
        step = raw[: at + len(first)] if at >= 0 else first
        if gen.finish_reason == "stop" and step == raw and not step.rstrip().endswith((".", "!", "?")):
            step = step.rstrip() + "."
        return step

    def _uncertainty(
        self, prompt: str, question: str, prefix: str, ctx: RunContext, tag: str
    ) -> tuple[float, list[str]]:
        """EigenScore of ``samples`` sampled steps continuing ``prompt``, and the sampled steps."""
        p = self.params
        outs = ctx.generate(
            prompt,
            role="sampler",
            max_new_tokens=self.unit_tokens(ctx),
            stop=self._stops(ctx),
            n=p.samples,
            temperature=p.temperature,
            top_k=p.sample_top_k,
            top_p=p.sample_top_p,
            seed=self._seed(question, ctx, tag),
        )
        steps = [self._step_of(o, ctx) for o in outs]
        steps = [s for s in steps if s.strip()]  # empty samples carry no state (as published)
        if not steps:
            return 0.0, []
        if p.hidden_context == "prompt":
            context = prompt
        else:
            context = f"Question: {question}\nAnswer:" + (f" {prefix}" if prefix else "")
        # every sample continues the same context, whose exemplars other prompts share: a backend may evaluate
        # each once (``Prompt.shared`` and ``inner``), and read the samples together
        texts = [Prompt(context + s, shared=len(context), inner=shared_levels(context)) for s in steps]
        analyses = ctx.analyze_many(texts, hidden_layers=[self.layer], last_only=True)
        states = [a.hidden[self.layer][-1] for a in analyses]
        return eigen_score(np.stack(states), p.alpha), [s.strip() for s in steps]

    # -- query -----------------------------------------------------------------------------------------
    def _query(
        self, draft: Draft, question: str, ctx: RunContext, nlp: Any
    ) -> tuple[str, list[dict[str, Any]]]:
        """The step's sure words (or words of the question / previous step), filtered to content POS."""
        gen = draft.generation
        text = gen.text if gen is not None else draft.text
        doc = nlp(text)
        spans = [(t.idx, t.idx + len(t.text)) for t in doc]
        per_word: list[list[int]] = [[] for _ in spans]
        if gen is not None and gen.logprobs is not None:
            per_word = group_by(assign(token_positions(gen.tokens), spans), len(spans))
            unc = token_uncertainty(gen.logprobs)
        previous = ctx.trace.steps[-1].kept if ctx.trace.steps else ""
        sure: list[str] = []
        record: list[dict[str, Any]] = []
        for t, toks in zip(doc, per_word, strict=True):
            if not any(ch.isalnum() for ch in t.text) or not toks:
                continue
            u = float(max(unc[i] for i in toks))
            ok = (
                t.text in question
                or (bool(previous) and t.text in previous)
                or u <= self.params.prob_threshold
            )
            record.append({"word": t.text, "uncertainty": score(u), "sure": ok})
            if ok:
                sure.append(t.text)
        query = filter_pos(" ".join(sure), nlp) if sure else ""
        if not query.strip():
            query = filter_pos(question, nlp)
        return query, record

    # -- check -----------------------------------------------------------------------------------------
    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        p = self.params
        if has_answer(draft.text):
            record = TriggerRecord.decide("eigen_score", "above", p.threshold, [], "step")
            return Check.accept(
                draft.text,
                "the step states the answer; SeaKR ends the reasoning there",
                {"answer": True},
                record,
            )
        eig, samples = self._uncertainty(draft.prompt, question, draft.prefix, ctx, "draft")
        record = TriggerRecord.decide("eigen_score", "above", p.threshold, [eig], "step")
        recorded = record.scores[0]
        signals: dict[str, Any] = {"eigen_score": recorded, "layer": self.layer, "samples": samples}
        if not record.fired:
            return Check.accept(draft.text, f"EigenScore {recorded:g} <= {p.threshold:g}", signals, record)
        query, words = self._query(draft, question, ctx, ctx.parts.text.nlp())
        signals["query_words"] = words
        earlier = {q for s in ctx.trace.steps for q in s.queries}
        if query in earlier:
            signals["suppressed"] = "repeated query"
            why = f"EigenScore {recorded:g} > {p.threshold:g} but query '{query}' was already searched"
            check = Check.accept(draft.text, why, signals, record)
            check.stop = True
            return check
        # The step is not trusted: the loop retrieves, writes it again with each new passage, and asks ``choose``.
        return Check.retrieve("", [query], f"EigenScore {recorded:g} > {p.threshold:g}", signals, record)

    def regeneration_stop(self, ctx: RunContext) -> list[str]:
        return self._stops(ctx)

    def choose(
        self, draft: Draft, check: Check, question: str, readings: list[Reading], ctx: RunContext
    ) -> Choice:
        """Keep the passage whose re-written step is least uncertain (self-aware re-ranking), with that step."""
        p = self.params
        if not readings:  # SeaKR drops the step and stops; we keep it
            why = "the search found no passage that is not already in use"
            return Choice(None, draft.text, reason=why, stop=True)
        reads: list[dict[str, Any]] = []
        best: tuple[float, int] | None = None
        steps: list[str] = []
        for i, reading in enumerate(readings):
            doc = reading.passage
            step = self._step_of(reading.generation, ctx).strip()
            steps.append(step)
            rec: dict[str, Any] = {"id": doc.id, "title": doc.title, "step": step}
            if p.rerank:
                eig, _ = self._uncertainty(reading.prompt, question, draft.prefix, ctx, f"read-{doc.id}")
                key = eig if step else math.inf
                rec["eigen_score"] = score(eig)
            else:
                key = 0.0
            reads.append(rec)
            if best is None or key < best[0]:
                best = (key, i)
        assert best is not None
        chosen = readings[best[1]].passage
        n_docs = len(draft.docs) + 1
        stop = n_docs >= p.max_docs
        return Choice(
            best[1],
            steps[best[1]],
            signals={"reads": reads, "chosen": chosen.id},
            reason=(
                f"{check.reason}; kept passage '{chosen.title}'"
                + (f"; {n_docs} passages reach max_docs" if stop else "")
            ),
            stop=stop,
        )

    # -- the final self-aware reasoning ----------------------------------------------------------------
    def _answer(self, prompt: str, question: str, ctx: RunContext, tag: str) -> dict[str, Any]:
        """A greedy answer continuing ``prompt`` and the EigenScore of sampled answers."""
        stop = list(ctx.parts.config.generation.stop) + ["\n"]
        gen = ctx.generate(prompt, max_new_tokens=self.params.answer_tokens, stop=stop)[0]
        answer = self._step_of(gen, ctx).strip().rstrip(".").strip()
        eig, samples = self._uncertainty(prompt, question, "", ctx, tag)
        return {"answer": answer, "eigen_score": score(eig), "samples": samples}

    def after(self, question: str, prediction: str, docs: list[Passage], ctx: RunContext) -> Final | None:
        if not self.params.final_stage:
            return None
        parts = ctx.parts
        sentences = parts.text.splitter.split(prediction)
        chain = " ".join(s for s in sentences if not has_answer(s)) if sentences else ""

        def prompt(prefix: str) -> str:
            return build_prompt(question, parts.exemplars, parts.template, docs, prefix=prefix)

        by_chain = self._answer(prompt(f"{chain} So the answer is".strip()), question, ctx, "final-chain")
        direct = self._answer(prompt("So the answer is"), question, ctx, "final-passages")
        candidates = [c for c in (by_chain, direct) if c["answer"]]
        if not candidates:
            return Final(prediction, {"chain": by_chain, "passages": direct}, "no final answer was written")
        best = min(candidates, key=lambda c: c["eigen_score"])
        kept = "chain" if best is by_chain else "passages"
        final = f"{chain} So the answer is {best['answer']}.".strip()
        why = f"the answer from the {kept} is the less uncertain (EigenScore {best['eigen_score']:g})"
        signals = {"chain": by_chain, "passages": direct, "kept": kept, "stated": extract_answer(prediction)}
        return Final(final, signals, why)
