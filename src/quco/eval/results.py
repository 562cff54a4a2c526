"""The results table of a plan (``quco.eval.plan``): run every row, then tabulate whatever has been recorded.

``run_plan`` runs or resumes each row's ``quco eval`` in plan order, one row at a time: a row already complete
costs nothing, an interrupted one continues where it stopped, a row that fails is reported and the next one
runs. A matched random control waits until the row it matches is complete (its firing rates are read from
that run). A row that calibrates a threshold first writes a calibrated copy of its config beside its run
directory, chosen on the dataset's calibration questions only.

``collect`` reads every row's run (restricted to the plan's questions) and computes, with ``quco.eval.stats``,
each row's EM/F1 with 95% intervals, the paired tests against the baseline and the control rows, and the
costs; ``write_markdown`` and ``write_html`` render them, and ``write_reports`` writes one full
``quco report`` per dataset.
"""

from __future__ import annotations

import hashlib
import html
import logging
import shlex
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quco.errors import QucoError
from quco.eval.cli import FIRING_COLUMNS, SUMMARY_COLUMNS, eval_command, firing_rates, format_rate
from quco.eval.detection import DETECTION_HEAD, Detection, detection, detection_cells
from quco.eval.gate.section import GateSection, gate_sections, image_html
from quco.eval.gate.section import html_parts as gate_html
from quco.eval.gate.section import markdown_lines as gate_markdown
from quco.eval.plan import DatasetPlan, Plan, PlanError, Row, check_config_notes
from quco.eval.runs import CONFIG_FILE, Run, load_run
from quco.eval.stats import Comparison, Interval, compare, summarize
from quco.storage import write_text_atomic

log = logging.getLogger(__name__)

BEGIN = "<!-- results:begin (written by `quco results table`; edit the text outside these markers) -->"
END = "<!-- results:end -->"
SUMMARY_BEGIN = (
    "<!-- results-summary:begin (written by `quco results table`; edit the text outside these markers) -->"
)
SUMMARY_END = "<!-- results-summary:end -->"

# The table's columns are `quco summary`'s, with the digits and scale each is printed with.
_FORMAT = {
    "em": (1, 100.0),
    "f1": (1, 100.0),
    "retrievals": (2, 1.0),
    "main_llm_calls": (2, 1.0),
    "llm_calls": (2, 1.0),
}
SCORE_COLUMNS = tuple((f, h, *_FORMAT[f]) for f, h in SUMMARY_COLUMNS if f in ("em", "f1"))
COST_COLUMNS = tuple((f, h, *_FORMAT.get(f, (1, 1.0))) for f, h in SUMMARY_COLUMNS if f not in ("em", "f1"))


# -- running ----------------------------------------------------------------------------------------------------


@dataclass
class RowRun:
    """What ``run_plan`` did with one row."""

    dataset: str
    row: str
    action: str  # "ran", "skipped", "failed", "planned" (dry run)
    detail: str = ""
    command: str = ""


def selected_rows(plan: Plan, datasets: Sequence[str], rows: Sequence[str]) -> list[tuple[DatasetPlan, Row]]:
    known_ds = {ds.name for ds in plan.datasets}
    for name in datasets:
        if name not in known_ds:
            raise PlanError(f"the plan has no dataset '{name}' (it has {', '.join(sorted(known_ds))})")
    known_rows = {row.name for _, row in plan.rows()}
    for name in rows:
        if name not in known_rows:
            raise PlanError(f"the plan has no row '{name}'")
    return [
        (ds, row)
        for ds, row in plan.rows()
        if (not datasets or ds.name in datasets) and (not rows or row.name in rows)
    ]


def planned_ids(ds: DatasetPlan, row: Row | None = None) -> list[str]:
    """The ids of the questions a row evaluates (the dataset's span, or its first ``row.limit``)."""
    from quco.datasets import load_dataset

    span = ds.row_span(row) if row is not None else ds.span
    return [ex.id for ex in load_dataset(ds.name, limit=span.limit, offset=span.offset)]


