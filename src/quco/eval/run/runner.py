"""``run_eval``: answer a dataset's questions, score them, and write one durable JSON line per question.

A run directory holds ``config.yaml`` (the resolved pipeline config, the dataset and a hash of both) and
``results.jsonl``. Every line is flushed and fsynced before the next question starts, so a run killed at any
moment loses at most the questions in flight; re-running the same command skips what is recorded. A
different config refuses to resume into the directory, because mixing two configs' answers in one file
would silently corrupt every number computed from it.

Concurrency: with ``workers > 1`` questions are answered on threads sharing one pipeline or in worker
processes, as the generator declares (``quco.eval.run.executors``); by default there is one worker, decoding with
every core as a thread (measured faster than one process per core). Scoring and writing always happen on the
calling thread. The run directory's files are read and written by ``quco.eval.runs.store``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from quco.answer import PUBLISHED_PROTOCOL_DATASETS, AnswerProtocol, protocol_named
from quco.datasets import DatasetRef, Example, load_dataset, resolve_dataset
from quco.errors import QucoError
from quco.eval.run.executors import choose_executor
from quco.eval.run.target import Target, resolve_target
from quco.eval.runs.records import EVAL_FORMAT, Record, RunConfig, Selection, config_hash, differences
from quco.eval.runs.store import (
    RESULTS_FILE,
    RunError,
    appending,
    drop_torn_line,
    keep_records,
    load_run,
    read_config,
    scan_results,
    unique_records,
    write_config,
)
from quco.eval.runs.world_file import record_world
from quco.paths import data_dir
from quco.storage import file_sha256

log = logging.getLogger(__name__)

# Bump when extraction or scoring changes: old runs then refuse to resume instead of mixing two rules.
METRICS_VERSION = 1

__all__ = [
    "EVAL_FORMAT",
    "METRICS_VERSION",
    "EvalOptions",
    "Questions",
    "RunSummary",
    "default_out_dir",
    "run_eval",
]


@dataclass(frozen=True)
class Questions:
    """Which of the dataset's questions to answer: ``limit`` from ``offset``, or a seeded ``sample``."""

    limit: int | None = None
    offset: int = 0
    sample: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class EvalOptions:
    """How to run an evaluation (none of these but the protocol changes what a question's answer is)."""

    out_dir: str | Path | None = None  # default: runs/DATASET-METHOD-HASH
    workers: int | None = None  # default 1
    resume: bool = True  # False: refuse a directory that already holds results
    progress: bool = True
    # The answer protocol (``quco.answer``): "published", "strict", or None: "published" for the datasets whose
    # published evaluation re-prompts when the target is a pipeline, else "strict"; ``reprompt`` asks for
    # "published" anywhere.
    protocol: str | None = None
    reprompt: bool = False
    reprompt_max_new_tokens: int | None = None
    overrides: dict[str, Any] | None = None  # dotted config overrides (a config target only)
    retry_errors: bool = False  # answer again the questions recorded with an error
    fingerprint: str | None = None  # identifies an answer function's version in the config hash
    label: str | None = None  # the run's name in summaries (default: its directory's)
    traces_from: str | Path | None = None  # a finished strict run whose traces stand in for the method's


@dataclass
class RunSummary:
    """What a call to ``run_eval`` did, and the scores over the selected questions recorded so far."""

    out_dir: Path
    selected: int
    completed: int
    resumed: int  # already recorded before this call
    new: int  # answered by this call
    errors: int
    missing: int  # answered but no answer could be extracted
    em: float
    f1: float
    seconds: float
    config_hash: str


def _portable(path: Path) -> str:
    """A dataset path as a run records it: under the data directory, as ``${QUCO_DATA_DIR}/...`` (the
    notation configs use), so a run directory committed on one machine names no folder of that machine."""
    try:
        rel = path.resolve().relative_to(data_dir().resolve())
    except ValueError:
        return str(path)
    return "${QUCO_DATA_DIR}/" + rel.as_posix()


def _shown(diffs: list[str]) -> str:
    return "; ".join(diffs[:3]) + (f"; and {len(diffs) - 3} more" if len(diffs) > 3 else "")


