"""FL-RAG, FS-RAG, FLARE, DRAGIN, ETC, SeaKR and the random trigger end to end on the real default model.

Each method answers real HotpotQA dev questions with BM25 over real HotpotQA paragraphs. The tests check
behaviour, not accuracy (the default model is a 270M base model): the decision at every step follows the
signal values recorded in the trace, the query follows the method's rule, every counter equals the calls that
actually reached the generator and the retriever, and traces survive a JSON round trip. A threshold sweep
replayed from a trace is checked against a real re-run.

The model is loaded once for the module; every pipeline is still built by ``Pipeline.from_config``, which is
handed that model wrapped in a recorder of the calls made to it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import quco.pipeline
from quco.config import GeneratorConfig, load_config
from quco.engine.loop import join_text
from quco.errors import CapabilityError, ConfigError
from quco.eval.run.matched import matched_config
from quco.eval.runs.records import Record
from quco.eval.runs.store import load_traces
from quco.llm.base import Analysis, Capability, Generation
from quco.pipeline import Pipeline, shared_generator
from quco.retrieval.base import Passage
from quco.signals import (
    aggregate,
    entropy_differences,
    rind_values,
    sentence_values,
    smooth_second_order,
)
from quco.signals.chance import retrieval_rate, uniform_draw
from quco.signals.replay import replay
from quco.trace import Trace
from quco.trigger_record import first_crossing, step_fired_at

pytestmark = pytest.mark.model

BUDGET = 32  # generated tokens per answer
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
METHODS = ("fl-rag", "fs-rag", "flare", "dragin", "etc", "seakr", "random")


# -- recorders of the calls that reach the real parts -------------------------------------------------------


@dataclass
class CallLog:
    sequences: int = 0  # generations returned (n samples = n)
    generated_tokens: int = 0
    prompt_tokens: int = 0
    analyses: int = 0
    analysed_tokens: int = 0
    max_new_tokens: list[int] = field(default_factory=list)
    searches: int = 0
    queries: list[str] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)  # every prompt generated from
    passages: list[list[str]] = field(default_factory=list)  # the ids of every search's passages, per query


class RecordingGenerator:
    """The real generator, with a log of every call; ``drop`` hides capabilities (for the build-time check)."""

    def __init__(self, inner: Any, log: CallLog, drop: frozenset[Capability] = frozenset()) -> None:
        self.inner = inner
        self.log = log
        self.name = inner.name
        self.capabilities = frozenset(inner.capabilities) - drop
        self.max_context_tokens = inner.max_context_tokens
        self.model = inner.model  # SeaKR reads the layer count from the model config

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def generate(self, prompt: str, **kwargs: Any) -> list[Generation]:
        outs = self.inner.generate(prompt, **kwargs)
        self.log.prompts.append(str(prompt))
        self.log.sequences += len(outs)
        self.log.generated_tokens += sum(len(o.token_ids) for o in outs)
        self.log.prompt_tokens += sum(o.prompt_tokens for o in outs)
        self.log.max_new_tokens.append(kwargs["max_new_tokens"])
        return outs

    def analyze(self, text: str, **kwargs: Any) -> Analysis:
        result = self.inner.analyze(text, **kwargs)
        self.log.analyses += 1
        self.log.analysed_tokens += len(result.token_ids)
        return result


class RecordingRetriever:
    def __init__(self, inner: Any, log: CallLog) -> None:
        self.inner = inner
        self.log = log
        self.name = inner.name

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.log.searches += 1
        self.log.queries.extend(queries)
        found = self.inner.search(queries, k)
        self.log.passages.extend([p.id for p in ps] for ps in found)
        return found


@dataclass
class Run:
    question: str
    trace: Trace
    log: CallLog


@dataclass
class Bundle:
    pipe: Pipeline
    log: CallLog

    def answer(self, question: str) -> Run:
        self.log.__init__()  # fresh counts per question
        trace = self.pipe.answer(question)
        return Run(question, trace, CallLog(**self.log.__dict__))


@pytest.fixture(scope="module")
def overrides(tmp_path_factory: pytest.TempPathFactory, small_hotpot_corpus: Path) -> dict:
    return {
        "retriever.corpus": str(small_hotpot_corpus),
        "retriever.index_dir": str(tmp_path_factory.mktemp("baselines") / "bm25"),
        "prompt.fewshot": 2,
        "generation.max_new_tokens": BUDGET,
        "generation.max_steps": 4,
    }


@pytest.fixture(scope="module")
def build(overrides: dict) -> Iterator[Any]:
    """``build(method, params)`` -> a Bundle whose pipeline came from ``Pipeline.from_config``.

    The process loads the model once (pipelines share it); each bundle wraps it in its own recorder.
    """

    def make(
        method: str,
        params: dict | None = None,
        drop: frozenset[Capability] = frozenset(),
        config: Path | None = None,
    ) -> Bundle:
        """``config``: a config file whose parameters ``params`` override one by one (default: the defaults)."""
        log = CallLog()
        model = shared_generator(GeneratorConfig())
        if config is None:
            cfg = load_config(overrides={**overrides, "params": params or {}}, method=method)
        else:
            dotted = {f"params.{k}": v for k, v in (params or {}).items()}
            cfg = load_config(config, overrides={**overrides, **dotted})
            assert cfg.method == method, config
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(quco.pipeline, "shared_generator", lambda _cfg: RecordingGenerator(model, log, drop))
            pipe = Pipeline.from_config(cfg, progress=False)
        pipe.parts.retriever = RecordingRetriever(pipe.parts.retriever, log)
        return Bundle(pipe, log)

    yield make


def records_file(traces: Sequence[Trace]) -> str:
    """A results.jsonl of these traces, one record per question (distinct ids: a run keeps one per id)."""
    return "".join(
        json.dumps({"id": f"q{i}", "index": i, "trace": t.to_dict()}) + "\n" for i, t in enumerate(traces)
    )


def answer_all(bundle: Bundle, rows: list[dict]) -> list[Run]:
    return [bundle.answer(row["question"]) for row in rows]


# -- checks every method must pass --------------------------------------------------------------------------


def check_common(run: Run) -> None:
    t, log = run.trace, run.log
    c = t.counters
    # every call that reached the generator or the retriever is in the counters, and nothing else
    assert c.total_llm_calls == log.sequences + log.analyses
    assert c.total_generated_tokens == log.generated_tokens
    assert sum(c.prompt_tokens.values()) == log.prompt_tokens + log.analysed_tokens
    assert c.retrieval_calls == log.searches
    assert c.retrievals == len(log.queries)
    assert [q for s in t.steps if s.decision == "retrieve" for q in s.queries] == log.queries
    # the decision at each step is the one its recorded scores imply
    for step in t.steps:
        for record in step.triggers:
            assert record.fired_at == first_crossing(
                record.scores, record.threshold, record.rule, record.forced
            )
        if step.stage != "generate" or not step.draft:
            continue
        assert step.triggers, f"step {step.index} of {t.method} records no trigger"
        at = step_fired_at(step.triggers)
        if step.signals.get("suppressed"):  # crossed, but the method may not act (SeaKR: repeated query)
            assert at is not None and step.decision != "retrieve"
            continue
        assert (step.decision == "retrieve") == (at is not None), step.reason
        if at is not None:
            assert step.queries and all(q.strip() for q in step.queries) and step.reason
    again = Trace.from_dict(json.loads(t.to_json()))
    assert again.to_dict() == t.to_dict()


def generate_steps(run: Run) -> list[Any]:
    return [s for s in run.trace.steps if s.stage == "generate" and s.draft]


def flagged(step: Any) -> dict:
    return step.signals["sentences"][step.triggers[0].fired_at]


def squeeze(text: str) -> str:
    return " ".join(text.split())


# -- configs ------------------------------------------------------------------------------------------------


def test_config_files_hold_valid_published_defaults() -> None:
    from quco.methods import method_class

    for method in METHODS:
        files = [CONFIGS / f"{method}.yaml", CONFIGS / "hotpotqa" / f"{method}.yaml"]
        files.append(CONFIGS / "2wikimultihopqa" / f"{method}.yaml")
        for path in files:
            cfg = load_config(path)
            assert cfg.method == method, path
            method_class(method)(cfg.params)  # parameters valid
    hotpot = {m: load_config(CONFIGS / "hotpotqa" / f"{m}.yaml").params for m in ("flare", "dragin")}
    wiki = {m: load_config(CONFIGS / "2wikimultihopqa" / f"{m}.yaml").params for m in ("flare", "dragin")}
    assert hotpot["flare"]["threshold"] == 0.08 and wiki["flare"]["threshold"] == 0.1
    assert (hotpot["dragin"]["threshold"], hotpot["dragin"]["keep_top_k"]) == (1.3, 35)
    assert (wiki["dragin"]["threshold"], wiki["dragin"]["keep_top_k"]) == (1.0, 25)
    assert load_config(CONFIGS / "seakr.yaml").params["samples"] == 20
    with pytest.raises(ConfigError, match="params.threshold"):
        method_class("flare")({"threshold": 2})
    with pytest.raises(ConfigError, match="either schedule or every"):
        method_class("random")({"schedule": [0], "every": 2})


# -- FLARE --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def flare_runs(build: Any, hotpot_dev: list[dict]) -> list[Run]:
    return answer_all(build("flare", {"threshold": 0.1}), hotpot_dev[:2])


def test_flare_signals_decisions_and_masked_query(flare_runs: list[Run]) -> None:
    fired = 0
    for run in flare_runs:
        check_common(run)
        for step in generate_steps(run):
            trig = step.triggers[0]
            for cand in step.signals["sentences"]:
                # the score is the mean of the recorded 1 - p values of the sentence's tokens
                assert cand["score"] == pytest.approx(aggregate(cand["uncertainty"], "avg"), abs=2e-6)
                assert all(0 <= u <= 1 for u in cand["uncertainty"])
            if trig.fired_at is None:
                assert all(s <= 0.1 for s in trig.scores)
                continue
            fired += 1
            cand = flagged(step)
            assert all(s <= 0.1 for s in trig.scores[: trig.fired_at])
            # query: the flagged sentence without its over-threshold tokens
            masked = squeeze(
                "".join(
                    t if u <= 0.1 else " " for t, u in zip(cand["tokens"], cand["uncertainty"], strict=True)
                )
            )
            assert step.queries == [masked or cand["text"]]
            # keep: the sentences before the flagged one, then the whole regeneration
            before = " ".join(
                c["text"] for c in step.signals["sentences"] if c["sentence"] < cand["sentence"]
            )
            assert step.kept == join_text(before, step.regenerated)
    assert fired >= 1
    assert sum(r.trace.counters.llm_calls.get("main", 0) for r in flare_runs) >= 2


def test_flare_threshold_sweep_matches_a_rerun(flare_runs: list[Run], build: Any) -> None:
    """Replay the recorded scores at a new threshold, then re-run the model at that threshold."""
    run = max(flare_runs, key=lambda r: len(generate_steps(r)))
    scores = sorted({s for st in generate_steps(run) for s in st.triggers[0].scores})
    options = [x + 1e-6 for x in scores] + [x - 1e-6 for x in scores]
    # the new threshold whose first changed decision comes latest (the longest certain prefix)
    best = max(
        (replay(run.trace, t) for t in options),
        key=lambda r: (any(d.changed for d in r.decisions), r.exact_steps),
    )
    assert any(d.changed for d in best.decisions)
    rerun = build("flare", {"threshold": best.threshold}).answer(run.question)
    check_common(rerun)
    steps = generate_steps(rerun)
    original = generate_steps(run)
    for k in range(best.exact_steps):
        d = best.decisions[k]
        trig = steps[k].triggers[0]
        assert trig.scores == original[k].triggers[0].scores
        assert (steps[k].decision == "retrieve", trig.fired_at) == (d.fire, d.at)


def test_flare_look_ahead_retrieves_with_the_question_first(build: Any, hotpot_dev: list[dict]) -> None:
    bundle = build("flare", {"mode": "look_ahead", "aggregate": "max", "threshold": 0.6})
    assert (bundle.pipe.method.shape.unit, bundle.pipe.method.shape.keep_rule) == (
        "sentence",
        "first_sentence",
    )
    run = bundle.answer(hotpot_dev[0]["question"])
    check_common(run)
    first = run.trace.steps[0]
    assert first.stage == "before" and first.queries == [run.question]
    for step in generate_steps(run):
        assert len(step.signals["sentences"]) <= 1  # one tentative sentence at a time
        for cand in step.signals["sentences"]:
            assert cand["score"] == pytest.approx(max(cand["uncertainty"]), abs=2e-6)


# -- DRAGIN -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dragin_runs(build: Any, hotpot_dev: list[dict]) -> list[Run]:
    return answer_all(build("dragin", {"threshold": 1.3, "keep_top_k": 35}), hotpot_dev[:2])


def test_dragin_signals_decisions_and_query(dragin_runs: list[Run]) -> None:
    fired = 0
    for run in dragin_runs:
        check_common(run)
        analyses = 0
        for step in generate_steps(run):
            analyses += 1
            trig = step.triggers[0]
            for cand in step.signals["sentences"]:
                values = rind_values(cand["attention"], cand["entropy"])
                assert cand["values"] == pytest.approx(values, rel=1e-3, abs=1e-5)
                assert cand["score"] == max(cand["values"])
            if trig.fired_at is None:
                assert all(s <= 1.3 for s in trig.scores)
                continue
            fired += 1
            analyses += 1  # the query re-read
            cand = flagged(step)
            assert any(v > 1.3 for v in cand["values"])
            words = [w["word"] for w in step.signals["query_words"]]
            assert 0 < len(words) <= 35
            assert step.queries == [" ".join(words)]
            # query words come from question + accepted text + the flagged sentence
            source = " ".join([run.question, run.trace.prediction, step.draft])
            assert all(w in source for w in words)
            hits = [w for w, h in zip(cand["words"], cand["hit"], strict=True) if h]
            assert set(hits) <= set(cand["words"])
            before = " ".join(
                c["text"] for c in step.signals["sentences"] if c["sentence"] < cand["sentence"]
            )
            assert step.kept.startswith(before)
            assert step.regenerated.startswith(step.kept[len(before) :].strip()[:10])
        assert run.trace.counters.llm_calls.get("probe", 0) == analyses
    assert fired >= 1


def test_dragin_needs_attention_at_build(build: Any) -> None:
    with pytest.raises(CapabilityError, match="'attention'"):
        build("dragin", drop=frozenset({Capability.ATTENTION}))
    with pytest.raises(CapabilityError, match="'hidden_states'"):
        build("seakr", drop=frozenset({Capability.HIDDEN_STATES}))


# -- ETC ----------------------------------------------------------------------------------------------------


def test_etc_trend_signals_decisions_and_query(build: Any, hotpot_dev: list[dict]) -> None:
    runs = answer_all(build("etc", {"threshold": 0.5}), hotpot_dev[:2])
    fired = 0
    for run in runs:
        check_common(run)
        for step in generate_steps(run):
            cands = step.signals["sentences"]
            ent = [e for c in cands for e in c["entropy"]]
            content = [b for c in cands for b in c["content"]]
            s1, s2 = entropy_differences(ent, content)
            assert [x for c in cands for x in c["s1"]] == pytest.approx(s1, abs=1e-5)
            assert [x for c in cands for x in c["s2"]] == pytest.approx(s2, abs=1e-5)
            m = smooth_second_order([x for c in cands for x in c["s2"]])
            assert [x for c in cands for x in c["m"]] == pytest.approx(m, abs=1e-5)
            for c in cands:
                assert c["values"] == pytest.approx(
                    sentence_values(c["attention"], c["m"]), rel=1e-3, abs=1e-5
                )
            trig = step.triggers[0]
            if trig.fired_at is None:
                assert all(s <= 0.5 for s in trig.scores)
                continue
            fired += 1
            cand = flagged(step)
            k = next(i for i, v in enumerate(cand["values"]) if v > 0.5)
            assert step.signals["flagged_word"] == cand["words"][k]
            # keep: the draft up to the flagged word (ETC keeps the start of the sentence), then the regeneration
            before = step.signals["kept_before"]
            assert step.draft.startswith(before)
            assert step.draft[len(before) :].lstrip().startswith(cand["words"][k])
            assert step.kept.startswith(before)
            words = [w["word"] for w in step.signals["query_words"]]
            assert 0 < len(words) <= 35 and step.queries == [" ".join(words)]
            source = " ".join([run.question, run.trace.prediction, step.draft])
            assert all(w in source for w in words)
    assert fired >= 1


# -- FL-RAG / FS-RAG ------------------------------------------------------------------------------------------


@pytest.mark.model
def test_dtr_random_control_differs_from_dtr_only_in_decisions(
    build: Any, hotpot_dev: list[dict], tmp_path: Path
) -> None:
    """configs/world/hotpotqa/dtr.yaml's parameters (dual path over the pipeline's BM25, AIS on the fly) against
    its control, dtr-random.yaml. DTR at a threshold every answer reaches (0.001 on this model) against the
    control at p = 1: both retrieve for every question, so the direct answer, the pseudo-passage, the queries,
    passages, AIS selection, every prompt, the answer and the counts must be the same. DTR never firing (threshold
    infinity) against p = 0: both answer every question with the direct answer. Then p from a DTR run's rate."""
    from quco.eval.score.identity import compare_question

    dtr_config, control_config = (
        CONFIGS / "world" / "hotpotqa" / "dtr.yaml",
        CONFIGS / "world" / "hotpotqa" / "dtr-random.yaml",
    )
    short = {"pseudo_max_new_tokens": 24, "direct_max_new_tokens": 8, "answer_max_new_tokens": 8}
    pairs = [
        (
            build("dtr", short | {"uncertainty_threshold": 0.001}, config=dtr_config),
            build("dtr-random", short | {"p": 1.0}, config=control_config),
        ),
        (
            build("dtr", short | {"uncertainty_threshold": math.inf}, config=dtr_config),
            build("dtr-random", short | {"p": 0.0}, config=control_config),
        ),
    ]
    fired = []
    for (dtr, control), decision in zip(pairs, ("retrieve", "skip"), strict=True):
        for row in hotpot_dev[:2]:
            a, b = dtr.answer(row["question"]), control.answer(row["question"])
            assert a.log.prompts == b.log.prompts and a.log.prompts
            assert a.log.queries == b.log.queries and a.log.passages == b.log.passages
            differences, _, steps = compare_question(
                Record.from_dict({"trace": a.trace.to_dict()}),
                Record.from_dict({"trace": b.trace.to_dict()}),
                ignore=("triggers", "reason", "method", "answer_nll"),  # the evidence: an NLL, a draw
            )
            x, y = a.trace.steps[0], b.trace.steps[0]
            assert x.decision == y.decision == decision
            # the evidence differs (an NLL against a draw); every other signal is the same
            assert [d for d in differences if "answer_nll" not in str(d)] == [] and steps == len(
                a.trace.steps
            )
            assert x.signals["direct_answer"] == y.signals["direct_answer"]
            assert (x.triggers[0].signal, y.triggers[0].signal) == ("answer_nll", "draw")
            assert y.signals["answer_nll"] == pytest.approx(x.triggers[0].scores[0], abs=1e-5)
            assert a.trace.counters.llm_calls == b.trace.counters.llm_calls
            assert (
                a.trace.counters.retrievals
                == b.trace.counters.retrievals
                == (2 if decision == "retrieve" else 0)
            )
            assert a.trace.prediction == b.trace.prediction
            fired.append(a)
    # p from a DTR run: the share of its questions that retrieved (here one of two)
    results = tmp_path / "results.jsonl"
    mixed = [fired[0].trace, fired[-1].trace]
    results.write_text(records_file(mixed))
    resolved, rates = matched_config(
        load_config(control_config, overrides={"params.match_run": str(results)})
    )
    assert rates == {"p": 0.5} and resolved.params["p"] == 0.5 and "match_run" not in resolved.params


