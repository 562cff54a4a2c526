"""``quco results run PLAN`` and ``quco results table PLAN``: the results table of a plan (``quco.eval.campaign.plan``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from quco.cli_support import friendly_errors, out, setup_logging, sub_app

results_app = sub_app("The results table of a plan: run or resume every row, then tabulate what is recorded.")

PlanArg = Annotated[Path, typer.Argument(help="Results plan (YAML), e.g. configs/results/headline.yaml.")]
DatasetOpt = Annotated[
    list[str] | None, typer.Option("--dataset", help="Only this dataset's rows (repeatable).")
]
RowOpt = Annotated[list[str] | None, typer.Option("--row", help="Only rows of this name (repeatable).")]


@results_app.command("run")
def run_cli(
    plan: PlanArg,
    dataset: DatasetOpt = None,
    row: RowOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print each row's `quco eval` command; run nothing.")
    ] = False,
    progress: Annotated[bool, typer.Option(help="Show the progress bars.")] = True,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Run or resume every row's `quco eval`, one row after the other (exit 1 if a row failed)."""
    from quco.eval.campaign.plan import load_plan
    from quco.eval.campaign.results import run_plan

    @friendly_errors
    def go() -> None:
        setup_logging(verbose)
        loaded = load_plan(plan)
        try:
            done = run_plan(
                loaded, dataset or (), row or (), dry_run, progress,
                echo=lambda s: out.print(s, highlight=False, soft_wrap=True),
            )  # fmt: skip
        except KeyboardInterrupt:
            out.print("interrupted; every answered question is saved: run the same command again to resume")
            raise typer.Exit(130) from None
        counts = {a: sum(1 for d in done if d.action == a) for a in ("ran", "skipped", "failed")}
        if dry_run:
            if counts["failed"]:
                raise typer.Exit(1)
            return
        counts = {a: sum(1 for d in done if d.action == a) for a in ("ran", "skipped", "failed")}
        out.print(f"{counts['ran']} rows run, {counts['skipped']} skipped, {counts['failed']} failed")
        for d in done:
            if d.action == "failed":
                out.print(f"  failed: {d.dataset}/{d.row}: {d.detail}", highlight=False, soft_wrap=True)
        if counts["failed"]:
            raise typer.Exit(1)

    go()


@results_app.command("status")
def status_cli(
    plan: PlanArg,
    dataset: DatasetOpt = None,
    row: RowOpt = None,
) -> None:
    """Which rows are complete, and the hours of compute the others need at their recorded pace."""
    from quco.eval.campaign.plan import load_plan
    from quco.eval.campaign.status import plan_status, render_status
    from quco.machine import cpu_name

    @friendly_errors
    def go() -> None:
        setup_logging(False)
        here = cpu_name()
        statuses = plan_status(load_plan(plan), dataset or (), row or (), processor=here)
        for line in render_status(statuses, here):
            out.print(line, highlight=False, soft_wrap=True)

    go()


@results_app.command("table")
def table_cli(
    plan: PlanArg,
    markdown: Annotated[
        Path | None, typer.Option(help="Markdown file (default: the plan's `markdown`, docs/results.md).")
    ] = None,
    html: Annotated[
        Path | None, typer.Option(help="HTML page (default: the plan's `html`, docs/results.html).")
    ] = None,
    reports: Annotated[
        bool, typer.Option(help="Also write each dataset's full `quco report` (OUT/DATASET/report.html).")
    ] = True,
) -> None:
    """Tabulate every recorded run of the plan (complete or not) into Markdown and HTML."""
    from quco.eval.campaign.plan import load_plan
    from quco.eval.render.results import table

    @friendly_errors
    def go() -> None:
        setup_logging(False)
        loaded = load_plan(plan)
        results, written = table(loaded, str(plan), markdown, html, reports)
        for res in results:
            out.print(
                f"{res.dataset.name}/{res.row.name}: {res.status} {res.answered}/{res.planned}",
                highlight=False,
            )
        for path in written:
            out.print(f"written {path}", highlight=False)

    go()