def row_progress(plan: Plan, ds: DatasetPlan, row: Row) -> tuple[int, int]:
    """(questions recorded, questions planned) of a row."""
    ids = planned_ids(ds, row)
    run_dir = plan.run_dir(ds, row)
    if not (run_dir / CONFIG_FILE).is_file():
        return 0, len(ids)
    recorded = {str(r["id"]) for r in load_run(run_dir).records}
    return sum(1 for i in ids if i in recorded), len(ids)


def row_overrides(plan: Plan, ds: DatasetPlan, row: Row) -> list[str]:
    """The row's `--set` overrides: the plan's, the row's, and the matched run for a random control."""
    sets = list(plan.set) + list(row.set)
    if row.match is not None:
        sets.append(f"params.match_run={plan.run_dir(ds, ds.row(row.match))}")
    return sets


def eval_argv(plan: Plan, ds: DatasetPlan, row: Row, config: Path) -> list[str]:
    """The `quco eval` command that runs (or resumes) a row."""
    span = ds.row_span(row)
    argv = ["quco", "eval", "--config", str(config), "--dataset", ds.name]
    argv += ["--offset", str(span.offset), "--limit", str(span.limit), "--out", str(plan.run_dir(ds, row))]
    argv += ["--label", row.title]
    if ds.reprompt:
        argv.append("--reprompt")
    if plan.workers is not None:
        argv += ["--workers", str(plan.workers)]
    for s in row_overrides(plan, ds, row):
        argv += ["--set", s]
    return argv


def _calibration_header(plan: Plan, ds: DatasetPlan, row: Row) -> str:
    """The first line of a calibrated copy: what it was made from, so a changed source or plan is noticed."""
    assert row.config is not None and ds.calibration is not None
    source = hashlib.sha256(Path(row.config).read_bytes()).hexdigest()[:16]
    specs = "; ".join(f"{c.param} {c.target} {c.rate:g}" for c in row.calibrate)
    inputs = hashlib.sha256("\n".join([*row_overrides(plan, ds, row), specs]).encode("utf-8")).hexdigest()[
        :16
    ]
    return (
        f"# calibrated copy of {row.config} (sha256 {source}), overrides and targets {inputs}: "
        f"{specs} on {ds.name} questions {ds.calibration.offset}:{ds.calibration.end}\n"
    )


def calibrated_config(plan: Plan, ds: DatasetPlan, row: Row, progress: bool = True) -> Path:
    """The row's config with its thresholds calibrated on the dataset's calibration questions (made once).

    The copy starts with a header naming its source config (with its sha256), the row's overrides and the
    calibration targets; a copy made from anything else is refused rather than silently reused.
    """
    from quco.config import parse_override
    from quco.eval.calibrate import calibrate, write_threshold

    assert row.config is not None and ds.calibration is not None  # checked when the plan was loaded
    dest = plan.calibrated_config(ds, row)
    header = _calibration_header(plan, ds, row)
    if dest.is_file():
        first = dest.read_text(encoding="utf-8").split("\n", 1)[0] + "\n"
        if first != header:
            raise PlanError(
                f"{dest} was calibrated from another config, other overrides or other targets than the row "
                "now has; delete it (and the row's run, made with it) to calibrate again"
            )
        check_config_notes(dest, ds, f"{ds.name}/{row.name}")
        return dest
    cal = ds.calibration
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_text(header + Path(row.config).read_text(encoding="utf-8"), encoding="utf-8")
    overrides = dict(parse_override(s) for s in row_overrides(plan, ds, row))
    try:
        for spec in row.calibrate:
            log.info("%s/%s: calibrating %s on questions %s", ds.name, row.name, spec.param, cal)
            result = calibrate(
                tmp, ds.name, cal.offset, cal.limit, spec.target, spec.rate,
                overrides=overrides, progress=progress, param=spec.param,
            )  # fmt: skip
            goal = f"rate {spec.rate:g}" if spec.target == "rate" else "best EM"
            note = (
                f"calibrated: {goal} on {ds.name} questions {cal.offset}:{cal.end} "
                f"({datetime.now(UTC).date().isoformat()})"
            )
            write_threshold(tmp, result.threshold, note, result.param)
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _dry_run(plan: Plan, ds: DatasetPlan, row: Row, waiting: str) -> RowRun:
    """The row's command, after checking that its config resolves with its overrides (nothing is built)."""
    from quco.config import load_config, parse_override

    assert row.config is not None
    config = plan.calibrated_config(ds, row) if row.calibrate else Path(row.config)
    try:
        load_config(row.config, overrides=dict(parse_override(s) for s in row_overrides(plan, ds, row)))
    except QucoError as exc:
        return RowRun(ds.name, row.name, "failed", f"the config does not resolve: {exc}")
    cmd = shlex.join(eval_argv(plan, ds, row, config))
    if row.calibrate and not config.is_file():
        cmd = f"(after calibrating {', '.join(c.param for c in row.calibrate)}) {cmd}"
    if waiting:
        cmd = f"(after '{row.match}' completes) {cmd}"
    return RowRun(ds.name, row.name, "planned", command=cmd)


