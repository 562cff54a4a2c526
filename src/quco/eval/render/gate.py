"""The frontier report: every signal and fitted gate on the evaluated questions, at equal retrieval budgets.

Each single signal reads its direction from the calibration split only. For every signal the report gives its
AUROC for "retrieval helps" and for "the closed-book draft is wrong", the exact EM and F1 of the gate that
fires on the top 25 / 50 / 75 % of the evaluated questions (the frontier point at that budget), the random
gate at the same number of firings (mean, 95% range over draws, and the share of draws at least as good), and
what computing the signal costs per question. Fitted gates are also shown at the threshold chosen on the
calibration split, as a live run would apply them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from quco.eval.gate.data import GateData
from quco.eval.gate.fit import signal_gate
from quco.eval.gate.frontier import (
    Point,
    RandomGate,
    at_budget,
    fire_at,
    frontier,
    oracle,
    outcome,
    point,
    random_gate,
)
from quco.eval.render.figures import mark_method, new_axes, place_labels, save
from quco.eval.score.stats import Interval, PairedResult, auc_value, auroc, paired_test
from quco.methods.gate import FEATURES
from quco.signals.gate_model import GateModel

BUDGETS = (0.25, 0.5, 0.75)


@dataclass
class GateRow:
    """One gate (a signal in its calibrated direction, or a fitted gate) on the evaluated questions."""

    name: str
    kind: str  # "signal" or "fitted"
    families: list[str]
    direction: float
    auroc_helps: Interval
    auroc_wrong: Interval
    curve: list[Point]
    budgets: dict[float, Point]
    random: dict[float, RandomGate]
    calibration_auroc: float = math.nan  # "helps" on the calibration questions, in the chosen direction
    chosen: Point | None = None  # at the threshold chosen on the calibration split
    chosen_random: RandomGate | None = None
    chosen_vs_open: PairedResult | None = None
    chosen_vs_closed: PairedResult | None = None
    model: GateModel | None = None

    def family_cost(self, data: GateData) -> dict[str, float]:
        """What computing this gate's features costs per question (all families it reads)."""
        out: dict[str, float] = {}
        for fam in self.families:
            for k, v in data.family_cost.get(fam, {}).items():
                out[k] = out.get(k, 0.0) + float(v.mean())
        return out


@dataclass
class FrontierReport:
    dataset: str
    calibration: tuple[int, int]
    evaluation: tuple[int, int]
    n_calibration: int
    n: int
    closed: Point
    opened: Point
    oracle: list[Point]
    random: dict[float, RandomGate]
    rows: list[GateRow] = field(default_factory=list)
    methods: dict[str, tuple[float, float, float]] = field(
        default_factory=dict
    )  # label: EM, F1, retrievals/q
    family_costs: dict[str, dict[str, float]] = field(default_factory=dict)


def _families(model: GateModel) -> list[str]:
    return sorted({FEATURES.get(f, "?") for f in model.features})


def _row(
    data: GateData,
    model: GateModel,
    name: str,
    kind: str,
    budgets: Sequence[float],
    n_boot: int,
    seed: int,
    cal: GateData | None = None,
) -> GateRow:
    scores = model.scores(data.features)
    families = _families(model)
    curve = frontier(data, scores, families)
    at = {b: at_budget(curve, b) for b in budgets}
    rand = {b: random_gate(data, p.fired, seed=seed) for b, p in at.items()}
    row = GateRow(
        name,
        kind,
        families,
        model.direction,
        auroc(scores, data.helps, n_boot=n_boot, seed=seed),
        auroc(scores, data.wrong, n_boot=n_boot, seed=seed),
        curve,
        at,
        rand,
        model=model,
    )
    if cal is not None and len(cal):
        row.calibration_auroc = auc_value(model.scores(cal.features), cal.helps)
    if kind == "fitted":
        fire = fire_at(scores, model.threshold)
        row.chosen = point(data, fire, families, model.threshold)
        row.chosen_random = random_gate(data, row.chosen.fired, seed=seed)
        em, _ = outcome(data, fire)
        row.chosen_vs_open = paired_test(data.open_em, em, n_boot=n_boot, seed=seed)
        row.chosen_vs_closed = paired_test(data.closed_em, em, n_boot=n_boot, seed=seed)
    return row


