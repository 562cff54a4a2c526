"""The paper's analyses, computed from recorded traces only (no model is run again).

- EM by question-entity frequency (QuCo-RAG Fig. 5 / Table 10): questions binned by the corpus count of
  their entities, as recorded by QuCo's stage-1 trigger record (the mean entity count).
  Runs of other methods are binned by the frequencies another run recorded for the same questions.
- EM against retrievals, tokens and LLM calls (Fig. 3), per run and per question.
- Runtime by component (Fig. 4) from ``counters.seconds``.
- Threshold sweeps (Fig. 6) where the signals allow: the stage-1 retrieval rate at any threshold, and, given a
  run that always retrieves first and one that never does, the EM a stage-1 threshold would have reached.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from quco.eval.runs.store import COST_FIELDS, Record, Run
from quco.trace import COMPONENTS, Step, as_trace
from quco.trigger_record import TriggerRecord

# Decade bins of corpus counts: 0, 1-9, 10-99, ..., >= 1e6.
FREQUENCY_EDGES: tuple[float, ...] = (0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, math.inf)


def _bin_label(low: float, high: float) -> str:
    def fmt(x: float) -> str:
        if x >= 1_000_000:
            return f"{x / 1_000_000:g}M"
        if x >= 1_000:
            return f"{x / 1_000:g}k"
        return f"{x:g}"

    if low == 0 and high == 1:
        return "0"
    if math.isinf(high):
        return f">={fmt(low)}"
    return f"{fmt(low)}-{fmt(high - 1) if high <= 1000 else fmt(high)}"


def records_of(
    rec: Record, signal: str | None = None, param: str | None = None
) -> list[tuple[Step, TriggerRecord]]:
    """The trigger records of one question's trace, with their steps (those of ``signal``/``param`` if given)."""
    trace = rec.trace
    if not trace:
        return []
    return [
        (step, r)
        for step in as_trace(trace).steps
        for r in step.triggers
        if (signal is None or r.signal == signal) and (param is None or r.param == param)
    ]


def question_frequency(rec: Record, stat: str = "mean") -> float | None:
    """Corpus frequency of a question's entities from its stage-1 record: their mean (default) or minimum count."""
    for step, record in records_of(rec, param="entity_threshold"):
        if record.signal == f"{stat}_entity_count":
            return record.scores[0] if record.scores else None
        counts = [
            float(c["count"])
            for c in step.signals.get("entity_counts", [])
            if c.get("count") is not None and c.get("status", "ok") == "ok"
        ]
        if not counts:
            return None
        return float(min(counts)) if stat == "min" else sum(counts) / len(counts)
    return None


def frequencies(run: Run, stat: str = "mean") -> dict[str, float]:
    out = {}
    for rec in run.records:
        f = question_frequency(rec, stat)
        if f is not None:
            out[rec.id] = f
    return out


def signal_source(runs: Sequence[Run], stat: str = "mean") -> Run | None:
    """The run whose recorded entity frequencies to use: a QuCo-RAG run if any has them, else the first that does."""
    with_signals = [r for r in runs if frequencies(r, stat)]
    return next((r for r in with_signals if r.method == "quco"), with_signals[0] if with_signals else None)


@dataclass(frozen=True)
class FrequencyTable:
    """EM per entity-frequency bin for several runs (NaN where a bin holds none of a run's questions)."""

    labels: list[str]
    n: list[int]  # questions in each bin (with a frequency)
    em: dict[str, list[float]]  # run name -> EM per bin
    source: str  # the run whose recorded frequencies define the bins
    stat: str


def em_by_entity_frequency(
    runs: Sequence[Run],
    freq_run: Run | None = None,
    stat: str = "mean",
    edges: Sequence[float] = FREQUENCY_EDGES,
) -> FrequencyTable | None:
    """Bin questions by recorded entity frequency and report each run's EM per bin; None without signals."""
    source = freq_run if freq_run is not None else signal_source(runs, stat)
    if source is None:
        return None
    freq = frequencies(source, stat)
    if not freq:
        return None
    bins = list(zip(edges[:-1], edges[1:], strict=True))

    def bin_of(value: float) -> int:
        for i, (low, high) in enumerate(bins):
            if low <= value < high:
                return i
        return len(bins) - 1

    assignment = {qid: bin_of(v) for qid, v in freq.items()}
    n = [0] * len(bins)
    for b in assignment.values():
        n[b] += 1
    table: dict[str, list[float]] = {}
    for run in runs:
        sums = [0.0] * len(bins)
        counts = [0] * len(bins)
        for rec in run.records:
            b = assignment.get(rec.id)
            if b is not None:
                sums[b] += rec.em
                counts[b] += 1
        table[run.name] = [s / c if c else math.nan for s, c in zip(sums, counts, strict=True)]
    labels = [_bin_label(low, high) for low, high in bins]
    return FrequencyTable(labels, n, table, source.name, stat)


@dataclass(frozen=True)
class EfficiencyPoint:
    """One run's mean EM and mean costs per question (a point of the EM-vs-cost plot)."""

    run: str
    em: float
    costs: dict[str, float]


def efficiency_points(runs: Sequence[Run]) -> list[EfficiencyPoint]:
    points = []
    for run in runs:
        costs = {}
        for f in COST_FIELDS:
            vals = np.asarray(run.values(f), dtype=float)
            vals = vals[np.isfinite(vals)]
            costs[f] = float(vals.mean()) if len(vals) else math.nan
        ems = run.values("em")
        points.append(EfficiencyPoint(run.name, float(np.mean(ems)) if ems else math.nan, costs))
    return points


