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
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from quco.answer import extract_answer
from quco.engine.context import RunContext
from quco.engine.method import Check, Decision, Draft, Method, MethodParams, Selection, Shape
from quco.llm.base import Capability
from quco.prompts import PromptTemplate, TemplateSection
from quco.retrieval.base import Passage
from quco.retrieval.corpus import document_text
from quco.retrieval.dense import DEFAULT_DENSE_MODEL, DenseRetriever
from quco.signals.dtr import AisScore, TriggerDecision, ais_select, ugt_decision
from quco.trace import RetrievedRef
from quco.trigger_record import TriggerRecord

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
DENSE_RETRIEVER = (
    "dense"  # name of the dense retriever in Parts.retrievers (shared with any other dense method)
)
_EMBEDDER_EXTRA = "dtr.embedder"  # Parts.extras: the embedder of path_retriever "pipeline"


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


class DTR(Method):
    name = "dtr"
    description = (
        "DTR: answer directly when the short answer's NLL is low; else dual-path dense retrieval "
        "(question + pseudo-passage) with adaptive selection."
    )
    Params = DTRParams
    # DTR searches its own dense index (built in setup): the pipeline's retriever only for the ablation that
    # asks for it. Dual-path retrieval is the loop's multi-path option; AIS is ``select``.
    SHAPE = Shape(
        single_pass=True,
        retriever=False,
        own_index=True,
        multi_path=True,
        needs=frozenset({Capability.TEXT, Capability.LOGPROBS}),
    )

    params: DTRParams

    @property
    def shape(self) -> Shape:
        p = self.params
        if p.retrieval == "dual_path":
            return replace(self.SHAPE, retriever=p.path_retriever == "pipeline")
        return replace(self.SHAPE, multi_path=False, retriever=p.standard_retriever == "pipeline")

    # -- parts ---------------------------------------------------------------------------------------
    def setup(self, parts: Any) -> None:
        p = self.params
        cfg = parts.config
        if p.retrieval == "dual_path" and p.path_retriever == "pipeline":
            from quco.retrieval.dense import Embedder

            if parts.retriever is None:  # parts assembled for another variant
                from quco.retrieval import build_retriever

                parts.retriever = build_retriever(cfg.retriever, corpus=parts.corpus())
            parts.extras[_EMBEDDER_EXTRA] = Embedder(p.dense_model, batch_size=p.dense_batch_size)
        elif p.retrieval == "dual_path" or p.standard_retriever == "dense":
            existing = parts.retrievers.get(DENSE_RETRIEVER)
            if not (isinstance(existing, DenseRetriever) and existing.embedder.name == p.dense_model):
                from quco.retrieval.dense import ensure_dense_index

                retriever, reused = ensure_dense_index(
                    parts.corpus(),
                    p.dense_index_dir,
                    p.dense_model,
                    batch_size=p.dense_batch_size,
                    passage_prefix=p.dense_passage_prefix,
                    query_prefix=p.dense_query_prefix,
                )
                log.info("dtr: dense index %s (%s)", retriever.index_dir, "reused" if reused else "built")
                parts.retrievers[DENSE_RETRIEVER] = retriever
        if p.answer_prompt == "short":
            # The paper answers zero-shot from the passages; the CoT exemplars would ask for reasoning.
            parts.template = ANSWER_TEMPLATE
            parts.exemplars = ()

    def unit_tokens(self, ctx: RunContext) -> int:
        if self.params.answer_prompt == "short":
            return self.params.answer_max_new_tokens
        return super().unit_tokens(ctx)

    # -- before generation: UGT, then standard or dual-path retrieval -------------------------------
    def before(self, question: str, ctx: RunContext) -> Decision:
        p = self.params
        signals: dict[str, Any] = {}
        if p.uncertainty_threshold > 0:
            answer, trig = self.direct_answer(question, ctx, signals)
            record = TriggerRecord.decide(
                "answer_nll",
                "at_least",
                p.uncertainty_threshold,
                [trig.uncertainty],
                "question",
                param="uncertainty_threshold",
            )
            if not record.fired:
                reason = f"mean NLL {trig.uncertainty:.4g} < {p.uncertainty_threshold:g}: confident, answered directly"
                return Decision(
                    False, signals=signals, reason=reason, triggers=[record], answer=as_prediction(answer)
                )
            reason = (
                f"mean NLL {trig.uncertainty:.4g} >= {p.uncertainty_threshold:g}"
                if math.isfinite(trig.uncertainty)
                else "the direct answer is empty"
            )
        else:
            record = TriggerRecord.decide(
                "answer_nll",
                "always",
                p.uncertainty_threshold,
                [None],
                "question",
                param="uncertainty_threshold",
            )
            reason = "threshold 0: always retrieve"
        return self.retrieve(question, ctx, signals, reason, record)

    def direct_answer(
        self, question: str, ctx: RunContext, signals: dict[str, Any]
    ) -> tuple[str, TriggerDecision]:
        """UGT's greedy short answer and its mean NLL; the answer and its log-probabilities go to ``signals``."""
        gen = ctx.generate(
            DIRECT_PROMPT.format(question=question),
            max_new_tokens=self.params.direct_max_new_tokens,
            stop=["\n"],
            logprobs=True,
        )[0]
        answer = short_answer(gen.text)
        # quco generators leave the end token out of Generation.logprobs, so nothing is dropped here.
        trig = ugt_decision(gen.logprobs or [], self.params.uncertainty_threshold)
        signals.update(
            direct_answer=answer,
            answer_tokens=trig.tokens,
            token_logprobs=[round(x, 5) for x in gen.logprobs or []],
        )
        return answer, trig

    def retrieve(
        self, question: str, ctx: RunContext, signals: dict[str, Any], reason: str, record: TriggerRecord
    ) -> Decision:
        """The retrieval of a question UGT sent to retrieval: standard, or both paths (a pseudo-passage first)."""
        p = self.params
        if p.retrieval == "standard":
            signals["retrieval"] = "standard"
            return Decision(
                True,
                [question],
                signals,
                f"{reason}; standard retrieval",
                triggers=[record],
                retriever=DENSE_RETRIEVER if p.standard_retriever == "dense" else None,
                k=p.top_k,
            )
        raw = ctx.generate(
            PSEUDO_PROMPT.format(question=question),
            role="pseudo_document",
            max_new_tokens=p.pseudo_max_new_tokens,
            stop=["\nQuestion:"],
        )[0].text
        pseudo = first_paragraph(raw)
        queries = [question, pseudo] if pseudo else [question]
        signals.update(retrieval="dual_path", ais_score=p.ais_score, pseudo_passage=pseudo)
        retriever = None if p.path_retriever == "pipeline" else DENSE_RETRIEVER
        return Decision(
            True, queries, signals, reason, triggers=[record], retriever=retriever, k=p.n_per_path
        )

    def select(self, question: str, decision: Decision, found: Selection, ctx: RunContext) -> Selection:
        """AIS: keep the ``top_k`` candidates closest to both the question and the pseudo-passage."""
        p = self.params
        passages, refs = found.passages, found.refs
        if not passages:
            return Selection([], [], note="nothing retrieved")
        k = p.top_k or 3
        queries = decision.queries
        with ctx.timed("retrieval"):
            if p.path_retriever == "pipeline":  # embed the few candidates on the fly
                emb = ctx.parts.extras[_EMBEDDER_EXTRA]
                vecs = emb.encode([p.dense_query_prefix + q for q in queries])
                texts = [p.dense_passage_prefix + document_text(c) for c in passages]
                sims = np.clip(vecs @ emb.encode(texts).T, -1.0, 1.0)
            else:
                dense: DenseRetriever = ctx.parts.retrievers[DENSE_RETRIEVER]  # type: ignore[assignment]
                vecs = dense.encode_queries(queries)
                sims = dense.similarities(vecs, [c.id for c in passages])
        s1 = [float(x) for x in sims[0]]
        signals: dict[str, Any] = {}
        if len(queries) > 1:
            s2 = [float(x) for x in sims[1]]
            s0 = float(vecs[0] @ vecs[1])
            order, scores = ais_select(s1, s2, k, p.ais_score, s0)
            signals["question_pseudo_cosine"] = round(s0, 6)
            note = f"dual-path retrieval, {len(passages)} candidates, kept {len(order)} by {p.ais_score}"
        else:
            # Without a pseudo-passage there is one path; rank by the question similarity alone.
            s2, scores = s1, s1
            order = sorted(range(len(s1)), key=lambda i: -s1[i])[:k]
            note = "the pseudo-passage is empty, so question-path retrieval only"
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
            for i, (c, f) in enumerate(zip(passages, refs, strict=True))
        ]
        kept: list[Passage] = [replace(passages[i], score=scores[i]) for i in order]
        kept_refs = [
            RetrievedRef(
                id=passages[i].id, title=passages[i].title, score=round(scores[i], 4), query=refs[i].query
            )
            for i in order
        ]
        return Selection(kept, kept_refs, signals, note)

    # -- after the one generation --------------------------------------------------------------------
    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        if self.params.answer_prompt != "short":
            return Check.accept(draft.text)
        answer = short_answer(draft.text)
        why = "short answer from the selected passages"
        return Check.accept(as_prediction(answer), why, {"short_answer": answer})
