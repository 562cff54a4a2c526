"""The results table of a plan, rendered: Markdown between markers in docs/results.md, the README's short
summary with one figure per dataset, the HTML page, and one ``quco report`` per dataset. ``table`` collects
whatever has been recorded (``quco.eval.campaign.results.collect``) and writes all of them.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from quco.errors import QucoError
from quco.eval.campaign.plan import DatasetPlan, Plan
from quco.eval.campaign.results import COST_COLUMNS, SCORE_COLUMNS, RowResult, collect, machine_cell
from quco.eval.render.gate_section import GateSection, gate_sections, image_html
from quco.eval.render.gate_section import html_parts as gate_html
from quco.eval.render.gate_section import markdown_lines as gate_markdown
from quco.eval.score.detection import DETECTION_HEAD, detection_cells
from quco.eval.score.stats import Comparison, Interval
from quco.eval.score.summary import FIRING_COLUMNS, format_rate
from quco.storage import write_text_atomic

log = logging.getLogger(__name__)

BEGIN = "<!-- results:begin (written by `quco results table`; edit the text outside these markers) -->"
END = "<!-- results:end -->"
SUMMARY_BEGIN = (
    "<!-- results-summary:begin (written by `quco results table`; edit the text outside these markers) -->"
)
SUMMARY_END = "<!-- results-summary:end -->"


def _iv(iv: Interval | None, digits: int, scale: float) -> str:
    return iv.format(digits, scale) if iv is not None else "—"


def _diff(comp: Comparison | None, metric: str) -> str:
    if comp is None:
        return "—"
    r = comp.results[metric]
    d = r.diff
    return f"{d.mean * 100:+.1f} [{d.low * 100:+.1f}, {d.high * 100:+.1f}] p={r.p_value:.3f} (n={r.n})"


def _rate(res: RowResult, stage: str) -> str:

    rate = res.firing.get(stage)
    return format_rate(rate, stage) if rate is not None else "—"


def _status(res: RowResult) -> str:
    if res.status in ("complete", "partial"):
        return f"{res.status} {res.answered}/{res.planned}" + (f", {res.errors} errors" if res.errors else "")
    return f"{res.status} 0/{res.planned}"


def _header(ds: DatasetPlan) -> str:
    return f"{ds.title or ds.name}, questions {ds.span}"


@dataclass(frozen=True)
class Section:
    """One dataset's three tables as rows of cells, shared by the Markdown and HTML renderings."""

    dataset: DatasetPlan
    scores: tuple[list[str], list[list[str]]]
    costs: tuple[list[str], list[list[str]]]
    runs: tuple[list[str], list[list[str]]]
    notes: list[str]
    detection: tuple[list[str], list[list[str]]] = ([], [])  # rows whose trigger judged drafts


def sections(plan: Plan, results: Sequence[RowResult]) -> list[Section]:
    out = []
    for ds in plan.datasets:
        rows = [r for r in results if r.dataset is ds]
        base = ds.row(ds.baseline).short_title if ds.baseline else "baseline"
        score_head = ["method", "n / planned"] + [h for _, h, *_ in SCORE_COLUMNS]
        score_head += [f"ΔEM vs {base}", f"ΔF1 vs {base}", "ΔEM vs control", "ΔF1 vs control"]
        scores = []
        for r in rows:
            cells = [r.row.title, f"{r.answered}/{r.planned}"]
            cells += [_iv(r.stats.get(f), d, s) for f, _, d, s in SCORE_COLUMNS]
            cells += [_diff(r.vs_baseline, "em"), _diff(r.vs_baseline, "f1")]
            cells += [_diff(r.vs_control, "em"), _diff(r.vs_control, "f1")]
            scores.append(cells)
        cost_head = ["method"] + [h for _, h, *_ in COST_COLUMNS] + [h for _, h in FIRING_COLUMNS]
        costs = [
            [r.row.title]
            + [_iv(r.stats.get(f), d, s) for f, _, d, s in COST_COLUMNS]
            + [_rate(r, "before"), _rate(r, "generate")]
            for r in rows
        ]
        run_head = ["method", "status", "run directory", "generator", "world", "config", "machine"]
        runs = []
        for r in rows:
            world = str(r.world.get("world", "—")) + (" (inferred)" if r.world.get("inferred") else "")
            config = r.row.config or "—"
            if r.row.set:
                config += " + " + ", ".join(r.row.set)
            if r.row.calibrate:
                config += f" (calibrated: {', '.join(c.param for c in r.row.calibrate)})"
            machine = machine_cell(r.run.records) if r.run is not None else "—"
            runs.append([r.row.title, _status(r), str(r.run_dir), r.generator or "—", world, config, machine])
        judged = [[r.row.title, *detection_cells(d)] for r in rows if (d := r.detection) is not None]
        det = (["method", *DETECTION_HEAD], judged)
        notes = [f"{ds.note.strip()}"] if ds.note else []
        notes += [_control_note(ds)] if any(ds.control_for(r.row) for r in rows) else []
        notes += [f"{r.row.title}: {r.row.note.strip()}" for r in rows if r.row.note]
        notes += [f"{r.row.title}: {r.problem}" for r in rows if r.problem]
        out.append(Section(ds, (score_head, scores), (cost_head, costs), (run_head, runs), notes, det))
    return out


