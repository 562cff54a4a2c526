"""``quco trace-diff``: are two runs' decisions the same, field by field?

A refactor that claims to change no behaviour is checked by recording the same questions before and after and
comparing every decision: each step's stage, draft, decision, reason, queries, retrieved passages, regenerated
and kept text, its typed trigger records (scores, threshold, rule, where it fired) and its signals; each
question's prediction, answer, stop reason, scores and counters (LLM calls and tokens by role, retrievals,
corpus lookups). Timings are not compared. Traces of an older format are first read in the current one
(``quco.eval.runs.legacy``), so a run recorded before a format change compares with one recorded after it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quco.eval.runs.store import Record, RunError, load_run

# Per question: record fields and counters that decide or measure an answer (seconds are left out).
RECORD_FIELDS = ("prediction", "answer", "missing", "reprompted", "em", "f1", "error")
TRACE_FIELDS = ("question", "method", "answer", "prediction", "stop_reason", "notes")
COUNTER_FIELDS = (
    "llm_calls",
    "prompt_tokens",
    "generated_tokens",
    "retrievals",
    "retrieval_calls",
    "passages_retrieved",
    "corpus_queries",
    "corpus_unknown",
)
STEP_FIELDS = (
    "index",
    "stage",
    "draft",
    "decision",
    "reason",
    "queries",
    "retrieved",
    "regenerated",
    "kept",
    "triggers",
    "signals",
)


@dataclass
class QuestionDiff:
    id: str
    differences: list[str] = field(default_factory=list)


@dataclass
class TraceDiff:
    """Two runs compared on the questions both recorded."""

    a: str
    b: str
    compared: int
    identical: int
    fields: int  # leaf values compared
    questions: list[QuestionDiff]
    only_a: int = 0
    only_b: int = 0
    decisions: int = 0  # steps compared

    @property
    def same(self) -> bool:
        return self.compared > 0 and self.identical == self.compared


def _close(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float | int) or isinstance(y, float) and isinstance(x, int):
        return math.isclose(float(x), float(y), rel_tol=0, abs_tol=1e-9) or (x != x and y != y)
    return x == y


def _diff(a: Any, b: Any, where: str, out: list[str], ignore: Sequence[str]) -> int:
    """Append ``where: a != b`` for every differing leaf; return how many leaves were compared."""
    if any(where == i or where.endswith("." + i) for i in ignore):
        return 0
    if isinstance(a, dict) and isinstance(b, dict):
        n = 0
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                out.append(
                    f"{where}.{key}: {'missing' if key not in a else repr(a[key])[:80]} != "
                    f"{'missing' if key not in b else repr(b[key])[:80]}"
                )
                n += 1
                continue
            n += _diff(a[key], b[key], f"{where}.{key}", out, ignore)
        return n
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{where}: {len(a)} items != {len(b)} items")
            return 1
        return sum(
            _diff(x, y, f"{where}[{i}]", out, ignore) for i, (x, y) in enumerate(zip(a, b, strict=True))
        )
    if not _close(a, b):
        out.append(f"{where}: {repr(a)[:120]} != {repr(b)[:120]}")
    return 1


def compare_question(ra: Record, rb: Record, ignore: Sequence[str] = ()) -> tuple[list[str], int, int]:
    """Differences between two records of one question; leaves and steps compared."""
    out: list[str] = []
    n = sum(_diff(getattr(ra, f), getattr(rb, f), f, out, ignore) for f in RECORD_FIELDS)
    ta, tb = ra.trace or {}, rb.trace or {}
    n += sum(_diff(ta.get(f), tb.get(f), f"trace.{f}", out, ignore) for f in TRACE_FIELDS)
    ca, cb = ta.get("counters") or {}, tb.get("counters") or {}
    n += sum(_diff(ca.get(f), cb.get(f), f"counters.{f}", out, ignore) for f in COUNTER_FIELDS)
    sa, sb = ta.get("steps") or [], tb.get("steps") or []
    if len(sa) != len(sb):
        out.append(f"steps: {len(sa)} != {len(sb)}")
    for i, (x, y) in enumerate(zip(sa, sb, strict=False)):
        n += sum(_diff(x.get(f), y.get(f), f"steps[{i}].{f}", out, ignore) for f in STEP_FIELDS)
    return out, n, min(len(sa), len(sb))


def trace_diff(
    run_a: str | Path, run_b: str | Path, ignore: Sequence[str] = (), first: int | None = None
) -> TraceDiff:
    """Compare two run directories question by question (``first``: only dataset positions below it)."""
    a, b = load_run(run_a), load_run(run_b)

    def keep(r: Record) -> bool:
        return first is None or r.index < first

    ra = {r.id: r for r in a.records if keep(r)}
    rb = {r.id: r for r in b.records if keep(r)}
    common = [i for i in ra if i in rb]
    if not common:
        raise RunError(f"{run_a} and {run_b} have no question in common; nothing to compare")
    questions, fields, steps = [], 0, 0
    for qid in common:
        diffs, n, s = compare_question(ra[qid], rb[qid], ignore)
        fields += n
        steps += s
        questions.append(QuestionDiff(qid, diffs))
    identical = sum(1 for q in questions if not q.differences)
    return TraceDiff(
        a.name,
        b.name,
        len(common),
        identical,
        fields,
        questions,
        len(ra) - len(common),
        len(rb) - len(common),
        steps,
    )