@pytest.mark.parametrize("method", ["fl-rag", "fs-rag"])
def test_fixed_schedule_retrieves_after_every_unit(method: str, build: Any, hotpot_dev: list[dict]) -> None:
    bundle = build(method, {"fix_length": 16} if method == "fl-rag" else {})
    splitter = bundle.pipe.parts.text.splitter
    for run in answer_all(bundle, hotpot_dev[:2]):
        check_common(run)
        first = run.trace.steps[0]
        assert first.stage == "before" and first.queries == [run.question]
        steps = generate_steps(run)
        for step in steps:
            final = step.triggers[0].detail.get("final", False)
            assert (step.decision == "retrieve") == (not final)
            if not final:
                assert step.queries == [step.draft]  # the unit just written is the next query
            assert step.kept == step.draft
            # a schedule reads nothing, so `quco detection` finds no judged draft here
            assert [r.rule for r in step.triggers] == ["always"]
            if method == "fs-rag":
                assert len(splitter.split(step.draft)) == 1
        if method == "fl-rag":
            assert all(n <= 16 for n in run.log.max_new_tokens)
        # no retrieval after the last unit: nothing would use it
        if steps and steps[-1].triggers[0].detail.get("final"):
            assert run.trace.counters.retrievals == 1 + sum(s.decision == "retrieve" for s in steps)


