"""QuCo-RAG, SR-RAG and Wo-RAG end to end with the real default model on real HotpotQA dev questions.

Retrieval and corpus statistics are built from the HotpotQA paragraph pool in the evaluation data. The
default model is a 270M base model, so these tests check behaviour (decisions follow recorded signals,
every call is counted, traces are complete), not accuracy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quco.config import load_config
from quco.pipeline import Pipeline
from quco.trace import Trace

pytestmark = pytest.mark.model

BUDGET = 48  # generated tokens per answer: enough for two or three sentences


@pytest.fixture(scope="module")
def overrides(tmp_path_factory: pytest.TempPathFactory, hotpot_pool_path: Path) -> dict:
    tmp = tmp_path_factory.mktemp("hotpot_idx")
    return {
        "retriever.corpus": str(hotpot_pool_path),
        "retriever.index_dir": str(tmp / "bm25"),
        "corpus_stats.index_dir": str(tmp / "stats"),
        "prompt.fewshot": 4,
        "generation.max_new_tokens": BUDGET,
        "generation.max_steps": 4,
    }


@pytest.fixture(scope="module")
def quco_pipe(overrides: dict) -> Pipeline:
    return Pipeline.from_config(load_config(overrides=overrides, method="quco"), progress=False)


def check_counters(trace: Trace) -> None:
    c = trace.counters
    assert c.llm_calls.get("main", 0) >= 1
    assert sum(c.generated_tokens.values()) > 0 and sum(c.prompt_tokens.values()) > 0
    retrieved_steps = [s for s in trace.steps if s.decision == "retrieve"]
    assert c.retrievals == sum(len(s.queries) for s in retrieved_steps)
    assert set(c.seconds) >= {"llm"}
    again = Trace.from_dict(json.loads(trace.to_json()))
    assert again.to_dict() == trace.to_dict()


def test_quco_stage1_and_stage2_on_hotpotqa(quco_pipe: Pipeline, hotpot_dev: list[dict]) -> None:
    saw_stage2_check = False
    for row in hotpot_dev[:3]:
        trace = quco_pipe.answer(row["question"])
        check_counters(trace)
        before = trace.steps[0]
        assert before.stage == "before"
        stage1 = before.triggers[0]
        assert stage1.signal == "mean_entity_count" and (before.decision == "retrieve") == stage1.fired
        if stage1.fired:
            assert before.queries == [row["question"]] and before.retrieved
        for step in trace.steps[1:]:
            for sent in step.signals.get("sentences", []):
                for claim in sent.get("claims", []):
                    saw_stage2_check = True
                    assert claim["flagged"] == (claim["count"] < claim["threshold"])
            if step.decision == "retrieve":
                assert step.queries and step.reason
        # Corpus lookups are counted: one per entity plus one per checked claim.
        n_claims = sum(
            len(s.get("claims", [])) for st in trace.steps for s in st.signals.get("sentences", [])
        )
        n_entities = len(before.signals.get("entity_counts", []))
        assert trace.counters.corpus_queries == n_entities + n_claims
    assert saw_stage2_check


def test_quco_options_of_ours_on_the_default_model(overrides: dict, hotpot_dev: list[dict]) -> None:
    """The rarest entity decides stage 1; stage-2 queries start with the question; passages are merged."""
    opts = {
        "params.entity_aggregate": "min",
        "params.entity_threshold": 1e12,
        "params.cooccurrence_threshold": 1e12,  # every claim is flagged
        "params.head_threshold": 1e12,
        "params.sentence_query": "question_head_relation",
        "params.stage2_passages": "merge",
    }
    pipe = Pipeline.from_config(load_config(overrides=overrides | opts, method="quco"), progress=False)
    stage2 = []
    for row in hotpot_dev[:2]:  # the model states no claim on the first question, one on the second
        trace = pipe.answer(row["question"])
        check_counters(trace)
        stage1 = trace.steps[0].triggers[0]
        counts = [c["count"] for c in trace.steps[0].signals["entity_counts"]]
        assert stage1.signal == "min_entity_count" and stage1.scores == [min(counts)] and stage1.fired
        queries = [q for s in trace.steps[1:] if s.decision == "retrieve" for q in s.queries]
        assert all(q.startswith(row["question"]) for q in queries)
        stage2 += queries
    assert stage2


def test_quco_long_question_is_truncated_and_noted(
    quco_pipe: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    question = ("Tell me about rivers. " * 1000) + "Which river flows through Vienna?"
    assert len(question) > 20000
    # The question's length is what is tested: a short answer budget keeps the test quick.
    monkeypatch.setattr(quco_pipe.parts.config.generation, "max_new_tokens", 12)
    trace = quco_pipe.answer(question)
    assert any("question was" in n for n in trace.notes)
    assert trace.question.endswith("Which river flows through Vienna?")
    c = trace.counters
    assert 0 < c.generated_tokens["main"] <= 12 * c.llm_calls["main"]


@pytest.mark.parametrize("method", ["sr-rag", "wo-rag"])
def test_reference_methods(method: str, overrides: dict, hotpot_dev: list[dict]) -> None:
    pipe = Pipeline.from_config(load_config(overrides=overrides, method=method), progress=False)
    for row in hotpot_dev[:2]:
        trace = pipe.answer(row["question"])
        check_counters(trace)
        assert trace.counters.llm_calls == {"main": 1}
        if method == "sr-rag":
            assert trace.steps[0].decision == "retrieve" and len(trace.steps[0].retrieved) == 3
            assert trace.counters.retrievals == 1
        else:
            assert trace.counters.retrievals == 0
