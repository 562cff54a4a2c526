"""A results plan: the rows of a results table (dataset x method), each one ``quco eval`` run, in one YAML file.

``quco results run PLAN`` runs or resumes every row; ``quco results table PLAN`` tabulates whatever has been
recorded (``quco.eval.campaign.results``). The plan fixes, per dataset, the evaluated questions (``offset``/``limit``)
and the questions thresholds may be calibrated on (``calibration``); the two must not overlap, and a row whose
config says its threshold was calibrated on evaluated questions is refused.

Paths in a plan (configs, ``out``, ``markdown``, ``html``) are relative to the working directory, as for
``quco eval``: run the commands from the repository root.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from quco.errors import QucoError

PARAM_NAMES = (
    "threshold",
    "entity_threshold",
    "cooccurrence_threshold",
    "head_threshold",
    "uncertainty_threshold",
)
# The note `quco calibrate` writes beside a threshold: "calibrated: rate 0.5 on hotpotqa questions 200:300 (date)".
CALIBRATED_NOTE = re.compile(r"calibrated: .*? on (?P<dataset>\S+) questions (?P<start>\d+):(?P<end>\d+)")


class PlanError(QucoError):
    """A results plan is malformed or breaks one of its rules (e.g. calibration on evaluated questions)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Span(_Strict):
    """Questions ``offset`` .. ``offset + limit - 1`` of a dataset file (file order)."""

    offset: int = Field(0, ge=0)
    limit: int = Field(..., ge=1)

    @property
    def end(self) -> int:
        return self.offset + self.limit

    def overlaps(self, start: int, end: int) -> bool:
        return self.offset < end and start < self.end

    def __str__(self) -> str:
        return f"{self.offset}–{self.end - 1}"


class Calibration(_Strict):
    """One threshold of a row chosen by ``quco calibrate`` on the dataset's calibration questions."""

    param: str = "threshold"
    target: Literal["rate", "em"] = "rate"
    rate: float = Field(0.5, ge=0.0, le=1.0)
    # A black-box threshold read from a recorded never-retrieving sampling pass (`quco calibrate --from-run`):
    # the pass's run directory, recorded there on the calibration questions by the first row that needs it, so
    # that rows whose estimators differ share one pass (their samples do not depend on the estimator).
    from_pass: str | None = None

    @model_validator(mode="after")
    def _known(self) -> Calibration:
        if self.param not in PARAM_NAMES:
            raise ValueError(
                f"unknown threshold parameter '{self.param}'; use one of {', '.join(PARAM_NAMES)}"
            )
        if self.from_pass is not None and (self.param, self.target) != ("threshold", "rate"):
            raise ValueError(
                "from_pass calibrates a black-box trigger's threshold for a rate: give it param: threshold "
                "and target: rate"
            )
        return self

    @property
    def spec(self) -> str:
        """The calibration in one phrase (the header of a calibrated copy names it)."""
        text = f"{self.param} {self.target} {self.rate:g}"
        return text + (f" from the pass {self.from_pass}" if self.from_pass else "")


class Row(_Strict):
    """One method on one dataset: a config, overrides, and how it relates to the other rows."""

    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # its run directory: OUT/DATASET/NAME
    label: str | None = None  # shown in the table (default: name)
    short: str | None = None  # in the README's table and the figures (default: the label before " (")
    config: str | None = None  # None: the row is planned but has no config yet (``note`` says why)
    set: list[str] = Field(default_factory=list)  # overrides after the plan's, as `quco eval --set`
    limit: int | None = Field(None, ge=1)  # a subset: the first N of the dataset's questions
    sample: int | None = Field(None, ge=1)  # a subset: a seeded random N of the dataset's questions
    seed: int = 0  # the seed of ``sample`` (`quco eval --sample N --seed S`)
    match: str | None = None  # a row whose firing rates this random control takes (params.match_run)
    calibrate: list[Calibration] = Field(default_factory=list)
    note: str | None = None

    @property
    def title(self) -> str:
        return self.label or self.name

    @property
    def short_title(self) -> str:
        return self.short or self.title.split(" (")[0]


class GatePlan(_Strict):
    """A dataset's retrieval-gate frontier (docs/gate.md): run directories and fitted gates, paths from the root."""

    closed: list[str]  # closed-book `gate` runs with fire: never (their traces hold the features)
    open: list[str]  # retrieval (SR-RAG) runs of the same questions
    gates: dict[str, str] = Field(default_factory=dict)  # label: a gate file of `quco gate fit`
    lines: list[str] | None = None  # signals drawn as lines in the figure (default: all)
    figure: str | None = None  # the PNG (default: docs/figures/gate-DATASET.png)


class DatasetPlan(_Strict):
    name: str  # a dataset name of `quco eval --dataset`
    title: str | None = None
    offset: int = Field(0, ge=0)
    limit: int = Field(..., ge=1)
    calibration: Span | None = None  # where calibrated thresholds come from (outside the evaluated questions)
    baseline: str | None = None  # the row every row is tested against (SR-RAG)
    # The random control a row is tested against when no control is matched to the row itself (control_for)
    control: str | None = None
    # The re-prompting answer protocol (`quco eval --reprompt`) on a dataset whose default is strict, so that it
    # is scored as the datasets whose default re-prompts.
    reprompt: bool = False
    note: str | None = None
    rows: list[Row] = Field(default_factory=list)
    gate: GatePlan | None = None  # the frontier of every gate signal at equal cost, beside the rows

    @property
    def span(self) -> Span:
        return Span(offset=self.offset, limit=self.limit)

    def row_span(self, row: Row) -> Span:
        return Span(offset=self.offset, limit=min(row.limit or self.limit, self.limit))

    def row(self, name: str) -> Row:
        for row in self.rows:
            if row.name == name:
                return row
        raise PlanError(f"dataset {self.name} has no row '{name}'")

    def control_for(self, row: Row) -> str | None:
        """The control a row is tested against: the control matched to this row (``match``) where the plan
        has one, else the dataset's control; none for a control itself."""
        for other in self.rows:
            if other.match == row.name:
                return other.name
        if row.match is not None or row.name == self.control:
            return None
        return self.control


