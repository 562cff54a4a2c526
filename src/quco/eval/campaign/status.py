"""How far a results plan has come, and how long its remaining questions will take (``quco results status``).

A table that grows over several working days needs a plan of its own: which rows are complete, which are
partial, which wait for another row, and how many hours of compute are left. The estimate uses each row's own
recorded seconds per question, averaged without the far outliers (``pace``): a question timed across a pause of
the run would inflate a plain mean, and a median would miss the costly questions of a gated row, which retrieves
for some questions only (a calibrated DTR row: median 1.8 s, mean 7.4 s). A row with nothing recorded borrows the
pace of the row of the same name on another dataset of the plan (the same method and settings), and has no
estimate if there is none.

Seconds depend on the processor that recorded them (the same question's trace can take five times as long on
another), so when a row has recorded at least ``HERE_MIN`` questions on this machine's processor (each
question records its ``cpu``), the estimate uses the pace of those alone, and a row without a pace borrows
preferably from a namesake paced on this processor. The figures are for planning, not for comparing methods.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from quco.errors import QucoError
from quco.eval.campaign.plan import DatasetPlan, Plan, Row
from quco.eval.campaign.results import pass_missing, planned_ids, selected_rows
from quco.eval.runs.store import CONFIG_FILE, Record, load_run
from quco.machine import cpu_name

HERE_MIN = 3  # questions on this processor before a row's estimate uses their pace alone
FENCE = 3.0  # a question slower than the upper quartile plus FENCE interquartile ranges is left out of a pace


@dataclass
class RowStatus:
    """One row's progress and the compute its remaining questions are expected to take."""

    dataset: str
    row: str
    recorded: int
    planned: int
    state: str  # "complete", "partial", "not started", "no config", "unreadable"
    seconds_per_question: float | None = None  # the row's own recorded mean
    pace: float | None = None  # seconds per question the estimate uses (``pace`` of the recorded seconds)
    pace_from: str = ""  # where ``pace`` comes from when it is not the row's own
    on_here: int = 0  # recorded questions that this machine's processor answered
    pace_here: bool = False  # ``pace`` is that of the questions answered on this machine's processor
    waits_for: str = ""  # a matched control's row, while that row is incomplete
    problem: str = ""
    pass_dir: str = ""  # the sampling pass this row records before its own questions (``from_pass``)
    pass_left: int = 0  # the pass's calibration questions still to record
    pass_pace: float | None = None  # seconds per pass question: the pass's own pace, else the row's

    @property
    def is_open(self) -> bool:
        """Questions remain to be answered (the row is neither complete nor without a config)."""
        return self.state not in ("complete", "no config")

    @property
    def hours_left(self) -> float | None:
        if not self.is_open:
            return 0.0
        if self.pace is None:
            return None
        first = self.pass_left * (self.pace if self.pass_pace is None else self.pass_pace)
        return (first + (self.planned - self.recorded) * self.pace) / 3600.0


def _seconds(records: Sequence[Record]) -> list[float]:
    return [r.seconds for r in records]


def pace(seconds: Sequence[float]) -> float:
    """Expected seconds per question: the mean of the recorded seconds without those beyond Tukey's outer
    fence (upper quartile + ``FENCE`` interquartile ranges), or their median when fewer than 4 are recorded.

    A pause of the run lands far beyond the fence; the slow mode of a row that retrieves for some questions
    only sits within it, so the estimate keeps its share, which a median would drop.
    """
    if not seconds:
        raise ValueError("a pace needs at least one recorded question")
    if len(seconds) < 4:
        return statistics.median(seconds)
    q1, _, q3 = statistics.quantiles(seconds, n=4, method="inclusive")
    fence = q3 + FENCE * (q3 - q1)
    return statistics.fmean(s for s in seconds if s <= fence)


def _row_status(plan: Plan, ds: DatasetPlan, row: Row, processor: str) -> RowStatus:
    ids = planned_ids(ds, row)
    st = RowStatus(ds.name, row.name, 0, len(ids), "not started")
    if row.config is None:
        st.state = "no config"
        return st
    run_dir = plan.run_dir(ds, row)
    if not (run_dir / CONFIG_FILE).is_file():
        return st
    try:
        run = load_run(run_dir)
    except QucoError as exc:
        st.state, st.problem = "unreadable", str(exc)
        return st
    records = run.restricted(ids).records
    st.recorded = len(records)
    seconds = _seconds(records)
    if seconds:
        st.seconds_per_question = statistics.fmean(seconds)
        st.pace = pace(seconds)
    here = _seconds([r for r in records if r.cpu == processor])
    st.on_here = len(here)
    if len(here) >= HERE_MIN:
        st.pace, st.pace_here = pace(here), True
    if st.recorded:
        st.state = "complete" if st.recorded == st.planned else "partial"
    return st


