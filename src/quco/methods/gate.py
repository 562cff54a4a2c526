"""A retrieval gate over a closed-book draft: answer closed-book, or retrieve once as SR-RAG does.

The model first writes its answer without passages (Wo-RAG's prompt and output). The gate then reads features
of that draft and of the question, computed by the other methods' own signal code with thresholds they never
reach, so each feature is exactly what that method would have looked at:
- ``flare``: token uncertainty 1 - p of the draft (FLARE's ``TokenRAG`` scores; free, from the draft's logprobs);
- ``dragin``: attention x entropy of the draft's words (DRAGIN's RIND; one re-read of the draft);
- ``etc``: ETC's smoothed second-order trend of word entropies, without ETC's attention weighting (free, from
  the draft's entropies; the weighting needs a re-read of prompt + draft that costs more than the draft itself);
- ``dtr``: the mean NLL of a short direct answer (DTR's UGT; one short generation);
- ``corpus``: QuCo-RAG's statistics: the question's entity counts (stage 1) and the draft's claims (stage 2);
- ``question``: its length and form (no model, no corpus);
- ``consistency`` (only when asked for: it samples the answer ``samples`` times more): how many sampled
  closed-book answers agree with the greedy one.

``fire: never`` records the features and keeps every draft (the closed-book run that ``quco gate frontier``
reads); ``fire: always`` retrieves for every question; ``fire: model`` applies a gate file written by
``quco gate fit``. When the gate fires, the draft is dropped and the question is answered once more with the
passages retrieved for it, in exactly SR-RAG's prompt, so a gate's answers are those of a Wo-RAG and an SR-RAG run
of the same model, and its exact efficiency frontier can be read from those two runs (docs/gate.md).
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from quco.answer import extract_answer
from quco.engine.context import RunContext
from quco.engine.method import Check, Draft, Method, MethodParams, Shape
from quco.errors import ConfigError
from quco.llm.base import Capability
from quco.methods.dragin import DRAGIN
from quco.methods.dtr import DIRECT_PROMPT
from quco.methods.flare import FLARE
from quco.methods.quco import QuCoRAG
from quco.signals import spans
from quco.signals.attention import max_per_group
from quco.signals.dtr import mean_nll
from quco.signals.gate_model import GateModel
from quco.signals.trend import entropy_differences, smooth_second_order
from quco.signals.words import content_words, is_content
from quco.trace import Counters
from quco.trigger_record import TriggerRecord, score

Family = Literal["flare", "dragin", "etc", "dtr", "corpus", "question", "consistency"]
FAMILIES: tuple[str, ...] = ("flare", "dragin", "etc", "dtr", "corpus", "question", "consistency")
DEFAULT_FAMILIES: tuple[str, ...] = ("flare", "dragin", "etc", "dtr", "corpus", "question")
# Each feature and the family that computes it.
FEATURES: dict[str, str] = {
    "flare_max": "flare",  # max over the draft's sentences of the max token uncertainty (1 - p)
    "flare_mean": "flare",  # mean token uncertainty over the draft
    "entropy_max": "flare",  # max token entropy (from the same call)
    "entropy_mean": "flare",
    "dragin_max": "dragin",  # max over sentences of DRAGIN's word value (attention x entropy x words)
    "dragin_mean": "dragin",  # mean over sentences of that maximum
    "dragin_first": "dragin",  # the first sentence's maximum
    "etc_max": "etc",  # max over the draft's content words of ETC's smoothed second-order entropy trend
    "etc_d1_max": "etc",  # max first-order entropy difference between consecutive content words
    "dtr_nll": "dtr",  # mean NLL of the short direct answer
    "entity_mean_log": "corpus",  # log10(1 + mean count) of the question's entities, as stage 1 reads it
    "entity_min_log": "corpus",  # log10(1 + count) of the rarest question entity
    "entities": "corpus",  # number of question entities found
    "claims": "corpus",  # claims extracted from the draft's sentences before the answer
    "zero_pairs": "corpus",  # claims whose head and tail never co-occur
    "cooc_min_log": "corpus",  # log10(1 + the lowest head/tail co-occurrence)
    "head_min_log": "corpus",  # log10(1 + the lowest head count of a 2-tuple claim)
    "question_words": "question",
    "question_choice": "question",  # 1: a comparison or yes/no form ("A or B", "both", "same", "Were ..."),
    "consistency_agree": "consistency",  # share of sampled answers equal to the greedy one
    "consistency_distinct": "consistency",  # distinct answers among the greedy one and the samples
}
_NEVER = 1e9  # a threshold the borrowed checks never reach: they score and keep
_CHOICE = re.compile(r"\b(or|both|same|either)\b", re.IGNORECASE)
_YES_NO = ("are ", "were ", "is ", "was ", "do ", "did ", "does ", "has ", "have ", "can ", "could ")


class GateParams(MethodParams):
    # never: keep every closed-book draft and record its features; always: retrieve for every question;
    # model: fire when the gate file's score reaches its threshold.
    fire: Literal["never", "always", "model"] = "never"
    model: str | None = None  # a gate file (quco gate fit); required with fire: model
    # The families computed. Default: every family with fire never/always, the model's own with fire: model.
    families: list[Family] | None = None
    dtr_max_new_tokens: int = Field(32, ge=1)
    # The consistency family: closed-book answers sampled from the draft's prompt (role "sampler").
    samples: int = Field(5, ge=2)
    temperature: float = Field(1.0, gt=0)
    seed: int = 0
    attention_layer: int = -1

    @model_validator(mode="after")
    def _model_given(self) -> GateParams:
        if self.fire == "model" and not self.model:
            raise ValueError("fire: model needs params.model, a gate file written by `quco gate fit`")
        return self


def question_features(question: str) -> dict[str, float]:
    q = question.strip()
    choice = bool(_CHOICE.search(q)) or q.lower().startswith(_YES_NO)
    return {"question_words": float(len(q.split())), "question_choice": float(choice)}


def _answer_key(text: str) -> str:
    """A sampled answer as compared: the stated answer, lower-cased, without punctuation and articles."""
    answer = (extract_answer(text) or "").lower()
    words = re.sub(r"[^\w\s]", " ", answer).split()
    return " ".join(w for w in words if w not in ("a", "an", "the"))


def _log(count: float | None) -> float | None:
    return None if count is None else math.log10(1.0 + max(0.0, count))


def _spent(before: Counters, after: Counters, seconds: float) -> dict[str, Any]:
    """What one family cost: LLM calls and tokens (all roles), corpus queries, wall seconds."""
    calls = after.total_llm_calls - before.total_llm_calls
    prompt = sum(after.prompt_tokens.values()) - sum(before.prompt_tokens.values())
    generated = after.total_generated_tokens - before.total_generated_tokens
    return {
        "llm_calls": calls,
        "prompt_tokens": prompt,
        "generated_tokens": generated,
        "corpus_queries": after.corpus_queries - before.corpus_queries,
        "seconds": round(seconds, 4),
    }


def _snapshot(counters: Counters) -> Counters:
    copy = Counters()
    copy.merge(counters)
    return copy


class Gate(Method):
    name = "gate"
    description = (
        "Retrieval gate: closed-book draft; retrieve once with the question when its features say so."
    )
    Params = GateParams
    template = "baseline"
    SHAPE = Shape(single_pass=True, keep_rule="all", draft_logprobs=True)

    params: GateParams

    @cached_property
    def gate(self) -> GateModel | None:
        return (
            GateModel.load(self.params.model) if self.params.fire == "model" and self.params.model else None
        )

    @cached_property
    def families(self) -> tuple[str, ...]:
        if self.params.families is not None:
            chosen = set(self.params.families)
        elif self.gate is not None:
            chosen = {FEATURES[f] for f in self.gate.features if f in FEATURES}
        else:
            chosen = set(DEFAULT_FAMILIES)
        if self.gate is not None:
            unknown = [f for f in self.gate.features if f not in FEATURES]
            if unknown:
                raise ConfigError(f"the gate file reads unknown features: {', '.join(unknown)}")
            missing = {FEATURES[f] for f in self.gate.features} - chosen
            if missing:
                raise ConfigError(f"the gate file reads features of families not computed: {sorted(missing)}")
        return tuple(f for f in FAMILIES if f in chosen)

    def inputs(self) -> dict[str, str] | None:
        if self.params.fire != "model" or not self.params.model:
            return None
        path = Path(self.params.model)
        if not path.is_file():
            raise ConfigError(f"gate file not found: {path}")
        return {"gate": hashlib.sha256(path.read_bytes()).hexdigest()}

    @property
    def shape(self) -> Shape:
        needs = {Capability.TEXT, Capability.LOGPROBS, Capability.ENTROPY}
        if "dragin" in self.families:
            needs.add(Capability.ATTENTION)
        if "consistency" in self.families:
            needs.add(Capability.SAMPLING)
        return replace(self.SHAPE, corpus_stats="corpus" in self.families, needs=frozenset(needs))

    def setup(self, parts: Any) -> None:
        # A firing gate answers again with the passages: the prompt must be SR-RAG's first prompt, so the
        # regeneration uses the template's initial section instead of its hallucination section.
        parts.template = replace(parts.template, hallucination=parts.template.initial)
        self.families  # noqa: B018 - validate the gate file against the families at build time

    # -- the borrowed checks -------------------------------------------------------------------------
    @cached_property
    def _flare(self) -> FLARE:
        return FLARE({"threshold": 1.0, "aggregate": "max"})

    @cached_property
    def _dragin(self) -> DRAGIN:
        return DRAGIN({"threshold": _NEVER, "attention_layer": self.params.attention_layer})

    @cached_property
    def _quco(self) -> QuCoRAG:
        # Counts in raw occurrences; thresholds no claim can fall below, so every sentence before the answer is read.
        return QuCoRAG({"entity_threshold": 0, "head_threshold": 0, "cooccurrence_threshold": 0})

    def features(self, draft: Draft, question: str, ctx: RunContext) -> tuple[dict[str, Any], dict[str, Any]]:
        """The draft's features and what each family cost and saw."""
        values: dict[str, Any] = {}
        detail: dict[str, Any] = {}
        gen = draft.generation
        for family in self.families:
            before, t0 = _snapshot(ctx.trace.counters), time.perf_counter()
            seen = getattr(self, f"_family_{family}")(draft, question, ctx, values)
            detail[family] = {"cost": _spent(before, ctx.trace.counters, time.perf_counter() - t0)}
            if seen:
                detail[family].update(seen)
        if gen is None:
            detail["note"] = "no generation to read"
        return {k: (None if v is None else score(v)) for k, v in values.items()}, detail

    def _family_flare(
        self, draft: Draft, question: str, ctx: RunContext, out: dict[str, Any]
    ) -> dict[str, Any]:
        gen = draft.generation
        if gen is None or gen.logprobs is None:
            return {}
        sentences = self._flare.check(draft, question, ctx).signals.get("sentences", [])
        scores = [s["score"] for s in sentences]
        unc = 1.0 - np.exp(np.asarray(gen.logprobs, dtype=float))
        out["flare_max"] = max(scores) if scores else None
        out["flare_mean"] = float(unc.mean()) if unc.size else None
        ent = np.asarray(gen.entropies or [], dtype=float)
        out["entropy_max"] = float(ent.max()) if ent.size else None
        out["entropy_mean"] = float(ent.mean()) if ent.size else None
        return {"sentence_scores": scores}

    def _family_dragin(
        self, draft: Draft, question: str, ctx: RunContext, out: dict[str, Any]
    ) -> dict[str, Any]:
        sentences = self._dragin.check(draft, question, ctx).signals.get("sentences", [])
        scores = [s["score"] for s in sentences]
        out["dragin_max"] = max(scores) if scores else None
        out["dragin_mean"] = float(np.mean(scores)) if scores else None
        out["dragin_first"] = scores[0] if scores else None
        return {"sentence_scores": scores}

    def _family_etc(
        self, draft: Draft, question: str, ctx: RunContext, out: dict[str, Any]
    ) -> dict[str, Any]:
        gen = draft.generation
        if gen is None or not gen.entropies:
            return {}
        # ETC's words (punctuation apart), a word's entropy the max over its tokens, content words only.
        words = spans.group_words(gen.tokens, split_punct=True)
        owner = spans.assign(spans.token_positions(gen.tokens), [(w.start, w.end) for w in words])
        entropy = max_per_group(gen.entropies, spans.group_by(owner, len(words)))
        real = content_words(gen.text, ctx.parts.text.nlp())
        content = [is_content(w.text, real) for w in words]
        s1, s2 = entropy_differences(entropy, content)
        smoothed = smooth_second_order(s2)
        out["etc_max"] = float(smoothed.max()) if smoothed.size else None
        out["etc_d1_max"] = float(s1.max()) if s1.size else None
        return {}

    def _family_dtr(
        self, draft: Draft, question: str, ctx: RunContext, out: dict[str, Any]
    ) -> dict[str, Any]:
        gen = ctx.generate(
            DIRECT_PROMPT.format(question=question),
            role="probe",
            max_new_tokens=self.params.dtr_max_new_tokens,
            stop=["\n"],
            logprobs=True,
        )[0]
        nll = mean_nll(gen.logprobs or [])
        out["dtr_nll"] = nll if math.isfinite(nll) else None
        return {"direct_answer": gen.text.strip()}

    def _family_corpus(
        self, draft: Draft, question: str, ctx: RunContext, out: dict[str, Any]
    ) -> dict[str, Any]:
        quco = self._quco
        stage1 = quco.before(question, ctx)
        counts = [r.get("count") for r in (stage1.signals.get("entity_counts", []) if stage1 else [])]
        counts = [float(c) for c in counts if c is not None]
        out["entities"] = float(len(stage1.signals.get("entities", [])) if stage1 else 0)
        out["entity_mean_log"] = _log(float(np.mean(counts))) if counts else None
        out["entity_min_log"] = _log(min(counts)) if counts else None
        scan = quco.check(replace(draft, sentences=quco.clean(draft.sentences)), question, ctx)
        claims = [c for s in scan.signals.get("sentences", []) for c in s.get("claims", [])]
        pairs = [c.get("count") for c in claims if c.get("kind") == "cooccurrence"]
        heads = [c.get("count") for c in claims if c.get("kind") != "cooccurrence"]
        pairs = [float(c) for c in pairs if c is not None]
        heads = [float(c) for c in heads if c is not None]
        out["claims"] = float(len(claims))
        out["zero_pairs"] = float(sum(1 for c in pairs if c <= 0))
        out["cooc_min_log"] = _log(min(pairs)) if pairs else None
        out["head_min_log"] = _log(min(heads)) if heads else None
        return {
            "entity_counts": stage1.signals.get("entity_counts", []) if stage1 else [],
            "claims": [
                {"triplet": c.get("triplet"), "kind": c.get("kind"), "count": c.get("count")} for c in claims
            ],
        }

    def _family_question(
        self, draft: Draft, question: str, ctx: RunContext, out: dict[str, Any]
    ) -> dict[str, Any]:
        out.update(question_features(question))
        return {}

    def _family_consistency(
        self, draft: Draft, question: str, ctx: RunContext, out: dict[str, Any]
    ) -> dict[str, Any]:
        if not draft.prompt:
            return {}
        p = self.params
        seed = (
            int.from_bytes(hashlib.sha256(f"{p.seed}\x1f{question}".encode()).digest()[:4], "big")
            & 0x7FFFFFFF
        )
        gens = ctx.generate(
            draft.prompt,
            role="sampler",
            max_new_tokens=self.unit_tokens(ctx),
            n=p.samples,
            temperature=p.temperature,
            seed=seed,
        )
        greedy = _answer_key(draft.text)
        answers = [_answer_key(g.text) for g in gens]
        out["consistency_agree"] = sum(a == greedy for a in answers) / len(answers) if answers else None
        out["consistency_distinct"] = float(len({greedy, *answers}))
        return {"answers": answers}

    # -- the decision --------------------------------------------------------------------------------
    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        values, detail = self.features(draft, question, ctx)
        signals: dict[str, Any] = {"features": values, "families": detail}
        p = self.params
        if p.fire == "model":
            gate = self.gate
            assert gate is not None
            value = gate.score(values)
            record = TriggerRecord.decide(
                "gate", "at_least", gate.threshold, [value], "question", param="threshold"
            )
            signals["gate_score"] = score(value)
            why = f"gate score {value:.4g} {'>=' if record.fired else '<'} {gate.threshold:.4g}"
        else:
            rule = "always" if p.fire == "always" else "at_least"
            record = TriggerRecord.decide("gate", rule, math.inf, [None], "question", param="fire")
            why = "fire: always" if p.fire == "always" else "fire: never (features recorded, draft kept)"
        if not record.fired:
            return Check.accept(draft.text, f"{why}: closed-book answer kept", signals, record)
        return Check.retrieve("", [question], f"{why}: retrieve with the question", signals, record)
