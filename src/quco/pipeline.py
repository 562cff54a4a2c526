"""``Pipeline``: a configured method on its parts, answering questions one at a time.

Parts are built once (indexes on first use, into the cache) and only when the method uses them:
Wo-RAG builds no retriever, SR-RAG no corpus-statistics index.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from quco.answer import STRICT, AnswerProtocol
from quco.config import GeneratorConfig, PipelineConfig, load_config
from quco.engine.context import Parts, RunContext
from quco.engine.loop import finish, run
from quco.engine.method import Method
from quco.errors import InputError
from quco.inputs import check_text
from quco.llm.base import ANALYSIS_CAPABILITIES, require
from quco.methods import method_class
from quco.prompts import configured_template, load_exemplars
from quco.trace import Trace

log = logging.getLogger(__name__)

# Loaded generators, shared by every pipeline of this process that asks for the same model settings:
# loading a model is the slowest part of building a pipeline, and the weights never change.
_GENERATORS: dict[str, Any] = {}
_GENERATORS_LOCK = threading.Lock()


def prompt_identity(config: PipelineConfig) -> dict[str, str]:
    """The prompt a config resolves to: its layout's name and a hash of the exemplars and layout text.

    Part of an evaluation run's identity, so that a run does not resume (or reuse traces) across a change of
    the exemplar or template files even when the config itself is unchanged.
    """
    import hashlib
    import json

    name = config.prompt.template or method_class(config.method).template
    # read the files as they are now (the loaders' caches may hold an older version)
    exemplars = load_exemplars.__wrapped__(config.prompt.exemplars)[: config.prompt.fewshot]
    template = configured_template(config.prompt, method_class(config.method).template, fresh=True)
    blob = json.dumps(
        {"exemplars": [e.render() for e in exemplars], "template": template.identity()}, sort_keys=True
    )
    return {"template": name, "sha256": hashlib.sha256(blob.encode("utf-8")).hexdigest()}


def shared_generator(config: GeneratorConfig):  # noqa: ANN201 - a quco.llm.base.Generator
    """The generator for ``config``, loaded once per process (again if the one loaded has been closed)."""
    from quco.llm import build_generator

    key = config.model_dump_json()
    with _GENERATORS_LOCK:
        generator = _GENERATORS.get(key)
        if generator is None or getattr(generator, "closed", False):
            generator = _GENERATORS[key] = build_generator(config)
        return generator


def _corpus_resolver(spec: str) -> Callable[[], Any]:
    """The corpus ``spec`` names, resolved on the first call only (``quco.world.corpora`` knows the names)."""

    @functools.cache
    def resolve() -> Any:
        from quco.world.corpora import resolve_corpus

        return resolve_corpus(spec)

    return resolve


def assemble(
    config: PipelineConfig, method: Method, progress: bool = True, share: Parts | None = None
) -> Parts:
    """The parts ``method`` needs under ``config``: built, or taken from ``share`` where configured alike.

    The one assembly path of the package: ``Pipeline.from_config`` and the server's pipeline pool use it.
    """
    from quco.text import build_text

    shape = method.shape
    generator = shared_generator(config.generator)
    analyzer = None
    needs = shape.needs
    if config.generator.analysis_backend is not None:
        analyzer = shared_generator(
            config.generator.model_copy(
                update={"backend": config.generator.analysis_backend, "analysis_backend": None}
            )
        )
        require(analyzer, needs & ANALYSIS_CAPABILITIES, f"method '{method.name}' (analysis backend)")
        needs = needs - ANALYSIS_CAPABILITIES
    require(generator, needs, f"method '{method.name}'")
    same = share.config if share is not None else None
    extractor_generator = None
    if config.text.extractor_model:
        extractor_generator = shared_generator(
            config.generator.model_copy(update={"model": config.text.extractor_model})
        )
    # The LLM extractors wrap their prompts in their generator's chat template: shared only with the same model.
    if same is not None and same.text == config.text and same.generator == config.generator:
        text = share.text
    else:
        text = build_text(config.text, generator=extractor_generator or generator)
    exemplars = load_exemplars(config.prompt.exemplars)[: config.prompt.fewshot]
    template = configured_template(config.prompt, method.template)

    corpus = _corpus_resolver(config.retriever.corpus)
    retriever = corpus_stats = None
    if shape.retriever or shape.corpus_stats:
        from quco.retrieval import build_retriever
        from quco.world.corpora import resolve_corpus

        source = corpus()
        if shape.retriever:
            if same is not None and share.retriever is not None and same.retriever == config.retriever:
                retriever = share.retriever
            else:
                retriever = build_retriever(config.retriever, progress=progress, corpus=source)
        if shape.corpus_stats:
            if (
                same is not None
                and share.corpus_stats is not None
                and same.corpus_stats == config.corpus_stats
            ):
                corpus_stats = share.corpus_stats
            else:
                from quco.corpus_stats import build_corpus_stats

                stats_source = (
                    resolve_corpus(config.corpus_stats.corpus) if config.corpus_stats.corpus else source
                )
                cache = {"auto": None, "on": True, "off": False}[config.corpus_stats.cache]
                corpus_stats = build_corpus_stats(
                    config.corpus_stats,
                    stats_source.docs,
                    stats_source.fingerprint(),
                    progress=progress,
                    cache=cache,
                )
    # Named retrievers (a dense index) are searched read-only, so pipelines over one corpus can share them.
    retrievers = {}
    if same is not None and same.retriever.corpus == config.retriever.corpus:
        retrievers = dict(share.retrievers)
    return Parts(
        config=config,
        generator=generator,
        text=text,
        exemplars=exemplars,
        template=template,
        retriever=retriever,
        corpus_stats=corpus_stats,
        extractor_generator=extractor_generator,
        analyzer=analyzer,
        retrievers=retrievers,
        corpus_resolver=corpus,
    )


# Questions are cut to this share of the context window, keeping their end, so that the prompt keeps room
# for exemplars, passages and the answer.
_QUESTION_SHARE = 0.25


class Pipeline:
    def __init__(self, config: PipelineConfig, method: Method, parts: Parts) -> None:
        self.config = config
        self.method = method
        self.parts = parts

    @property
    def generator(self):  # noqa: ANN201 - the configured quco.llm.base.Generator
        return self.parts.generator

    @classmethod
    def from_config(
        cls,
        config: PipelineConfig | str | None = None,
        progress: bool = True,
        *,
        share: Parts | None = None,
        **overrides: Any,
    ) -> Pipeline:
        """Build from a ``PipelineConfig``, a YAML path, or the defaults (plus dotted overrides).

        ``share``: the parts of another pipeline in this process; every part whose configuration is the same is
        reused instead of built again (the server's pool builds one pipeline per method this way).
        """
        if not isinstance(config, PipelineConfig):
            config = load_config(config, overrides=overrides or None)
        method = method_class(config.method)(config.params)
        parts = assemble(config, method, progress=progress, share=share)
        method.setup(parts)
        return cls(config, method, parts)

    def _prepare_question(self, question: str, trace: Trace) -> str:
        if not isinstance(question, str) or not question.strip():
            raise InputError('the question is empty; ask something, e.g. quco ask "Who wrote Hamlet?"')
        check_text(question)  # lone surrogates / undecodable bytes: one clear error, not a tokenizer crash
        question = " ".join(question.split())
        limit = int(self.parts.generator.max_context_tokens * _QUESTION_SHARE)
        n = self.parts.generator.count_tokens(question)
        if n > limit:
            # Keep the end: long inputs usually put the actual question last.
            keep = question
            while self.parts.generator.count_tokens(keep) > limit:
                keep = keep[len(keep) // 10 + 1 :]
            trace.notes.append(
                f"question was {n} tokens, more than {limit} (a quarter of the {self.parts.generator.max_context_tokens}-"
                f"token context); kept its last {self.parts.generator.count_tokens(keep)} tokens"
            )
            question = keep.strip()
        return question

    def answer(self, question: str, protocol: AnswerProtocol = STRICT) -> Trace:
        """Answer one question; the returned trace holds the answer, every step and every cost.

        ``protocol``: what happens after generation about the stated answer (``quco.answer.AnswerProtocol``;
        the default, strict, does nothing).
        """
        trace = Trace(question=question, method=self.method.name)
        start = time.perf_counter()
        trace.question = self._prepare_question(question, trace)
        ctx = RunContext(parts=self.parts, trace=trace)
        run(self.method, trace.question, ctx)
        finish(ctx, protocol)
        trace.seconds = round(time.perf_counter() - start, 4)
        accounted = sum(trace.counters.seconds.values())
        trace.counters.add_seconds("other", max(0.0, trace.seconds - accounted))
        trace.counters.seconds = {k: round(v, 4) for k, v in trace.counters.seconds.items()}
        return trace

    def finish(self, trace: Trace, protocol: AnswerProtocol) -> Trace:
        """Apply ``protocol`` to a trace answered earlier (a recorded run); its cost is added to the trace."""
        start = time.perf_counter()
        llm_before = trace.counters.seconds.get("llm", 0.0)
        finish(RunContext(parts=self.parts, trace=trace), protocol)
        spent = time.perf_counter() - start
        trace.seconds = round(trace.seconds + spent, 4)
        other = max(0.0, spent - (trace.counters.seconds.get("llm", 0.0) - llm_before))
        trace.counters.add_seconds("other", other)
        trace.counters.seconds = {k: round(v, 4) for k, v in trace.counters.seconds.items()}
        return trace