# -- random trigger -------------------------------------------------------------------------------------------


def test_random_trigger_draws_are_seeded_per_question(
    build: Any, hotpot_dev: list[dict], flare_runs: list[Run], tmp_path: Path
) -> None:
    bundle = build("random", {"p": 0.5, "seed": 3})
    runs = answer_all(bundle, hotpot_dev[:2])
    for run in runs:
        check_common(run)
        seen = 0
        for step in generate_steps(run):
            trig = step.triggers[0]
            idx = trig.detail["candidates"]
            assert idx == list(range(seen, seen + len(idx)))  # candidate points counted over the question
            assert trig.scores == [round(uniform_draw(3, run.question, i), 6) for i in idx]
            at = trig.fired_at
            seen += at + 1 if at is not None else len(idx)
            if at is not None:
                assert trig.scores[at] < 0.5 and all(s >= 0.5 for s in trig.scores[:at])
                sentence = step.signals["flagged_sentence"]
                assert sentence in step.draft and step.queries == [sentence]
    # the same question gives the same draws and decisions, whatever ran before it
    again = bundle.answer(runs[0].question)
    assert [(s.signals, s.triggers) for s in again.trace.steps] == [
        (s.signals, s.triggers) for s in runs[0].trace.steps
    ]
    # p from another run's observed retrieval rate
    results = tmp_path / "results.jsonl"
    results.write_text(records_file([r.trace for r in flare_runs]))
    resolved, rates = matched_config(
        load_config(overrides={"params": {"match_run": str(results)}}, method="random")
    )
    matched = build("random", resolved.params)
    rate = retrieval_rate(load_traces(results))
    assert matched.pipe.method.p == rates["p"] == rate.per_candidate and 0 < rate.per_candidate <= 1


