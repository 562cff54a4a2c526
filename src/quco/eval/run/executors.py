"""Where an evaluation's questions are answered: on this thread, on threads sharing one pipeline, or in worker
processes with one pipeline each, as the generator declares (``GeneratorBase.parallelism``).

- "threads": the generator's calls overlap (a server); ``--workers N`` threads share one pipeline.
- "processes": an in-process library that decodes one request at a time (llama.cpp); ``--workers N`` starts N
  processes, each with its own pipeline and ``generator.threads`` threads (default: the cores divided among the
  workers). The model file is memory-mapped, so its weights are in memory once whatever the number of workers.
- "serial": one question at a time whatever ``--workers`` says (the transformers backend serialises its
  generation with a lock).

Scoring and writing stay with the caller. Outputs do not depend on the number of workers: the backend's
reproducible mode makes each answer a function of its question alone (see ``quco.llm.batching``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol, TypeVar

from quco.answer import STRICT, AnswerProtocol
from quco.config import PipelineConfig
from quco.datasets import Example
from quco.errors import QucoError
from quco.eval.run.answering import Answerer, Outcome
from quco.eval.runs.records import Record
from quco.machine import usable_cores

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

Todo = list[tuple[int, Example]]  # (position in the selection, question) still to answer


class WorkerError(QucoError):
    """A worker process could not build its pipeline, or died."""


class Executor(Protocol):
    def outcomes(self, todo: Todo) -> Iterator[Outcome]:
        """Answer ``todo``; each outcome as it is ready."""
        ...


class InlineExecutor:
    """Answers on the calling thread, in order."""

    def __init__(self, answerer: Answerer, recorded: Mapping[str, Record] | None = None) -> None:
        self.answerer = answerer
        self.recorded = recorded or {}

    def outcomes(self, todo: Todo) -> Iterator[Outcome]:
        for pos, ex in todo:
            yield self.answerer(pos, ex, self.recorded.get(ex.id))


class ThreadExecutor:
    """``workers`` threads sharing one pipeline; outcomes as they finish."""

    def __init__(
        self, answerer: Answerer, workers: int, recorded: Mapping[str, Record] | None = None
    ) -> None:
        self.answerer = answerer
        self.workers = workers
        self.recorded = recorded or {}

    def outcomes(self, todo: Todo) -> Iterator[Outcome]:
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="quco-eval")

        def submit(item: tuple[int, Example]) -> Future[Outcome]:
            pos, ex = item
            return pool.submit(self.answerer, pos, ex, self.recorded.get(ex.id))

        try:
            for fut in bounded_as_completed(submit, todo, 2 * self.workers):
                yield fut.result()
        finally:
            # On Ctrl-C (or any exit) drop what has not started; questions in flight are redone on resume.
            pool.shutdown(wait=False, cancel_futures=True)


_WORKER: dict[str, Any] = {}  # the answerer of this worker process (set by _init)


def _init(config_json: str, threads: int, protocol: AnswerProtocol) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops the workers
    logging.basicConfig(level=logging.WARNING, format=f"[worker {os.getpid()}] %(levelname)s %(message)s")
    try:
        from quco.pipeline import Pipeline

        cfg = PipelineConfig.model_validate_json(config_json)
        cfg = cfg.model_copy(update={"generator": cfg.generator.model_copy(update={"threads": threads})})
        pipe = Pipeline.from_config(cfg, progress=False)
        _WORKER["answerer"] = Answerer.of(pipe.answer, pipe, protocol)
    except Exception as exc:  # reported by the first question this worker is given
        _WORKER["error"] = f"{type(exc).__name__}: {exc}"


def _answer(position: int, example: Example, recorded: Record | None) -> Outcome:
    if "error" in _WORKER:
        raise WorkerError(f"a worker process could not build its pipeline: {_WORKER['error']}")
    return _WORKER["answerer"](position, example, recorded)


class ProcessExecutor:
    """``workers`` processes answering questions of one config; ``outcomes`` yields them as they finish."""

    def __init__(
        self,
        config: PipelineConfig,
        workers: int,
        *,
        protocol: AnswerProtocol = STRICT,
        recorded: Mapping[str, Record] | None = None,
    ) -> None:
        self.config = config
        self.workers = workers
        self.threads = config.generator.threads or max(1, usable_cores() // workers)
        self.protocol = protocol
        self.recorded = recorded or {}

    def outcomes(self, todo: Todo) -> Iterator[Outcome]:
        log.info("answering in %d worker processes with %d thread(s) each", self.workers, self.threads)
        pool = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=multiprocessing.get_context("spawn"),  # llama.cpp's threads do not survive a fork
            initializer=_init,
            initargs=(self.config.model_dump_json(), self.threads, self.protocol),
        )
        finished_ok = False
        try:
            for fut in bounded_as_completed(
                lambda item: pool.submit(_answer, *item, self.recorded.get(item[1].id)),
                todo,
                2 * self.workers,
            ):
                try:
                    outcome = fut.result()
                except BrokenProcessPool as exc:
                    raise WorkerError(
                        "a worker process died (out of memory, or a crash in the model library); the "
                        "questions recorded so far are kept: run the same command again to resume"
                    ) from exc
                yield outcome
            finished_ok = True
        finally:
            if finished_ok:
                pool.shutdown(wait=True)
            else:  # Ctrl-C, an error, or the caller stopped: questions in flight are redone on resume
                pool.shutdown(wait=False, cancel_futures=True)
                for proc in list((getattr(pool, "_processes", None) or {}).values()):
                    proc.terminate()


def bounded_as_completed(
    submit: Callable[[T], Future[R]], items: Iterable[T], window: int
) -> Iterator[Future[R]]:
    """``submit(item)`` for every item with at most ``window`` futures in flight; each future as it finishes.

    Items are submitted in order as others finish, so a long run never queues all its work up front (Ctrl-C
    drops little) and results stream back while later items are still waiting.
    """
    pending: set[Future[R]] = set()
    queue = iter(items)
    for item in queue:
        pending.add(submit(item))
        if len(pending) >= window:
            break
    while pending:
        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
        for fut in finished:
            nxt = next(queue, None)
            if nxt is not None:
                pending.add(submit(nxt))
            yield fut


def choose_executor(
    target: Any,
    workers: int,
    protocol: AnswerProtocol,
    recorded: Mapping[str, Record] | None = None,
) -> Executor:
    """The executor for ``target`` (a ``quco.eval.run.target.Target``) and ``workers``, by its generator's
    ``parallelism``. Processes build their own pipelines; otherwise the target is built here."""
    if workers > 1 and target.parallelism == "processes" and target.buildable:
        return ProcessExecutor(target.config, workers, protocol=protocol, recorded=recorded)
    if workers > 1 and target.parallelism == "serial":
        log.warning("this generator answers one question at a time; using 1 worker")
        workers = 1
    answer_fn, pipe = target.build()
    answerer = Answerer.of(answer_fn, pipe, protocol, shared_process=workers > 1)
    if workers <= 1:
        return InlineExecutor(answerer, recorded)
    return ThreadExecutor(answerer, workers, recorded)


__all__ = [
    "Executor",
    "InlineExecutor",
    "ProcessExecutor",
    "ThreadExecutor",
    "WorkerError",
    "bounded_as_completed",
    "choose_executor",
]
