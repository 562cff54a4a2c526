"""A run directory on disk, read and written here only: ``config.yaml`` (a ``RunConfig``), ``results.jsonl``
(one ``Record`` per line) and ``world.json`` (``quco.eval.runs.world_file``).

Reading is shared by the runner (resume), the statistics, the analyses and the report, so that every tool
agrees on what a run holds: a torn last line (a killed writer) is ignored, a corrupt line elsewhere is an
error, and a question id recorded twice counts once (the first record). Writing is the runner's: each record is
flushed and fsynced before the next, the config is replaced atomically.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import IO, Any

import yaml

from quco.errors import QucoError
from quco.eval.runs.records import COST_FIELDS, DatasetId, Record, RunConfig
from quco.storage import write_bytes_atomic

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
RESULTS_FILE = "results.jsonl"

__all__ = [
    "CONFIG_FILE",
    "COST_FIELDS",
    "RESULTS_FILE",
    "Record",
    "ResultsScan",
    "Run",
    "RunConfig",
    "RunError",
    "load_run",
    "load_traces",
    "read_config",
    "scan_results",
    "unique_records",
]


class RunError(QucoError):
    """A run directory is missing, unreadable, or cannot be resumed as asked."""


@dataclass(frozen=True)
class ResultsScan:
    records: list[Record]
    good_bytes: int  # length of the file prefix holding complete, valid lines
    torn: bool  # a trailing partial or unparseable last line was found
    lines: list[bytes] = field(
        default_factory=list, repr=False
    )  # each record's line as read (with its newline)


def scan_results(path: Path) -> ResultsScan:
    """Parse ``results.jsonl``; a bad *last* line is reported as torn, a bad line elsewhere raises."""
    if not path.is_file():
        return ResultsScan([], 0, False)
    data = path.read_bytes()
    records: list[Record] = []
    lines: list[bytes] = []
    pos = 0
    lineno = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        last = end == -1 or data[end + 1 :].strip() == b""
        chunk = data[pos:] if end == -1 else data[pos:end]
        lineno += 1
        try:
            rec = json.loads(chunk.decode("utf-8")) if chunk.strip() else None
            if rec is not None and not isinstance(rec, dict):
                raise ValueError("not an object")
        except (ValueError, UnicodeDecodeError) as exc:
            if end == -1 or last:
                return ResultsScan(records, pos, True, lines)
            raise RunError(
                f"{path}: line {lineno} is corrupt ({exc}); delete that line and re-run to redo the question"
            ) from exc
        if end == -1:  # a complete JSON object without its newline: the write was cut before "\n"
            return ResultsScan(records, pos, True, lines)
        if rec is not None:
            records.append(Record.from_dict(rec))
            lines.append(data[pos : end + 1])
        pos = end + 1
    return ResultsScan(records, pos, False, lines)


def _first_of_each(ids: list[str], where: Path | str) -> list[int]:
    seen: set[str] = set()
    keep = []
    for i, rid in enumerate(ids):
        if rid in seen:
            log.warning("%s: question %s recorded twice; keeping the first record", where, rid)
            continue
        seen.add(rid)
        keep.append(i)
    return keep


def unique_records(records: list[Record], where: Path | str = "") -> list[Record]:
    """The records with each question id once (its first record)."""
    return [records[i] for i in _first_of_each([r.id for r in records], where)]


def current_names(config: dict[str, Any]) -> dict[str, Any]:
    """A recorded ``config.yaml`` with its model names in their current form (an alias, such as the evaluation
    model's earlier name, becomes the name): the run is compared and resumed as if recorded under it."""
    from quco.model_catalog import canonical_model_name

    pipeline = config.get("pipeline")
    if not isinstance(pipeline, dict):
        return config
    for section, key in (("generator", "model"), ("text", "extractor_model")):
        part = pipeline.get(section)
        if isinstance(part, dict) and isinstance(part.get(key), str):
            part[key] = canonical_model_name(part[key])
    return config


def read_config(run_dir: Path) -> RunConfig:
    """A run's ``config.yaml`` (model names in their current form)."""
    path = Path(run_dir) / CONFIG_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunError(
            f"{run_dir} is not a quco run directory (no {CONFIG_FILE}); pass the --out of `quco eval`"
        ) from None
    except (OSError, yaml.YAMLError) as exc:
        raise RunError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise RunError(f"{path} does not hold a mapping; it was not written by `quco eval`")
    return RunConfig.from_dict(current_names(data))


@dataclass
class Run:
    """A finished or partial run as read from disk."""

    dir: Path
    config: RunConfig
    records: list[Record] = field(default_factory=list)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "config" and isinstance(value, dict):  # transitional: callers that still build a mapping
            value = RunConfig.from_dict(value)
        super().__setattr__(name, value)

    @property
    def name(self) -> str:
        return str(self.config.label) if self.config.label else self.dir.name

    @property
    def method(self) -> str:
        return self.config.method

    @property
    def dataset(self) -> DatasetId:
        return self.config.dataset

    @cached_property
    def world(self) -> dict[str, Any]:
        """The run's world record (``world.json``, or inferred from its config for runs made before it)."""
        from quco.eval.runs.world_file import read_world

        return read_world(self.dir, self.config)

    def by_id(self) -> dict[str, Record]:
        return {r.id: r for r in self.records}

    def restricted(self, ids: Sequence[str]) -> Run:
        """The same run over the questions of ``ids`` it recorded, in the order of ``ids`` (so that two runs
        restricted to the same ids pair question by question)."""
        by_id = self.by_id()
        return Run(self.dir, self.config, [by_id[i] for i in ids if i in by_id])

    def values(self, metric: str) -> list[float]:
        """Per-question values of ``em``, ``f1`` or a cost field (errored questions: 0 for scores, NaN for costs)."""
        if metric == "em":
            return [r.em for r in self.records]
        if metric == "f1":
            return [r.f1 for r in self.records]
        return [r.costs()[metric] for r in self.records]


def load_run(run_dir: str | Path) -> Run:
    """Read a run directory (the results file is not modified, a torn last line is skipped).

    Traces written by an older version are read in the current form (``quco.eval.runs.legacy``).
    """
    from quco.eval.runs.legacy import upgrade_trace

    path = Path(run_dir)
    config = read_config(path)
    scan = scan_results(path / RESULTS_FILE)
    if scan.torn:
        log.warning("%s: ignoring a torn last line (the run was killed while writing)", path / RESULTS_FILE)
    records = unique_records(scan.records, path / RESULTS_FILE)
    for rec in records:
        if isinstance(rec.trace, dict):
            rec.trace = upgrade_trace(rec.trace, config.pipeline)
    return Run(path, config, records)


def load_traces(path: str | Path) -> list[dict[str, Any]]:
    """The traces of a run (its directory, or the ``results.jsonl`` inside one), in the current form.

    Records that raised (no trace) are left out; a run without any trace is an error.
    """
    from quco.eval.runs.legacy import upgrade_trace

    p = Path(path).expanduser()
    results = p / RESULTS_FILE if p.is_dir() else p
    if not results.is_file():
        raise RunError(f"no results file at {results}; give a run directory or its {RESULTS_FILE}")
    pipeline = read_config(results.parent).pipeline if (results.parent / CONFIG_FILE).is_file() else None
    records = unique_records(scan_results(results).records, results)
    traces = [upgrade_trace(r.trace, pipeline) for r in records if isinstance(r.trace, dict)]
    if not traces:
        raise RunError(f"{results} holds no traces; run an evaluation that writes them first")
    return traces


# -- writing ------------------------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    """Signals may hold numpy scalars/arrays or sets; store them as plain JSON rather than fail the run."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def record_line(record: Record) -> str:
    """One line of ``results.jsonl``."""
    return json.dumps(record.to_dict(), ensure_ascii=False, default=_json_default) + "\n"


def _fsync_write(fh: IO[str], text: str) -> None:
    fh.write(text)
    fh.flush()
    os.fsync(fh.fileno())


def write_config(run_dir: Path, config: RunConfig) -> None:
    """Replace ``config.yaml`` atomically."""
    text = yaml.safe_dump(config.to_dict(), sort_keys=False, allow_unicode=True)
    write_bytes_atomic(Path(run_dir) / CONFIG_FILE, text.encode("utf-8"))


def drop_torn_line(run_dir: Path, scan: ResultsScan) -> None:
    """Cut a torn last line off ``results.jsonl`` (what a killed writer left)."""
    with (Path(run_dir) / RESULTS_FILE).open("r+b") as fh:
        fh.truncate(scan.good_bytes)
        os.fsync(fh.fileno())


def keep_records(run_dir: Path, scan: ResultsScan, keep: Any) -> list[Record]:
    """Rewrite ``results.jsonl`` with the first record of each question for which ``keep(record)`` holds, each
    line as it was read; the records kept."""
    path = Path(run_dir) / RESULTS_FILE
    chosen = [i for i in _first_of_each([r.id for r in scan.records], path) if keep(scan.records[i])]
    write_bytes_atomic(path, b"".join(scan.lines[i] for i in chosen))
    return [scan.records[i] for i in chosen]


@contextmanager
def appending(run_dir: Path) -> Iterator[Any]:
    """A function that appends a record to ``results.jsonl``, durably (flushed and fsynced) before it returns."""
    with (Path(run_dir) / RESULTS_FILE).open("a", encoding="utf-8") as fh:
        yield lambda record: _fsync_write(fh, record_line(record))
