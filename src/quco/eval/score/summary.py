"""Summaries of recorded runs: the columns of ``quco summary`` and ``quco compare``, each stage's firing rate, and
one row per run with intervals."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from quco.errors import QucoError
from quco.eval.runs.store import load_run
from quco.eval.score.stats import SUMMARY_FIELDS, Comparison, compare_runs, summarize


def compare_command(run_a: Path, run_b: Path, metrics: Sequence[str] = ("em", "f1")) -> Comparison:
    """Paired comparison of run B against run A on their common questions."""
    unknown = [m for m in metrics if m not in SUMMARY_FIELDS]
    if unknown:
        raise QucoError(f"unknown metric '{unknown[0]}'; use one of {', '.join(SUMMARY_FIELDS)}")
    return compare_runs(run_a, run_b, metrics)


# Columns of `quco summary`: a score or cost field and its header. "main" counts the main generations only (the
# papers' #Call and #Tok); "all roles" adds extractor, sampler, judge, probe and answer re-prompt calls.
SUMMARY_COLUMNS = (
    ("em", "EM"),
    ("f1", "F1"),
    ("retrievals", "retrievals/q"),
    ("main_llm_calls", "LLM calls/q (main)"),
    ("llm_calls", "LLM calls/q (all roles)"),
    ("main_tokens", "gen. tokens/q (main)"),
    ("tokens", "gen. tokens/q (all roles)"),
    ("seconds", "s/q"),
)
# `quco compare` by default: the scores and the costs the papers report, main-only beside all roles.
COMPARE_METRICS = ("em", "f1", "retrievals", "main_llm_calls", "llm_calls", "main_tokens", "tokens")
METRIC_NAMES = {
    "main_llm_calls": "LLM calls (main)",
    "llm_calls": "LLM calls (all roles)",
    "main_tokens": "gen. tokens (main)",
    "tokens": "gen. tokens (all roles)",
}
# The firing rate of each stage's trigger records (QuCo-RAG: stage 1 = entity frequency before generation, per
# question; stage 2 = claims, per judged sentence).
FIRING_COLUMNS = (("before", "stage 1 fired"), ("generate", "stage 2 fired"))


def firing_rates(run: Any) -> dict[str, Any]:
    """Per stage: the trigger records' firing rate over the run's traces (None where that stage has none)."""
    from quco.signals.chance import stage_rate

    traces = [r.trace for r in run.records if r.trace]
    rates = {stage: stage_rate(traces, stage) for stage, _ in FIRING_COLUMNS}
    return {stage: rate if rate.steps else None for stage, rate in rates.items()}


def format_rate(rate: Any, stage: str) -> str:
    if rate is None:
        return "n/a"
    queries = f"; {rate.per_firing:.2f} queries/firing" if rate.fired else ""
    if stage == "before":
        return f"{rate.per_step:.0%} ({rate.fired}/{rate.steps} q{queries})"
    return f"{rate.per_candidate:.1%} ({rate.fired}/{rate.candidates} cand.{queries})"


def summary_rows(
    runs: Sequence[Path], first: int | None = None, common: bool = False, n_boot: int = 10_000
) -> list[dict[str, Any]]:
    """One row per run: its name, method, question count and each summary column's mean with 95% interval.

    ``first`` keeps the questions whose dataset position is below it (so runs of different length are
    tabulated on the same questions); ``common`` keeps only the questions every run has answered.
    """
    loaded = [load_run(r) for r in runs]
    if first is not None:
        if first < 1:
            raise QucoError(f"--first must be at least 1, got {first}")
        for run in loaded:
            run.records = [r for r in run.records if r.index < first]
    if common:
        shared = set.intersection(*({r.id for r in run.records} for run in loaded))
        for run in loaded:
            run.records = [r for r in run.records if r.id in shared]
    rows = []
    for run in loaded:
        stats = summarize(run, [f for f, _ in SUMMARY_COLUMNS], n_boot=n_boot)
        rows.append(
            {
                "run": run.name,
                "method": run.method,
                "questions": len(run.records),
                "stats": stats,
                "firing": firing_rates(run),
            }
        )
    return rows
