"""``run_eval``: answer a dataset's questions, score them, and write one durable JSON line per question.

A run directory holds ``config.yaml`` (the resolved pipeline config, the dataset and a hash of both) and
``results.jsonl``. Every line is flushed and fsynced before the next question starts, so a run killed at any
moment loses at most the questions in flight; re-running the same command skips what is recorded. A
different config refuses to resume into the directory, because mixing two configs' answers in one file
would silently corrupt every number computed from it.

Concurrency: with ``workers > 1`` questions are answered on threads that share one pipeline. Whether that
is safe and useful is the backend's business (the in-process transformers backend serialises generation
with a lock, so it runs with one worker here); scoring and writing always happen on the calling thread.
For the in-process llama.cpp backend the workers are processes (``quco.eval.parallel``); by default there is
one, decoding with every core as a thread (measured faster than one process per core).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from filelock import FileLock, Timeout

from quco.answer import PUBLISHED_PROTOCOL_DATASETS, AnswerProtocol, protocol_named
from quco.config import PipelineConfig, load_config
from quco.datasets import Example, load_dataset, resolve_dataset
from quco.errors import QucoError
from quco.eval.metrics import score_prediction
from quco.eval.parallel import bounded_as_completed, process_workers
from quco.eval.runs import (
    CONFIG_FILE,
    RESULTS_FILE,
    RunError,
    current_names,
    scan_results,
    unique_records,
)
from quco.machine import cpu_name, load_average
from quco.paths import data_dir
from quco.storage import file_sha256
from quco.trace import Trace

log = logging.getLogger(__name__)

EVAL_FORMAT = "quco-eval/1"
# Bump when extraction or scoring changes: old runs then refuse to resume instead of mixing two rules.
METRICS_VERSION = 1
AnswerFn = Callable[[str], Trace]


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


@dataclass
class _Target:
    """What answers questions, as resolved from ``run_eval``'s first argument."""

    identity: dict[str, Any]  # hashed: the resolved config, or the answer function's name + fingerprint
    build: Callable[[], tuple[AnswerFn, Any]]  # -> (answer_fn, generator or None)
    method: str
    config: PipelineConfig | None = None
    backend: str | None = None
    built_here: bool = False  # built from a config (so worker processes can build it too)


def _pipeline_identity(cfg: PipelineConfig) -> dict[str, Any]:
    """What a run from this config is: the resolved config, its prompt, and the rates a control takes from a
    matched run (so that a control resumed after its matched run changed is refused, not silently mixed)."""
    from quco.methods import method_class
    from quco.pipeline import prompt_identity

    identity: dict[str, Any] = {"pipeline": cfg.model_dump(mode="json"), "prompt": prompt_identity(cfg)}
    method = method_class(cfg.method)(cfg.params)
    rates = method.matched_rates()
    if rates is not None:
        identity["matched_rates"] = rates
    inputs = method.inputs()
    if inputs is not None:
        identity["inputs"] = inputs
    return identity


def _resolve_target(
    target: Any, overrides: dict[str, Any] | None, fingerprint: str | None, progress: bool
) -> _Target:
    if isinstance(target, str | Path) or target is None:
        target = load_config(target, overrides=overrides)
    elif overrides:
        raise QucoError("overrides apply to a config file or PipelineConfig, not to a built pipeline")

    if isinstance(target, PipelineConfig):
        cfg = target

        def build() -> tuple[AnswerFn, Any]:
            from quco.pipeline import Pipeline

            pipe = Pipeline.from_config(cfg, progress=progress)
            return pipe.answer, pipe

        return _Target(
            _pipeline_identity(cfg),
            build,
            cfg.method,
            cfg,
            cfg.generator.backend,
            built_here=True,
        )
    pipe_cfg = getattr(target, "config", None)
    if hasattr(target, "answer") and isinstance(pipe_cfg, PipelineConfig):  # a built Pipeline
        return _Target(
            _pipeline_identity(pipe_cfg),
            lambda: (target.answer, target),
            pipe_cfg.method,
            pipe_cfg,
            pipe_cfg.generator.backend,
        )
    if callable(target):
        name = (
            f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(target).__name__)}"
        )
        method = str(getattr(target, "method", "") or name.rsplit(".", 1)[-1])
        identity = {"answerer": name, "method": method, "fingerprint": fingerprint}
        return _Target(identity, lambda: (target, None), method)
    raise QucoError(
        f"cannot evaluate a {type(target).__name__}: pass a config file, a PipelineConfig, a Pipeline, "
        "or a function question -> Trace"
    )