def _control_note(ds: DatasetPlan) -> str:
    """Which control each row's "vs control" columns compare with."""
    pairs = [(ds.row(ctrl.match), ctrl) for ctrl in ds.rows if ctrl.match is not None]
    parts = [f"{row.short_title} against {ctrl.short_title}" for row, ctrl in pairs]
    rest = f"every other row against {ds.row(ds.control).short_title}" if ds.control else ""
    return (
        "Δ vs control: "
        + "; ".join(parts + ([rest] if rest else []))
        + " (each control draws at the rates of the row it is matched to)"
    )


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    def esc(c: str) -> str:
        return c.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(esc(h) for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return lines


def _legend(plan: Plan) -> str:
    return (
        "Means per question with 95% percentile-bootstrap intervals; EM and F1 in % (accuracy for yes/no/maybe "
        "questions). Δ: the row minus the named row on the questions both answered, in points, with a paired "
        "bootstrap 95% interval and a two-sided sign-flip permutation p-value. Costs: main = the main "
        "generations only (the papers' #Call and #Tok); all roles adds extractor, sampler, judge, probe and "
        "answer re-prompt calls. s/q: wall seconds per question on the machine that ran it; machine: the "
        "1-minute load average when each question ended (median, max) and the answering process's CPU seconds "
        "per question beside its wall seconds (medians; a question that waited shows wall above CPU, a 2-thread "
        "process can show CPU up to twice wall), over the questions that recorded them, and the processor "
        "that answered them (each with its questions and their median CPU seconds when a row ran on several). "
        "Stage 1 fired: "
        "share of questions whose pre-generation trigger fired; stage 2: share of judged sentences (or "
        "candidate points) flagged; each with the retrieval queries per firing. First drafts (rows whose trigger judges drafts during generation): each "
        "question's first judged draft scored as the final answer is; how often it is wrong when the trigger "
        "fired and when it kept the draft, their difference (Newcombe's score interval for two proportions, "
        "label-permutation p-value; "
        "shown when each group has 5 drafts or more), the shares of wrong and of right drafts it fired on, and "
        "the AUROC of the first scored candidate's score as a ranking of wrong drafts first (0.5: chance; "
        "`quco detection`)."
    )


def render_markdown(
    plan: Plan,
    results: Sequence[RowResult],
    plan_path: str,
    gates: Sequence[GateSection] = (),
    path: Path | None = None,
    figures: dict[str, Path] | None = None,
) -> str:
    where = (path or Path(plan.markdown)).parent
    complete = sum(1 for r in results if r.status == "complete")
    lines = [
        BEGIN,
        "",
        f"Generated {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} from `{plan_path}` by "
        f"`quco results table {plan_path}`: {complete} of {len(results)} planned rows complete.",
        "",
        _legend(plan),
    ]
    for sec in sections(plan, results):
        lines += ["", f"### {_header(sec.dataset)}", ""]
        fig = (figures or {}).get(sec.dataset.name)
        if fig is not None:
            lines += [f"![{_figure_alt(sec.dataset)}]({_relative(fig, where)})", ""]
        lines += _md_table(*sec.scores) + [""] + _md_table(*sec.costs) + [""]
        if sec.detection[1]:
            lines += _md_table(*sec.detection) + [""]
        lines += _md_table(*sec.runs)
        if sec.notes:
            lines += [""] + [f"- {n}" for n in sec.notes]
    lines += gate_markdown(gates, path or Path(plan.markdown))
    lines += ["", END]
    return "\n".join(lines) + "\n"


def _splice(path: Path, block: str, begin: str, end: str, new_file: str) -> Path:
    """Write ``block`` (from ``begin`` to ``end``) between the markers of ``path``, keeping the text around
    them; a missing file becomes ``new_file`` followed by the block."""
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        start, stop = text.find(begin.split(" (")[0]), text.find(end)
        if start < 0 or stop < start:
            raise QucoError(
                f"{path} exists but has no '{begin.split(' (')[0]} ... {end}' block; add the two markers "
                "where the tables belong (the text around them is kept), or write to another file"
            )
        text = text[:start] + block.rstrip("\n") + text[stop + len(end) :]
    else:
        text = new_file + block
    write_text_atomic(path, text)
    return path


def write_markdown(
    plan: Plan,
    results: Sequence[RowResult],
    path: Path,
    plan_path: str,
    gates: Sequence[GateSection] = (),
    figures: dict[str, Path] | None = None,
) -> Path:
    """Write the tables between the markers of ``path`` (the text around them is kept), or a new file."""
    block = render_markdown(plan, results, plan_path, gates, path, figures)
    return _splice(path, block, BEGIN, END, f"# {plan.title}\n\n")


# -- the summary: a figure per dataset and one short table -------------------------------------------------


def _scored_by_accuracy(ds: DatasetPlan) -> bool:
    """Whether the dataset's questions are yes/no(/maybe) labels, whose EM is the accuracy."""
    from quco.datasets import load_dataset

    return any(ex.kind != "span" for ex in load_dataset(ds.name, limit=1, offset=ds.offset))


def _metric(ds: DatasetPlan) -> str:
    return "accuracy" if _scored_by_accuracy(ds) else "EM"


def _short_header(ds: DatasetPlan) -> str:
    return (ds.title or ds.name).split(" (")[0]


def _figure_alt(ds: DatasetPlan) -> str:
    return f"{_short_header(ds)}: {_metric(ds)} against retrievals per question, 95% intervals"


def _plotted(results: Sequence[RowResult], ds: DatasetPlan) -> list[RowResult]:
    """The dataset's rows with recorded questions, each a point of its figure and a cell of the summary."""
    return [
        r for r in results
        if r.dataset is ds and r.run is not None and all(r.stats.get(f) for f in ("em", "retrievals"))
    ]  # fmt: skip


def _point_label(res: RowResult) -> str:
    """A row's short title; a running row says how many questions it has, and a row planned on a subset of the
    dataset's questions (SeaKR's first 50, a seeded 100) says which share, since its point is over other
    questions than the rest."""
    if res.status != "complete":
        return f"{res.row.short_title} (n={res.answered})"
    if res.on_subset:
        return f"{res.row.short_title} ({res.planned} of {res.dataset.limit} q)"
    return res.row.short_title


def results_figure(ds: DatasetPlan, rows: Sequence[RowResult], path: Path) -> Path:
    """The dataset's rows as points: EM (accuracy for yes/no questions) against retrievals per question, each
    with its 95% intervals on both axes; a hollow point is a row still running, labelled with its questions."""
    from quco.eval.render.figures import mark_method, new_axes, place_labels, save

    fig, ax = new_axes((7.2, 4.2))
    palette = [f"C{i}" for i in range(10)]
    spots: dict[tuple[float, float], list[RowResult]] = {}
    colors: dict[tuple[float, float], str] = {}
    where: dict[tuple[float, float], tuple[float, float]] = {}  # the first row's exact point
    for r in rows:
        em, ret = r.stats["em"], r.stats["retrievals"]
        x, y = ret.mean, 100 * em.mean
        spot = (round(x, 2), round(y, 1))
        color = colors.setdefault(spot, palette[len(colors) % len(palette)])
        where.setdefault(spot, (x, y))
        ax.errorbar(
            [x], [y], xerr=[[x - ret.low], [ret.high - x]], yerr=[[y - 100 * em.low], [100 * em.high - y]],
            fmt="none", ecolor=color, alpha=0.5, elinewidth=1, capsize=2,
        )  # fmt: skip
        spots.setdefault(spot, []).append(r)
    labels = []
    for spot, same in spots.items():  # rows at the same point share one label
        text = ", ".join(_point_label(r) for r in same)
        filled = all(r.status == "complete" for r in same)
        labels.append(mark_method(ax, *where[spot], text, filled=filled, color=colors[spot], fontsize=7.5))
    ax.margins(x=0.08, y=0.08)
    fig.canvas.draw()
    place_labels(fig, ax, labels)
    metric = _metric(ds)
    title = (
        f"{_short_header(ds)}, questions {ds.span}: {metric} against retrievals per question (95% intervals)"
    )
    return save(fig, ax, path, title, ylabel=f"{metric} (%)", legend=False)


def results_figures(plan: Plan, results: Sequence[RowResult]) -> dict[str, Path]:
    """One figure per dataset with recorded rows, beside the Markdown (FIGURES/results-DATASET.png)."""
    where = Path(plan.markdown).parent / "figures"
    out = {}
    for ds in plan.datasets:
        rows = _plotted(results, ds)
        if rows:
            out[ds.name] = results_figure(ds, rows, where / f"results-{ds.name}.png")
    return out


def render_summary(
    plan: Plan, results: Sequence[RowResult], plan_path: str, path: Path, figures: dict[str, Path]
) -> str:
    """One short table (EM and retrievals per question of every row with records, a column pair per dataset)
    and each dataset's figure, between the summary markers."""
    datasets = [ds for ds in plan.datasets if _plotted(results, ds)]
    cells: dict[str, dict[str, list[str]]] = {}  # short title: dataset: [EM, r/q]
    for ds in datasets:
        for r in _plotted(results, ds):
            em, ret = r.stats["em"], r.stats["retrievals"]
            partial = "" if r.status == "complete" else f" (n={r.answered})"
            if r.on_subset:
                partial = f" ({r.planned} q)"
            cells.setdefault(r.row.short_title, {})[ds.name] = [
                f"{100 * em.mean:.1f}{partial}",
                f"{ret.mean:.2f}",
            ]
    head = ["method"]
    for ds in datasets:
        head += [f"{_short_header(ds)} {_metric(ds)}", "r/q"]
    rows = [
        [name] + [c for ds in datasets for c in by_ds.get(ds.name, ["—", "—"])]
        for name, by_ds in cells.items()
    ]
    spans = sorted({f"{ds.span.limit}" for ds in datasets})
    lines = [SUMMARY_BEGIN, ""] + _md_table(head, rows) + [""]
    lines.append(
        f"{' or '.join(spans)} questions per dataset; EM and accuracy in %, r/q: retrievals per question. "
        "(n=…): a row still running, on the n questions it has answered; (N q): a row planned on N of them (SeaKR's "
        "first 50, a seeded sample). The figures show each row with its 95% "
        f"intervals; [{plan.markdown}]({_relative(Path(plan.markdown), path.parent)}) has every table and its "
        "reading. Generated "
        f"{datetime.now(UTC).strftime('%Y-%m-%d')} by `quco results table {plan_path}`."
    )
    for ds in datasets:
        lines += ["", f"![{_figure_alt(ds)}]({_relative(figures[ds.name], path.parent)})"]
    lines += ["", SUMMARY_END]
    return "\n".join(lines) + "\n"


def write_summary(
    plan: Plan, results: Sequence[RowResult], path: Path, plan_path: str, figures: dict[str, Path]
) -> Path:
    """The summary between the markers of ``path`` (e.g. the README), the text around them kept."""
    return _splice(
        path, render_summary(plan, results, plan_path, path, figures), SUMMARY_BEGIN, SUMMARY_END, ""
    )


def _html_table(head: list[str], rows: list[list[str]], cls: str) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=num' if i else ''}>{html.escape(c)}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table class='wrap {cls}'><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def write_html(
    plan: Plan,
    results: Sequence[RowResult],
    path: Path,
    plan_path: str,
    reports: dict[str, Path] | None = None,
    gates: Sequence[GateSection] = (),
    figures: dict[str, Path] | None = None,
) -> Path:
    """The tables as one self-contained HTML page, linking each dataset's full report when written: each
    dataset's figure and scores, its costs, first drafts and runs folded under a summary line."""
    from quco.eval.render.report import stylesheet

    parts = [f"<h1>{html.escape(plan.title)}</h1>"]
    complete = sum(1 for r in results if r.status == "complete")
    parts.append(
        f"<p class='muted'>Generated {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} from "
        f"<code>{html.escape(plan_path)}</code>: {complete} of {len(results)} planned rows complete.</p>"
        "<details class='more'><summary>How to read the tables</summary>"
        f"<p class='muted'>{html.escape(_legend(plan))}</p></details>"
    )
    for sec in sections(plan, results):
        parts.append(f"<h2>{html.escape(_header(sec.dataset))}</h2>")
        report = (reports or {}).get(sec.dataset.name)
        if report is not None:
            rel = Path(_relative(report, path.parent))
            parts.append(f"<p>Full report (plots, every question's trace): <a href='{html.escape(str(rel))}'>"
                         f"{html.escape(str(rel))}</a></p>")  # fmt: skip
        fig = (figures or {}).get(sec.dataset.name)
        if fig is not None:
            parts.append(image_html(fig, _figure_alt(sec.dataset), "figure"))
        parts.append(_html_table(*sec.scores, "scores"))
        folded = [
            ("Costs and firing rates", sec.costs, "costs"),
            ("First drafts", sec.detection, "detection"),
        ]
        folded.append(("Runs: status, directory, config, machine", sec.runs, "runs"))
        for summary, (head, rows), cls in folded:
            if rows:
                parts.append(
                    f"<details class='more'><summary>{html.escape(summary)}</summary>"
                    f"{_html_table(head, rows, cls)}</details>"
                )
        if sec.notes:
            parts.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in sec.notes) + "</ul>")
    parts += gate_html(gates, _html_table)
    page = (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(plan.title)}</title>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<style>{stylesheet()}</style></head><body>{''.join(parts)}</body></html>"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def _relative(target: Path, start: Path) -> str:
    import os

    return os.path.relpath(target.resolve(), start.resolve())


