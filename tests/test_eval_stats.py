"""Bootstrap intervals, paired tests and the trace analyses, against values computed by hand."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from quco.errors import QucoError
from quco.eval.runs.records import Record, RunConfig
from quco.eval.runs.store import Run
from quco.eval.score.analysis import (
    claim_flag_rates,
    efficiency_points,
    em_by_cost,
    em_by_entity_frequency,
    question_frequency,
    runtime_breakdown,
    threshold_sweep,
    trigger_scores,
    trigger_sweep,
)
from quco.eval.score.stats import bootstrap_ci, compare, paired_test, permutation_p_value, summarize
from quco.signals.corpus import Claim, claim_records, entity_rarity
from quco.trigger_record import TriggerRecord


def test_bootstrap_interval_matches_normal_approximation() -> None:
    rng = np.random.default_rng(1)
    values = (rng.random(1000) < 0.3).astype(float)
    iv = bootstrap_ci(values, n_boot=4000)
    p = values.mean()
    half = 1.96 * math.sqrt(p * (1 - p) / 1000)  # ~0.028
    assert iv.mean == pytest.approx(p)
    assert iv.low == pytest.approx(p - half, abs=0.006)
    assert iv.high == pytest.approx(p + half, abs=0.006)
    assert iv == bootstrap_ci(values, n_boot=4000)  # seeded: reproducible
    assert bootstrap_ci([2.0, 2.0, 2.0]) == bootstrap_ci([2.0, 2.0, 2.0, math.nan])
    assert (bootstrap_ci([2.0, 2.0]).low, bootstrap_ci([2.0, 2.0]).high) == (2.0, 2.0)
    assert bootstrap_ci([]).n == 0 and bootstrap_ci([]).format() == "n/a"


def test_permutation_p_value_matches_exact_enumeration() -> None:
    diffs = np.array([1, 1, 1, 0, 1, -1, 1, 0, 1, 1], dtype=float)
    observed = abs(diffs.mean())
    exact = np.mean(
        [abs((np.array(s) * diffs).mean()) >= observed - 1e-12 for s in itertools.product([-1, 1], repeat=10)]
    )
    assert exact == pytest.approx(0.0703125)  # 72 of 1024 sign patterns
    assert permutation_p_value(diffs, n_perm=20_000) == pytest.approx(exact, abs=0.006)
    assert permutation_p_value(np.zeros(20)) == 1.0
    assert permutation_p_value(np.ones(50), n_perm=5000) == pytest.approx(1 / 5001)


def test_paired_test_reports_difference_and_drops_unpaired_nans() -> None:
    a = [0, 0, 1, 1, 0, 1, 0, 0, math.nan, 1]
    b = [1, 0, 1, 1, 1, 1, 1, 0, 1, math.nan]
    r = paired_test(a, b, "em", n_boot=2000)
    assert r.n == 8
    assert (r.mean_a, r.mean_b) == (pytest.approx(3 / 8), pytest.approx(6 / 8))
    assert r.diff.mean == pytest.approx(3 / 8)
    assert r.diff.low <= 3 / 8 <= r.diff.high
    assert r.p_value == pytest.approx(0.25, abs=0.03)  # exact: 2 * 1/8 (three +1 diffs, five zeros)
    with pytest.raises(ValueError, match="differ in length"):
        paired_test([1, 0], [1])


def _rec(qid: str, em: float, *, count: float | None = None, retrievals: int = 0, secs: dict | None = None,
         tokens: int = 10, error: bool = False, claims: list[list[dict]] | None = None) -> Record:  # fmt: skip
    steps = []
    if count is not None:
        stage1 = entity_rarity([count, 2 * count], 100_000, "count", True).record
        steps.append({"index": 0, "stage": "before", "triggers": [stage1.to_dict()],
                      "signals": {"entity_counts": [{"entity": "X", "count": count, "status": "ok"},
                                                    {"entity": "Y", "count": 2 * count, "status": "ok"}]}})  # fmt: skip
    if claims:
        judged = [[Claim(c["kind"], float(c["count"])) for c in sentence] for sentence in claims]
        records = claim_records(judged, 1, 20, "count", True)
        steps.append({"index": 1, "stage": "generate", "triggers": [r.to_dict() for r in records]})
    trace = {
        "question": qid,
        "method": "x",
        "version": 2,
        "steps": steps,
        "seconds": sum((secs or {}).values()),
        "counters": {
            "llm_calls": {"main": 1, "extractor": 2},
            "generated_tokens": {"main": tokens, "extractor": 4},
            "prompt_tokens": {"main": 100},
            "retrievals": retrievals,
            "corpus_queries": 3,
            "seconds": secs or {},
        },
    }
    return Record.from_dict(
        {"id": qid, "em": em, "f1": em, "error": "boom" if error else None, "trace": None if error else trace}
    )


def _run(name: str, recs: list[Record], method: str = "quco") -> Run:
    cfg = {"label": name, "pipeline": {"method": method}, "dataset": {"name": "hotpotqa", "sha256": "abc"}}
    return Run(Path(name), RunConfig.from_dict(cfg), recs)


def test_costs_and_summary_from_traces() -> None:
    rec = _rec("q", 1.0, retrievals=2, secs={"llm": 1.5, "retrieval": 0.5}, tokens=30)
    costs = rec.costs()
    assert costs == {"retrievals": 2.0, "main_llm_calls": 1.0, "llm_calls": 3.0, "main_tokens": 30.0,
                     "tokens": 34.0, "prompt_tokens": 100.0, "corpus_queries": 3.0, "extractor_calls": 2.0,
                     "seconds": 2.0}  # fmt: skip
    assert all(math.isnan(v) for v in _rec("e", 0.0, error=True).costs().values())
    run = _run("r", [rec, _rec("e", 0.0, error=True)])
    s = summarize(run, n_boot=500)
    assert s["em"].mean == 0.5 and s["em"].n == 2  # an error is a wrong answer
    assert s["retrievals"].mean == 2.0 and s["retrievals"].n == 1  # but has no cost


def test_compare_pairs_common_questions_and_guards_datasets() -> None:
    a = _run("a", [_rec(str(i), float(i % 2)) for i in range(10)])
    b = _run("b", [_rec(str(i), 1.0) for i in range(2, 12)])
    comp = compare(a, b, ("em", "retrievals"), n_boot=500)
    assert (comp.n_common, comp.only_a, comp.only_b) == (8, 2, 2)
    assert comp.results["em"].diff.mean == pytest.approx(0.5)
    other = Run(
        Path("c"), RunConfig.from_dict({"dataset": {"name": "2wikimultihopqa", "sha256": "zzz"}}), b.records
    )
    with pytest.raises(QucoError, match="different datasets"):
        compare(a, other)
    with pytest.raises(QucoError, match="no question in common"):
        compare(a, _run("d", [_rec("x", 1.0)]))


def test_entity_frequency_bins_and_other_runs_binned_by_them() -> None:
    rec = _rec("q", 1.0, count=5)
    assert question_frequency(rec) == 7.5  # mean of 5 and 10
    assert question_frequency(rec, "min") == 5.0
    assert question_frequency(_rec("q", 1.0)) is None
    quco = _run("quco", [_rec("a", 1, count=0), _rec("b", 0, count=3), _rec("c", 1, count=4),
                         _rec("d", 1, count=500), _rec("e", 0, count=2e6), _rec("f", 1)])  # fmt: skip
    wo = _run("wo", [_rec(q, em) for q, em in zip("abcdef", [0, 0, 1, 0, 1, 1], strict=True)], "wo-rag")
    table = em_by_entity_frequency([wo, quco])
    assert table is not None and table.source == "quco"
    assert table.labels[:4] == ["0", "1-9", "10-99", "100-999"] and table.labels[-1] == ">=1M"
    # mean counts: a=0, b=4.5, c=6, d=750, e=3e6; f has none and is left out
    assert table.n == [1, 2, 0, 1, 0, 0, 0, 1]
    assert table.em["quco"][:2] == [1.0, 0.5] and math.isnan(table.em["quco"][2])
    assert table.em["wo"][:2] == [0.0, 0.5] and table.em["wo"][7] == 1.0
    assert em_by_entity_frequency([wo]) is None


def test_threshold_sweep_simulates_stage_one_from_two_runs() -> None:
    signal = _run(
        "quco", [_rec("a", 1, count=0), _rec("b", 0, count=40), _rec("c", 1, count=4000), _rec("d", 1)]
    )
    always = _run("sr", [_rec(q, em) for q, em in zip("abcd", [1, 1, 0, 0], strict=True)], "sr-rag")
    never = _run("wo", [_rec(q, em) for q, em in zip("abcd", [0, 0, 1, 1], strict=True)], "wo-rag")
    rows = threshold_sweep(signal, [0, 1, 100, 10_000], with_run=always, without_run=never)
    # frequencies a=0, b=60, c=6000, d=none (never retrieves)
    assert [r.trigger_rate for r in rows] == [0.0, 0.25, 0.5, 0.75]
    # t=1: a from SR (1), b c d from Wo (0 1 1); t=100: a b from SR (1 1), c d from Wo (1 1); ...
    assert [r.em for r in rows] == [0.5, 0.75, 1.0, 0.75]
    assert threshold_sweep(signal, [100])[0].em is None


def test_runtime_cost_groups_and_claim_rates() -> None:
    run = _run("r", [
        _rec("a", 1, retrievals=0, secs={"llm": 1.0, "other": 0.2}),
        _rec("b", 0, retrievals=2, secs={"llm": 3.0, "retrieval": 0.4}),
        _rec("c", 1, retrievals=2, secs={"llm": 2.0, "corpus_stats": 0.3},
             claims=[[{"kind": "cooccurrence", "count": 0}, {"kind": "head_count", "count": 30}],
                     [{"kind": "cooccurrence", "count": 7}]]),
        _rec("d", 0, error=True),
    ])  # fmt: skip
    rt = runtime_breakdown([run])["r"]
    assert rt["llm"] == pytest.approx(2.0) and rt["retrieval"] == pytest.approx(0.4 / 3)
    assert rt["extraction"] == 0.0
    assert em_by_cost(run, "retrievals") == [("0", 1, 1.0), ("2", 2, 0.5)]
    # per judged sentence: its lowest co-occurrence (0 and 7), its lowest head count (30)
    assert claim_flag_rates(run, [1, 10], "cooccurrence_threshold") == [(1.0, 0.5), (10.0, 1.0)]
    assert claim_flag_rates(run, [20, 40], "head_threshold") == [(20.0, 0.0), (40.0, 1.0)]
    point = efficiency_points([run])[0]
    assert point.em == 0.5 and point.costs["retrievals"] == pytest.approx(4 / 3)


def test_trigger_sweep_replays_recorded_scores() -> None:
    def rec(qid: str, scores: list[float]) -> Record:
        r = _rec(qid, 1.0)
        record = TriggerRecord.decide("token_uncertainty", "above", 0.5, scores, "sentence")
        r.trace["steps"] = [{"index": 0, "stage": "generate", "triggers": [record.to_dict()]}]
        return r

    run = _run("flare", [rec("a", [0.2, 0.7]), rec("b", [0.1, 0.3])], "flare")
    assert sorted(trigger_scores(run)) == [0.1, 0.2, 0.3, 0.7]
    pts = trigger_sweep(run, [0.05, 0.25, 0.5, 0.8])
    assert [p.retrievals_per_question for p in pts] == [1.0, 1.0, 0.5, 0.0]
    default = [p.threshold for p in trigger_sweep(run)]  # default: 9 quantiles of the recorded scores
    assert len(default) == 9 and default == sorted(default) and (default[0], default[-1]) == (0.1, 0.7)
    assert trigger_sweep(_run("wo", [_rec("a", 1.0)])) == []
