"""Answer an evaluation's questions in worker processes, one pipeline (and one model) per process.

llama.cpp in one process decodes one request at a time, so threads that share a pipeline wait for each other.
For the in-process ``llamacpp`` backend, ``quco eval --workers N`` therefore starts N processes, each with its
own pipeline and ``generator.threads`` threads (default: the cores divided among the workers). The model file
is memory-mapped, so its weights are in memory once whatever the number of workers. Scoring and writing stay
in the calling process, as with threads.

Outputs do not depend on the number of workers: the backend's reproducible mode makes each answer a function
of its question alone (see ``quco.llm.batching``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from quco.answer import STRICT, AnswerProtocol
from quco.config import PipelineConfig
from quco.datasets import Example
from quco.errors import QucoError
from quco.machine import usable_cores

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

# Backends whose generator runs in this process and serialises its calls: workers are processes.
PROCESS_BACKENDS = ("llamacpp",)

_WORKER: dict[str, Any] = {}  # the pipeline of this worker process (set by _init)


class WorkerError(QucoError):
    """A worker process could not build its pipeline, or died."""


def _init(config_json: str, threads: int, protocol: AnswerProtocol) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops the workers
    logging.basicConfig(level=logging.WARNING, format=f"[worker {os.getpid()}] %(levelname)s %(message)s")
    try:
        from quco.pipeline import Pipeline

        cfg = PipelineConfig.model_validate_json(config_json)
        cfg = cfg.model_copy(update={"generator": cfg.generator.model_copy(update={"threads": threads})})
        pipe = Pipeline.from_config(cfg, progress=False)
        _WORKER.update(pipe=pipe, protocol=protocol)
    except Exception as exc:  # reported by the first question this worker is given
        _WORKER["error"] = f"{type(exc).__name__}: {exc}"


def _answer(position: int, example: Example, recorded: dict[str, Any] | None) -> Any:
    from quco.eval.runner import _answer_one, _finish_recorded

    if "error" in _WORKER:
        raise WorkerError(f"a worker process could not build its pipeline: {_WORKER['error']}")
    pipe, protocol = _WORKER["pipe"], _WORKER["protocol"]
    if recorded is not None:  # --traces-from: the recorded trace stands in for the method's answer
        return _finish_recorded(pipe, recorded, protocol, example, position)
    return _answer_one(lambda q: pipe.answer(q, protocol=protocol), example, position)


class ProcessWorkers:
    """``workers`` processes answering questions of one config; ``outcomes`` yields them as they finish."""

    def __init__(
        self,
        config: PipelineConfig,
        workers: int,
        *,
        protocol: AnswerProtocol = STRICT,
        recorded: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.config = config
        self.workers = workers
        self.threads = config.generator.threads or max(1, usable_cores() // workers)
        self.protocol = protocol
        self.recorded = recorded or {}

    def outcomes(self, todo: list[tuple[int, Example]]) -> Iterator[Any]:
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


def process_workers(
    config: PipelineConfig | None,
    backend: str | None,
    workers: int,
    *,
    protocol: AnswerProtocol = STRICT,
    recorded: dict[str, dict[str, Any]] | None = None,
) -> ProcessWorkers | None:
    """Worker processes for a config whose backend needs them and more than one worker; else None."""
    if config is None or workers <= 1 or backend not in PROCESS_BACKENDS:
        return None
    return ProcessWorkers(config, workers, protocol=protocol, recorded=recorded)


__all__ = [
    "PROCESS_BACKENDS",
    "bounded_as_completed",
    "ProcessWorkers",
    "WorkerError",
    "process_workers",
]
