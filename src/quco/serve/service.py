"""The answering service behind ``quco serve``: one pipeline per method on shared parts, bounded concurrency.

Pipelines are synchronous; the service runs them on worker threads, admits at most ``concurrency`` questions
at once plus ``queue`` waiting ones (the rest get 429 at once), and stops waiting for an answer after
``timeout_s`` (the worker finishes in the background and only then frees its slot, so the limit stays honest).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from quco.config import PipelineConfig
from quco.errors import ConfigError, QucoError
from quco.trace import Trace

log = logging.getLogger(__name__)


class Overloaded(QucoError):
    """Every answering slot and queue place is taken; the client should retry later."""


class AnswerTimeout(QucoError):
    """The answer took longer than the per-request timeout."""


@dataclass
class ServeSettings:
    """Limits and choices of one ``quco serve`` process."""

    config: PipelineConfig = field(default_factory=PipelineConfig)
    methods: tuple[str, ...] = ()  # methods callers may name; empty: only the config's method
    api_key: str | None = None  # bearer token; None: no authentication (loopback use)
    concurrency: int = 2  # questions answered at once
    queue: int = 16  # questions waiting for a slot before new ones get 429
    timeout_s: float = 300.0  # per request
    max_body_bytes: int = 64 * 1024
    max_question_chars: int = 2000
    trace_history: int = 256  # recent traces kept in memory for the viewer
    preload: bool = True  # build the default method's pipeline at startup instead of on the first request


class PipelinePool:
    """One pipeline per method; methods after the first reuse its generator, text tools and indexes."""

    def __init__(self, config: PipelineConfig, methods: tuple[str, ...]) -> None:
        from quco.methods import method_class

        self.config = config
        self.default = method_class(config.method).name
        names = [method_class(m).name for m in methods] or [self.default]
        self.allowed = tuple(dict.fromkeys([self.default, *names]))
        self._pipelines: dict[str, Any] = {}
        self._lock = threading.Lock()

    def resolve(self, method: str | None) -> str:
        """Canonical method name, or ConfigError naming the methods this server offers."""
        from quco.methods import method_class

        if not method:
            return self.default
        try:
            name = method_class(method).name
        except ConfigError:
            name = ""
        if name not in self.allowed:
            raise ConfigError(f"method '{method}' is not served here; use one of: {', '.join(self.allowed)}")
        return name

    def get(self, method: str) -> Any:
        with self._lock:
            pipeline = self._pipelines.get(method)
            if pipeline is None:
                pipeline = self._build(method)
                self._pipelines[method] = pipeline
            return pipeline

    def _build(self, method: str) -> Any:
        """A pipeline for ``method``; methods after the first share the default pipeline's parts."""
        from quco.pipeline import Pipeline

        start = time.perf_counter()
        base = self._pipelines.get(self.default)
        share = base.parts if base is not None and method != self.default else None
        pipeline = Pipeline.from_config(self._config_for(method), progress=False, share=share)
        log.info("pipeline for method '%s' ready in %.1f s", method, time.perf_counter() - start)
        return pipeline

    def _config_for(self, method: str) -> PipelineConfig:
        params = self.config.params if method == self.default else {}
        return self.config.model_copy(update={"method": method, "params": params})


class TraceStore:
    """The most recent traces by id, for the viewer (memory only: a restart forgets them)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, trace_id: str, trace: dict[str, Any]) -> None:
        with self._lock:
            self._data[trace_id] = trace
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def get(self, trace_id: str) -> dict[str, Any] | None:
        with self._lock:
            return self._data.get(trace_id)

    def ids(self) -> list[str]:
        with self._lock:
            return list(reversed(self._data))


@dataclass
class Answered:
    id: str
    method: str
    trace: Trace
    seconds: float


class AnswerService:
    """Admission control, worker threads and timeouts around ``PipelinePool``."""

    def __init__(self, settings: ServeSettings, pool: PipelinePool | None = None) -> None:
        if settings.concurrency < 1 or settings.queue < 0 or settings.timeout_s <= 0:
            raise ConfigError("serve concurrency must be >= 1, queue >= 0 and timeout_s > 0")
        self.settings = settings
        self.pool = pool or PipelinePool(settings.config, settings.methods)
        self.traces = TraceStore(settings.trace_history)
        self._executor = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="quco-serve")
        self._admitted = 0  # running + waiting
        self._running = 0
        self._lock = threading.Lock()
        self.started = time.time()
        self.answered = 0
        self.failed = 0

    def preload(self) -> None:
        self.pool.get(self.pool.default)

    @property
    def load(self) -> dict[str, int]:
        with self._lock:
            return {
                "running": self._running,
                "waiting": self._admitted - self._running,
                "concurrency": self.settings.concurrency,
                "queue": self.settings.queue,
            }

    def _admit(self) -> None:
        with self._lock:
            if self._admitted >= self.settings.concurrency + self.settings.queue:
                raise Overloaded(
                    f"server busy: {self.settings.concurrency} questions running and {self.settings.queue} "
                    "waiting; retry later"
                )
            self._admitted += 1

    def _work(self, method: str, question: str) -> Trace:
        with self._lock:
            self._running += 1
        try:
            return self.pool.get(method).answer(question)
        finally:
            with self._lock:
                self._running -= 1
                self._admitted -= 1

    def _release_if_cancelled(self, future: Any) -> None:
        """A question cancelled before a worker took it never ran ``_work``, so free its place here."""
        if future.cancelled():
            with self._lock:
                self._admitted -= 1

    async def answer(
        self, question: str, method: str | None = None, timeout_s: float | None = None
    ) -> Answered:
        """Answer on a worker thread; Overloaded, AnswerTimeout or the pipeline's QucoError on failure."""
        name = self.pool.resolve(method)
        self._admit()
        start = time.perf_counter()
        future = self._executor.submit(self._work, name, question)
        future.add_done_callback(self._release_if_cancelled)
        limit = min(timeout_s or self.settings.timeout_s, self.settings.timeout_s)
        try:
            trace = await asyncio.wait_for(asyncio.wrap_future(future), timeout=limit)
        except TimeoutError as exc:
            self.failed += 1
            raise AnswerTimeout(
                f"no answer within {limit:g} s; ask again later or raise the server's --timeout"
            ) from exc
        except Exception:
            self.failed += 1
            raise
        self.answered += 1
        answered = Answered(uuid.uuid4().hex[:16], name, trace, round(time.perf_counter() - start, 4))
        self.traces.put(answered.id, trace.to_dict())
        return answered

    def close(self) -> None:
        """Stop taking work. Generators stay open: pipelines share them process-wide (quco.pipeline)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