class Plan(_Strict):
    title: str = "Results"
    out: str = "runs/results"  # run directories: OUT/DATASET/ROW
    markdown: str = "docs/results.md"
    html: str = "docs/results.html"
    # A file whose results summary (one short table, a figure per dataset) is kept between markers, e.g. README.md
    readme: str | None = None
    set: list[str] = Field(default_factory=list)  # overrides for every row, before the row's own
    workers: int | None = Field(None, ge=1)
    datasets: list[DatasetPlan]

    def run_dir(self, dataset: DatasetPlan, row: Row) -> Path:
        return Path(self.out) / dataset.name / row.name

    def calibrated_config(self, dataset: DatasetPlan, row: Row) -> Path:
        """Where a row's calibrated copy of its config is kept (beside its run directory)."""
        return Path(self.out) / dataset.name / f"{row.name}.calibrated.yaml"

    def rows(self) -> Iterator[tuple[DatasetPlan, Row]]:
        for ds in self.datasets:
            for row in ds.rows:
                yield ds, row


@dataclass(frozen=True)
class CalibrationNote:
    """A threshold note found in a config file: which questions it was calibrated on."""

    line: str
    dataset: str
    start: int
    end: int


def calibration_notes(text: str) -> list[CalibrationNote]:
    return [
        CalibrationNote(m.group(0), m.group("dataset"), int(m.group("start")), int(m.group("end")))
        for m in CALIBRATED_NOTE.finditer(text)
    ]


def _check(plan: Plan, source: str) -> None:
    names = [ds.name for ds in plan.datasets]
    if len(set(names)) != len(names):
        raise PlanError(f"{source}: a dataset is listed twice ({', '.join(names)})")
    for ds in plan.datasets:
        where = f"{source}: {ds.name}"
        rows = [r.name for r in ds.rows]
        dup = sorted({n for n in rows if rows.count(n) > 1})
        if dup:
            raise PlanError(f"{where}: row '{dup[0]}' is listed twice")
        shorts = [r.short_title for r in ds.rows]
        same = sorted({n for n in shorts if shorts.count(n) > 1})
        if same:
            raise PlanError(
                f"{where}: several rows are shown as '{same[0]}' in the summary; give them distinct `short` names"
            )
        for ref, what in ((ds.baseline, "baseline"), (ds.control, "control")):
            if ref is not None and ref not in rows:
                raise PlanError(f"{where}: {what} '{ref}' is not one of its rows")
        cal = ds.calibration
        if cal is not None and cal.overlaps(ds.offset, ds.offset + ds.limit):
            raise PlanError(
                f"{where}: the calibration questions {cal} overlap the evaluated questions {ds.span}; "
                "thresholds must be chosen on other questions"
            )
        for row in ds.rows:
            if row.limit is not None and row.limit > ds.limit:
                raise PlanError(f"{where}/{row.name}: limit {row.limit} exceeds the dataset's {ds.limit}")
            if row.sample is not None and row.limit is not None:
                raise PlanError(f"{where}/{row.name}: give a row `limit` or `sample`, not both")
            if row.sample is not None and row.sample > ds.limit:
                raise PlanError(f"{where}/{row.name}: sample {row.sample} exceeds the dataset's {ds.limit}")
            if row.match is not None:
                if row.match not in rows or row.match == row.name:
                    raise PlanError(f"{where}/{row.name}: match '{row.match}' is not another row")
                if rows.index(row.match) > rows.index(row.name):
                    raise PlanError(f"{where}/{row.name}: the matched row '{row.match}' must come before it")
                matched = ds.row(row.match)
                if (row.limit, row.sample, row.seed) != (matched.limit, matched.sample, matched.seed):
                    raise PlanError(
                        f"{where}/{row.name}: a control answers the questions of its matched row "
                        f"'{row.match}'; give it the same limit, sample and seed"
                    )
            if row.calibrate and cal is None:
                raise PlanError(
                    f"{where}/{row.name}: the row calibrates a threshold, but the dataset names no "
                    "calibration questions (calibration: {offset: ..., limit: ...})"
                )
            if row.calibrate and row.config is None:
                raise PlanError(f"{where}/{row.name}: a row without a config cannot be calibrated")
            if row.config is not None:
                check_config_notes(Path(row.config), ds, f"{where}/{row.name}")


def check_config_notes(config: Path, ds: DatasetPlan, where: str) -> None:
    """Refuse a config whose threshold notes say it was calibrated on questions this dataset evaluates."""
    try:
        text = config.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"{where}: cannot read config {config}: {exc}") from None
    for note in calibration_notes(text):
        if note.dataset == ds.name and ds.span.overlaps(note.start, note.end):
            raise PlanError(
                f"{where}: {config} holds a threshold calibrated on {ds.name} questions "
                f"{note.start}:{note.end}, which overlap the evaluated questions {ds.span} ('{note.line}')"
            )


def load_plan(path: str | Path) -> Plan:
    """Read and check a results plan (every rule above; configs must exist)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PlanError(f"cannot read plan {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise PlanError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path} must hold a mapping (title, out, datasets, ...)")
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise PlanError(f"{path}: {loc}: {first['msg']} ({len(exc.errors())} problem(s))") from None
    _check(plan, str(path))
    return plan
