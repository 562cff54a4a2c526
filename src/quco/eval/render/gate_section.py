"""The results table's gate section: each dataset's frontier, its figure, and the table's rows as points."""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quco.errors import QucoError
from quco.eval.campaign.plan import DatasetPlan, Plan
from quco.eval.gate.data import load_gate_data
from quco.eval.render.gate import FrontierReport, blocks, build_report, figure
from quco.eval.render.gate import markdown_lines as report_markdown_lines
from quco.signals.gate_model import GateModel


@dataclass
class GateSection:
    dataset: DatasetPlan
    report: FrontierReport | None
    figure: Path | None
    problem: str = ""
    notes: list[str] = field(default_factory=list)


def _points(
    ds: DatasetPlan, results: Sequence[Any], ids: set[str]
) -> tuple[dict[str, tuple[float, float, float]], list[str]]:
    """Each complete row of the dataset that answers all of the frontier's questions, at its measured cost; and
    the complete rows that answer only some of them (SeaKR's 50, a seeded sample), with their counts, not drawn."""
    out, apart = {}, []
    for r in results:
        if r.dataset is not ds or r.status != "complete" or r.run is None:
            continue
        recs = [x for x in r.run.records if x.id in ids and x.trace]
        if len(recs) != len(ids):
            apart.append(f"{r.row.short_title} ({len(recs)} of {len(ids)} questions)")
            continue
        n = len(recs)
        retrievals = sum(x.costs()["retrievals"] for x in recs) / n
        out[r.row.name] = (
            sum(x.em for x in recs) / n,
            sum(x.f1 for x in recs) / n,
            retrievals,
        )
    return out, apart


def gate_sections(plan: Plan, results: Sequence[Any], n_boot: int = 2000) -> list[GateSection]:
    """The frontier of every dataset whose plan has a ``gate`` entry; a problem instead when its runs fall short."""
    out = []
    for ds in plan.datasets:
        g = ds.gate
        if g is None:
            continue
        if ds.calibration is None:
            out.append(
                GateSection(ds, None, None, "the dataset has no calibration questions to fit gates on")
            )
            continue
        try:
            data = load_gate_data(g.closed, g.open)
        except QucoError as exc:
            out.append(GateSection(ds, None, None, str(exc)))
            continue
        gates, notes = [], []
        for label, path in g.gates.items():
            if Path(path).is_file():
                gates.append((label, GateModel.load(path)))
            else:
                notes.append(
                    f"The fitted gate '{label}' is not there yet ({path}; `quco gate fit` writes it)."
                )
        cal, ev = (
            data.between(ds.calibration.offset, ds.calibration.end),
            data.between(ds.offset, ds.span.end),
        )
        if len(cal) < ds.calibration.limit or len(ev) < ds.limit:
            out.append(
                GateSection(
                    ds,
                    None,
                    None,
                    f"the gate runs answer {len(ev)} of the {ds.limit} evaluated and {len(cal)} of the "
                    f"{ds.calibration.limit} calibration questions in both runs; the frontier waits for all",
                )
            )
            continue
        points, apart = _points(ds, results, set(ev.ids))
        if apart:
            notes.append(
                f"Not drawn here: {', '.join(apart)}. Each answers only part of the frontier's questions, so its "
                "point would not be comparable with these; the results figure and table show it on its own "
                "questions, beside SR-RAG on the same ones."
            )
        titles = {row.name: row.short_title for row in ds.rows}  # as in the results figures
        report = build_report(
            data,
            (ds.calibration.offset, ds.calibration.end),
            (ds.offset, ds.span.end),
            dataset=ds.title or ds.name,
            gates=gates,
            methods={titles.get(k, k): v for k, v in points.items()},
            n_boot=n_boot,
        )
        path = Path(g.figure or f"docs/figures/gate-{ds.name}.png")
        out.append(GateSection(ds, report, figure(report, path, g.lines), notes=notes))
    return out


def markdown_lines(sections: Sequence[GateSection], markdown_path: Path) -> list[str]:
    lines: list[str] = []
    for sec in sections:
        lines += ["", f"### Retrieval gates at equal cost: {sec.dataset.title or sec.dataset.name}", ""]
        if sec.report is None:
            lines.append(f"Not yet: {sec.problem}.")
            continue
        if sec.figure is not None:
            rel = os.path.relpath(sec.figure.resolve(), markdown_path.parent.resolve())
            lines += [f"![EM against retrievals per question, {sec.dataset.name}]({rel})", ""]
        lines += report_markdown_lines([*blocks(sec.report), *sec.notes])
    return lines


def image_html(path: Path, alt: str, cls: str = "plot") -> str:
    """A PNG embedded in the page, so that the page stands alone."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"<img class='{cls}' alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"


def html_parts(sections: Sequence[GateSection], table: Any) -> list[str]:
    """``table(head, rows, cls)`` renders a table as the page does."""
    parts = []
    for sec in sections:
        title = sec.dataset.title or sec.dataset.name
        parts.append(f"<h2>Retrieval gates at equal cost: {html.escape(title)}</h2>")
        if sec.report is None:
            parts.append(f"<p class='muted'>Not yet: {html.escape(sec.problem)}.</p>")
            continue
        if sec.figure is not None:
            parts.append(image_html(sec.figure, f"EM against retrievals per question, {title}"))
        for block in [*blocks(sec.report), *sec.notes]:
            if isinstance(block, str):
                parts.append(f"<p>{html.escape(block)}</p>")
            else:
                parts.append(table(*block, "gate"))
    return parts
