"""DTR: UGT decisions and AIS scores against hand-computed values; the method end to end on HotpotQA."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from quco.config import load_config
from quco.errors import ConfigError
from quco.methods import method_class
from quco.methods.dtr import DTR, as_prediction, short_answer
from quco.pipeline import Pipeline
from quco.retrieval.dense import DenseRetriever
from quco.signals.dtr import ais_alpha, ais_score, ais_select, mean_nll, ugt_decision
from test_dense import shared_dense_index

# -- UGT ----------------------------------------------------------------------------------------------------

# Per-token log-probabilities of greedy direct answers recorded from gemma3-270m (hf backend) with DTR's
# direct-answer prompt; the end token is not part of Generation.logprobs.
RECORDED_NO = [-1.24415, -0.73995]  # HotpotQA dev 0 -> " No": mean NLL = 1.98410 / 2 = 0.99205
RECORDED_PARIS = [-1.0787264108657837]  # "What is the capital of France?" -> " Paris"
# gemma3-270m is never that sure; a hand-made confident answer (a larger model's typical values).
CONFIDENT = [-0.000412, -0.000188, -0.000095]  # mean NLL = 0.000695 / 3 = 0.00023167


def test_mean_nll_by_hand() -> None:
    assert mean_nll(CONFIDENT) == pytest.approx(0.000695 / 3)
    assert mean_nll(RECORDED_NO) == pytest.approx(0.99205)
    assert mean_nll(RECORDED_PARIS) == pytest.approx(1.0787264108657837)
    # with a trailing end token reported by the backend, it is left out (as in DTR's code)
    assert mean_nll([-0.2, -0.4, -3.0], drop_last=True) == pytest.approx(0.3)
    assert mean_nll([-0.2], drop_last=True) == math.inf
    assert mean_nll([]) == math.inf


def test_ugt_decisions_by_hand() -> None:
    d = ugt_decision(CONFIDENT, 0.001)
    assert not d.retrieve and d.tokens == 3 and d.uncertainty == pytest.approx(0.00023167, abs=1e-8)
    assert ugt_decision(CONFIDENT, 0.0002).retrieve  # 0.000232 >= 0.0002
    assert ugt_decision(RECORDED_NO, 0.001).retrieve
    assert not ugt_decision(RECORDED_NO, 1.0).retrieve  # 0.99205 < 1.0
    assert ugt_decision(RECORDED_PARIS, 1.0).retrieve  # 1.0787 >= 1.0
    assert ugt_decision([-0.5, -0.5], 0.5).retrieve  # u == threshold retrieves
    assert ugt_decision(CONFIDENT, 0.0).retrieve  # 0 means always
    assert ugt_decision([], 10.0).retrieve  # an empty answer is never confident


# -- AIS ----------------------------------------------------------------------------------------------------


def test_ais_scores_by_hand() -> None:
    # s1 = 0.8, s2 = 0.6: theta1 = 36.87 deg, theta2 = 53.13 deg, together 90 deg -> cos = 0
    assert ais_score(0.8, 0.6, "cos_sum") == pytest.approx(0.0, abs=1e-12)
    assert ais_score(0.5, 0.5, "cos_sum") == pytest.approx(-0.5)  # 60 + 60 = 120 deg
    assert ais_score(1.0, 0.5, "cos_sum") == pytest.approx(0.5)  # 0 + 60 deg
    assert ais_score(0.8, 0.6, "sum") == pytest.approx(1.4)
    # weighted angle with s0 = 1 (theta0 = 0): alpha = 0.45520
    t1, t2 = math.acos(0.8), math.acos(0.6)  # 0.643501, 0.927295
    assert ais_alpha(1.0) == pytest.approx(0.45520)
    assert ais_score(0.8, 0.6, "weighted_angle", s0=1.0) == pytest.approx(-(0.4552 * t1 + 0.5448 * t2))
    assert ais_score(0.8, 0.6, "weighted_angle", s0=1.0) == pytest.approx(-0.798112, abs=1e-6)
    # s0 = 0 (theta0 = pi/2): alpha = 0.05848 * 1.570796 + 0.45520 = 0.547060
    assert ais_alpha(0.0) == pytest.approx(0.547060, abs=1e-6)
    # dot products of unit vectors can overshoot 1; they are clipped, not turned into NaN
    assert ais_score(1.0000003, 0.5, "cos_sum") == pytest.approx(0.5)
    with pytest.raises(ValueError, match="needs s0"):
        ais_score(0.8, 0.6, "weighted_angle")


def test_ais_variants_can_rank_differently() -> None:
    # A is close to the question only (18.2 + 78.5 = 96.7 deg); B is equally close to both (53.1 + 53.1 deg).
    s1, s2 = [0.95, 0.6], [0.2, 0.6]
    order, scores = ais_select(s1, s2, 2, "cos_sum")
    assert order == [0, 1] and scores[0] == pytest.approx(0.19 - math.sqrt(0.0975) * math.sqrt(0.96))
    assert scores[0] == pytest.approx(-0.115941, abs=1e-6)
    assert scores[1] == pytest.approx(-0.28)
    order, scores = ais_select(s1, s2, 2, "sum")
    assert order == [1, 0] and scores == pytest.approx([1.15, 1.2])
    # ties keep candidate order; k larger than the pool keeps everything
    assert ais_select([0.5, 0.5, 0.9], [0.5, 0.5, 0.9], 5, "sum")[0] == [2, 0, 1]


def test_short_answer_cleaning() -> None:
    assert short_answer(' "Paris".\nQuestion: next') == "Paris"
    assert short_answer("So the answer is Lyon.") == "Lyon"
    assert as_prediction("Paris") == "So the answer is Paris."
    assert as_prediction("") == ""


def test_params_are_validated() -> None:
    assert method_class("dtr") is DTR
    with pytest.raises(ConfigError, match="n_per_path"):
        DTR({"n_per_path": 0})
    with pytest.raises(ConfigError, match="standard_retriever"):
        DTR({"retrieval": "dual_path", "standard_retriever": "pipeline"})
    with pytest.raises(ConfigError, match="ais_score"):
        DTR({"ais_score": "product"})
    with pytest.raises(ConfigError, match="params.threshold"):
        DTR({"threshold": 0.1})


def test_config_files_load() -> None:
    root = Path(__file__).resolve().parents[1] / "configs"
    files = sorted(root.glob("dtr*.yaml")) + sorted((root / "hotpotqa").glob("dtr*.yaml"))
    files += sorted((root / "world").glob("*/dtr*.yaml"))
    assert len(files) >= 18
    for path in files:
        cfg = load_config(path)
        assert cfg.method == ("dtr-random" if path.stem == "dtr-random" else "dtr"), path
        method_class(cfg.method)(cfg.params)  # parameters valid


# -- end to end ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, data_root: Path) -> Pipeline:
    corpus, index_dir = shared_dense_index(
        str(tmp_path_factory.getbasetemp() / "dense-shared"), str(data_root)
    )
    cfg = load_config(
        None,
        overrides={
            "method": "dtr",
            "retriever.corpus": str(corpus),
            "params.dense_index_dir": str(index_dir),
            "params.answer_max_new_tokens": 8,
            "params.direct_max_new_tokens": 8,
            "params.pseudo_max_new_tokens": 24,
        },
    )
    return Pipeline.from_config(cfg, progress=False)


def _with(pipeline: Pipeline, **params: object) -> Pipeline:
    """Another DTR variant on the same loaded model and dense index."""
    method = DTR({**pipeline.method.params.model_dump(), **params})
    parts = replace(pipeline.parts, retrievers=dict(pipeline.parts.retrievers))
    method.setup(parts)
    return Pipeline(pipeline.config, method, parts)


@pytest.mark.model
def test_ugt_decision_matches_recorded_logprobs(pipeline: Pipeline, hotpot_dev: list[dict]) -> None:
    trace = pipeline.answer(hotpot_dev[0]["question"])
    before = trace.steps[0]
    assert before.stage == "before"
    lps = before.signals["token_logprobs"]
    assert lps, "the direct answer must have tokens"
    u = -sum(lps) / len(lps)
    record = before.triggers[0]
    assert (record.signal, record.rule, record.param) == ("answer_nll", "at_least", "uncertainty_threshold")
    assert record.scores[0] == pytest.approx(u, abs=1e-4)
    assert (
        before.decision == ("retrieve" if u >= 0.001 else "skip") == ("retrieve" if record.fired else "skip")
    )
    assert trace.counters.llm_calls["main"] >= 1


@pytest.mark.model
def test_dtr_end_to_end_on_hotpotqa(pipeline: Pipeline, hotpot_dev: list[dict]) -> None:
    always = _with(pipeline, uncertainty_threshold=0.0)
    assert isinstance(always.parts.retrievers["dense"], DenseRetriever)
    trace = always.answer(hotpot_dev[1]["question"])
    before = trace.steps[0]
    assert before.decision == "retrieve" and before.reason.startswith("threshold 0")
    assert before.triggers[0].rule == "always" and before.triggers[0].fired
    # the pseudo-passage is its own counted call; no direct answer was asked for
    assert trace.counters.llm_calls == {"pseudo_document": 1, "main": 1}
    assert trace.counters.retrievals == 2 and trace.counters.passages_retrieved == 10
    cands = before.signals["candidates"]
    assert 5 <= len(cands) <= 10 and sum(c["kept"] for c in cands) == 3
    for c in cands:  # every score is the paper's cos(t1 + t2) of the recorded similarities
        assert c["score"] == pytest.approx(ais_score(c["s1"], c["s2"], "cos_sum"), abs=1e-5)
    kept = sorted((c for c in cands if c["kept"]), key=lambda c: -c["score"])
    assert [r.id for r in before.retrieved] == [c["id"] for c in kept]
    assert len(trace.steps) == 2 and trace.stop_reason in ("answer", "single_pass")
    assert trace.prediction == "" or trace.prediction.startswith("So the answer is")
    # the UGT-only ablation: plain top-3 dense retrieval for the question, no pseudo-passage
    standard = _with(pipeline, uncertainty_threshold=0.0, retrieval="standard")
    trace = standard.answer(hotpot_dev[2]["question"])
    assert "pseudo_document" not in trace.counters.llm_calls
    assert trace.counters.retrievals == 1 and len(trace.steps[0].retrieved) == 3


@pytest.mark.model
def test_dual_path_over_bm25_candidates(pipeline: Pipeline, hotpot_dev: list[dict]) -> None:
    """path_retriever=pipeline (corpora too large to embed): BM25 finds both paths' candidates, and the AIS
    cosines computed on the fly equal those of the stored embeddings of the same passages."""
    bm25 = _with(pipeline, uncertainty_threshold=0.0, path_retriever="pipeline")
    trace = bm25.answer(hotpot_dev[3]["question"])
    before = trace.steps[0]
    assert before.decision == "retrieve" and before.signals["retrieval"] == "dual_path"
    assert trace.counters.retrievals == 2
    cands = before.signals["candidates"]
    assert 5 <= len(cands) <= 10 and sum(c["kept"] for c in cands) == 3
    dense = pipeline.parts.retrievers["dense"]
    q = dense.encode_queries([hotpot_dev[3]["question"]])
    stored = dense.similarities(q, [c["id"] for c in cands])[0]
    assert [c["s1"] for c in cands] == pytest.approx([float(x) for x in stored], abs=1e-4)
    for c in cands:
        assert c["score"] == pytest.approx(ais_score(c["s1"], c["s2"], "cos_sum"), abs=1e-5)