def build_report(
    data: GateData,
    calibration: tuple[int, int],
    evaluation: tuple[int, int],
    *,
    dataset: str = "",
    features: Sequence[str] | None = None,
    gates: Sequence[tuple[str, GateModel]] = (),
    budgets: Sequence[float] = BUDGETS,
    methods: dict[str, tuple[float, float, float]] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> FrontierReport:
    cal = data.between(*calibration)
    ev = data.between(*evaluation)
    if len(ev) == 0:
        raise ValueError(f"no evaluated question in {evaluation[0]}:{evaluation[1]}")
    never = np.zeros(len(ev), dtype=bool)
    report = FrontierReport(
        dataset,
        calibration,
        evaluation,
        len(cal),
        len(ev),
        point(ev, never),
        point(ev, ~never),
        oracle(ev),
        {b: random_gate(ev, int(math.floor(b * len(ev) + 1e-9)), seed=seed) for b in budgets},
        methods=dict(methods or {}),
    )
    step = max(1, len(ev) // 40)
    report.band = [random_gate(ev, k, draws=2000, seed=seed) for k in range(0, len(ev) + 1, step)]
    names = list(features) if features is not None else [f for f in FEATURES if f in ev.feature_names()]
    for name in names:
        if len(cal) == 0:
            raise ValueError(
                f"no calibration question in {calibration[0]}:{calibration[1]}: signals need a direction"
            )
        model = signal_gate(cal, name)
        report.rows.append(_row(ev, model, name, "signal", budgets, n_boot, seed, cal))
    for name, model in gates:
        report.rows.append(_row(ev, model, name, "fitted", budgets, n_boot, seed, cal))
    report.family_costs = {
        fam: {k: float(v.mean()) for k, v in costs.items()} for fam, costs in ev.family_cost.items()
    }
    return report


# -- rendering -------------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return "—" if math.isnan(x) else f"{100 * x:.1f}"


def _auc(i: Interval) -> str:
    if math.isnan(i.mean):
        return "—"
    return f"{i.mean:.2f} [{i.low:.2f}, {i.high:.2f}]"


def _at(p: Point, r: RandomGate) -> str:
    return f"{_pct(p.em)} ({p.rate:.2f}; rnd {_pct(r.em_mean)}, p={r.p_at_least(p.em):.2f})"


Table = tuple[list[str], list[list[str]]]


def _curve_key(row: GateRow) -> tuple:
    """What makes a row's frontier: a fitted model's parameters (the same model at several thresholds draws one
    curve), or the row's own name."""
    m = row.model if row.kind == "fitted" else None
    if m is None:
        return (row.name,)
    return (tuple(m.features), tuple(m.coef), m.intercept, m.direction)


def blocks(report: FrontierReport) -> list[str | Table]:
    """The report as paragraphs and tables (head, rows), for Markdown and HTML alike."""
    out: list[str | Table] = []
    b = list(report.random)
    best = max(report.oracle, key=lambda p: (p.em, -p.fired))
    c0, c1 = report.calibration
    e0, e1 = report.evaluation
    out.append(
        f"Questions {e0}-{e1 - 1} ({report.n}); directions, fitted gates and their thresholds from questions "
        f"{c0}-{c1 - 1} ({report.n_calibration}). Closed-book EM {_pct(report.closed.em)} "
        f"(F1 {_pct(report.closed.f1)}), retrieval for every question EM {_pct(report.opened.em)} "
        f"(F1 {_pct(report.opened.f1)}); the oracle gate reaches EM {_pct(best.em)} at "
        f"{best.rate:.3f} retrievals per question."
    )
    head = ["gate", "reads", "dir", "AUROC helps", "AUROC wrong"] + [f"EM at {x:g} r/q" for x in b]
    orc = [at_budget(report.oracle, x) for x in b]
    rows = [["oracle", "—", "—", "—", "—"] + [f"{_pct(p.em)} ({p.rate:.2f})" for p in orc]]
    rows.append(
        ["random (mean [95% of draws])", "—", "—", "0.50", "0.50"]
        + [f"{_pct(r.em_mean)} [{_pct(r.em_low)}, {_pct(r.em_high)}]" for r in report.random.values()]
    )
    shown: set[tuple] = set()
    for row in report.rows:
        if row.kind == "fitted":  # one frontier per fitted model, whatever its threshold
            key = _curve_key(row)
            if key in shown:
                continue
            shown.add(key)
        d = "fit" if row.kind == "fitted" else ("+" if row.direction > 0 else "−")
        cells = [row.name, ", ".join(row.families), d, _auc(row.auroc_helps), _auc(row.auroc_wrong)]
        rows.append(cells + [_at(row.budgets[x], row.random[x]) for x in b])
    out.append((head, rows))
    out.append(
        "Each EM cell: the gate firing on its top-scored questions without exceeding the budget (the "
        "retrievals per question it reached), the random gate's mean EM at the same number of firings, and p, "
        "the share of 10,000 random gates at least as good. dir: the direction read on the calibration "
        "questions (+: higher retrieves)."
    )
    fitted = [r for r in report.rows if r.kind == "fitted" and r.chosen is not None]
    if fitted:
        out.append(
            "Fitted gates at the threshold chosen on the calibration questions (what a live run does):"
        )
        head = [
            "gate",
            "budget",
            "retrievals/q",
            "EM",
            "F1",
            "vs retrieval always",
            "vs random",
            "LLM calls/q",
        ]
        rows = []
        for r in fitted:
            ch, rnd, vs = r.chosen, r.chosen_random, r.chosen_vs_open
            assert ch is not None and rnd is not None and vs is not None and r.model is not None
            rows.append(
                [
                    r.name,
                    f"{r.model.budget}",
                    f"{ch.rate:.3f}",
                    _pct(ch.em),
                    _pct(ch.f1),
                    f"{100 * vs.diff.mean:+.1f} [{100 * vs.diff.low:+.1f}, {100 * vs.diff.high:+.1f}], "
                    f"p={vs.p_value:.3f}",
                    f"{_pct(rnd.em_mean)}, p={rnd.p_at_least(ch.em):.3f}",
                    f"{ch.costs['llm_calls']:.2f}",
                ]
            )
        out.append((head, rows))
    if report.family_costs:
        out.append("What each family of signals costs per question, on top of the closed-book draft:")
        head = ["family", "LLM calls", "prompt tokens", "generated tokens", "corpus queries", "seconds"]
        rows = [
            [
                fam,
                f"{c.get('llm_calls', 0):.2f}",
                f"{c.get('prompt_tokens', 0):.0f}",
                f"{c.get('generated_tokens', 0):.1f}",
                f"{c.get('corpus_queries', 0):.1f}",
                f"{c.get('seconds', 0):.2f}",
            ]
            for fam, c in report.family_costs.items()
        ]
        out.append((head, rows))
    return out


def markdown_lines(parts: Sequence[str | Table]) -> list[str]:
    """Paragraphs and tables as Markdown lines, a blank line after each."""
    lines: list[str] = []
    for block in parts:
        if isinstance(block, str):
            lines += [block, ""]
            continue
        head, rows = block
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines.append("")
    return lines


def markdown(report: FrontierReport) -> str:
    return "\n".join(markdown_lines(blocks(report)))


def to_json(report: FrontierReport) -> dict[str, Any]:
    def pt(p: Point) -> dict[str, Any]:
        return {"fired": p.fired, "rate": p.rate, "em": p.em, "f1": p.f1, "threshold": p.threshold, **p.costs}

    return {
        "dataset": report.dataset,
        "calibration": list(report.calibration),
        "evaluation": list(report.evaluation),
        "n": report.n,
        "closed": pt(report.closed),
        "open": pt(report.opened),
        "oracle": [pt(p) for p in report.oracle],
        "random": {
            str(b): {"fired": r.fired, "em": r.em_mean, "low": r.em_low, "high": r.em_high}
            for b, r in report.random.items()
        },
        "rows": [
            {
                "name": r.name,
                "kind": r.kind,
                "families": r.families,
                "direction": r.direction,
                "auroc_helps": [r.auroc_helps.mean, r.auroc_helps.low, r.auroc_helps.high],
                "auroc_wrong": [r.auroc_wrong.mean, r.auroc_wrong.low, r.auroc_wrong.high],
                "budgets": {
                    str(b): pt(p) | {"p_random": r.random[b].p_at_least(p.em)} for b, p in r.budgets.items()
                },
                "curve": [[p.rate, p.em] for p in r.curve],
                "chosen": None if r.chosen is None else pt(r.chosen),
            }
            for r in report.rows
        ],
        "methods": {k: {"em": v[0], "f1": v[1], "retrievals": v[2]} for k, v in report.methods.items()},
        "family_costs": report.family_costs,
    }


def best_per_family(report: FrontierReport) -> list[str]:
    """Each family's signal that ranked "retrieval helps" best on the calibration questions."""
    best: dict[str, GateRow] = {}
    for row in report.rows:
        if row.kind != "signal" or math.isnan(row.calibration_auroc):
            continue
        fam = row.families[0]
        if fam not in best or row.calibration_auroc > best[fam].calibration_auroc:
            best[fam] = row
    return [r.name for r in best.values()]


def figure(report: FrontierReport, path: str | Path, lines_for: Sequence[str] | None = None) -> Path:
    """EM against retrievals per question: a line per signal (by default each family's best on the
    calibration questions), the fitted gates, the oracle, the random gate's mean and 95% band, the methods."""
    fig, ax = new_axes()
    n = report.n
    data_rates = np.linspace(0, 1, 101)
    base, full = report.closed.em, report.opened.em
    ax.plot(
        data_rates,
        100 * (base + (full - base) * data_rates),
        color="0.35",
        lw=1,
        ls="--",
        label="random gate",
    )
    if report.band:
        xs = [r.fired / n for r in report.band]
        ax.fill_between(xs, [100 * r.em_low for r in report.band], [100 * r.em_high for r in report.band],
                        color="0.88", label="random, 95% of draws")  # fmt: skip
    orc = report.oracle
    ax.plot([p.rate for p in orc], [100 * p.em for p in orc], color="k", lw=1.2, label="oracle")
    chosen = set(lines_for) if lines_for is not None else set(best_per_family(report))
    colors: dict[tuple, str] = {}  # one line per fitted model; a dot for each threshold chosen on it
    for row in report.rows:
        if row.name not in chosen and row.kind != "fitted":
            continue
        key = _curve_key(row)
        if key not in colors:
            style = {"lw": 2.2} if row.kind == "fitted" else {"lw": 1.1, "alpha": 0.9}
            label = (
                row.name.split(" (budget")[0]
                if row.kind == "fitted"
                else f"{row.name} ({'+' if row.direction > 0 else '−'})"
            )
            xs, ys = [p.rate for p in row.curve], [100 * p.em for p in row.curve]
            colors[key] = ax.plot(xs, ys, label=label, **style)[0].get_color()
        if row.chosen is not None:
            ax.plot([row.chosen.rate], [100 * row.chosen.em], "o", color=colors[key], ms=7)
    # Methods at the same cost and score share one label, so that none is printed over another.
    spots: dict[tuple[float, float], list[str]] = {}
    for label, (em, _f1, r) in report.methods.items():
        spots.setdefault((round(r, 3), round(100 * em, 2)), []).append(label)
    labels = [mark_method(ax, r, em, ", ".join(names)) for (r, em), names in spots.items()]
    fig.canvas.draw()
    place_labels(fig, ax, labels)
    title = f"{report.dataset}: closed-book or one retrieval, per question (n={n})"
    return save(fig, ax, path, title)
