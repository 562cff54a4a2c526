"""Evaluation: faithful metrics, resumable runs, confidence intervals, paired tests, analyses and reports."""

from quco.eval.run.runner import EvalOptions, Questions, RunSummary, run_eval
from quco.eval.runs.records import Record, RunConfig
from quco.eval.runs.store import Run, load_run
from quco.eval.score.detection import Detection, detection
from quco.eval.score.metrics import exact_match, extract_answer, f1_score, normalize_answer, score_prediction
from quco.eval.score.stats import (
    Comparison,
    Interval,
    PairedResult,
    bootstrap_ci,
    compare,
    compare_runs,
    paired_test,
)

__all__ = [
    "Comparison",
    "Detection",
    "EvalOptions",
    "Interval",
    "PairedResult",
    "Questions",
    "Record",
    "Run",
    "RunConfig",
    "RunSummary",
    "bootstrap_ci",
    "compare",
    "compare_runs",
    "detection",
    "exact_match",
    "extract_answer",
    "f1_score",
    "load_run",
    "normalize_answer",
    "paired_test",
    "run_eval",
    "score_prediction",
    "write_report",
]


def __getattr__(name: str):  # noqa: ANN202 - matplotlib is only imported when a report is written
    if name == "write_report":
        from quco.eval.render.report import write_report

        return write_report
    raise AttributeError(name)
