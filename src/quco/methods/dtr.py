"""DTR (Decide Then Retrieve): retrieve only when a direct answer is uncertain, then search along two paths.

Before generating, the model gives a greedy short answer; its mean token NLL (end token excluded) below
``uncertainty_threshold`` means the model is sure, and that answer is returned without retrieval (UGT).
Otherwise the model writes a pseudo-passage; the question and the pseudo-passage each fetch ``n_per_path``
passages from a dense index, and the union is re-scored by closeness to both (AIS: the paper's
cos(theta1 + theta2) by default) to keep ``top_k`` (DPR-AIS). The loop then answers once from them.

Ablations: ``retrieval: standard`` is UGT with plain top-k retrieval for the question; an
``uncertainty_threshold`` of 0 always retrieves (DPR-AIS alone, and no direct-answer call is made).
Defaults are the published ones (threshold 0.001, n = 5, top-k 3); see docs/dtr.md.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from quco.answer import extract_answer
from quco.engine.context import RunContext
from quco.engine.method import Check, Decision, Draft, Method, MethodParams
from quco.llm.base import Capability
from quco.prompts import PromptTemplate, TemplateSection
from quco.retrieval.base import Passage, Retriever
from quco.retrieval.corpus import document_text
from quco.retrieval.dense import DEFAULT_DENSE_MODEL, DenseRetriever
from quco.trace import RetrievedRef
from quco.triggers.dtr import AisScore, ais_select, ugt_decision

log = logging.getLogger(__name__)

# Prompts in our own words after the paper's descriptions: a short direct answer, a pseudo-passage, and a
# short answer from the selected passages.
DIRECT_PROMPT = "Answer the question with a single word or a short phrase.\n\nQuestion: {question}\nAnswer:"
PSEUDO_PROMPT = "Write a short passage that answers the question.\n\nQuestion: {question}\nPassage:"
_ANSWER_SECTION = TemplateSection(
    context_header="Passages:\n",
    doc_format="[{index}] {doc}\n",
    post_doc="\n",
    instruction="Using the passages above, answer the question with a single word or a short phrase.\n\n",
)
ANSWER_TEMPLATE = PromptTemplate(
    name="dtr-short", exemplar_header="", initial=_ANSWER_SECTION, hallucination=_ANSWER_SECTION
)
DENSE_EXTRA = "dense"  # key of the dense retriever in Parts.extras (shared with any other dense method)
_STANDARD_EXTRA = "dtr.standard_retriever"
_EMBEDDER_EXTRA = "dtr.embedder"


class DTRParams(MethodParams):
    top_k: int | None = Field(default=3, ge=1)  # passages kept for the answer (published topk = 3)
    # UGT: u = mean NLL of the direct answer; u >= threshold => retrieve. <= 0: always retrieve, no direct call.
    uncertainty_threshold: float = 0.001
    retrieval: Literal["dual_path", "standard"] = "dual_path"
    ais_score: AisScore = "cos_sum"  # paper: cos(t1+t2); "sum": the code's s1+s2; "weighted_angle"
    n_per_path: int = Field(default=5, ge=1)  # passages fetched per path before AIS (published topn = 5)
    # Standard retrieval only: the dense index, or the pipeline's configured retriever (BM25).
    standard_retriever: Literal["dense", "pipeline"] = "dense"
    # Dual path: where both paths' candidates come from. "dense": the dense index of the corpus (published);
    # "pipeline": the pipeline's retriever (BM25), with the AIS cosines computed by embedding the few
    # candidates on the fly, for corpora too large to embed (the Wikipedia haystack, docs/world.md).
    path_retriever: Literal["dense", "pipeline"] = "dense"
    # "short": zero-shot short answer from the passages (the paper's prompt); "cot": the configured few-shot
    # chain-of-thought prompt, as the other methods use, for like-for-like comparisons.
    answer_prompt: Literal["short", "cot"] = "short"
    direct_max_new_tokens: int = Field(default=32, ge=1)
    pseudo_max_new_tokens: int = Field(default=128, ge=1)
    answer_max_new_tokens: int = Field(default=32, ge=1)
    dense_model: str = DEFAULT_DENSE_MODEL  # bundled all-MiniLM-L6-v2, or any sentence-transformers model
    dense_index_dir: str | None = None  # default: <cache>/dense/<corpus>-<model>
    dense_batch_size: int = Field(default=64, ge=1)
    dense_query_prefix: str = ""  # e.g. "query: " for e5 models
    dense_passage_prefix: str = ""  # e.g. "passage: " for e5 models

    @model_validator(mode="after")
    def _dual_path_is_dense(self) -> DTRParams:
        if self.retrieval == "dual_path" and self.standard_retriever != "dense":
            raise ValueError(
                "standard_retriever applies to retrieval: standard only; dual_path needs the dense index"
            )
        return self


def short_answer(text: str) -> str:
    """The answer in a short generation: its first line, without quotes or a final period."""
    line = text.strip().split("\n", 1)[0].strip()
    stated = extract_answer(line)
    if stated:
        return stated
    return line.rstrip(".").strip().strip("\"'").strip()


def first_paragraph(text: str) -> str:
    """The passage a generation starts with: leading blank lines skipped, cut at the first blank line.

    Base models often open with a line break, so a "\n\n" stop string would end the passage before it starts.
    """
    return text.strip().split("\n\n", 1)[0].strip()


def as_prediction(answer: str) -> str:
    """A short answer in the form every scorer in quco reads ("So the answer is X.")."""
    return f"So the answer is {answer}." if answer else ""


def _finite(x: float) -> float | None:
    return round(x, 6) if math.isfinite(x) else None


class DTR(Method):
    name: ClassVar[str] = "dtr"
    description: ClassVar[str] = (
        "DTR: answer directly when the short answer's NLL is low; else dual-path dense retrieval "
        "(question + pseudo-passage) with adaptive selection."
    )
    Params: ClassVar[type[MethodParams]] = DTRParams
    needs: ClassVar[frozenset[Capability]] = frozenset({Capability.TEXT, Capability.LOGPROBS})
    uses_retriever: ClassVar[bool] = False  # DTR searches its own dense index (built in setup)
    single_pass: ClassVar[bool] = True

    params: DTRParams

    # -- parts ---------------------------------------------------------------------------------------
    def setup(self, parts: Any) -> None:
        p = self.params
        cfg = parts.config
        if p.retrieval == "dual_path" and p.path_retriever == "pipeline":
            from quco.retrieval import build_retriever
            from quco.retrieval.dense import Embedder

            parts.extras[_STANDARD_EXTRA] = parts.retriever or build_retriever(cfg.retriever)
            parts.extras[_EMBEDDER_EXTRA] = Embedder(p.dense_model, batch_size=p.dense_batch_size)
        elif p.retrieval == "dual_path" or p.standard_retriever == "dense":
            existing = parts.extras.get(DENSE_EXTRA)
            if not (isinstance(existing, DenseRetriever) and existing.embedder.name == p.dense_model):
                from quco.retrieval.dense import ensure_dense_index

                retriever, reused = ensure_dense_index(
                    cfg.retriever.corpus,
                    p.dense_index_dir,
                    p.dense_model,
                    batch_size=p.dense_batch_size,
                    passage_prefix=p.dense_passage_prefix,
                    query_prefix=p.dense_query_prefix,
                )
                log.info("dtr: dense index %s (%s)", retriever.index_dir, "reused" if reused else "built")
                parts.extras[DENSE_EXTRA] = retriever
        else:
            from quco.retrieval import build_retriever

            parts.extras[_STANDARD_EXTRA] = parts.retriever or build_retriever(cfg.retriever)
        if p.answer_prompt == "short":
            # The paper answers zero-shot from the passages; the CoT exemplars would ask for reasoning.
            parts.template = ANSWER_TEMPLATE
            parts.exemplars = ()

    def _dense(self, ctx: RunContext) -> DenseRetriever:
        return ctx.parts.extras[DENSE_EXTRA]

    def _standard(self, ctx: RunContext) -> Retriever:
        if self.params.standard_retriever == "dense":
            return self._dense(ctx)
        return ctx.parts.extras[_STANDARD_EXTRA]

    def unit_tokens(self, ctx: RunContext) -> int:
        if self.params.answer_prompt == "short":
            return self.params.answer_max_new_tokens
        return super().unit_tokens(ctx)

    # -- before generation: UGT, then standard or dual-path retrieval -------------------------------
    def before(self, question: str, ctx: RunContext) -> Decision:
        p = self.params
        signals: dict[str, Any] = {"threshold": p.uncertainty_threshold}
        if p.uncertainty_threshold > 0:
            gen = ctx.generate(
                DIRECT_PROMPT.format(question=question),
                max_new_tokens=p.direct_max_new_tokens,
                stop=["\n"],
                logprobs=True,
            )[0]
            answer = short_answer(gen.text)
            # quco generators leave the end token out of Generation.logprobs, so nothing is dropped here.
            trig = ugt_decision(gen.logprobs or [], p.uncertainty_threshold)
            signals.update(
                direct_answer=answer,
                uncertainty=_finite(trig.uncertainty),
                answer_tokens=trig.tokens,
                token_logprobs=[round(x, 5) for x in gen.logprobs or []],
            )
            if not trig.retrieve:
                reason = f"mean NLL {trig.uncertainty:.4g} < {p.uncertainty_threshold:g}: confident, answered directly"
                return Decision(False, signals=signals, reason=reason, answer=as_prediction(answer))
            reason = (
                f"mean NLL {trig.uncertainty:.4g} >= {p.uncertainty_threshold:g}"
                if math.isfinite(trig.uncertainty)
                else "the direct answer is empty"
            )
        else:
            reason = "threshold 0: always retrieve"
        if p.retrieval == "standard":
            docs, refs = ctx.retrieve([question], p.top_k, retriever=self._standard(ctx))
            signals["retrieval"] = "standard"
            return Decision(
                True, [question], signals, f"{reason}; standard retrieval", passages=docs, refs=refs
            )
        return self._dual_path(question, ctx, signals, reason)

    def _dual_path(self, question: str, ctx: RunContext, signals: dict[str, Any], reason: str) -> Decision:
        p = self.params
        k = p.top_k or 3
        on_the_fly = p.path_retriever == "pipeline"
        dense = ctx.parts.extras[_STANDARD_EXTRA] if on_the_fly else self._dense(ctx)
        raw = ctx.generate(
            PSEUDO_PROMPT.format(question=question),
            role="pseudo_document",
            max_new_tokens=p.pseudo_max_new_tokens,
            stop=["\nQuestion:"],
        )[0].text
        pseudo = first_paragraph(raw)
        queries = [question, pseudo] if pseudo else [question]
        signals.update(retrieval="dual_path", ais_score=p.ais_score, pseudo_passage=pseudo)
        candidates, found = ctx.retrieve(queries, p.n_per_path, retriever=dense)
        if not candidates:
            return Decision(True, queries, signals, f"{reason}; nothing retrieved", passages=[], refs=[])
        with ctx.timed("retrieval"):
            if on_the_fly:
                emb = ctx.parts.extras[_EMBEDDER_EXTRA]
                vecs = emb.encode([p.dense_query_prefix + q for q in queries])
                texts = [p.dense_passage_prefix + document_text(c) for c in candidates]
                sims = np.clip(vecs @ emb.encode(texts).T, -1.0, 1.0)
            else:
                vecs = dense.encode_queries(queries)
                sims = dense.similarities(vecs, [c.id for c in candidates])
        s1 = [float(x) for x in sims[0]]
        if pseudo:
            s2 = [float(x) for x in sims[1]]
            s0 = float(vecs[0] @ vecs[1])
            order, scores = ais_select(s1, s2, k, p.ais_score, s0)
            signals["question_pseudo_cosine"] = round(s0, 6)
            why = f"{reason}; dual-path retrieval, {len(candidates)} candidates, kept {len(order)} by {p.ais_score}"
        else:
            # Without a pseudo-passage there is one path; rank by the question similarity alone.
            s2, scores = s1, s1
            order = sorted(range(len(s1)), key=lambda i: -s1[i])[:k]
            why = f"{reason}; the pseudo-passage is empty, so question-path retrieval only"
        signals["candidates"] = [
            {
                "id": c.id,
                "title": c.title,
                "path": "question" if f.query == question else "pseudo_passage",
                "s1": round(s1[i], 6),
                "s2": round(s2[i], 6),
                "score": round(scores[i], 6),
                "kept": i in order,
            }
            for i, (c, f) in enumerate(zip(candidates, found, strict=True))
        ]
        passages: list[Passage] = [replace(candidates[i], score=scores[i]) for i in order]
        refs = [
            RetrievedRef(
                id=candidates[i].id,
                title=candidates[i].title,
                score=round(scores[i], 4),
                query=found[i].query,
            )
            for i in order
        ]
        return Decision(True, queries, signals, why, passages=passages, refs=refs)

    # -- after the one generation --------------------------------------------------------------------
    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        if self.params.answer_prompt != "short":
            return Check(fire=False, keep=draft.text)
        answer = short_answer(draft.text)
        return Check(
            fire=False,
            keep=as_prediction(answer),
            signals={"short_answer": answer},
            reason="short answer from the selected passages",
        )