def test_quco_random_control_differs_from_quco_only_in_decisions(build: Any, hotpot_dev: list[dict]) -> None:
    """configs/hotpotqa/quco.yaml with its thresholds at infinity (a question with an entity retrieves, every claim
    is flagged) and its control, configs/hotpotqa/quco-random.yaml, with both chances at 1, on the query and
    passage rules of the calibrated rows (question + head + relation, merged): both fire on the same questions and
    sentences, so everything but the decisions' evidence must be the same: every prompt the model reads, drafts,
    the entities and claims judged, the queries (the question at stage 1; one per flagged claim at stage 2),
    the passages, regenerations, kept text, answer, LLM calls and tokens by role, retrievals. Only QuCo-RAG
    looks counts up."""
    from quco.eval.score.identity import compare_question

    options = {"sentence_query": "question_head_relation", "stage2_passages": "merge"}
    infinite = {"entity_threshold": math.inf, "cooccurrence_threshold": math.inf, "head_threshold": math.inf}
    quco = build("quco", options | infinite, config=CONFIGS / "hotpotqa" / "quco.yaml")
    chances = {"p_stage1": 1.0, "p_claim": 1.0, "seed": 5}
    control = build("quco-random", options | chances, config=CONFIGS / "hotpotqa" / "quco-random.yaml")
    same_sentence = stage1 = 0
    for row in hotpot_dev[:2]:
        question = row["question"]
        a, b = quco.answer(question), control.answer(question)
        check_common(a)
        check_common(b)
        assert a.log.prompts == b.log.prompts and a.log.prompts  # the same prompts, passages included
        assert a.log.queries == b.log.queries and a.log.passages == b.log.passages
        differences, _, steps = compare_question(
            Record.from_dict({"trace": a.trace.to_dict()}),
            Record.from_dict({"trace": b.trace.to_dict()}),
            ignore=("triggers", "signals", "reason", "method", "corpus_queries", "corpus_unknown"),
        )
        assert differences == [] and steps == len(a.trace.steps)
        # stage 1: the same entities; both retrieve with the question when there is one, neither when there is none
        x, y = a.trace.steps[0], b.trace.steps[0]
        entities = x.signals["entities"]
        assert x.stage == y.stage == "before" and entities == y.signals["entities"]
        assert x.decision == y.decision == ("retrieve" if entities else "skip")
        if x.decision == "retrieve":
            assert x.queries == y.queries == [question]
            stage1 += 1
        claims_judged = 0
        for x, y in zip(generate_steps(a), generate_steps(b), strict=True):
            judged = [[c["triplet"] for c in s.get("claims", [])] for s in x.signals["sentences"]]
            assert judged == [[c["triplet"] for c in s.get("claims", [])] for s in y.signals["sentences"]]
            claims_judged += sum(map(len, judged))
        assert (a.trace.counters.corpus_queries > 0) == (claims_judged > 0 or bool(entities))
        assert b.trace.counters.corpus_queries == 0
        for x, y in zip(generate_steps(a), generate_steps(b), strict=True):
            if x.decision != "retrieve":
                continue
            sentence = x.signals["flagged_sentence"]
            assert y.signals["flagged_sentence"] == sentence
            claims = next(s["claims"] for s in y.signals["sentences"] if s["sentence"] == sentence)
            assert claims and all(c["flagged"] for c in claims)
            heads = list(dict.fromkeys(f"{question} {c['triplet'][0]} {c['triplet'][1]}" for c in claims))
            assert x.queries == y.queries == heads  # one query per flagged claim, QuCo-RAG's form
            same_sentence += 1
    assert stage1 >= 1, "stage 1 retrieved for no question, so it was not compared"
    assert same_sentence >= 1, "no sentence fired, so stage 2 was not compared"


