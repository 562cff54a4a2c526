"""The evaluation commands ``quco eval``, ``quco summary``, ``quco compare``, ``quco detection`` and ``quco report``.

``eval_app`` is mounted into the main ``quco`` command with ``app.add_typer(eval_app)`` (no name: its commands
join the top level). The plain functions ``eval_command``, ``compare_command`` and ``report_command`` do the
work and return values, so they can be called from Python or another CLI as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from quco.cli_support import friendly_errors, out, setup_logging
from quco.errors import QucoError
from quco.eval.run.command import eval_command
from quco.eval.run.runner import EvalOptions, Questions, RunSummary
from quco.eval.runs.store import load_run
from quco.eval.score.stats import SUMMARY_FIELDS, summarize
from quco.eval.score.summary import (
    COMPARE_METRICS,
    FIRING_COLUMNS,
    METRIC_NAMES,
    SUMMARY_COLUMNS,
    compare_command,
    format_rate,
    summary_rows,
)

eval_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def report_command(runs: Sequence[Path], out_html: Path, baseline: int = 0) -> Path:
    """Write the HTML report of ``runs`` (compared against ``runs[baseline]``)."""
    from quco.eval.render.report import write_report

    if not 0 <= baseline < len(runs):
        raise QucoError(f"--baseline must index one of the {len(runs)} runs (0..{len(runs) - 1})")
    return write_report(runs, out_html, baseline=baseline)


# -- typer wiring -------------------------------------------------------------------------------------------


# Ctrl-C: the finished questions are saved
_friendly = friendly_errors(
    interrupted="interrupted; results so far are saved: run the same command again to resume"
)


_logging = setup_logging


def _print_summary(summary: RunSummary) -> None:
    run = load_run(summary.out_dir)
    done = {r.id for r in run.records}
    table = Table(title=f"{run.name}: {summary.completed}/{summary.selected} questions", show_lines=False)
    table.add_column("metric")
    table.add_column("mean [95% CI]", justify="right")
    stats = summarize(run)
    for field in SUMMARY_FIELDS:
        iv = stats[field]
        scale = 100.0 if field in ("em", "f1") else 1.0
        table.add_row(field, iv.format(digits=2, scale=scale))
    out.print(table)
    out.print(
        f"{summary.new} answered now, {summary.resumed} resumed, {summary.errors} errors, "
        f"{summary.missing} without an answer; {len(done)} recorded in {summary.out_dir}"
    )


@eval_app.command("eval")
@_friendly
def eval_cli(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML pipeline config.")] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            help="Dataset name (hotpotqa, 2wikimultihopqa, pubmedqa, strategyqa, musique), NAME:FILE, or FILE."
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(help="First N questions (after --offset).")] = None,
    offset: Annotated[int, typer.Option(help="Skip the first N questions.")] = 0,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Run directory (default runs/DATASET-METHOD-HASH).")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            help="Questions answered concurrently (backends that allow it; default 1); llamacpp: worker "
            "processes sharing the cores as threads."
        ),
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue a run in --out (default); --no-resume refuses.")
    ] = True,
    reprompt: Annotated[
        bool,
        typer.Option(
            help="Use the published answer protocol (re-prompt 'So the answer is' when no answer is stated, "
            "counted) also on datasets whose default is strict."
        ),
    ] = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="No answer protocol: a prediction without an answer is scored as missing (the default on "
            "HotpotQA and 2WikiMultihopQA is the published protocol, which re-prompts).",
        ),
    ] = False,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a config field (repeatable).")
    ] = None,
    method: Annotated[str | None, typer.Option("--method", "-m", help="Method name.")] = None,
    sample: Annotated[
        int | None,
        typer.Option(
            help="A seeded random sample of N of the questions --offset/--limit select (all by default)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of --sample.")] = 0,
    retry_errors: Annotated[bool, typer.Option(help="Re-run questions recorded with an error.")] = False,
    label: Annotated[str | None, typer.Option(help="Name of the run in reports.")] = None,
    progress: Annotated[bool, typer.Option(help="Show the progress bar.")] = True,
    traces_from: Annotated[
        Path | None,
        typer.Option(
            "--traces-from",
            help="Reuse the traces of this run (same config, made with --strict) and only add the answer "
            "protocol's re-prompt calls.",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Evaluate a method on a dataset: one JSON line per question, resumable, with EM/F1 and every cost."""
    _logging(verbose)
    options = EvalOptions(
        out_dir=out_dir, workers=workers, resume=resume, reprompt=reprompt, progress=progress,
        retry_errors=retry_errors, label=label, traces_from=traces_from, protocol="strict" if strict else None,
    )  # fmt: skip
    questions = Questions(limit=limit, offset=offset, sample=sample, seed=seed)
    summary = eval_command(config, dataset, questions, options, set_ or [], method)
    _print_summary(summary)