def plan_status(
    plan: Plan, datasets: Sequence[str] = (), rows: Sequence[str] = (), processor: str | None = None
) -> list[RowStatus]:
    """Every selected row's progress, with a pace for each row that has one (its own, or a namesake's).

    ``processor``: the machine the estimate is for, as questions record it (default: this one, ``cpu_name``).
    """
    selected = selected_rows(plan, datasets, rows)
    here = cpu_name() if processor is None else processor
    every = {(ds.name, row.name): _row_status(plan, ds, row, here) for ds, row in plan.rows()}
    for ds, row in plan.rows():
        st = every[(ds.name, row.name)]
        if row.match is not None:
            target = every[(ds.name, row.match)]
            if target.state != "complete":
                st.waits_for = row.match
        if st.pace is None and st.is_open:
            donors = [
                other
                for (name, row_name), other in every.items()
                if row_name == row.name and name != ds.name and other.pace is not None
            ]
            if donors:
                best = max(donors, key=lambda d: (d.pace_here, d.recorded))
                st.pace, st.pace_from = best.pace, f"{best.dataset}/{best.row}"
                st.pace_here = best.pace_here
    _count_passes(plan, every)
    return [every[(ds.name, row.name)] for ds, row in selected]


def _count_passes(plan: Plan, every: dict[tuple[str, str], RowStatus]) -> None:
    """Charge each unfinished sampling pass (``from_pass``) to the first open row of the plan that reads it:
    that row records it before its own questions, and the rows after it reuse it. A row with no pace of its own
    or of a namesake takes its pass's: the same drafts and samples, without the retrievals (an underestimate)."""
    charged: set[str] = set()
    paces: dict[str, float | None] = {}
    for ds, row in plan.rows():
        st = every[(ds.name, row.name)]
        if not st.is_open or ds.calibration is None:
            continue
        for spec in row.calibrate:
            if spec.from_pass is None:
                continue
            if spec.from_pass not in paces:
                recorded = Path(spec.from_pass)
                seconds = _seconds(load_run(recorded).records) if (recorded / CONFIG_FILE).is_file() else []
                paces[spec.from_pass] = pace(seconds) if seconds else None
            if st.pace is None and paces[spec.from_pass] is not None:
                st.pace, st.pace_from = paces[spec.from_pass], f"its sampling pass {spec.from_pass}"
            if spec.from_pass in charged:
                continue
            charged.add(spec.from_pass)
            missing = pass_missing(ds, spec)
            if missing:
                st.pass_dir, st.pass_left, st.pass_pace = spec.from_pass, missing, paces[spec.from_pass]


def _hours(h: float | None) -> str:
    if h is None:
        return "?"
    return f"{h:.1f} h" if h >= 0.1 or h == 0 else f"{h * 60:.0f} min"


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def render_status(statuses: Sequence[RowStatus], processor: str) -> list[str]:
    """The lines ``quco results status`` prints: one aligned line per row, then the totals.

    ``processor``: the one ``plan_status`` estimated for.
    """
    table = [["row", "state", "recorded", "s/q", "left", "notes"]]
    for st in statuses:
        notes = []
        if st.waits_for:
            notes.append(f"waits for '{st.waits_for}' to complete")
        if st.pace_from:
            notes.append(f"at the pace of {st.pace_from}" + (" on this processor" if st.pace_here else ""))
        elif st.pace_here and st.is_open:
            notes.append(f"at the pace of its {st.on_here} questions on this processor")
        if st.pass_left:
            left = f"{st.pass_left} question" + ("s" if st.pass_left != 1 else "")
            notes.append(f"records its sampling pass first ({left} left)")
        if st.problem:
            notes.append(st.problem)
        own = "—" if st.seconds_per_question is None else f"{st.seconds_per_question:.1f}"
        left = _hours(st.hours_left) if st.is_open else "—"
        table.append(
            [f"{st.dataset}/{st.row}", st.state, f"{st.recorded}/{st.planned}", own, left,
             "; ".join(notes)]
        )  # fmt: skip
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in table]
    lines = [line.rstrip() for line in lines]
    open_rows = [st for st in statuses if st.is_open]
    known = [h for st in open_rows if (h := st.hours_left) is not None]
    complete = sum(1 for st in statuses if st.state == "complete")
    lines.append("")
    lines.append(f"{complete} of {len(statuses)} rows complete, {_rows(len(open_rows))} open.")
    if open_rows:
        line = (
            f"About {math.fsum(known):.1f} h of compute left for {_rows(len(known))} at their recorded pace"
        )
        unknown = len(open_rows) - len(known)
        line += f"; {_rows(unknown)} without a pace yet (left: ?)." if unknown else "."
        lines.append(line)
        paced_here = sum(1 for st in open_rows if st.pace_here)
        lines.append(
            f"This machine: {processor}. Paced on this processor: {paced_here} of the {_rows(len(known))} with a pace "
            f"(a row's own questions, once it has {HERE_MIN} here); the others use the seconds of the machines "
            "that recorded them."
        )
    return lines
