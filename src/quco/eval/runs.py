"""A run directory on disk: ``config.yaml`` plus ``results.jsonl`` (one JSON line per question).

Reading is shared by the runner (resume), the statistics, the analyses and the report, so that every tool
agrees on what a run holds: a torn last line (a killed writer) is ignored, a corrupt line elsewhere is an
error, and a question id recorded twice counts once (the first record).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from quco.errors import QucoError

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
RESULTS_FILE = "results.jsonl"

# Per-question quantities the statistics and report know about, in display order. ``main_*`` count the main
# generations only (drafts and regenerations), as the papers' #Call and #Tok do; ``llm_calls`` and ``tokens``
# count every role (extractor, sampler, judge, probe, answer re-prompt, ...).
COST_FIELDS = (
    "retrievals",
    "main_llm_calls",
    "llm_calls",
    "main_tokens",
    "tokens",
    "prompt_tokens",
    "corpus_queries",
    "extractor_calls",
    "seconds",
)


class RunError(QucoError):
    """A run directory is missing, unreadable, or cannot be resumed as asked."""


@dataclass(frozen=True)
class ResultsScan:
    records: list[dict[str, Any]]
    good_bytes: int  # length of the file prefix holding complete, valid lines
    torn: bool  # a trailing partial or unparseable last line was found


def scan_results(path: Path) -> ResultsScan:
    """Parse ``results.jsonl``; a bad *last* line is reported as torn, a bad line elsewhere raises."""
    if not path.is_file():
        return ResultsScan([], 0, False)
    data = path.read_bytes()
    records: list[dict[str, Any]] = []
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
                return ResultsScan(records, pos, True)
            raise RunError(
                f"{path}: line {lineno} is corrupt ({exc}); delete that line and re-run to redo the question"
            ) from exc
        if end == -1:  # a complete JSON object without its newline: the write was cut before "\n"
            return ResultsScan(records, pos, True)
        if rec is not None:
            records.append(rec)
        pos = end + 1
    return ResultsScan(records, pos, False)


def unique_records(records: list[dict[str, Any]], where: Path | str = "") -> list[dict[str, Any]]:
    seen: set[str] = set()
    out = []
    for rec in records:
        rid = str(rec.get("id"))
        if rid in seen:
            log.warning("%s: question %s recorded twice; keeping the first record", where, rid)
            continue
        seen.add(rid)
        out.append(rec)
    return out


def _total(value: Any) -> float:
    if isinstance(value, dict):
        return float(sum(value.values()))
    return float(value or 0)


def record_costs(rec: dict[str, Any]) -> dict[str, float]:
    """Costs of one answered question from its trace; NaN for all when the question raised (no trace)."""
    trace = rec.get("trace")
    if not trace:
        return {k: math.nan for k in COST_FIELDS}
    counters = trace.get("counters", {})
    calls = counters.get("llm_calls", {}) or {}
    generated = counters.get("generated_tokens", {}) or {}
    return {
        "retrievals": float(counters.get("retrievals", 0)),
        "main_llm_calls": float(calls.get("main", 0)),
        "llm_calls": _total(calls),
        "main_tokens": float(generated.get("main", 0)),
        "tokens": _total(generated),
        "prompt_tokens": _total(counters.get("prompt_tokens", {})),
        "corpus_queries": float(counters.get("corpus_queries", 0)),
        "extractor_calls": float(calls.get("extractor", 0)),
        # The pipeline's own wall time (re-prompt included), consistent with its per-component seconds.
        "seconds": float(trace.get("seconds") or rec.get("seconds") or 0.0),
    }


def component_seconds(rec: dict[str, Any]) -> dict[str, float]:
    trace = rec.get("trace") or {}
    return {k: float(v) for k, v in (trace.get("counters", {}).get("seconds", {}) or {}).items()}


@dataclass
class Run:
    """A finished or partial run as read from disk."""

    dir: Path
    config: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        label = self.config.get("label")
        return str(label) if label else self.dir.name

    @property
    def method(self) -> str:
        pipeline = self.config.get("pipeline") or {}
        return str(pipeline.get("method") or self.config.get("method") or self.config.get("answerer") or "?")

    @property
    def dataset(self) -> dict[str, Any]:
        return dict(self.config.get("dataset") or {})

    def by_id(self) -> dict[str, dict[str, Any]]:
        return {str(r["id"]): r for r in self.records}

    def values(self, metric: str) -> list[float]:
        """Per-question values of ``em``, ``f1`` or a cost field (errored questions: 0 for scores, NaN for costs)."""
        if metric in ("em", "f1"):
            return [float(r.get(metric) or 0.0) for r in self.records]
        return [record_costs(r)[metric] for r in self.records]


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


def read_config(run_dir: Path) -> dict[str, Any]:
    path = run_dir / CONFIG_FILE
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
    return current_names(data)


def load_run(run_dir: str | Path) -> Run:
    """Read a run directory (the results file is not modified, a torn last line is skipped).

    Traces written by an older version are read in the current form (``quco.eval.legacy``).
    """
    from quco.eval.legacy import upgrade_trace

    path = Path(run_dir)
    config = read_config(path)
    scan = scan_results(path / RESULTS_FILE)
    if scan.torn:
        log.warning("%s: ignoring a torn last line (the run was killed while writing)", path / RESULTS_FILE)
    records = unique_records(scan.records, path / RESULTS_FILE)
    for rec in records:
        if isinstance(rec.get("trace"), dict):
            rec["trace"] = upgrade_trace(rec["trace"], config)
    return Run(path, config, records)


def load_traces(path: str | Path) -> list[dict[str, Any]]:
    """The traces of a run (its directory, or the ``results.jsonl`` inside one), in the current form.

    Records that raised (no trace) are left out; a run without any trace is an error.
    """
    from quco.eval.legacy import upgrade_trace

    p = Path(path).expanduser()
    results = p / RESULTS_FILE if p.is_dir() else p
    if not results.is_file():
        raise RunError(f"no results file at {results}; give a run directory or its {RESULTS_FILE}")
    config = read_config(results.parent) if (results.parent / CONFIG_FILE).is_file() else {}
    records = unique_records(scan_results(results).records, results)
    traces = [upgrade_trace(r["trace"], config) for r in records if isinstance(r.get("trace"), dict)]
    if not traces:
        raise RunError(f"{results} holds no traces; run an evaluation that writes them first")
    return traces