@eval_app.command("summary")
@_friendly
def summary_cli(
    runs: Annotated[list[Path], typer.Argument(help="Run directories written by `quco eval`.")],
    first: Annotated[
        int | None, typer.Option(help="Only questions at dataset positions below N (e.g. 50).")
    ] = None,
    common: Annotated[bool, typer.Option(help="Only questions that every run has answered.")] = False,
    markdown: Annotated[bool, typer.Option(help="Print a Markdown table.")] = False,
) -> None:
    """One line per run: EM, F1, retrievals, LLM calls and generated tokens (main and all roles), seconds per
    question with 95% CIs; and each stage's trigger firing rate (stage 1 per question, stage 2 per candidate)."""
    _logging(False)
    rows = summary_rows(runs, first, common)
    firing = any(v is not None for row in rows for v in row["firing"].values())
    headers = ["run", "method", "n"] + [h for _, h in SUMMARY_COLUMNS]
    headers += [h for _, h in FIRING_COLUMNS] if firing else []

    def cells(row: dict[str, Any]) -> list[str]:
        vals = []
        for f, _ in SUMMARY_COLUMNS:
            iv = row["stats"][f]
            scale, digits = (100.0, 1) if f in ("em", "f1") else (1.0, 1 if f != "retrievals" else 2)
            vals.append(iv.format(digits, scale))
        if firing:
            vals += [format_rate(row["firing"][stage], stage) for stage, _ in FIRING_COLUMNS]
        return [row["run"], row["method"], str(row["questions"])] + vals

    from quco.eval.runs.world_file import world_lines  # which world each run measured in (pool or realistic)

    _print_table(
        "mean per question [95% bootstrap CI]; EM and F1 in %", headers, [cells(r) for r in rows], markdown
    )
    for line in world_lines([load_run(r) for r in runs]):
        out.print(f"- {line}" if markdown else line, highlight=False, soft_wrap=True)


def _print_table(title: str, head: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> None:
    """One table of runs: Markdown lines, or a rich table with the run and method columns to the left."""
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        for line in lines:
            out.print(line, highlight=False, soft_wrap=True)
        return
    table = Table(title=title)
    for h in head:
        table.add_column(h, justify="left" if h in ("run", "method") else "right")
    for row in rows:
        table.add_row(*row)
    out.print(table)


# The two runs of `quco compare` and `quco trace-diff`.
RunA = Annotated[Path, typer.Argument(help="Run directory A: the baseline (or the run recorded first).")]
RunB = Annotated[Path, typer.Argument(help="Run directory B, compared against A.")]


@eval_app.command("compare")
@_friendly
def compare_cli(
    run_a: RunA,
    run_b: RunB,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            help="Metric (repeatable; default: EM, F1, retrievals, LLM calls and tokens, main and all roles)."
        ),
    ] = None,
) -> None:
    """Paired test of run B against run A on the same questions: difference, 95% interval, p-value."""
    _logging(False)
    comp = compare_command(run_a, run_b, metric or list(COMPARE_METRICS))
    table = Table(title=f"{comp.b} vs {comp.a} on {comp.n_common} common questions")
    for col in ("metric", comp.a, comp.b, "B − A [95% CI]", "p (permutation)"):
        table.add_column(col, justify="right")
    for m, r in comp.results.items():
        scale = 100.0 if m in ("em", "f1") else 1.0
        table.add_row(
            METRIC_NAMES.get(m, m),
            f"{r.mean_a * scale:.2f}",
            f"{r.mean_b * scale:.2f}",
            r.diff.format(2, scale),
            f"{r.p_value:.4f}",
        )
    out.print(table)
    if comp.only_a or comp.only_b:
        out.print(f"[dim]{comp.only_a} questions only in A, {comp.only_b} only in B (left out)[/dim]")