def _hash(identity: dict[str, Any]) -> str:
    blob = json.dumps(identity, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ, for an error message a person can act on."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            out += _differences(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [f"{prefix[:-1]} ({old!r} -> {new!r})"]


def _portable(path: Path) -> str:
    """A dataset path as a run records it: under the data directory, as ``${QUCO_DATA_DIR}/...`` (the
    notation configs use), so a run directory committed on one machine names no folder of that machine."""
    try:
        rel = path.resolve().relative_to(data_dir().resolve())
    except ValueError:
        return str(path)
    return "${QUCO_DATA_DIR}/" + rel.as_posix()


def _fsync_write(fh, text: str) -> None:
    fh.write(text)
    fh.flush()
    os.fsync(fh.fileno())


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        _fsync_write(fh, text)
    os.replace(tmp, path)


# -- the run ------------------------------------------------------------------------------------------------


@dataclass
class _Outcome:
    example: Example
    position: int
    trace: Trace | None = None
    prediction: str = ""
    reprompted: bool = False
    error: str | None = None
    error_traceback: str | None = None
    seconds: float = 0.0
    cpu_seconds: float | None = None  # CPU time of this process, all its threads; None if it was shared
    load: float | None = None  # the machine's 1-minute load average when the question ended
    cpu: str = ""  # the processor that answered it (quco.machine.cpu_name)


def _answer_one(
    answer_fn: AnswerFn, example: Example, position: int, *, shared_process: bool = False
) -> _Outcome:
    """Answer one question, timing it. ``shared_process``: other questions run on threads of this process at
    the same time, so its CPU time is not this question's alone (and is not recorded)."""
    out = _Outcome(example, position)
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        trace = answer_fn(example.question)
        if not isinstance(trace, Trace):
            raise TypeError(f"the answer function returned {type(trace).__name__}, expected a quco Trace")
        out.trace = trace
        out.prediction = trace.prediction
        out.reprompted = any(s.stage == "after" and s.decision == "reprompt" for s in trace.steps)
    except Exception as exc:  # recorded, and the run goes on
        out.error = f"{type(exc).__name__}: {exc}"
        out.error_traceback = traceback.format_exc(limit=8)
        log.warning("question %s failed: %s", example.id, out.error)
    out.seconds = round(time.perf_counter() - start, 4)
    if not shared_process:
        out.cpu_seconds = round(time.process_time() - cpu_start, 4)
    out.load = load_average()
    out.cpu = cpu_name()
    return out


def _finish_recorded(
    pipe: Any,
    recorded: dict[str, Any],
    protocol: AnswerProtocol,
    example: Example,
    position: int,
    *,
    shared_process: bool = False,
) -> _Outcome:
    """--traces-from: finish a recorded trace under this run's protocol; its seconds add to the recorded."""
    trace = Trace.from_dict(recorded["trace"])
    outcome = _answer_one(
        lambda _q: pipe.finish(trace, protocol), example, position, shared_process=shared_process
    )
    outcome.seconds = round(float(recorded.get("seconds") or 0.0) + outcome.seconds, 4)
    cpu = recorded.get("cpu_seconds")
    outcome.cpu_seconds = (
        round(float(cpu) + outcome.cpu_seconds, 4)
        if isinstance(cpu, int | float) and outcome.cpu_seconds is not None
        else None
    )
    first = recorded.get("cpu")
    if isinstance(first, str) and first and first != outcome.cpu:  # its seconds come from both machines
        outcome.cpu = f"{first}, then {outcome.cpu}"
    return outcome


def _record(outcome: _Outcome) -> dict[str, Any]:
    ex = outcome.example
    rec: dict[str, Any] = {
        "id": ex.id,
        "index": ex.meta.get("index", outcome.position),
        "question": ex.question,
        "gold": list(ex.answers),
        "kind": ex.kind,
    }
    if outcome.error is None:
        score = score_prediction(outcome.prediction, ex.answers, ex.kind, ex.dataset)
        rec.update(
            prediction=outcome.prediction,
            answer=score.answer,
            missing=score.missing,
            reprompted=outcome.reprompted,
            em=score.em,
            f1=round(score.f1, 6),
            error=None,
        )
    else:
        rec.update(prediction="", answer="", missing=True, reprompted=False, em=0.0, f1=0.0)
        rec.update(error=outcome.error, error_traceback=outcome.error_traceback)
    rec["seconds"] = outcome.seconds
    rec["cpu_seconds"] = outcome.cpu_seconds
    rec["load"] = outcome.load
    rec["cpu"] = outcome.cpu
    rec["meta"] = {k: v for k, v in ex.meta.items() if k != "index"}
    rec["trace"] = outcome.trace.to_dict() if outcome.trace is not None else None
    return rec


def _recorded_traces(run_dir: str | Path, identity: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Records (by question id) of a run whose traces can stand in for this run's answers.

    That run must have the same identity except for the answer protocol, which must have been strict (its
    traces would otherwise hold the protocol's step already). Records with an error or without a trace are
    left out.
    """
    from quco.eval.runs import load_run

    src = load_run(run_dir)
    if "answer_protocol" not in src.config:
        raise RunError(f"--traces-from {run_dir}: {_OLDER_RUN}")
    protocol_keys = ("reprompt", "answer_protocol")
    theirs = {k: v for k, v in src.config.items() if k not in _SELECTION_KEYS and k not in protocol_keys}
    ours = {k: v for k, v in identity.items() if k not in protocol_keys}
    diffs = _differences(theirs, json.loads(json.dumps(ours, default=str)))
    if diffs:
        shown = "; ".join(diffs[:3]) + (f"; and {len(diffs) - 3} more" if len(diffs) > 3 else "")
        raise RunError(f"--traces-from {run_dir} was made with a different configuration ({shown})")
    if src.config["answer_protocol"].get("name") != "strict":
        raise RunError(
            f"--traces-from {run_dir} used an answer protocol with a re-prompt: its traces already hold that "
            "call; use a run made with --strict"
        )
    return {str(r["id"]): r for r in src.records if not r.get("error") and r.get("trace")}


def default_out_dir(dataset: str, method: str, config_hash: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in f"{dataset}-{method}")
    return Path("runs") / f"{safe}-{config_hash[:8]}"


def _json_default(value: Any) -> Any:
    """Signals may hold numpy scalars/arrays or sets; store them as plain JSON rather than fail the run."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


# Keys of config.yaml that describe this invocation and are not part of the hashed identity.
_SELECTION_KEYS = ("config_hash", "label", "created", "updated", "selection")


# Runs written before the answer protocol was part of the identity were made with other loop defaults (the token
# budget over the whole prediction, QuCo-RAG ending generation at a negation, DRAGIN skipping the answer sentence):
# their answers cannot be continued or reused by this version.
_OLDER_RUN = (
    "made by an older version of quco whose defaults differ (token budget, answer protocol, QuCo-RAG's loop, "
    "DRAGIN's answer sentence); run it again"
)


def _check_or_write_config(
    out: Path, identity: dict[str, Any], config_hash: str, selection: dict[str, Any], label: str | None
) -> None:
    path = out / CONFIG_FILE
    now = datetime.now(UTC).isoformat(timespec="seconds")
    created = now
    if path.is_file():
        stored = current_names(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
        if stored and "answer_protocol" not in stored:
            raise RunError(f"{out} holds a run {_OLDER_RUN}: use another --out, or delete that directory")
        if stored.get("config_hash") != config_hash:
            old = {k: v for k, v in stored.items() if k not in _SELECTION_KEYS}
            # A setting added to quco since the run was made, left unset (None: what the run did), is no change:
            # the run resumes under the new form of its configuration.
            diffs = _differences(old, identity)
            if diffs:
                shown = "; ".join(diffs[:3]) + (f"; and {len(diffs) - 3} more" if len(diffs) > 3 else "")
                raise RunError(
                    f"{out} holds a run made with a different configuration ({shown}); "
                    "use another --out, or delete that directory to start over"
                )
            log.info("%s: its configuration gains settings added since, all unset; resuming", out)
        created = stored.get("created", now)
        label = label if label is not None else stored.get("label")
    doc = {"config_hash": config_hash, "label": label, "created": created, "updated": now}
    doc.update(identity)
    doc["selection"] = selection
    _atomic_write(path, yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))


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


def _outcomes(
    todo: list[tuple[int, Example]], workers: int, call: Callable[[int, Example], _Outcome]
) -> Iterator[_Outcome]:
    """Answer ``todo`` in order on this thread, or on ``workers`` threads (yielding as they finish)."""
    if workers <= 1:
        for pos, ex in todo:
            yield call(pos, ex)
        return
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="quco-eval")
    try:
        for fut in bounded_as_completed(lambda item: pool.submit(call, *item), todo, 2 * workers):
            yield fut.result()
    finally:
        # On Ctrl-C (or any exit) drop what has not started; questions in flight are redone on resume.
        pool.shutdown(wait=False, cancel_futures=True)


def run_eval(
    target: Any,
    dataset: str | Path,
    limit: int | None = None,
    offset: int = 0,
    out_dir: str | Path | None = None,
    workers: int | None = None,
    resume: bool = True,
    reprompt: bool = False,
    progress: bool = True,
    *,
    protocol: str | None = None,
    sample: int | None = None,
    seed: int = 0,
    overrides: dict[str, Any] | None = None,
    retry_errors: bool = False,
    fingerprint: str | None = None,
    reprompt_max_new_tokens: int | None = None,
    label: str | None = None,
    traces_from: str | Path | None = None,
) -> RunSummary:
    """Evaluate ``target`` on ``dataset`` into ``out_dir``, resuming what is already recorded there.

    ``target`` is a config file path, a ``PipelineConfig``, a built ``Pipeline``, or any function
    ``question -> Trace`` (identified in the config hash by its name and ``fingerprint``). Questions that raise
    are recorded with their error (``retry_errors`` re-runs them). Ctrl-C stops after flushing what finished.

    ``protocol`` is the answer protocol (``quco.answer``): "published" (cut at "Question:"/"Note:", re-prompt
    when no answer is stated, counted), "strict" (none), or None: "published" for the datasets whose published
    evaluation re-prompts (HotpotQA, 2WikiMultihopQA) when ``target`` is a pipeline, else "strict";
    ``reprompt=True`` asks for "published" anywhere. ``traces_from`` names a finished strict run of the same
    configuration: its recorded traces stand in for the method's answers (the loop is deterministic given its
    config), so only the protocol's re-prompt calls are made. Questions it lacks (or that raised there) are
    answered afresh.
    """
    if workers is not None and workers < 1:
        raise QucoError(f"workers must be >= 1, got {workers}")
    start = time.perf_counter()
    ref = resolve_dataset(dataset)
    examples = load_dataset(dataset, limit=limit, offset=offset, sample=sample, seed=seed)
    tgt = _resolve_target(target, overrides, fingerprint, progress)
    if workers is None:  # one: llama.cpp decodes fastest with every core as a thread of one process
        workers = 1
    if protocol is None:
        default = (
            "published" if ref.name in PUBLISHED_PROTOCOL_DATASETS and tgt.config is not None else "strict"
        )
        protocol = "published" if reprompt else default
    answer_protocol = protocol_named(protocol, reprompt_max_new_tokens)
    if traces_from is not None and not answer_protocol.reprompt:
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
            "sample_seed": seed if sample is not None else None,
        },
        "answer_protocol": {"name": answer_protocol.name}
        | ({"max_new_tokens": answer_protocol.max_new_tokens} if answer_protocol.reprompt else {}),
    }
    config_hash = _hash(identity)
    reuse = _recorded_traces(traces_from, identity) if traces_from is not None else {}
    out = Path(out_dir) if out_dir is not None else default_out_dir(ref.name, tgt.method, config_hash)
    out.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(out / ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RunError(
            f"another `quco eval` is writing into {out}; wait for it or choose another --out"
        ) from None
    try:
        from quco.world.guard import record_world  # world.json: which corpora, pool or realistic

        record_world(out, tgt.config)
        return _run_locked(
            out, tgt, identity, config_hash, examples, ref, workers, resume, answer_protocol, progress,
            retry_errors, label, start,
            {"dataset_path": _portable(ref.path), "limit": limit, "offset": offset, "sample": sample, "seed": seed}
            | ({"traces_from": str(traces_from)} if traces_from is not None else {}),
            reuse,
        )  # fmt: skip
    finally:
        lock.release()


def _run_locked(
    out: Path,
    tgt: _Target,
    identity: dict[str, Any],
    config_hash: str,
    examples: list[Example],
    ref: Any,
    workers: int,
    resume: bool,
    protocol: AnswerProtocol,
    progress: bool,
    retry_errors: bool,
    label: str | None,
    start: float,
    selection: dict[str, Any],
    reuse: dict[str, dict[str, Any]] | None = None,
) -> RunSummary:
    results = out / RESULTS_FILE
    scan = scan_results(results)
    if scan.records and not resume:
        raise RunError(
            f"{out} already holds {len(scan.records)} results; resume into it (drop --no-resume) or choose another --out"
        )
    _check_or_write_config(out, identity, config_hash, selection, label)
    if scan.torn:
        log.warning("%s: dropping a torn last line (the previous run was killed while writing)", results)
        with results.open("r+b") as fh:
            fh.truncate(scan.good_bytes)
            os.fsync(fh.fileno())
    records = unique_records(scan.records, results)
    if retry_errors and any(r.get("error") for r in records):
        records = [r for r in records if not r.get("error")]
        lines = "".join(json.dumps(r, ensure_ascii=False, default=_json_default) + "\n" for r in records)
        _atomic_write(results, lines)
    selected_ids = {ex.id for ex in examples}
    prior = [r for r in records if str(r.get("id")) in selected_ids]
    done_ids = {str(r["id"]) for r in prior}
    todo = [(pos, ex) for pos, ex in enumerate(examples) if ex.id not in done_ids]
    log.info("%s: %d of %d questions recorded, %d to answer", out, len(prior), len(examples), len(todo))

    errors = sum(1 for r in prior if r.get("error"))
    new: list[dict[str, Any]] = []
    if todo:
        procs = process_workers(
            tgt.config if tgt.built_here else None, tgt.backend, workers, protocol=protocol, recorded=reuse
        )
        answer_fn, pipe = tgt.build() if procs is None else (None, None)
        if pipe is not None:
            answer_fn = functools.partial(pipe.answer, protocol=protocol)
        elif procs is None and protocol.reprompt:
            raise QucoError("the answer re-prompt needs a pipeline's generator; pass a config or a Pipeline")
        if workers > 1 and tgt.backend == "hf":
            log.warning(
                "the in-process transformers backend generates one question at a time; using 1 worker"
            )
            workers = 1

        def call(pos: int, ex: Example) -> _Outcome:
            recorded = (reuse or {}).get(ex.id)
            if recorded is not None:
                return _finish_recorded(pipe, recorded, protocol, ex, pos, shared_process=workers > 1)
            return _answer_one(answer_fn, ex, pos, shared_process=workers > 1)

        em_sum = sum(float(r.get("em") or 0.0) for r in prior)
        bar = _Progress(progress, f"{tgt.method} on {ref.name}", len(examples), len(prior), em_sum)
        try:
            with bar, results.open("a", encoding="utf-8") as fh:
                for outcome in _outcomes(todo, workers, call) if procs is None else procs.outcomes(todo):
                    rec = _record(outcome)
                    _fsync_write(fh, json.dumps(rec, ensure_ascii=False, default=_json_default) + "\n")
                    new.append(rec)
                    errors += 1 if rec["error"] else 0
                    bar.advance(rec["em"], errors)
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
        missing=sum(1 for r in done if r.get("missing") and not r.get("error")),
        em=sum(float(r.get("em") or 0.0) for r in done) / n if n else 0.0,
        f1=sum(float(r.get("f1") or 0.0) for r in done) / n if n else 0.0,
        seconds=round(time.perf_counter() - start, 3),
        config_hash=config_hash,
    )