def _recorded_traces(run_dir: str | Path, identity: dict[str, Any]) -> dict[str, Record]:
    """Records (by question id) of a run whose traces can stand in for this run's answers.

    That run must have the same identity except for the answer protocol, which must have been strict (its
    traces would otherwise hold the protocol's step already). Records with an error or without a trace are
    left out.
    """
    src = load_run(run_dir)
    if src.config.answer_protocol is None:
        raise RunError(f"--traces-from {run_dir}: {_OLDER_RUN}")
    protocol_keys = ("reprompt", "answer_protocol")
    theirs = {k: v for k, v in src.config.identity.items() if k not in protocol_keys}
    ours = {k: v for k, v in identity.items() if k not in protocol_keys}
    diffs = differences(theirs, json.loads(json.dumps(ours, default=str)))
    if diffs:
        raise RunError(f"--traces-from {run_dir} was made with a different configuration ({_shown(diffs)})")
    if src.config.answer_protocol != "strict":
        raise RunError(
            f"--traces-from {run_dir} used an answer protocol with a re-prompt: its traces already hold that "
            "call; use a run made with --strict"
        )
    return {r.id: r for r in src.records if not r.error and r.trace}


def default_out_dir(dataset: str, method: str, config_hash: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in f"{dataset}-{method}")
    return Path("runs") / f"{safe}-{config_hash[:8]}"


# Runs written before the answer protocol was part of the identity were made with other loop defaults (the token
# budget over the whole prediction, QuCo-RAG ending generation at a negation, DRAGIN skipping the answer sentence):
# their answers cannot be continued or reused by this version.
_OLDER_RUN = (
    "made by an older version of quco whose defaults differ (token budget, answer protocol, QuCo-RAG's loop, "
    "DRAGIN's answer sentence); run it again"
)


