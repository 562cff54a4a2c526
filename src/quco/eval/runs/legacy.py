"""Version-1 traces read as version 2: each decision's scores become typed trigger records.

Runs recorded before ``TRACE_VERSION`` 2 kept a thresholded check's scores in ``signals["trigger"]`` and
QuCo-RAG's and DTR's decisions only in their own signals. ``upgrade_trace`` rebuilds the records those
decisions would emit now, with the same functions the live methods use (``quco.signals.corpus`` for QuCo-RAG),
so summaries, sweeps, calibration, the random control and ``quco trace-diff`` read old and new runs alike.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from quco.signals.corpus import Claim, claim_records, entity_rarity
from quco.trace import TRACE_VERSION
from quco.trigger_record import TriggerRecord

# Signals of version-1 steps that the trigger records now hold.
_MOVED = ("trigger", "threshold", "mean_count", "unit", "unknown", "uncertainty", "score")

_SIGNALS = {  # method -> (signal name, unit) of its version-1 ``signals["trigger"]``
    "flare": ("token_uncertainty", "sentence"),
    "dragin": ("rind", "sentence"),
    "etc": ("entropy_trend", "sentence"),
    "seakr": ("eigen_score", "step"),
    "fl-rag": ("schedule", "chunk"),
    "fs-rag": ("schedule", "sentence"),
    "random": ("draw", "sentence"),
    "blackbox": ("", "sentence"),
}


def _params(method: str, params: dict[str, Any] | None) -> Any:
    """The method's validated parameters, or None for an answerer that is no registered method."""
    from quco.errors import ConfigError
    from quco.methods import method_class

    try:
        return method_class(method).Params.model_validate(params or {})
    except ConfigError:
        return None


def _always(signal: str, unit: str) -> TriggerRecord:
    return TriggerRecord.decide(signal, "always", 0.0, [None], unit, param="")


def _from_trigger(method: str, trig: dict[str, Any], signals: dict[str, Any], params: Any) -> TriggerRecord:
    signal, unit = _SIGNALS.get(method, ("", "sentence"))
    extra = {k: v for k, v in trig.items() if k not in ("rule", "threshold", "scores", "fired_at")}
    scores = list(trig.get("scores") or [])
    param = "threshold"
    if method in ("fl-rag", "fs-rag"):
        return TriggerRecord.decide(signal, "always", 0.0, [None] * len(scores), unit, param="", **extra)
    if method == "random":
        signal, param = ("schedule", "") if extra.get("mode") == "schedule" else ("draw", "p")
    if method == "blackbox":
        signal = str(signals.get("estimator", "blackbox"))
        extra["similarity"] = signals.get("similarity")
    if method == "dragin" and params is not None:
        extra["weight"] = params.weight
    return TriggerRecord.decide(signal, trig["rule"], trig["threshold"], scores, unit, param=param, **extra)


def _count_value(rec: dict[str, Any], unit: str) -> float | None:
    if rec.get("status", "ok") != "ok" or rec.get("count") is None:
        return None
    return rec.get("per_billion") if unit == "per_billion" else float(rec["count"])


def _quco_before(signals: dict[str, Any], params: Any, unknown_retrieves: bool) -> TriggerRecord:
    unit = signals.get("unit", params.threshold_unit)
    values = [_count_value(r, unit) for r in signals.get("entity_counts", [])]
    threshold = signals.get("threshold", params.entity_threshold)
    return entity_rarity(values, threshold, unit, unknown_retrieves).record


def _quco_check(signals: dict[str, Any], params: Any, unknown_retrieves: bool) -> list[TriggerRecord]:
    unit = params.threshold_unit
    judged = [
        [Claim(c["kind"], _count_value(c, unit)) for c in s["claims"]]
        for s in signals.get("sentences", [])
        if "claims" in s
    ]
    return claim_records(
        judged, params.cooccurrence_threshold, params.head_threshold, unit, unknown_retrieves
    )


def _dtr_before(signals: dict[str, Any], params: Any) -> TriggerRecord:
    threshold = signals.get("threshold", params.uncertainty_threshold)
    if threshold <= 0:
        return TriggerRecord.decide(
            "answer_nll", "always", threshold, [None], "question", param="uncertainty_threshold"
        )
    u = signals.get("uncertainty")
    return TriggerRecord.decide(
        "answer_nll",
        "at_least",
        threshold,
        [math.inf if u is None else u],
        "question",
        param="uncertainty_threshold",
    )


def upgrade_step(method: str, step: dict[str, Any], params: Any, unknown_retrieves: bool) -> dict[str, Any]:
    """One version-1 step as version 2 (a new dict; the input is not changed)."""
    if "triggers" in step:  # already in the current form
        return step
    step = copy.deepcopy(step)
    signals = step.get("signals") or {}
    stage = step.get("stage")
    records: list[TriggerRecord] = []
    if isinstance(signals.get("trigger"), dict):
        records = [_from_trigger(method, signals["trigger"], signals, params)]
    elif params is None:
        pass
    elif method == "quco" and stage == "before":
        records = [_quco_before(signals, params, unknown_retrieves)]
    elif method == "quco" and stage == "generate" and params.stage2 and "sentences" in signals:
        records = _quco_check(signals, params, unknown_retrieves)
    elif method == "dtr" and stage == "before":
        records = [_dtr_before(signals, params)]
    elif stage == "before" and method in ("sr-rag", "flare"):
        records = [_always("always", "question")]
    elif stage == "before" and method in ("fl-rag", "fs-rag"):
        records = [_always("schedule", "question")]
    step["signals"] = {k: v for k, v in signals.items() if k not in _MOVED}
    step["triggers"] = [r.to_dict() for r in records]
    return step


def upgrade_trace(trace: dict[str, Any], pipeline: dict[str, Any] | None = None) -> dict[str, Any]:
    """A trace dict as the current version, given the run's pipeline config (``RunConfig.pipeline``, if any)."""
    if int(trace.get("version", 1)) >= TRACE_VERSION:
        return trace
    pipeline = pipeline or {}
    method = str(trace.get("method") or pipeline.get("method") or "")
    params = _params(method, pipeline.get("params"))
    unknown_retrieves = ((pipeline.get("corpus_stats") or {}).get("unknown_policy", "retrieve")) == "retrieve"
    out = dict(trace)
    out["steps"] = [upgrade_step(method, s, params, unknown_retrieves) for s in trace.get("steps") or []]
    out["version"] = TRACE_VERSION
    return out
