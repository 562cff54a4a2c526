"""Black-box triggers: retrieve when sampled versions of the next sentence disagree (arXiv 2501.09292).

FLARE-style: the loop drafts the next sentence greedily (a temporary sentence); the check samples the same
sentence ``n_samples`` times from the same prompt at ``temperature``, scores their disagreement U with an
estimator of Lin et al. (NumSemSets, EigValLaplacian, DegMat, Eccentricity, lexical similarity) over a
pairwise similarity (Jaccard, embedding cosine, NLI, LLM judge), and fires when U > ``threshold``: the
temporary sentence is discarded, passages are retrieved with it (or with the question, or an LLM-written
sub-query), and the loop regenerates the sentence. Every sample, judge and sub-query call goes through the
run context, so its cost is in the trace (roles "sampler", "judge", "query_writer").
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from pydantic import Field

from quco.engine.context import RunContext
from quco.engine.method import Check, Draft, Method, MethodParams, Shape
from quco.errors import CapabilityError, ConfigError, QucoError
from quco.llm.base import Capability
from quco.prompts import build_prompt
from quco.signals.sampled.estimators import EstimatorName, estimate
from quco.signals.sampled.similarity import (
    DEFAULT_NLI_MODEL,
    EmbeddingSimilarity,
    JaccardSimilarity,
    JudgeSimilarity,
    NLISimilarity,
    SampleSimilarity,
    SimilarityName,
    yes_no_from_logprobs,
    yes_no_probability,
)
from quco.text.stopping import first_sentence_done
from quco.trigger_record import TriggerRecord

SAMPLER_ROLE = "sampler"
JUDGE_ROLE = "judge"
QUERY_ROLE = "query_writer"

# Uncalibrated starting points, used when a config sets no threshold: Eccentricity > 2 is the value of the
# study (2501.09292); the others fire when the samples are far from agreeing. Calibrate (`quco calibrate`).
DEFAULT_THRESHOLDS: dict[str, float] = {
    "num_sem_sets": 1.0,  # more than one semantic set
    "eig_val_laplacian": 1.5,
    "deg_mat": 0.4,
    "eccentricity": 2.0,
    "lexical_similarity": -0.5,  # mean ROUGE-L below 0.5
}

SUBQUERY_PROMPT = (
    "Write a short search query that finds the facts needed to check the sentence.\n"
    "Question: {question}\n"
    "Sentence: {sentence}\n"
    "Search query:"
)


class BlackBoxParams(MethodParams):
    estimator: EstimatorName = "eccentricity"
    similarity: SimilarityName = "jaccard"  # ignored by lexical_similarity (ROUGE-L on the texts)
    affinity: Literal["entail", "contra"] = "entail"  # W from P(entail) or 1 - P(contra) (NLI and judge)
    threshold: float | None = None  # fire when U > threshold; None: DEFAULT_THRESHOLDS[estimator]
    n_samples: int = Field(10, ge=1)  # LM-Polygraph's samples_n
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)
    seed: int = 0  # samples are seeded from (seed, question, text so far): a rerun draws the same samples
    sentence_tokens: int = Field(64, ge=1)  # token cap of the temporary sentence and of each sample
    query: Literal["sentence", "question", "llm"] = "sentence"
    query_tokens: int = Field(32, ge=1)  # token cap of an LLM-written sub-query
    set_threshold: float = 0.5  # NumSemSets on a symmetric similarity: samples share a meaning when W > this
    eccentricity_threshold: float = 0.9  # eigenvalues kept by Eccentricity (LM-Polygraph's thres)
    embedding_model: str | None = None  # a sentence-transformers directory or id; None: bundled MiniLM
    nli_model: str = DEFAULT_NLI_MODEL
    nli_batch_size: int = Field(10, ge=1)
    nli_device: str = "cpu"
    nli_entail_label: str | None = None  # label names, when the model's are not entailment/contradiction
    nli_contra_label: str | None = None
    # Judge: "forced" reads log P(" yes") and log P(" no") after the prompt (two counted scoring passes per
    # judgement, exact); "generate" reads one generated token (one call; exact only with top alternatives).
    judge_scoring: Literal["forced", "generate"] = "forced"
    record_samples: bool = True  # put the sampled sentences into the trace
    # "sentence": a sample stops once its first sentence is complete (only that sentence is scored), which
    # saves the tokens after it; "length": every sample runs to sentence_tokens, as the draft does.
    sample_stop: Literal["sentence", "length"] = "sentence"


_WORD = re.compile(r"\w")


def _seed(base: int, question: str, prefix: str) -> int:
    digest = hashlib.sha256(f"{base}\x1f{question}\x1f{prefix}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


class BlackBoxRAG(Method):
    name = "blackbox"
    description = (
        "Black-box trigger: retrieve when sampled versions of the next sentence disagree "
        "(NumSemSets, EigV, DegMat, Eccentricity, lexical similarity)."
    )
    Params = BlackBoxParams
    template = "baseline"
    # The whole prediction shares the token budget, as this loop has always run (no published loop to follow).
    SHAPE = Shape(
        unit="sentence", budget="prediction", needs=frozenset({Capability.TEXT, Capability.SAMPLING})
    )

    params: BlackBoxParams

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        self._similarity: SampleSimilarity | None = None

    @property
    def threshold(self) -> float:
        p = self.params
        return p.threshold if p.threshold is not None else DEFAULT_THRESHOLDS[p.estimator]

    def unit_tokens(self, ctx: RunContext) -> int:
        return min(self.params.sentence_tokens, ctx.parts.config.generation.max_new_tokens)

    # -- parts -----------------------------------------------------------------------------------------------
    def _needs_matrix(self) -> bool:
        return self.params.estimator != "lexical_similarity"

    def _model_similarity(self) -> SampleSimilarity:
        """The similarity that holds a model or none (built once; the judge is built per check)."""
        p = self.params
        if self._similarity is None:
            if p.similarity == "embedding":
                self._similarity = EmbeddingSimilarity(p.embedding_model)
            elif p.similarity == "nli":
                self._similarity = NLISimilarity(
                    p.nli_model, p.nli_batch_size, p.nli_device, p.nli_entail_label, p.nli_contra_label
                )
            else:
                self._similarity = JaccardSimilarity()
        return self._similarity

    def setup(self, parts: Any) -> None:
        """Load the embedding or NLI model when the pipeline is built, so the first question does not pay."""
        if not self._needs_matrix() or self.params.similarity == "judge":
            return
        sim = self._model_similarity()
        if isinstance(sim, (EmbeddingSimilarity, NLISimilarity)):
            sim.load()

    def _judge(self, ctx: RunContext) -> JudgeSimilarity:
        if self.params.judge_scoring == "generate":
            logprobs = Capability.LOGPROBS in ctx.parts.generator.capabilities

            def by_generation(prompt: str) -> tuple[float, float] | None:
                gen = ctx.generate(prompt, role=JUDGE_ROLE, max_new_tokens=1, stop=(), logprobs=logprobs)[0]
                return yes_no_probability(gen)

            return JudgeSimilarity(by_generation)

        def continuation_logprob(prompt: str, word: str) -> float:
            k = max(1, ctx.count_tokens(prompt + word) - ctx.count_tokens(prompt))
            try:
                analysis = ctx.analyze(prompt + word, role=JUDGE_ROLE, scores=True)
            except CapabilityError as exc:
                raise ConfigError(
                    f"the judge's forced scoring needs token scores ({exc}); set params.judge_scoring=generate"
                ) from exc
            return float(sum((analysis.logprobs or [])[-k:]))

        def forced(prompt: str) -> tuple[float, float]:
            return yes_no_from_logprobs(
                continuation_logprob(prompt, " yes"), continuation_logprob(prompt, " no")
            )

        return JudgeSimilarity(forced)

    # -- the check -------------------------------------------------------------------------------------------
    def sample(self, draft: Draft, question: str, ctx: RunContext) -> list[str]:
        """``n_samples`` sampled versions of the draft's sentence, from the prompt the draft came from."""
        p = self.params
        parts = ctx.parts
        prompt = draft.prompt or build_prompt(question, parts.exemplars, parts.template, prefix=draft.prefix)
        remaining = max(1, parts.config.generation.max_new_tokens - ctx.count_tokens(draft.prefix))
        split = parts.text.splitter.split
        gens = ctx.generate(
            prompt,
            role=SAMPLER_ROLE,
            max_new_tokens=min(self.unit_tokens(ctx), remaining),
            n=p.n_samples,
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=p.top_k,
            seed=_seed(p.seed, question, draft.prefix),
            stop_when=first_sentence_done(split) if p.sample_stop == "sentence" else None,
        )
        samples = []
        for gen in gens:
            sentences = split(gen.text)
            samples.append(sentences[0].strip() if sentences else gen.text.strip())
        return samples

    def score(self, samples: list[str], ctx: RunContext) -> tuple[float, dict[str, Any]]:
        """U of the samples, and what the trace should show about how it was computed."""
        p = self.params
        info: dict[str, Any] = {}
        if not self._needs_matrix():
            return estimate("lexical_similarity", samples), info
        if p.similarity == "judge":
            pairs = self._judge(ctx).scores(samples)  # its calls are timed as "llm" by the context
        else:
            with ctx.timed("similarity"):
                pairs = self._model_similarity().scores(samples)
        return self._estimate(samples, pairs, info)

    def score_recorded(self, samples: list[str]) -> float:
        """U of samples recorded in a trace, without a run context (any similarity but the LLM judge)."""
        if not self._needs_matrix():
            return estimate("lexical_similarity", samples)
        if self.params.similarity == "judge":
            raise QucoError(
                "the LLM-judge similarity needs the model: it cannot be scored from recorded samples"
            )
        return self._estimate(samples, self._model_similarity().scores(samples), {})[0]

    def _estimate(self, samples: list[str], pairs: Any, info: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        p = self.params
        info["unique"] = pairs.unique
        if p.similarity in ("nli", "judge"):
            info[f"{p.similarity}_pairs"] = pairs.model_calls  # ordered pairs scored
        if pairs.unparsed:
            info["judge_unparsed"] = pairs.unparsed
        u = estimate(
            p.estimator,
            samples,
            pairs.entail,
            pairs.contra,
            affinity_kind=p.affinity,
            set_threshold=p.set_threshold,
            eccentricity_threshold=p.eccentricity_threshold,
        )
        return u, info

    def _queries(self, draft: Draft, question: str, ctx: RunContext) -> list[str]:
        p = self.params
        # A temporary sentence without a word (e.g. ".") finds nothing: the question searches instead.
        if p.query == "question" or not _WORD.search(draft.text):
            return [question]
        if p.query == "llm":
            prompt = SUBQUERY_PROMPT.format(question=question, sentence=draft.text)
            gen = ctx.generate(prompt, role=QUERY_ROLE, max_new_tokens=p.query_tokens, stop=["\n"])[0]
            query = gen.text.strip()
            if query:
                return [query]
        return [draft.text]

    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        p = self.params
        samples = self.sample(draft, question, ctx)
        u, info = self.score(samples, ctx)
        theta = self.threshold
        # One candidate per check, recorded as every thresholded trigger is, so runs can be replayed at
        # other thresholds (quco.signals.replay) and matched by the random trigger.
        similarity = "rougeL" if not self._needs_matrix() else p.similarity
        record = TriggerRecord.decide(p.estimator, "above", theta, [u], "sentence", similarity=similarity)
        signals: dict[str, Any] = {
            "estimator": p.estimator,
            "similarity": similarity,
            "n": len(samples),
            **info,
        }
        if p.record_samples:
            signals["samples"] = samples
        if record.fired:
            queries = self._queries(draft, question, ctx)
            return Check.retrieve(
                "", queries, f"{p.estimator} U = {u:.4g} > {theta:g}: the samples disagree", signals, record
            )
        return Check.accept(draft.text, f"{p.estimator} U = {u:.4g} <= {theta:g}", signals, record)
