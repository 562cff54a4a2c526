"""Per-question accounting: every call a method makes to a part goes through ``RunContext``.

Keeping the counting here, rather than in each method or backend, is what makes the counters complete:
a method cannot call the LLM, the retriever or the corpus index without it landing in the trace.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from quco.config import PipelineConfig
from quco.corpus_stats.base import CorpusStats, CountResult, Phrase
from quco.errors import QucoError
from quco.llm.base import Analysis, Generation, Generator
from quco.prompts import Exemplar, PromptTemplate
from quco.retrieval.base import Passage, Retriever
from quco.text.base import LLMCall
from quco.trace import RetrievedRef, Trace


@dataclass
class Parts:
    """The components a pipeline runs on, built once and shared by all questions."""

    config: PipelineConfig
    generator: Generator
    text: Any  # quco.text.TextTools: splitter, entities, triplets
    exemplars: Sequence[Exemplar]
    template: PromptTemplate
    retriever: Retriever | None = None
    corpus_stats: CorpusStats | None = None
    extractor_generator: Generator | None = None  # separate model for the LLM extractor, if configured
    analyzer: Generator | None = None  # the model on another backend for analyze(), if configured
    # Retrievers a method searches besides the pipeline's, by name (DTR's dense index); the loop looks them up
    # when a decision names one.
    retrievers: dict[str, Retriever] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)  # other method-specific parts (a loaded model)
    # Resolves the config's retrieval corpus, on the first call only (a corpus name of the realistic world may
    # build its haystack then); set by pipeline assembly. Read it through ``corpus()``.
    corpus_resolver: Callable[[], Any] | None = None

    def corpus(self) -> Any:
        """The retrieval corpus resolved, for a method building its own index over it (DTR's dense index);
        parts assembled without a resolver hand on the configured corpus, which must then name files."""
        if self.corpus_resolver is None:
            return self.config.retriever.corpus
        return self.corpus_resolver()


@dataclass
class RunContext:
    parts: Parts
    trace: Trace
    retrieved_ids: set[str] = field(default_factory=set)
    _timers: list[list[Any]] = field(
        default_factory=list, repr=False
    )  # open [component, seconds so far, start]

    # -- timing --------------------------------------------------------------------------------------
    @contextmanager
    def timed(self, component: str) -> Iterator[None]:
        """Add the block's wall time to ``component``; a timed block inside it (an LLM extractor's call inside
        "extraction") is counted once, under its own component, so the components sum to the wall time."""
        now = time.perf_counter()
        if self._timers:  # pause the enclosing component
            outer = self._timers[-1]
            outer[1] += now - outer[2]
        self._timers.append([component, 0.0, now])
        try:
            yield
        finally:
            name, spent, start = self._timers.pop()
            end = time.perf_counter()
            self.trace.counters.add_seconds(name, spent + end - start)
            if self._timers:
                self._timers[-1][2] = end  # resume the enclosing component

    # -- LLM -----------------------------------------------------------------------------------------
    def generate(
        self,
        prompt: str,
        *,
        role: str = "main",
        max_new_tokens: int,
        stop: Sequence[str] | None = None,
        generator: Generator | None = None,
        **options: Any,
    ) -> list[Generation]:
        gen = generator or self.parts.generator
        stops = self.parts.config.generation.stop if stop is None else stop
        with self.timed("llm"):
            outs = gen.generate(prompt, max_new_tokens=max_new_tokens, stop=stops, **options)
        for out in outs:
            # Each returned sequence is one generation: n samples cost n calls' worth of tokens.
            self.trace.counters.add_llm(
                role, out.prompt_tokens, len(out.token_ids), evaluated=out.prompt_tokens_evaluated
            )
            if out.prompt_truncated:
                note = f"prompt for role '{role}' exceeded the context window and was left-truncated"
                if note not in self.trace.notes:
                    self.trace.notes.append(note)
        return outs

    def llm_call(self, role: str = "extractor") -> LLMCall:
        """A counted (prompt, max_new_tokens) -> text callable for components such as LLM extractors."""
        gen = self.parts.extractor_generator if role == "extractor" else None

        def call(prompt: str, max_new_tokens: int) -> str:
            return self.generate(
                prompt, role=role, max_new_tokens=max_new_tokens, stop=["\n\n"], generator=gen
            )[0].text

        return call

    def analyze(self, text: str, *, role: str = "probe", **options: Any) -> Analysis:
        """A counted forward pass (attention, hidden states, token scores) over ``text``."""
        with self.timed("llm"):
            result = (self.parts.analyzer or self.parts.generator).analyze(text, **options)
        self.trace.counters.add_llm(role, len(result.token_ids), 0, evaluated=result.evaluated)
        return result

    def analyze_many(self, texts: Sequence[str], *, role: str = "probe", **options: Any) -> list[Analysis]:
        """Counted forward passes over several texts with the same options (one call per text), which the backend
        may run together (``GeneratorBase.analyze_many``)."""
        target = self.parts.analyzer or self.parts.generator
        many = getattr(target, "analyze_many", None)
        with self.timed("llm"):
            results = many(texts, **options) if many else [target.analyze(t, **options) for t in texts]
        for result in results:
            self.trace.counters.add_llm(role, len(result.token_ids), 0, evaluated=result.evaluated)
        return results

    def count_tokens(self, text: str) -> int:
        return self.parts.generator.count_tokens(text) if text else 0

    # -- retrieval -----------------------------------------------------------------------------------
    def retrieve(
        self, queries: Sequence[str], k: int | None = None, retriever: Retriever | None = None
    ) -> tuple[list[Passage], list[RetrievedRef]]:
        """Top-k per query, merged in query order without duplicates (from ``retriever`` or the pipeline's)."""
        retriever = retriever or self.parts.retriever
        if retriever is None:
            raise QucoError("this method retrieves but the pipeline has no retriever configured")
        queries = [q for q in queries if q and q.strip()]
        if not queries:
            return [], []
        k = k or self.parts.config.retriever.top_k
        with self.timed("retrieval"):
            results = retriever.search(queries, k)
        counters = self.trace.counters
        counters.retrievals += len(queries)
        counters.retrieval_calls += 1
        passages: list[Passage] = []
        refs: list[RetrievedRef] = []
        seen: set[str] = set()
        for query, hits in zip(queries, results, strict=True):
            counters.passages_retrieved += len(hits)
            for p in hits:
                if p.id in seen:
                    continue
                seen.add(p.id)
                passages.append(p)
                refs.append(RetrievedRef(id=p.id, title=p.title, score=round(float(p.score), 4), query=query))
        self.retrieved_ids.update(seen)
        return passages, refs

    # -- corpus statistics ---------------------------------------------------------------------------
    def _stats(self) -> CorpusStats:
        if self.parts.corpus_stats is None:
            raise QucoError("this method needs corpus statistics but none are configured")
        return self.parts.corpus_stats

    def _account(self, results: list[CountResult]) -> list[CountResult]:
        c = self.trace.counters
        c.corpus_queries += len(results)
        c.corpus_unknown += sum(r.status != "ok" for r in results)
        c.corpus_cache_hits += sum(bool(r.cached) for r in results)
        for r in results:
            if r.status != "ok":
                note = f"corpus lookup failed for '{r.query}': {r.error}; handled by the unknown-policy"
                self.trace.notes.append(note)
        return results

    def count(self, phrases: Sequence[Phrase]) -> list[CountResult]:
        if not phrases:
            return []
        with self.timed("corpus_stats"):
            results = self._stats().count_many(list(phrases))
        return self._account(results)

    def cooccur(self, pairs: Sequence[tuple[Phrase, Phrase]]) -> list[CountResult]:
        if not pairs:
            return []
        with self.timed("corpus_stats"):
            results = self._stats().cooccur_many(list(pairs))
        return self._account(results)