def _check_or_write_config(out: Path, config: RunConfig) -> None:
    """Write ``config`` into ``out``, or refuse when ``out`` holds a run with another identity. A resumed run
    keeps its creation time and (unless given anew) its label."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    created, label = now, config.label
    if (out / "config.yaml").is_file():
        stored = read_config(out)
        if stored.answer_protocol is None:
            raise RunError(f"{out} holds a run {_OLDER_RUN}: use another --out, or delete that directory")
        if stored.config_hash != config.config_hash:
            # A setting added to quco since the run was made, left unset (None: what the run did), is no change:
            # the run resumes under the new form of its configuration.
            diffs = differences(stored.identity, config.identity)
            if diffs:
                raise RunError(
                    f"{out} holds a run made with a different configuration ({_shown(diffs)}); "
                    "use another --out, or delete that directory to start over"
                )
            log.info("%s: its configuration gains settings added since, all unset; resuming", out)
        created = stored.created or now
        label = label if label is not None else stored.label
    write_config(out, replace(config, label=label, created=created, updated=now))


class _Progress:
    """A rich progress bar with ETA and the running EM, or nothing when progress is off."""

    def __init__(self, enabled: bool, description: str, total: int, completed: int, em_sum: float) -> None:
        self.enabled = enabled
        self.done = completed
        self.em_sum = em_sum
        self._progress = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("EM {task.fields[em]}"),
                TextColumn("errors {task.fields[errors]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._task = self._progress.add_task(
                description, total=total, completed=completed, em=self._em(), errors=0
            )

    def _em(self) -> str:
        return f"{self.em_sum / self.done:.3f}" if self.done else "-"

    def __enter__(self) -> _Progress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def advance(self, em: float, errors: int) -> None:
        self.done += 1
        self.em_sum += em
        if self._progress is not None:
            self._progress.update(self._task, advance=1, em=self._em(), errors=errors)


def run_eval(
    target: Any,
    dataset: str | Path,
    questions: Questions | None = None,
    options: EvalOptions | None = None,
) -> RunSummary:
    """Evaluate ``target`` on ``dataset`` into ``options.out_dir``, resuming what is already recorded there.

    ``target`` is a config file path, a ``PipelineConfig``, a built ``Pipeline``, or any function
    ``question -> Trace`` (identified in the config hash by its name and ``options.fingerprint``). Questions
    that raise are recorded with their error (``retry_errors`` re-runs them). Ctrl-C stops after flushing what
    finished. ``options.traces_from`` names a finished strict run of the same configuration: its recorded traces
    stand in for the method's answers (the loop is deterministic given its config), so only the protocol's
    re-prompt calls are made. Questions it lacks (or that raised there) are answered afresh.
    """
    q = questions or Questions()
    opts = options or EvalOptions()
    if opts.workers is not None and opts.workers < 1:
        raise QucoError(f"workers must be >= 1, got {opts.workers}")
    start = time.perf_counter()
    ref = resolve_dataset(dataset)
    examples = load_dataset(dataset, limit=q.limit, offset=q.offset, sample=q.sample, seed=q.seed)
    tgt = resolve_target(target, opts.overrides, opts.fingerprint, opts.progress)
    protocol = opts.protocol
    if protocol is None:
        default = (
            "published" if ref.name in PUBLISHED_PROTOCOL_DATASETS and tgt.config is not None else "strict"
        )
        protocol = "published" if opts.reprompt else default
    answer_protocol = protocol_named(protocol, opts.reprompt_max_new_tokens)
    if opts.traces_from is not None and not answer_protocol.reprompt:
        raise QucoError(
            "--traces-from adds the answer protocol's re-prompt to a finished strict run; drop --strict"
        )
    identity: dict[str, Any] = {
        "format": EVAL_FORMAT,
        "metrics_version": METRICS_VERSION,
        **tgt.identity,
        "dataset": {
            "name": ref.name,
            "sha256": file_sha256(ref.path),
            "sample_seed": q.seed if q.sample is not None else None,
        },
        "answer_protocol": {"name": answer_protocol.name}
        | ({"max_new_tokens": answer_protocol.max_new_tokens} if answer_protocol.reprompt else {}),
    }
    run_config = RunConfig(
        identity,
        config_hash(identity),
        label=opts.label,
        selection=Selection(
            _portable(ref.path),
            q.limit,
            q.offset,
            q.sample,
            q.seed,
            str(opts.traces_from) if opts.traces_from is not None else None,
        ),
    )
    reuse = _recorded_traces(opts.traces_from, identity) if opts.traces_from is not None else {}
    out = (
        Path(opts.out_dir)
        if opts.out_dir is not None
        else default_out_dir(ref.name, tgt.method, run_config.hash())
    )
    out.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(out / ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RunError(
            f"another `quco eval` is writing into {out}; wait for it or choose another --out"
        ) from None
    try:
        record_world(out, tgt.config)  # world.json: which corpora, pool or realistic
        job = _Job(out, tgt, run_config, examples, ref, answer_protocol, reuse, start)
        return _run_locked(job, opts)
    finally:
        lock.release()


@dataclass
class _Job:
    """One invocation of ``run_eval``, resolved: where, what, on which questions, under which protocol."""

    out: Path
    target: Target
    config: RunConfig
    examples: list[Example]
    dataset: DatasetRef
    protocol: AnswerProtocol
    reuse: dict[str, Record]  # --traces-from: recorded answers by question id
    start: float  # perf_counter when the call began


def _run_locked(job: _Job, opts: EvalOptions) -> RunSummary:
    out, examples = job.out, job.examples
    results = out / RESULTS_FILE
    scan = scan_results(results)
    if scan.records and not opts.resume:
        raise RunError(
            f"{out} already holds {len(scan.records)} results; resume into it (drop --no-resume) or choose another --out"
        )
    _check_or_write_config(out, job.config)
    if scan.torn:
        log.warning("%s: dropping a torn last line (the previous run was killed while writing)", results)
        drop_torn_line(out, scan)
    records = unique_records(scan.records, results)
    if opts.retry_errors and any(r.error for r in records):
        records = keep_records(out, scan, lambda r: not r.error)
    selected_ids = {ex.id for ex in examples}
    prior = [r for r in records if r.id in selected_ids]
    done_ids = {r.id for r in prior}
    todo = [(pos, ex) for pos, ex in enumerate(examples) if ex.id not in done_ids]
    log.info("%s: %d of %d questions recorded, %d to answer", out, len(prior), len(examples), len(todo))

    errors = sum(1 for r in prior if r.error)
    new: list[Record] = []
    if todo:
        executor = choose_executor(job.target, opts.workers or 1, job.protocol, job.reuse)
        em_sum = sum(r.em for r in prior)
        title = f"{job.target.method} on {job.dataset.name}"
        bar = _Progress(opts.progress, title, len(examples), len(prior), em_sum)
        try:
            with bar, appending(out) as append:
                for outcome in executor.outcomes(todo):
                    rec = outcome.record()
                    append(rec)
                    new.append(rec)
                    errors += 1 if rec.error else 0
                    bar.advance(rec.em, errors)
        except KeyboardInterrupt:
            log.warning(
                "interrupted: %d of %d questions recorded in %s; run the same command again to resume",
                len(prior) + len(new), len(examples), out,
            )  # fmt: skip
            raise
    done = prior + new
    n = len(done)
    return RunSummary(
        out_dir=out,
        selected=len(examples),
        completed=n,
        resumed=len(prior),
        new=len(new),
        errors=errors,
        missing=sum(1 for r in done if r.missing and not r.error),
        em=sum(r.em for r in done) / n if n else 0.0,
        f1=sum(r.f1 for r in done) / n if n else 0.0,
        seconds=round(time.perf_counter() - job.start, 3),
        config_hash=job.config.config_hash or "",
    )


# Transitional: ``quco.eval.campaign.results`` imports this name; it moves to ``quco.eval.runs.records.differences``.
_differences = differences