def test_random_trigger_with_the_black_box_loop(build: Any, hotpot_dev: list[dict]) -> None:
    """unit: sentence = one check per drafted sentence, the temporary sentence dropped and searched with."""
    bundle = build("random", {"p": 0.5, "seed": 1, "unit": "sentence", "sentence_tokens": 16})
    assert bundle.pipe.method.shape.unit == "sentence" and bundle.pipe.method.shape.draft_docs == "latest"
    fired = 0
    for run in answer_all(bundle, hotpot_dev[:2]):
        check_common(run)
        steps = generate_steps(run)
        for i, step in enumerate(steps):
            trig = step.triggers[0]
            assert trig.detail["candidates"] == [i]  # one candidate per check, every sentence (answer too)
            assert trig.scores == [round(uniform_draw(1, run.question, i), 6)]
            if step.decision == "retrieve":
                fired += 1
                assert trig.scores[0] < 0.5 and step.queries == [step.draft]
                assert step.kept.split()[:1] == step.regenerated.split()[:1]  # the regenerated sentence
            else:
                assert trig.scores[0] >= 0.5 and step.kept == step.draft
        assert bundle.log.max_new_tokens and max(bundle.log.max_new_tokens) <= 16
    assert fired > 0


# -- SeaKR ----------------------------------------------------------------------------------------------------


