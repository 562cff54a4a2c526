"""The results table of a plan (``quco.eval.campaign.plan``): run every row, then tabulate whatever has been recorded.

``run_plan`` runs or resumes each row's ``quco eval`` in plan order, one row at a time: a row already complete
costs nothing, an interrupted one continues where it stopped, a row that fails is reported and the next one
runs. A matched random control waits until the row it matches is complete (its firing rates are read from
that run). A row that calibrates a threshold first writes a calibrated copy of its config beside its run
directory, chosen on the dataset's calibration questions only.

``collect`` reads every row's run (restricted to the plan's questions) and computes, with ``quco.eval.score.stats``,
each row's EM/F1 with 95% intervals, the paired tests against the baseline and the control rows, and the
costs; ``quco.eval.render.results`` renders them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import shlex
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quco.errors import QucoError
from quco.eval.campaign.plan import Calibration, DatasetPlan, Plan, PlanError, Row, check_config_notes
from quco.eval.run.command import eval_command
from quco.eval.run.runner import EvalOptions, Questions
from quco.eval.runs.records import Record
from quco.eval.runs.store import CONFIG_FILE, Run, load_run
from quco.eval.score.detection import Detection, detection
from quco.eval.score.stats import Comparison, Interval, compare, summarize
from quco.eval.score.summary import SUMMARY_COLUMNS, firing_rates

log = logging.getLogger(__name__)

# The table's columns are `quco summary`'s, with the digits and scale each is printed with.
COLUMN_FORMAT = {
    "em": (1, 100.0),
    "f1": (1, 100.0),
    "retrievals": (2, 1.0),
    "main_llm_calls": (2, 1.0),
    "llm_calls": (2, 1.0),
}
SCORE_COLUMNS = tuple((f, h, *COLUMN_FORMAT[f]) for f, h in SUMMARY_COLUMNS if f in ("em", "f1"))
COST_COLUMNS = tuple(
    (f, h, *COLUMN_FORMAT.get(f, (1, 1.0))) for f, h in SUMMARY_COLUMNS if f not in ("em", "f1")
)


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


def row_questions(ds: DatasetPlan, row: Row) -> Questions:
    """The questions a row evaluates: the dataset's span, its first ``row.limit``, or a seeded ``row.sample``
    of the span."""
    span = ds.row_span(row)
    return Questions(limit=span.limit, offset=span.offset, sample=row.sample, seed=row.seed)


def question_ids(dataset: str, q: Questions) -> list[str]:
    """The ids of the dataset's questions that ``q`` selects."""
    from quco.datasets import load_dataset

    return [
        ex.id for ex in load_dataset(dataset, limit=q.limit, offset=q.offset, sample=q.sample, seed=q.seed)
    ]


def planned_ids(ds: DatasetPlan, row: Row) -> list[str]:
    """The ids of the questions a row evaluates (``row_questions``)."""
    return question_ids(ds.name, row_questions(ds, row))


def calibration_questions(ds: DatasetPlan) -> Questions:
    """The dataset's calibration questions (a sampling pass records them all)."""
    assert ds.calibration is not None
    return Questions(limit=ds.calibration.limit, offset=ds.calibration.offset)


def recorded_count(run_dir: Path, ids: Sequence[str]) -> int:
    """How many of ``ids`` the run in ``run_dir`` has recorded (0 when there is no run yet)."""
    if not (run_dir / CONFIG_FILE).is_file():
        return 0
    recorded = {r.id for r in load_run(run_dir).records}
    return sum(1 for i in ids if i in recorded)


def row_progress(plan: Plan, ds: DatasetPlan, row: Row) -> tuple[int, int]:
    """(questions recorded, questions planned) of a row."""
    ids = planned_ids(ds, row)
    return recorded_count(plan.run_dir(ds, row), ids), len(ids)


def row_overrides(plan: Plan, ds: DatasetPlan, row: Row) -> list[str]:
    """The row's `--set` overrides: the plan's, the row's, and the matched run for a random control."""
    sets = list(plan.set) + list(row.set)
    if row.match is not None:
        sets.append(f"params.match_run={plan.run_dir(ds, ds.row(row.match))}")
    return sets


def eval_argv(plan: Plan, ds: DatasetPlan, row: Row, config: Path) -> list[str]:
    """The `quco eval` command that runs (or resumes) a row."""
    q = row_questions(ds, row)
    argv = ["quco", "eval", "--config", str(config), "--dataset", ds.name]
    argv += ["--offset", str(q.offset), "--limit", str(q.limit)]
    if q.sample is not None:
        argv += ["--sample", str(q.sample), "--seed", str(q.seed)]
    argv += ["--out", str(plan.run_dir(ds, row))]
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
    specs = "; ".join(c.spec for c in row.calibrate)
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
    from quco.eval.calibrate.search import calibrate, rate_from_runs, write_threshold

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
            if spec.from_pass is not None:
                recorded = record_pass(plan, ds, row, spec, progress)
                result, _ = rate_from_runs(tmp, [recorded], spec.rate, overrides)
            else:
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


def pass_missing(ds: DatasetPlan, spec: Calibration) -> int:
    """How many of the dataset's calibration questions the recorded pass of ``spec`` still lacks."""
    assert spec.from_pass is not None
    ids = question_ids(ds.name, calibration_questions(ds))
    return len(ids) - recorded_count(Path(spec.from_pass), ids)


