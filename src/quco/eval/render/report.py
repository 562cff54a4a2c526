"""``write_report``: one self-contained HTML page comparing runs (tables, embedded plots, per-question traces).

Everything is inline (CSS, PNGs as base64, a few lines of script for filtering) so the file can be mailed,
attached to an issue, or opened offline. Plots use matplotlib's object API (no pyplot global state).
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import json
import logging
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from quco.errors import QucoError
from quco.eval.runs.records import Record
from quco.eval.runs.store import Run, load_run
from quco.eval.runs.world_file import world_html
from quco.eval.score.analysis import (
    efficiency_points,
    em_by_cost,
    em_by_entity_frequency,
    runtime_breakdown,
    signal_source,
    threshold_sweep,
    trigger_sweep,
)
from quco.eval.score.stats import Interval, compare, summarize

log = logging.getLogger(__name__)

# (field, column title, digits, scale)
TABLE_COLUMNS = (
    ("em", "EM", 1, 100.0),
    ("f1", "F1", 1, 100.0),
    ("retrievals", "Retrievals", 2, 1.0),
    ("main_llm_calls", "LLM calls (main)", 2, 1.0),
    ("llm_calls", "LLM calls (all roles)", 2, 1.0),
    ("main_tokens", "Gen. tokens (main)", 1, 1.0),
    ("tokens", "Gen. tokens (all roles)", 1, 1.0),
    ("prompt_tokens", "Prompt tokens", 0, 1.0),
    ("corpus_queries", "Corpus queries", 1, 1.0),
    ("seconds", "Seconds", 2, 1.0),
)


def stylesheet() -> str:
    """The one stylesheet of the HTML pages (style.css beside this module), inlined so a page stands alone."""
    return resources.files("quco.eval.render").joinpath("style.css").read_text(encoding="utf-8")


_SCRIPT = """
function countImages(){
  const imgs=[...document.querySelectorAll('img.plot')];
  const ok=imgs.filter(i=>i.complete&&i.naturalWidth>0).length;
  document.body.dataset.imagesTotal=imgs.length;document.body.dataset.imagesOk=ok;
}
window.addEventListener('load',countImages);
function filterRows(){
  const q=document.getElementById('filter').value.toLowerCase();
  const only=document.getElementById('disagree').checked;
  for(const tr of document.querySelectorAll('#questions > tbody > tr')){
    const hit=!q||tr.dataset.text.includes(q);
    const dis=!only||tr.dataset.disagree==='1';
    tr.style.display=(hit&&dis)?'':'none';
  }
}
"""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _png(fig) -> str:  # noqa: ANN001 - a matplotlib Figure
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img class="plot" alt="{_esc(fig.get_label())}" src="data:image/png;base64,{data}">'


def _figure(width: float = 7.0, height: float = 3.6, label: str = ""):  # noqa: ANN202
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.set_label(label)
    return fig


def _finish(fig, ax, title: str, xlabel: str, ylabel: str | None = None, grid: bool = True) -> str:  # noqa: ANN001
    """Label, legend and title a plot, and embed it."""
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if grid:
        ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    return _png(fig)


def _cell(iv: Interval, digits: int, scale: float) -> str:
    if iv.n == 0 or math.isnan(iv.mean):
        return '<td class="num muted">n/a</td>'
    return (
        f'<td class="num">{iv.mean * scale:.{digits}f}<br>'
        f'<span class="ci">[{iv.low * scale:.{digits}f}, {iv.high * scale:.{digits}f}]</span></td>'
    )


def _summary_table(runs: Sequence[Run], summaries: dict[str, dict[str, Interval]]) -> str:
    head = "".join(f"<th>{_esc(t)}</th>" for _, t, _, _ in TABLE_COLUMNS)
    rows = []
    for run in runs:
        s = summaries[run.name]
        errors = sum(1 for r in run.records if r.error)
        missing = sum(1 for r in run.records if r.missing and not r.error)
        reprompted = sum(1 for r in run.records if r.reprompted)
        cells = "".join(_cell(s[f], d, sc) for f, _, d, sc in TABLE_COLUMNS)
        rows.append(
            f"<tr><td><b>{_esc(run.name)}</b><br><span class='muted'>{_esc(run.method)}</span></td>"
            f'<td class="num">{len(run.records)}</td>{cells}'
            f'<td class="num">{errors}</td><td class="num">{missing}</td><td class="num">{reprompted}</td></tr>'
        )
    return (
        '<table id="summary"><thead><tr><th>Run</th><th>n</th>'
        f"{head}<th>Errors</th><th>No answer</th><th>Re-prompted</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        "<p class='muted'>Means per question with 95% bootstrap intervals. EM/F1 in %. Tokens and calls count every "
        "role (main, extractor, re-prompt, ...). Seconds are wall time per question.</p>"
    )


def _paired_table(runs: Sequence[Run], baseline: Run) -> str:
    rows = []
    for run in runs:
        if run is baseline:
            continue
        try:
            comp = compare(baseline, run, ("em", "f1"))
        except QucoError as exc:
            rows.append(f"<tr><td>{_esc(run.name)}</td><td colspan='5' class='muted'>{_esc(exc)}</td></tr>")
            continue
        cells = []
        for m in ("em", "f1"):
            r = comp.results[m]
            cells.append(
                f'<td class="num">{r.diff.mean * 100:+.1f}<br><span class="ci">[{r.diff.low * 100:+.1f}, '
                f'{r.diff.high * 100:+.1f}]</span></td><td class="num">{r.p_value:.4f}</td>'
            )
        rows.append(f"<tr><td>{_esc(run.name)}</td><td class='num'>{comp.n_common}</td>{''.join(cells)}</tr>")
    if not rows:
        return ""
    return (
        f"<h2>Paired tests against {_esc(baseline.name)}</h2>"
        '<table id="paired"><thead><tr><th>Run</th><th>Common questions</th><th>ΔEM (points)</th><th>p</th>'
        f"<th>ΔF1 (points)</th><th>p</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        "<p class='muted'>Difference run − baseline on the same questions: paired bootstrap 95% interval, "
        "two-sided sign-flip permutation p-value.</p>"
    )


def _detection_table(runs: Sequence[Run], n_boot: int) -> str:
    from quco.eval.score.detection import DETECTION_HEAD, detection, detection_cells

    found = [(run, d) for run in runs if (d := detection(run, n_boot)) is not None]
    if not found:
        return ""
    head = "".join(f"<th>{_esc(h)}</th>" for h in ("Run", *DETECTION_HEAD))
    rows = "".join(
        f"<tr><td>{_esc(run.name)}</td>" + "".join(f"<td class='num'>{_esc(c)}</td>" for c in detection_cells(d))
        + "</tr>"
        for run, d in found
    )  # fmt: skip
    return (
        f"<h2>Does the trigger catch wrong drafts?</h2><table id='detection'><thead><tr>{head}</tr></thead>"
        f"<tbody>{rows}</tbody></table><p class='muted'>Each question's first draft judged during generation, "
        "scored as the final answer is: how often it is wrong when the trigger fired and when it kept it "
        "(bootstrap 95% interval, label-permutation p-value), and how well the trigger's first score ranks "
        "wrong drafts first (AUROC, 0.5: chance; `quco detection`).</p>"
    )


def _plot_efficiency(runs: Sequence[Run]) -> str:
    points = efficiency_points(runs)
    fig = _figure(11, 3.4, "EM versus cost per question")
    for i, (cost, title) in enumerate(
        (
            ("tokens", "generated tokens (all roles)"),
            ("llm_calls", "LLM calls (all roles)"),
            ("retrievals", "retrievals"),
        )
    ):
        ax = fig.add_subplot(1, 3, i + 1)
        for p in points:
            ax.scatter([p.costs[cost]], [p.em * 100], s=40)
            ax.annotate(
                p.run, (p.costs[cost], p.em * 100), fontsize=8, xytext=(4, 3), textcoords="offset points"
            )
        ax.set_xlabel(f"mean {title} / question")
        if i == 0:
            ax.set_ylabel("EM (%)")
        ax.grid(alpha=0.3)
    fig.suptitle("EM versus cost (one point per run)")
    return _png(fig)


def _plot_runtime(runs: Sequence[Run]) -> str:
    breakdown = runtime_breakdown(runs)
    fig = _figure(8, 1.2 + 0.5 * len(runs), "Runtime breakdown")
    ax = fig.add_subplot(1, 1, 1)
    names = list(breakdown)
    left = [0.0] * len(names)
    components = sorted({c for v in breakdown.values() for c in v}, key=lambda c: (c == "other", c))
    for comp in components:
        widths = [breakdown[n].get(comp, 0.0) for n in names]
        ax.barh(names, widths, left=left, label=comp)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_xlabel("mean seconds per question")
    ax.invert_yaxis()
    ax.legend(
        fontsize=8, ncol=len(components), loc="upper center", bbox_to_anchor=(0.5, -0.25), frameon=False
    )
    ax.set_title("Runtime by component")
    return _png(fig)


def _plot_frequency(runs: Sequence[Run]) -> str | None:
    table = em_by_entity_frequency(runs)
    if table is None:
        return None
    fig = _figure(9, 3.6, "EM by entity frequency")
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(1, len(table.em))
    xs = list(range(len(table.labels)))
    for k, (name, ems) in enumerate(table.em.items()):
        ax.bar([x + k * width for x in xs], [0 if math.isnan(e) else e * 100 for e in ems], width, label=name)
    ax.set_xticks([x + width * (len(table.em) - 1) / 2 for x in xs])
    ax.set_xticklabels([f"{lab}\n(n={n})" for lab, n in zip(table.labels, table.n, strict=True)], fontsize=8)
    xlabel = f"{table.stat} corpus count of the question's entities (recorded by {table.source})"
    return _finish(fig, ax, "EM by question-entity frequency", xlabel, "EM (%)", grid=False)


def _plot_em_by_retrievals(runs: Sequence[Run]) -> str:
    fig = _figure(8, 3.4, "EM by retrievals per question")
    ax = fig.add_subplot(1, 1, 1)
    per_run = {run.name: em_by_cost(run, "retrievals") for run in runs}
    # one numeric axis shared by all runs (a categorical axis would order groups by first appearance)
    labels = sorted(
        {g[0] for groups in per_run.values() for g in groups}, key=lambda s: float(s.split("-")[0])
    )
    where = {label: i for i, label in enumerate(labels)}
    for name, groups in per_run.items():
        if groups:
            ax.plot([where[g[0]] for g in groups], [g[2] * 100 for g in groups], marker="o", label=name)
    ax.set_xticks(range(len(labels)), labels)
    return _finish(
        fig, ax, "EM by number of retrievals per question", "retrievals for the question", "EM (%)"
    )


def _plot_sweep(runs: Sequence[Run]) -> str | None:
    signal = signal_source(runs)
    if signal is None:
        return None
    by_method = {r.method: r for r in runs}
    rows = threshold_sweep(signal, with_run=by_method.get("sr-rag"), without_run=by_method.get("wo-rag"))
    fig = _figure(8, 3.4, "Stage-1 threshold sweep")
    ax = fig.add_subplot(1, 1, 1)
    xs = [max(r.threshold, 0.5) for r in rows]
    ax.plot(xs, [r.trigger_rate * 100 for r in rows], marker="o", label="questions retrieving first (%)")
    if rows and rows[0].em is not None:
        ax.plot(xs, [(r.em or 0) * 100 for r in rows], marker="s", label="simulated EM (%) from SR-/Wo-RAG")
    ax.set_xscale("log")
    xlabel = f"stage-1 threshold on entity frequency (records of {signal.name})"
    return _finish(fig, ax, "Stage-1 threshold sweep from recorded signals", xlabel)


def _plot_trigger_sweeps(runs: Sequence[Run]) -> str | None:
    # Model-confidence triggers share one axis (params.threshold); QuCo-RAG's counts have the stage-1 plot.
    sweeps = [(r.name, trigger_sweep(r, param="threshold")) for r in runs]
    sweeps = [(name, pts) for name, pts in sweeps if pts]
    if not sweeps:
        return None
    fig = _figure(8, 3.4, "Trigger threshold sweep")
    ax = fig.add_subplot(1, 1, 1)
    for name, pts in sweeps:
        ax.plot([p.threshold for p in pts], [p.retrievals_per_question for p in pts], marker="o", label=name)
    xlabel = "trigger threshold (replayed from recorded scores)"
    return _finish(fig, ax, "Trigger threshold sweep from recorded signals", xlabel, "retrievals / question")


def _trace_html(rec: Record) -> str:
    if rec.error:
        return f"<pre class='bad'>{_esc(rec.error)}\n{_esc(rec.error_traceback or '')}</pre>"
    trace = rec.trace or {}
    parts = [f"<div><b>Prediction:</b> {_esc(rec.prediction)}</div>"]
    for step in trace.get("steps", []):
        decision = step.get("decision", "")
        extra = ""
        if step.get("queries"):
            extra += f"<div>queries: {_esc(' | '.join(step['queries']))}</div>"
        if step.get("retrieved"):
            titles = ", ".join(str(p.get("title") or p.get("id")) for p in step["retrieved"])
            extra += f"<div>retrieved: {_esc(titles)}</div>"
        if step.get("kept"):
            extra += f"<div>kept: {_esc(step['kept'])}</div>"
        draft = f"<div>draft: {_esc(step['draft'])}</div>" if step.get("draft") else ""
        parts.append(
            f"<div class='step {_esc(decision)}'><b>{_esc(step.get('stage'))} #{_esc(step.get('index'))}</b> "
            f"{_esc(decision)} — {_esc(step.get('reason', ''))}{draft}{extra}</div>"
        )
    counters = trace.get("counters", {})
    parts.append(
        f"<div class='muted'>calls {_esc(counters.get('llm_calls', {}))}, retrievals "
        f"{_esc(counters.get('retrievals', 0))}, corpus queries {_esc(counters.get('corpus_queries', 0))}, "
        f"seconds {_esc(counters.get('seconds', {}))}</div>"
    )
    if trace.get("notes"):
        parts.append(f"<div class='muted'>notes: {_esc('; '.join(trace['notes']))}</div>")
    raw = json.dumps(trace, ensure_ascii=False, indent=1)
    parts.append(f"<details><summary>raw trace</summary><pre>{_esc(raw)}</pre></details>")
    return "".join(parts)


def _questions_table(runs: Sequence[Run]) -> str:
    maps = [r.by_id() for r in runs]
    order: dict[str, tuple[float, str]] = {}
    for m in maps:
        for qid, rec in m.items():
            order.setdefault(qid, (float(rec.index), qid))
    rows = []
    for qid in sorted(order, key=lambda q: order[q]):
        first = next(m[qid] for m in maps if qid in m)
        ems = [m[qid].em for m in maps if qid in m]
        disagree = "1" if len({e for e in ems}) > 1 else "0"
        cells, details = [], []
        for run, m in zip(runs, maps, strict=True):
            rec = m.get(qid)
            if rec is None:
                cells.append("<td class='muted'>—</td>")
                continue
            mark = "<span class='ok'>✓</span>" if rec.em else "<span class='bad'>✗</span>"
            shown = "error" if rec.error else (rec.answer or "(no answer)")
            cells.append(f"<td>{mark} {_esc(shown)}</td>")
            details.append(f"<details><summary>{_esc(run.name)}</summary>{_trace_html(rec)}</details>")
        text = f"{first.question} {' '.join(first.gold)}".lower()
        rows.append(
            f"<tr data-text='{_esc(text)}' data-disagree='{disagree}'><td class='num'>{_esc(first.index)}</td>"
            f"<td>{_esc(first.question)}<details><summary>traces</summary>{''.join(details)}</details></td>"
            f"<td>{_esc(' | '.join(first.gold))}</td>{''.join(cells)}</tr>"
        )
    head = "".join(f"<th>{_esc(r.name)}</th>" for r in runs)
    return (
        "<h2>Questions</h2><p><input id='filter' placeholder='filter by question or gold answer' "
        "oninput='filterRows()'> <label><input type='checkbox' id='disagree' onchange='filterRows()'> only "
        "questions where runs disagree</label></p>"
        f"<table id='questions'><thead><tr><th>#</th><th>Question</th><th>Gold</th>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def write_report(
    run_dirs: Sequence[str | Path | Run],
    out_html: str | Path,
    baseline: int = 0,
    title: str = "quco evaluation report",
    n_boot: int = 10_000,
    extra_html: str = "",
) -> Path:
    """Write the comparison of ``run_dirs`` to ``out_html``; the run at position ``baseline`` is compared to."""
    runs = [r if isinstance(r, Run) else load_run(r) for r in run_dirs]
    if not runs:
        raise QucoError("no run given; pass at least one run directory written by `quco eval`")
    names = [r.name for r in runs]
    if len(set(names)) != len(names):  # two dirs with the same name (e.g. a/run and b/run): use their paths
        for r in runs:
            r.config = dataclasses.replace(r.config, label=str(r.dir))
    summaries = {r.name: summarize(r, n_boot=n_boot) for r in runs}
    datasets = sorted({f"{r.dataset.name} ({(r.dataset.sha256 or '')[:8]})" for r in runs})
    plots = [_plot_efficiency(runs), _plot_runtime(runs), _plot_em_by_retrievals(runs)]
    plots += [p for p in (_plot_frequency(runs), _plot_sweep(runs), _plot_trigger_sweeps(runs)) if p]
    run_list = "".join(
        f"<li><b>{_esc(r.name)}</b>: method {_esc(r.method)}, {len(r.records)} questions, config "
        f"{_esc(r.config.config_hash)}, dir <code>{_esc(r.dir)}</code></li>"
        for r in runs
    )
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = (
        f"<h1>{_esc(title)}</h1><p class='muted'>Generated {generated}. Dataset: {_esc(', '.join(datasets))}.</p>"
        f"<ul>{run_list}</ul>{world_html(runs)}<h2>Comparison</h2>{_summary_table(runs, summaries)}"
        f"{_paired_table(runs, runs[baseline])}{_detection_table(runs, n_boot)}{extra_html}"
        f"<h2>Plots</h2><div class='plots'>{''.join(plots)}</div>{_questions_table(runs)}"
    )
    page = (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_esc(title)}</title>"
        f"<style>{stylesheet()}</style><script>{_SCRIPT}</script></head><body>{body}</body></html>"
    )
    out = Path(out_html)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    log.info("report written to %s (%d runs, %d plots)", out, len(runs), len(plots))
    return out