def run_plan(
    plan: Plan,
    datasets: Sequence[str] = (),
    rows: Sequence[str] = (),
    dry_run: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] = log.info,
) -> list[RowRun]:
    """Run or resume every selected row in plan order; a failing row is reported and the next one runs."""

    done: list[RowRun] = []
    for ds, row in selected_rows(plan, datasets, rows):
        if row.config is None:
            why = "no config" + (" (see the dataset's note)" if ds.note and not row.note else "")
            why += f": {row.note}" if row.note else ""
            done.append(RowRun(ds.name, row.name, "skipped", why))
            echo(f"{ds.name}/{row.name}: skipped, {why}")
            continue
        waiting = ""
        if row.match is not None:
            have, want = row_progress(plan, ds, ds.row(row.match))
            if have < want:
                waiting = f"waits for '{row.match}' to complete ({have}/{want} questions)"
                if not dry_run:
                    done.append(RowRun(ds.name, row.name, "skipped", waiting))
                    echo(f"{ds.name}/{row.name}: {waiting}")
                    continue
        if dry_run:
            done.append(_dry_run(plan, ds, row, waiting))
            echo(
                done[-1].command
                if done[-1].action == "planned"
                else f"{ds.name}/{row.name}: {done[-1].detail}"
            )
            continue
        try:
            config = calibrated_config(plan, ds, row, progress) if row.calibrate else Path(row.config)
            span = ds.row_span(row)
            cmd = shlex.join(eval_argv(plan, ds, row, config))
            echo(f"{ds.name}/{row.name}: {cmd}")
            summary = eval_command(
                config, ds.name, span.limit, span.offset, plan.run_dir(ds, row), plan.workers,
                sets=row_overrides(plan, ds, row), label=row.title, progress=progress,
                reprompt=ds.reprompt,
            )  # fmt: skip
        except QucoError as exc:
            done.append(RowRun(ds.name, row.name, "failed", str(exc)))
            echo(f"{ds.name}/{row.name}: FAILED: {exc}")
            continue
        detail = (
            f"{summary.completed}/{summary.selected} questions recorded ({summary.new} now, "
            f"{summary.errors} errors), EM {summary.em:.3f}"
        )
        done.append(RowRun(ds.name, row.name, "ran", detail, cmd))
        echo(f"{ds.name}/{row.name}: {detail}")
    return done


# -- collecting ------------------------------------------------------------------------------------------------