@eval_app.command("detection")
@_friendly
def detection_cli(
    runs: Annotated[list[Path], typer.Argument(help="Run directories written by `quco eval`.")],
    markdown: Annotated[bool, typer.Option(help="Print a Markdown table.")] = False,
) -> None:
    """Does each run's trigger catch wrong drafts? Its first judged draft per question, scored like the final
    answer: how often it is wrong when the trigger fired and when it kept it (95% interval, p-value), and how well
    the trigger's first score ranks wrong drafts first (AUROC)."""
    from quco.eval.score.detection import DETECTION_HEAD, detection, detection_cells

    _logging(False)
    loaded = [load_run(r) for r in runs]
    labels = [run.name for run in loaded]
    if len(set(labels)) < len(labels):  # one label for two runs (two datasets' runs): name them by path
        labels = [str(run.dir) for run in loaded]
    rows = []
    for label, run in zip(labels, loaded, strict=True):
        d = detection(run)
        if d is None:
            out.print(
                f"[dim]{label}: no draft judged during generation (the trigger decides before it)[/dim]"
            )
            continue
        rows.append([label, str(run.method), *detection_cells(d)])
    if not rows:
        return
    title = "first drafts: wrong answer rate when the trigger fired and when it kept the draft"
    _print_table(title, ["run", "method", *DETECTION_HEAD], rows, markdown)


@eval_app.command("report")
@_friendly
def report_cli(
    runs: Annotated[list[Path], typer.Argument(help="Run directories written by `quco eval`.")],
    out_html: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write.")] = Path("report.html"),
    baseline: Annotated[int, typer.Option(help="Index of the run the others are tested against.")] = 0,
) -> None:
    """Write a self-contained HTML report: comparison table with intervals, plots, per-question traces."""
    _logging(False)
    path = report_command(runs, out_html, baseline)
    out.print(f"report written to {path}")


@eval_app.command("trace-diff")
@_friendly
def trace_diff_cli(
    run_a: RunA,
    run_b: RunB,
    first: Annotated[
        int | None, typer.Option(help="Only questions at dataset positions below N (e.g. 10).")
    ] = None,
    ignore: Annotated[
        list[str] | None, typer.Option(help="A field to leave out, e.g. signals (repeatable).")
    ] = None,
    show: Annotated[int, typer.Option(help="Differences printed per question.")] = 20,
) -> None:
    """Compare two runs' decisions field by field (steps, trigger records, counters, answers); exit 1 if any differ."""
    from quco.eval.score.identity import trace_diff

    _logging(False)
    diff = trace_diff(run_a, run_b, ignore or (), first)
    for q in diff.questions:
        if not q.differences:
            continue
        out.print(f"[bold]question {q.id}[/bold]: {len(q.differences)} differences", highlight=False)
        for line in q.differences[:show]:
            out.print(f"  {line}", highlight=False, soft_wrap=True)
    out.print(
        f"{diff.b} vs {diff.a}: {diff.identical} of {diff.compared} questions identical "
        f"({diff.decisions} steps, {diff.fields} fields compared)"
        + (f"; {diff.only_a} only in A, {diff.only_b} only in B" if diff.only_a or diff.only_b else ""),
        highlight=False,
    )
    if not diff.same:
        raise typer.Exit(1)