def write_reports(
    plan: Plan, results: Sequence[RowResult], gates: Sequence[GateSection] = ()
) -> dict[str, Path]:
    """One ``quco report`` per dataset over its rows with records (OUT/DATASET/report.html), with its gate
    frontier when there is one."""
    from quco.eval.render.report import write_report

    written = {}
    for ds in plan.datasets:
        rows = [r for r in results if r.dataset is ds and r.run is not None and r.run.records]
        if not rows:
            continue
        names = [r.row.name for r in rows]
        baseline = names.index(ds.baseline) if ds.baseline in names else 0
        out = Path(plan.out) / ds.name / "report.html"
        extra = gate_html([g for g in gates if g.dataset is ds], _html_table)
        written[ds.name] = write_report(
            [r.run for r in rows],
            out,
            baseline=baseline,
            title=f"{plan.title}: {_header(ds)}",
            extra_html="".join(extra),
        )
    return written


def table(
    plan: Plan,
    plan_path: str,
    markdown: Path | None = None,
    html_path: Path | None = None,
    reports: bool = True,
    n_boot: int = 10_000,
) -> tuple[list[RowResult], list[Path]]:
    """``quco results table``: collect the runs and write the Markdown, the HTML page and the reports."""
    results = collect(plan, n_boot=n_boot)
    gates = gate_sections(plan, results, n_boot=min(n_boot, 2000))
    figures = results_figures(plan, results)
    written = [write_markdown(plan, results, markdown or Path(plan.markdown), plan_path, gates, figures)]
    if plan.readme is not None:
        written.append(write_summary(plan, results, Path(plan.readme), plan_path, figures))
    report_paths = write_reports(plan, results, gates) if reports else {}
    html_out = html_path or Path(plan.html)
    written.append(write_html(plan, results, html_out, plan_path, report_paths, gates, figures))
    written += list(figures.values())
    written += [g.figure for g in gates if g.figure is not None]
    written += list(report_paths.values())
    return results, written