@dataclass
class RowResult:
    """One row of the table: its run restricted to the planned questions, with statistics."""

    dataset: DatasetPlan
    row: Row
    run_dir: Path
    planned: int
    run: Run | None = None
    status: str = "not run"  # "complete", "partial", "not run", "no config", "unreadable"
    problem: str = ""
    stats: dict[str, Interval] = field(default_factory=dict)
    vs_baseline: Comparison | None = None
    vs_control: Comparison | None = None
    world: dict[str, Any] = field(default_factory=dict)
    firing: dict[str, Any] = field(default_factory=dict)
    detection: Detection | None = None

    @property
    def answered(self) -> int:
        return len(self.run.records) if self.run is not None else 0

    @property
    def errors(self) -> int:
        return sum(1 for r in self.run.records if r.get("error")) if self.run is not None else 0

    @property
    def generator(self) -> str:
        if self.run is None:
            return ""
        gen = (self.run.config.get("pipeline") or {}).get("generator") or {}
        return f"{gen.get('model', '?')} ({gen.get('backend', '?')})" if gen else str(self.run.method)


def machine_cell(records: Sequence[dict[str, Any]]) -> str:
    """The machine a row ran on, from what its questions recorded: the 1-minute load average (median, max)
    and the median CPU seconds of the answering process beside the median wall seconds, then the processors
    that answered them (with their questions' median CPU seconds when there are several). Questions recorded
    before these were kept carry none of them and are left out (the counts say how many had them)."""
    loads = [float(r["load"]) for r in records if isinstance(r.get("load"), int | float)]
    if not loads:
        return "—"
    cell = f"load {statistics.median(loads):.1f} (max {max(loads):.1f})"
    timed = [r for r in records if isinstance(r.get("cpu_seconds"), int | float)]
    if timed:
        cpu = statistics.median(float(r["cpu_seconds"]) for r in timed)
        wall = statistics.median(float(r.get("seconds") or 0.0) for r in timed)
        cell += f"; CPU {cpu:.1f} s/q, wall {wall:.1f} s/q (medians)"
    cell += f"; {len(loads)} of {len(records)} questions"
    return cell + _processors(records)


def _processors(records: Sequence[dict[str, Any]]) -> str:
    """ "; on CPU" for one recorded processor; for several, each with its questions and their median CPU s."""
    by_cpu: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if isinstance(r.get("cpu"), str) and r["cpu"]:
            by_cpu.setdefault(r["cpu"], []).append(r)
    if not by_cpu:
        return ""
    unknown = len(records) - sum(len(v) for v in by_cpu.values())
    if len(by_cpu) == 1 and not unknown:
        return f"; on {next(iter(by_cpu))}"
    parts = []
    for name, group in by_cpu.items():
        part = f"{name}: {len(group)} q"
        cpus = [float(r["cpu_seconds"]) for r in group if isinstance(r.get("cpu_seconds"), int | float)]
        if cpus:
            part += f", CPU {statistics.median(cpus):.1f} s/q"
        parts.append(part)
    if unknown:
        parts.append(f"not recorded: {unknown} q")
    return "; on " + "; ".join(parts)


def _restricted(run: Run, ids: Sequence[str]) -> Run:
    by_id = run.by_id()
    return Run(run.dir, run.config, [by_id[i] for i in ids if i in by_id])


def _compare(a: RowResult | None, b: RowResult, n_boot: int) -> Comparison | None:
    if a is None or a is b or a.run is None or b.run is None or not a.run.records or not b.run.records:
        return None
    try:
        return compare(a.run, b.run, ("em", "f1"), n_boot=n_boot)
    except QucoError as exc:
        b.problem = (b.problem + "; " if b.problem else "") + f"no paired test against {a.row.title}: {exc}"
        return None