def record_pass(plan: Plan, ds: DatasetPlan, row: Row, spec: Calibration, progress: bool = True) -> Path:
    """The never-retrieving sampling pass ``spec`` reads its threshold from, recorded (or resumed) on the
    dataset's calibration questions with the row's config, its overrides and ``params.threshold=.inf``.

    A complete pass is reused as it is, whichever row recorded it, and an interrupted one is resumed with the
    estimator and similarity it was begun with (they score the samples, they do not draw them). A row whose
    sampling settings differ is refused when its threshold is read from it
    (``quco.eval.calibrate.search.scores_from_run``).
    """
    assert row.config is not None and ds.calibration is not None and spec.from_pass is not None
    out = Path(spec.from_pass)
    missing = pass_missing(ds, spec)
    if missing:
        cal = ds.calibration
        log.info("%s/%s: recording the sampling pass in %s (%d questions to answer)", ds.name, row.name, out,
                 missing)  # fmt: skip
        options = EvalOptions(
            out_dir=out, workers=plan.workers, progress=progress,
            label=f"never-retrieving sampling pass on {ds.name} questions {cal.offset}:{cal.end}",
        )  # fmt: skip
        sets = [*row_overrides(plan, ds, row), f"params.{spec.param}=.inf"]
        if (out / CONFIG_FILE).is_file():
            begun = (load_run(out).config.pipeline or {}).get("params") or {}
            sets += [f"params.{k}={begun[k]}" for k in ("estimator", "similarity") if k in begun]
        eval_command(Path(row.config), ds.name, calibration_questions(ds), options, sets)
    return out


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
        passes = [c.from_pass for c in row.calibrate if c.from_pass and pass_missing(ds, c)]
        first = f"recording the sampling pass in {', '.join(passes)} and " if passes else ""
        cmd = f"(after {first}calibrating {', '.join(c.param for c in row.calibrate)}) {cmd}"
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
            cmd = shlex.join(eval_argv(plan, ds, row, config))
            echo(f"{ds.name}/{row.name}: {cmd}")
            options = EvalOptions(
                out_dir=plan.run_dir(ds, row), workers=plan.workers, reprompt=ds.reprompt, progress=progress,
                label=row.title,
            )  # fmt: skip
            summary = eval_command(
                config, ds.name, row_questions(ds, row), options, sets=row_overrides(plan, ds, row)
            )
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
    def on_subset(self) -> bool:
        """The row is complete on fewer questions than the dataset's (SeaKR's first 50, a seeded sample)."""
        return self.status == "complete" and self.planned < self.dataset.limit

    @property
    def errors(self) -> int:
        return sum(1 for r in self.run.records if r.error) if self.run is not None else 0

    @property
    def generator(self) -> str:
        if self.run is None:
            return ""
        gen = (self.run.config.pipeline or {}).get("generator") or {}
        return f"{gen.get('model', '?')} ({gen.get('backend', '?')})" if gen else str(self.run.method)


def machine_cell(records: Sequence[Record]) -> str:
    """The machine a row ran on, from what its questions recorded: the 1-minute load average (median, max)
    and the median CPU seconds of the answering process beside the median wall seconds, then the processors
    that answered them (with their questions' median CPU seconds when there are several). Questions recorded
    before these were kept carry none of them and are left out (the counts say how many had them)."""
    loads = [float(r.load) for r in records if isinstance(r.load, int | float)]
    if not loads:
        return "—"
    cell = f"load {statistics.median(loads):.1f} (max {max(loads):.1f})"
    timed = [r for r in records if isinstance(r.cpu_seconds, int | float)]
    if timed:
        cpu = statistics.median(float(r.cpu_seconds or 0.0) for r in timed)
        wall = statistics.median(float(r.seconds or 0.0) for r in timed)
        cell += f"; CPU {cpu:.1f} s/q, wall {wall:.1f} s/q (medians)"
    cell += f"; {len(loads)} of {len(records)} questions"
    return cell + _processors(records)


def _processors(records: Sequence[Record]) -> str:
    """ "; on CPU" for one recorded processor; for several, each with its questions and their median CPU s."""
    by_cpu: dict[str, list[Record]] = {}
    for r in records:
        if isinstance(r.cpu, str) and r.cpu:
            by_cpu.setdefault(r.cpu, []).append(r)
    if not by_cpu:
        return ""
    unknown = len(records) - sum(len(v) for v in by_cpu.values())
    if len(by_cpu) == 1 and not unknown:
        return f"; on {next(iter(by_cpu))}"
    parts = []
    for name, group in by_cpu.items():
        part = f"{name}: {len(group)} q"
        cpus = [float(r.cpu_seconds) for r in group if isinstance(r.cpu_seconds, int | float)]
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
    from quco.eval.runs.records import differences

    recorded = run.config.pipeline
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
    from quco.eval.runs.world_file import read_world

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
                    recorded_ds = run.dataset.name
                    if recorded_ds and recorded_ds != ds.name:
                        raise QucoError(f"{res.run_dir} holds a run on {recorded_ds}, not {ds.name}")
                except QucoError as exc:
                    res.status, res.problem = "unreadable", str(exc)
                else:
                    run.config = dataclasses.replace(run.config, label=row.title)
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
        for res in by_name.values():
            res.vs_baseline = _compare(base, res, n_boot)
            control = ds.control_for(res.row)
            res.vs_control = _compare(by_name.get(control) if control else None, res, n_boot)
    return results
