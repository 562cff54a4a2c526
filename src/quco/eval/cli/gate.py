"""``quco gate fit`` and ``quco gate frontier``: retrieval gates from a closed-book run and a retrieval run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from quco.cli_support import friendly_errors, out, setup_logging, sub_app
from quco.errors import QucoError

gate_app = sub_app("Retrieval gates: fit one on a calibration split, trace every signal's frontier.")

Closed = Annotated[
    list[Path],
    typer.Option(
        "--closed",
        help="A closed-book 'gate' run with fire: never (configs/world/DATASET/gate.yaml); repeat for runs "
        "over other questions of the same configuration.",
    ),
]
Opened = Annotated[
    list[Path], typer.Option("--open", help="A retrieval run (SR-RAG) of the same questions; repeatable.")
]


def split(text: str, option: str) -> tuple[int, int]:
    """ "200:300" -> (200, 300): dataset positions, the end excluded."""
    start, sep, end = text.partition(":")
    try:
        a, b = int(start or 0), int(end)
    except ValueError:
        raise QucoError(f"{option} must look like START:END, e.g. 200:300; got '{text}'") from None
    if not sep or b <= a or a < 0:
        raise QucoError(f"{option} {text} selects no question; use START:END with END > START >= 0")
    return a, b


def _named(items: list[str], option: str) -> list[tuple[str, Path]]:
    pairs = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise QucoError(f"{option} takes LABEL=PATH; got '{item}'")
        pairs.append((name, Path(path)))
    return pairs


@gate_app.command("fit")
@friendly_errors
def fit_cli(
    closed: Closed,
    opened: Opened,
    out_file: Annotated[Path, typer.Option("--out", help="The gate file to write (JSON).")],
    calibration: Annotated[
        str, typer.Option(help="Questions to fit on, START:END (END exclusive).")
    ] = "200:300",
    feature: Annotated[
        list[str] | None,
        typer.Option(help="Features to read (repeatable); one feature makes a signal gate. Default: all."),
    ] = None,
    target: Annotated[
        str, typer.Option(help="'helps' (retrieval turns wrong into right) or 'wrong'.")
    ] = "helps",
    budget: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of questions to retrieve for.")
    ] = 0.5,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Fit a gate on the calibration questions and choose its threshold for a retrieval budget."""
    setup_logging(verbose)
    from quco.eval.gate.data import load_gate_data
    from quco.eval.gate.fit import logistic_gate, signal_gate
    from quco.methods.gate import FEATURES

    data = load_gate_data(closed, opened)
    cal = data.between(*split(calibration, "--calibration"))
    if len(cal) == 0:
        raise QucoError(f"no question of {calibration} is answered in both the closed and the open runs")
    names = list(feature) if feature else [f for f in FEATURES if f in cal.feature_names()]
    unknown = [f for f in names if f not in FEATURES]
    if unknown:
        raise QucoError(f"unknown feature(s): {', '.join(unknown)}; known: {', '.join(FEATURES)}")
    if target not in ("helps", "wrong"):
        raise QucoError(f"--target must be helps or wrong; got '{target}'")
    if len(names) == 1:
        model = signal_gate(cal, names[0], target, budget)  # type: ignore[arg-type]
    else:
        model = logistic_gate(cal, names, target, budget)  # type: ignore[arg-type]
    model.note = (
        f"{model.note + '; ' if model.note else ''}fitted on questions {calibration} ({len(cal)} answered) of "
        f"{data.closed_name} and {data.open_name}"
    )
    model.save(out_file)
    fired = model.scores(cal.features) >= model.threshold
    out.print(
        f"{model.kind} gate over {len(model.features)} feature(s), target '{target}': threshold "
        f"{model.threshold:.6g} fires on {int(fired.sum())} of {len(cal)} calibration questions "
        f"(budget {budget:g}) -> {out_file}"
    )


@gate_app.command("frontier")
@friendly_errors
def frontier_cli(
    closed: Closed,
    opened: Opened,
    calibration: Annotated[str, typer.Option(help="Questions that set each signal's direction.")] = "200:300",
    evaluate: Annotated[str, typer.Option(help="Questions the frontier is measured on.")] = "0:200",
    gate: Annotated[
        list[str] | None, typer.Option(help="A fitted gate to show, LABEL=FILE (repeatable).")
    ] = None,
    method: Annotated[
        list[str] | None, typer.Option(help="A method's run to mark at its cost, LABEL=RUN_DIR (repeatable).")
    ] = None,
    line: Annotated[
        list[str] | None, typer.Option(help="Signals drawn as lines in the figure (default: every signal).")
    ] = None,
    dataset: Annotated[str, typer.Option(help="Name shown in the title.")] = "",
    markdown_file: Annotated[Path | None, typer.Option("--markdown", help="Write the tables here.")] = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="Write every point here.")] = None,
    figure_file: Annotated[Path | None, typer.Option("--figure", help="Write the figure (PNG) here.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Every signal's exact frontier, the fitted gates, and the oracle and random bounds."""
    setup_logging(verbose)
    from quco.eval.gate.data import load_gate_data
    from quco.eval.render.gate import build_report, figure, markdown, to_json
    from quco.eval.runs.store import load_run
    from quco.signals.gate_model import GateModel

    data = load_gate_data(closed, opened)
    ev = split(evaluate, "--evaluate")
    ids = set(data.between(*ev).ids)
    methods = {}
    for label, run_dir in _named(method or [], "--method"):
        recs = [r for r in load_run(run_dir).records if r.id in ids and r.trace]
        if len(recs) != len(ids):
            raise QucoError(f"{run_dir} answered {len(recs)} of the {len(ids)} evaluated questions")
        em = sum(r.em for r in recs) / len(recs)
        f1 = sum(r.f1 for r in recs) / len(recs)
        retrievals = sum(r.costs()["retrievals"] for r in recs) / len(recs)
        methods[label] = (em, f1, retrievals)
    gates = [(label, GateModel.load(path)) for label, path in _named(gate or [], "--gate")]
    report = build_report(
        data,
        split(calibration, "--calibration"),
        ev,
        dataset=dataset or str(data.closed_name),
        gates=gates,
        methods=methods,
    )
    text = markdown(report)
    out.print(text, markup=False, highlight=False, soft_wrap=True)
    if markdown_file:
        markdown_file.parent.mkdir(parents=True, exist_ok=True)
        markdown_file.write_text(text, encoding="utf-8")
    if json_file:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(json.dumps(to_json(report), indent=1), encoding="utf-8")
    if figure_file:
        figure(report, figure_file, line)
        out.print(f"figure: {figure_file}")