def _check_config(plan: Plan, ds: DatasetPlan, row: Row, run: Run, res: RowResult) -> None:
    """Note (never hide) a run whose recorded pipeline is not what the plan's row resolves to now."""
    from quco.config import load_config, parse_override
    from quco.eval.records import differences

    recorded = run.config.get("pipeline")
    if not isinstance(recorded, dict) or row.config is None:
        return
    config = plan.calibrated_config(ds, row) if row.calibrate else Path(row.config)
    try:
        overrides = dict(parse_override(s) for s in row_overrides(plan, ds, row))
        expected = load_config(config, overrides=overrides).model_dump(mode="json")
    except QucoError as exc:
        res.problem = f"cannot resolve the row's config to check its run: {exc}"
        return
    diffs = differences(recorded, expected)
    if diffs:
        shown = "; ".join(diffs[:3]) + (f"; and {len(diffs) - 3} more" if len(diffs) > 3 else "")
        res.problem = f"its run was made with another config than the plan's row resolves to now ({shown})"


def collect(plan: Plan, n_boot: int = 10_000) -> list[RowResult]:
    """Read every row's run (only the questions the plan evaluates for it) and compute its statistics."""
    from quco.eval.world_file import read_world

    results: list[RowResult] = []
    for ds in plan.datasets:
        by_name: dict[str, RowResult] = {}
        for row in ds.rows:
            ids = planned_ids(ds, row)
            res = RowResult(ds, row, plan.run_dir(ds, row), len(ids))
            if row.config is None:
                res.status = "no config"
            elif (res.run_dir / CONFIG_FILE).is_file():
                try:
                    run = load_run(res.run_dir)
                    recorded_ds = run.dataset.get("name")
                    if recorded_ds and recorded_ds != ds.name:
                        raise QucoError(f"{res.run_dir} holds a run on {recorded_ds}, not {ds.name}")
                except QucoError as exc:
                    res.status, res.problem = "unreadable", str(exc)
                else:
                    run.config = {**run.config, "label": row.title}
                    restricted = _restricted(run, ids)
                    if restricted.records:  # a run started with nothing recorded yet stays "not run"
                        res.run = restricted
                        res.status = "complete" if res.answered == res.planned else "partial"
                        res.stats = summarize(
                            restricted, [f for f, *_ in SCORE_COLUMNS + COST_COLUMNS], n_boot
                        )
                        res.world = read_world(res.run_dir, run.config)
                        res.firing = firing_rates(restricted)
                        res.detection = detection(restricted, n_boot)
                        _check_config(plan, ds, row, run, res)
            by_name[row.name] = res
            results.append(res)
        base = by_name.get(ds.baseline) if ds.baseline else None
        ctrl = by_name.get(ds.control) if ds.control else None
        for res in by_name.values():
            res.vs_baseline = _compare(base, res, n_boot)
            res.vs_control = _compare(ctrl, res, n_boot)
    return results


# -- rendering ------------------------------------------------------------------------------------------------


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
        ctrl = ds.row(ds.control).short_title if ds.control else "control"
        score_head = ["method", "n / planned"] + [h for _, h, *_ in SCORE_COLUMNS]
        score_head += [f"ΔEM vs {base}", f"ΔF1 vs {base}", f"ΔEM vs {ctrl}", f"ΔF1 vs {ctrl}"]
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
        notes += [f"{r.row.title}: {r.row.note.strip()}" for r in rows if r.row.note]
        notes += [f"{r.row.title}: {r.problem}" for r in rows if r.problem]
        out.append(Section(ds, (score_head, scores), (cost_head, costs), (run_head, runs), notes, det))
    return out


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
        "candidate points) flagged. First drafts (rows whose trigger judges drafts during generation): each "
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
    return res.row.short_title + ("" if res.status == "complete" else f" (n={res.answered})")


def results_figure(ds: DatasetPlan, rows: Sequence[RowResult], path: Path) -> Path:
    """The dataset's rows as points: EM (accuracy for yes/no questions) against retrievals per question, each
    with its 95% intervals on both axes; a hollow point is a row still running, labelled with its questions."""
    from quco.eval.figures import mark_method, new_axes, place_labels, save

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
        "(n=…): a row still running, on its first n questions. The figures show each row with its 95% "
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
    from quco.eval.report import stylesheet

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
    from quco.eval.report import write_report

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
