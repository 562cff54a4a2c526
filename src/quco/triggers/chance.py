"""The random trigger's draws, and the retrieval rate of another run to match.

A "fewer retrievals, similar accuracy" claim needs a control that retrieves just as often at random
points. The draws are a hash of (seed, question, candidate index): reproducible, and independent of the
order in which questions are answered or of how many run in parallel.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quco.errors import ConfigError


def uniform_draw(seed: int, question: str, index: int) -> float:
    """A number in [0, 1) fixed by (seed, question, candidate index)."""
    digest = hashlib.sha256(f"{seed}\x1f{question}\x1f{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _trace_dict(trace: Any) -> dict[str, Any]:
    return trace if isinstance(trace, dict) else trace.to_dict()


def step_candidates(step: dict[str, Any]) -> int:
    """Candidate points a check consulted: its recorded scores up to the one that fired (the rest of that draft
    is discarded), else its scanned sentences, else 1."""
    signals = step.get("signals") or {}
    trigger = signals.get("trigger")
    if isinstance(trigger, dict) and isinstance(trigger.get("scores"), list):
        fired = trigger.get("fired_at")
        return fired + 1 if isinstance(fired, int) else len(trigger["scores"])
    sentences = signals.get("sentences")
    if isinstance(sentences, list):
        return len(sentences)
    return 1


@dataclass(frozen=True)
class RetrievalRate:
    """How often a run retrieved: per question, per check (generate step), per candidate point."""

    questions: int
    retrievals: int  # all retrieval queries (counters.retrievals)
    check_retrievals: int  # generate steps that retrieved (the runtime trigger fired)
    checks: int  # generate steps with a check
    candidates: int  # candidate points examined by the checks

    @property
    def per_question(self) -> float:
        return self.retrievals / self.questions if self.questions else 0.0

    @property
    def per_check(self) -> float:
        return self.check_retrievals / self.checks if self.checks else 0.0

    @property
    def per_candidate(self) -> float:
        return self.check_retrievals / self.candidates if self.candidates else 0.0


def retrieval_rate(traces: Iterable[Any]) -> RetrievalRate:
    """The observed retrieval rate of a list of traces (``Trace`` objects or their dicts)."""
    questions = retrievals = fired = checks = candidates = 0
    for t in traces:
        d = _trace_dict(t)
        questions += 1
        retrievals += int((d.get("counters") or {}).get("retrievals", 0))
        for step in d.get("steps") or []:
            if step.get("stage") != "generate" or not step.get("draft"):
                continue
            checks += 1
            candidates += step_candidates(step)
            if step.get("decision") == "retrieve":
                fired += 1
    return RetrievalRate(questions, retrievals, fired, checks, candidates)


def read_traces(path: str | Path) -> list[dict[str, Any]]:
    """The traces of a run: ``results.jsonl`` (or its run directory), one JSON record per line with a ``trace``.

    A torn last line (a killed writer) is ignored; records without a trace are skipped.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "results.jsonl"
    if not p.is_file():
        raise ConfigError(f"no results file at {p}; give a run directory or its results.jsonl")
    lines = p.read_text(encoding="utf-8").splitlines()
    traces: list[dict[str, Any]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            if n == len(lines):
                break
            raise ConfigError(f"{p}: line {n} is not valid JSON ({exc.msg}); repair or delete it") from exc
        trace = rec.get("trace") if isinstance(rec, dict) else None
        if isinstance(trace, dict):
            traces.append(trace)
    if not traces:
        raise ConfigError(f"{p} holds no traces; run an evaluation that writes them first")
    return traces


def rate_from_run(path: str | Path) -> RetrievalRate:
    """The retrieval rate observed in another run's ``results.jsonl``."""
    return retrieval_rate(read_traces(path))