def em_by_cost(run: Run, cost: str = "retrievals", max_groups: int = 8) -> list[tuple[str, int, float]]:
    """EM of the questions grouped by how much they cost: exact values when few, quantile bins otherwise."""
    pairs = [(r.costs()[cost], r.em) for r in run.records]
    pairs = [(c, e) for c, e in pairs if math.isfinite(c)]
    if not pairs:
        return []
    values = sorted({c for c, _ in pairs})
    if len(values) <= max_groups:
        groups = [(f"{v:g}", [e for c, e in pairs if c == v]) for v in values]
    else:
        costs = np.array([c for c, _ in pairs])
        edges = np.unique(np.quantile(costs, np.linspace(0, 1, max_groups + 1)))
        groups = []
        for i, (low, high) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
            last = i == len(edges) - 2
            members = [e for c, e in pairs if low <= c < high or (last and c == high)]
            groups.append((f"{low:g}-{high:g}", members))
    return [(label, len(ems), float(np.mean(ems))) for label, ems in groups if ems]


def runtime_breakdown(runs: Sequence[Run]) -> dict[str, dict[str, float]]:
    """Mean wall seconds per question by component (llm, retrieval, corpus_stats, extraction, other)."""
    out = {}
    for run in runs:
        totals = dict.fromkeys(COMPONENTS, 0.0)
        answered = [r for r in run.records if r.trace]
        for rec in answered:
            for comp, sec in rec.component_seconds().items():
                totals[comp] = totals.get(comp, 0.0) + sec
        out[run.name] = {k: v / len(answered) if answered else 0.0 for k, v in totals.items()}
    return out


@dataclass(frozen=True)
class SweepRow:
    threshold: float
    trigger_rate: float  # share of questions (with a frequency) that would retrieve before generating
    em: float | None  # simulated EM, when runs with and without stage-1 retrieval were given
    n: int


def threshold_sweep(
    signal_run: Run,
    thresholds: Sequence[float] | None = None,
    with_run: Run | None = None,
    without_run: Run | None = None,
    stat: str = "mean",
) -> list[SweepRow]:
    """Stage-1 threshold sweep: retrieve before generating when the entity frequency is below the threshold.

    With ``with_run`` (always retrieves first, e.g. SR-RAG) and ``without_run`` (never does, e.g. Wo-RAG), a
    question's simulated EM is taken from the run the threshold would have chosen, on the questions all three
    runs answered. Questions without a recorded frequency never trigger, as in QuCo-RAG's stage 1.
    """
    freq = frequencies(signal_run, stat)
    if thresholds is None:
        top = max(freq.values(), default=1.0)
        thresholds = [0.0] + [10.0**k for k in range(0, int(math.log10(max(top, 1.0))) + 2)]
    ids = [r.id for r in signal_run.records]
    simulate = with_run is not None and without_run is not None
    if simulate:
        em_with = {k: v.em for k, v in with_run.by_id().items()}
        em_without = {k: v.em for k, v in without_run.by_id().items()}
        ids = [i for i in ids if i in em_with and i in em_without]
    rows = []
    for t in thresholds:
        fires = [i in freq and freq[i] < t for i in ids]
        rate = float(np.mean(fires)) if ids else math.nan
        em = None
        if simulate and ids:
            em = float(np.mean([em_with[i] if f else em_without[i] for i, f in zip(ids, fires, strict=True)]))
        rows.append(SweepRow(float(t), rate, em, len(ids)))
    return rows


def claim_flag_rates(
    run: Run, thresholds: Sequence[float], param: str = "cooccurrence_threshold"
) -> list[tuple[float, float]]:
    """Stage-2 sweep: share of judged sentences a threshold of ``param`` would flag.

    ``param`` is "cooccurrence_threshold" (the sentence's lowest head/tail co-occurrence) or "head_threshold"
    (its lowest head count); sentences without a claim of that kind are left out. Only the sentences that were
    scanned are recorded (a scan stops at the first flagged sentence), so above the run's own threshold this is
    a lower bound.
    """
    scores = [s for rec in run.records for _, r in records_of(rec, param=param) for s in r.known_scores()]
    if not scores:
        return []
    arr = np.asarray(scores)
    return [(float(t), float(np.mean(arr < t))) for t in thresholds]


def trigger_scores(run: Run, param: str | None = None) -> list[float]:
    """Every candidate score recorded by thresholded decisions (of ``param`` if given)."""
    return [
        s
        for rec in run.records
        for _, r in records_of(rec, param=param)
        if r.rule != "always" and r.param
        for s in r.known_scores()
    ]


def trigger_sweep(
    run: Run, thresholds: Sequence[float] | None = None, points: int = 9, param: str | None = None
) -> list[Any]:
    """Replayed retrieval rate of a run's thresholded trigger across thresholds of ``param``.

    ``param`` defaults to the parameter the run's records name most (``threshold`` for FLARE, DRAGIN, ETC,
    black-box; ``entity_threshold`` for QuCo-RAG). Delegates to ``quco.signals.replay``, which re-decides every
    recorded step; ``exact_share`` says how much of each point is certain (decisions after the first changed one
    are estimates). Default thresholds: the quantiles of the recorded scores. Empty without trigger records.
    """
    from quco.signals.replay import sweep, trace_params

    traces = [r.trace for r in run.records if r.trace]
    if param is None:
        params = trace_params(traces)
        if not params:
            return []
        param = params[0]
    scores = trigger_scores(run, param)
    if not scores:
        return []
    if thresholds is None:
        thresholds = sorted({round(float(q), 6) for q in np.quantile(scores, np.linspace(0, 1, points))})
    return sweep(traces, thresholds, param)