def test_seakr_eigenscore_trigger_sure_word_query_and_reranking(build: Any, hotpot_dev: list[dict]) -> None:
    n = 2
    bundle = build("seakr", {"samples": n, "max_docs": 1, "top_k": 2})
    assert bundle.pipe.method.layer == 9  # the middle of Gemma-3-270m's 18 layers
    run = bundle.answer(hotpot_dev[0]["question"])
    check_common(run)
    final = run.trace.steps[-1]
    assert final.stage == "after"  # the final self-aware reasoning: two answers, the less uncertain kept
    chain, passages = final.signals["chain"], final.signals["passages"]
    kept = chain if final.signals["kept"] == "chain" else passages
    assert kept["eigen_score"] == min(c["eigen_score"] for c in (chain, passages) if c["answer"])
    assert run.trace.prediction == final.kept and run.trace.prediction.endswith(
        f"So the answer is {kept['answer']}."
    )
    estimates = 2
    for step in generate_steps(run):
        sig = step.signals
        if sig.get("answer"):
            assert step.triggers[0].scores == []
            continue
        estimates += 1
        eig = sig["eigen_score"]
        assert math.isfinite(eig) and step.triggers[0].scores == [eig]
        assert (step.decision == "retrieve") == (eig > -6.0)
        assert len(sig["samples"]) <= n
        if step.decision != "retrieve":
            continue
        words = step.queries[0].split()
        assert words and all(w in step.draft or w in run.question for w in words)
        sure = {w["word"] for w in sig["query_words"] if w["sure"]}
        assert set(words) <= sure | set(run.question.replace("?", " ").split())
        reads = sig["reads"]
        estimates += len(reads)
        keyed = [(r["eigen_score"] if r["step"] else np.inf, i) for i, r in enumerate(reads)]
        best = reads[min(keyed)[1]]
        assert sig["chosen"] == best["id"] and step.kept == best["step"]
        assert step.regenerated == ""  # the re-ranking already wrote the step
        assert 0 < len(reads) <= 2  # top_k passages, each read alone
        assert run.trace.stop_reason in ("check_stop", "answer")  # max_docs = 1 passage chosen
    # every estimate sampled n continuations and read the state of each non-empty one
    assert run.trace.counters.llm_calls.get("sampler", 0) == n * estimates
    assert 0 < run.trace.counters.llm_calls.get("probe", 0) <= n * estimates
