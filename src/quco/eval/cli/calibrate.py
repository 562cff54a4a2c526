"""``quco calibrate``: choose a trigger's threshold on one split of questions and write it into the config
(the search itself is ``quco.eval.calibrate.search``)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from quco.errors import QucoError
from quco.eval.calibrate.search import calibrate, em_from_runs, rate_from_runs, write_threshold

# ---------------------------------------------------------------------------------------------

calibrate_app = typer.Typer(
    help="Choose a trigger threshold on one split of questions and write it to the config."
)


def _parse_span(text: str) -> tuple[int, int]:
    """ "0:100" -> (offset 0, limit 100)."""
    try:
        start, _, end = text.partition(":")
        a, b = int(start or 0), int(end)
    except ValueError:
        raise QucoError(f"--questions must look like START:END, e.g. 0:100; got '{text}'") from None
    if b <= a or a < 0:
        raise QucoError(f"--questions {text} selects no question; use START:END with END > START >= 0")
    return a, b - a


@calibrate_app.callback(invoke_without_command=True)
def calibrate_command(
    config: Annotated[Path, typer.Option("--config", "-c", help="YAML config of the method to calibrate.")],
    dataset: Annotated[str, typer.Option(help="Dataset name or file (see quco.datasets).")] = "hotpotqa",
    questions: Annotated[str, typer.Option(help="Calibration split START:END (END exclusive).")] = "0:100",
    target: Annotated[str, typer.Option(help="'rate' (target retrieval rate) or 'em' (best EM).")] = "rate",
    rate: Annotated[float, typer.Option(help="Target share of decisions that fire (target 'rate').")] = 0.5,
    param: Annotated[
        str | None,
        typer.Option(
            help="The threshold parameter to calibrate: threshold (default), or QuCo-RAG's entity_threshold, "
            "cooccurrence_threshold, head_threshold, or DTR's uncertainty_threshold."
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the threshold here (default: into --config).")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the threshold, write nothing.")] = False,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a config field, e.g. params.n_samples=4.")
    ] = None,
    from_run: Annotated[
        list[Path] | None,
        typer.Option(
            "--from-run",
            help="Use recorded `quco eval` runs instead of running the model. Target 'rate', black-box: "
            "re-score the samples of a never-retrieving pass (params.threshold=.inf). Target 'em', a decision "
            "taken once before generation (QuCo-RAG's entity_threshold, DTR's uncertainty_threshold): the "
            "exact EM of every threshold from a run where it always fires and one where it never does. "
            "Repeatable.",
        ),
    ] = None,
    max_retrievals: Annotated[
        float | None,
        typer.Option(help="Target 'em' from runs: only thresholds within this many retrievals per question."),
    ] = None,
) -> None:
    """Choose θ on the calibration questions and write it into the config (params.threshold, or --param)."""
    from rich.console import Console

    from quco.config import parse_override

    console, err = Console(), Console(stderr=True)
    try:
        offset, limit = _parse_span(questions)
        overrides = dict(parse_override(s) for s in set_ or [])
        if from_run is not None and target == "em":
            result, questions, dataset = em_from_runs(console, from_run, param, max_retrievals)
        elif from_run is not None:
            if target != "rate":
                raise QucoError(f"unknown calibration target '{target}'; use 'rate' or 'em'")
            result, questions = rate_from_runs(config, from_run, rate, overrides)
        else:
            result = calibrate(
                config, dataset, offset, limit, target, rate, overrides=overrides, progress=True, param=param
            )
        for c in result.candidates:
            console.print(
                f"θ={c.threshold:.6g}  EM={c.em:.3f}  rate={c.retrieval_rate:.3f}  "
                f"retrievals/q={c.retrievals_per_question:.2f}  LLM calls/q={c.llm_calls_per_question:.1f}"
            )
        if result.candidates and result.margin is not None:  # from runs, _em_from_runs printed it
            for line in result.margin.lines(result.param):
                console.print(line, highlight=False, soft_wrap=True)
        console.print(
            f"{result.param} {result.threshold:.6g} ({target}; predicted firing rate "
            f"{result.predicted_rate:.3f} "
            f"over {len(result.scores)} decisions of {result.questions} questions)"
        )
        if not dry_run:
            dest = out or config
            goal = f"rate {rate:g}" if target == "rate" else "best EM"
            if target == "em" and max_retrievals is not None:
                goal += f" within {max_retrievals:g} retrievals/q"
            if result.margin is not None and result.margin.note():
                goal += f", {result.margin.note()}"
            note = (
                f"calibrated: {goal} on {dataset} questions {questions} "
                f"({datetime.now(UTC).date().isoformat()})"
            )
            if out is not None and not out.exists():
                out.write_text(config.read_text(encoding="utf-8"), encoding="utf-8")
            write_threshold(dest, result.threshold, note, result.param)
            console.print(f"written to {dest}")
    except QucoError as exc:
        err.print(f"[bold red]error:[/bold red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
