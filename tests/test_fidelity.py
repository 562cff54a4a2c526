"""The published protocols where they change results: token budgets, the answer protocol, QuCo-RAG's loop,
DRAGIN's answer sentence, cost columns, answer extraction, timing, QuCo-RAG as a first-class trigger and the
same-prompt ablation.

Control flow runs on a scripted generator over real retrieval, corpus statistics and text tools (as in
``test_engine.py``); the real default model runs the same loop paths in ``test_integration.py`` and
``test_eval_integration.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from quco.answer import PUBLISHED, STRICT, cut_prediction, extract_answer, wants_reprompt
from quco.config import load_config
from quco.engine.context import RunContext
from quco.errors import ConfigError
from quco.eval.run.matched import matched_config
from quco.llm.base import Generation
from quco.methods import method_class
from quco.methods.quco import CHATTY_PHRASES, NEGATION_PHRASES, QuCoRAG
from quco.trace import Trace
from test_engine import QUESTION, ScriptedGenerator, build_real_parts, make_pipeline

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.fixture(scope="module")
def real_parts(tmp_path_factory: pytest.TempPathFactory, small_hotpot_corpus: Path):  # noqa: ANN201
    return build_real_parts(tmp_path_factory.mktemp("idx"), small_hotpot_corpus)


@dataclass
class BudgetGenerator(ScriptedGenerator):
    """A scripted generator whose texts end by length (so the loop goes on), recording each call's budget."""

    budgets: list[int] = field(default_factory=list)
    stops: list[list[str]] = field(default_factory=list)

    def generate(
        self, prompt: str, *, max_new_tokens: int, stop=(), n: int = 1, **kw: object
    ) -> list[Generation]:
        self.budgets.append(max_new_tokens)
        self.stops.append(list(stop or []))
        out = super().generate(prompt, max_new_tokens=max_new_tokens, stop=stop, n=n, **kw)
        out[0].finish_reason = "length"
        return out


def _with(pipe, gen: ScriptedGenerator, tokens: int | None = None, **generation: object):  # noqa: ANN001, ANN202
    """The pipeline on ``gen``, with ``generation.max_new_tokens`` (``tokens``) and other settings changed."""
    pipe.parts.generator = gen
    cfg = pipe.parts.config
    update = dict(generation) | ({"max_new_tokens": tokens} if tokens else {})
    pipe.parts.config = cfg.model_copy(update={"generation": cfg.generation.model_copy(update=update)})
    return pipe


NO_FLAGS = {"stage1": False, "cooccurrence_threshold": 0, "head_threshold": 0}  # stage 2 runs, flags nothing
FACTS = ["Scott Derrickson is an American director.", "Ed Wood was an American filmmaker."]


# -- 1. the token budget ------------------------------------------------------------------------------------


def test_token_budget_is_per_call_as_published_and_per_prediction_on_request(real_parts) -> None:
    """Published (DRAGIN/QuCo-RAG): every call may write generate_max_length tokens, and the loop stops once the
    prediction is longer than that. ``generation.budget: prediction`` shares the budget over the prediction."""
    pipe, _ = make_pipeline(real_parts, "quco", [], **NO_FLAGS)
    gen = BudgetGenerator(list(FACTS))
    trace = _with(pipe, gen, tokens=10).answer(QUESTION)
    assert gen.budgets == [10, 10]  # the second call gets the whole budget again
    assert trace.stop_reason == "token_budget"  # 6 + 6 words > 10
    pipe, _ = make_pipeline(real_parts, "quco", [], **NO_FLAGS)
    gen = BudgetGenerator(list(FACTS))
    _with(pipe, gen, 10, budget="prediction").answer(QUESTION)
    assert gen.budgets == [10, 4]  # what is left of the prediction's budget


def test_two_wiki_configs_give_the_published_128_tokens_per_call() -> None:
    paths = [
        p for d in ("", "eval", "world") for p in sorted((CONFIGS / d / "2wikimultihopqa").glob("*.yaml"))
    ]
    assert len(paths) >= 30
    for path in paths:
        cfg = load_config(path)
        assert cfg.generation.max_new_tokens == 128, path.name
        assert "64 tokens" not in path.read_text("utf-8"), path.name
        shape = method_class(cfg.method)(cfg.params).shape
        # the black-box loop (and its control, unit: sentence) budgets the whole prediction
        sentence_loop = cfg.method == "blackbox" or cfg.params.get("unit") == "sentence"
        expected = "prediction" if cfg.method == "seakr" or sentence_loop else "per_call"
        if cfg.method in ("seakr", "random", "dtr"):  # no published 2Wiki settings of theirs
            assert "not a published setting" in path.read_text("utf-8"), path.name
        assert (cfg.generation.budget or shape.budget) == expected, path.name


# -- 2. the answer protocol ---------------------------------------------------------------------------------


def test_published_protocol_rules() -> None:
    assert cut_prediction("Paris is big. Question: what?", PUBLISHED.cut_at) == "Paris is big. "
    assert cut_prediction("Question: what? Paris.", PUBLISHED.cut_at) == "Question: what? Paris."  # not at 0
    assert cut_prediction("So the answer is X. Note: y", PUBLISHED.cut_at) == "So the answer is X. "
    assert not wants_reprompt("So the answer is Paris.", PUBLISHED)
    assert wants_reprompt("Paris is the capital.", PUBLISHED)
    assert wants_reprompt("So the Answer is Paris.", PUBLISHED)  # "answer is", case-sensitive, as published
    assert wants_reprompt("Paris. Question: so the answer is Rome", PUBLISHED)  # the answer was cut away
    assert not wants_reprompt("Paris is the capital.", STRICT)
    assert PUBLISHED.max_new_tokens == 128


def test_published_protocol_reprompts_a_missing_answer_as_a_counted_step(real_parts) -> None:
    pipe, _ = make_pipeline(real_parts, "wo-rag", [])
    gen = BudgetGenerator(["Scott Derrickson was born in Denver.", "Denver."])
    trace = _with(pipe, gen).answer(QUESTION, protocol=PUBLISHED)
    after = trace.steps[-1]
    assert (after.stage, after.decision) == ("after", "reprompt")
    assert gen.budgets[-1] == 128 and gen.stops[-1] == ["Question:", "Note:"]
    assert gen.prompts[-1].endswith("Answer: Scott Derrickson was born in Denver. So the answer is")
    assert trace.prediction == "Scott Derrickson was born in Denver. So the answer is Denver."
    assert trace.answer == "Denver" and trace.counters.llm_calls == {"main": 1, "answer_reprompt": 1}
    # a stated answer is only cut where the published evaluation cuts it; no call is made
    pipe, _ = make_pipeline(real_parts, "wo-rag", [])
    gen = BudgetGenerator(["So the answer is Paris Note: it is big."])
    trace = _with(pipe, gen).answer(QUESTION, protocol=PUBLISHED)
    assert trace.steps[-1].decision == "cut" and trace.prediction == "So the answer is Paris "
    assert trace.counters.llm_calls == {"main": 1}


def test_runner_defaults_to_the_published_protocol_on_its_datasets(tmp_path: Path) -> None:
    from quco.errors import QucoError
    from quco.eval.run.runner import EvalOptions, Questions, run_eval
    from quco.eval.runs.store import load_run

    cfg = load_config(CONFIGS / "hotpotqa/sr-rag.yaml")
    run_eval(cfg, "hotpotqa", Questions(limit=0), EvalOptions(out_dir=tmp_path / "h", progress=False))
    assert load_run(tmp_path / "h").config.identity["answer_protocol"] == {
        "name": "published",
        "max_new_tokens": 128,
    }
    run_eval(cfg, "pubmedqa", Questions(limit=0), EvalOptions(out_dir=tmp_path / "p", progress=False))
    assert load_run(tmp_path / "p").config.identity["answer_protocol"] == {"name": "strict"}
    run_eval(
        cfg,
        "hotpotqa",
        Questions(limit=0),
        EvalOptions(out_dir=tmp_path / "s", progress=False, protocol="strict"),
    )
    assert load_run(tmp_path / "s").config.identity["answer_protocol"] == {"name": "strict"}
    with pytest.raises(QucoError, match="strict run"):
        run_eval(
            cfg,
            "hotpotqa",
            Questions(limit=0),
            EvalOptions(out_dir=tmp_path / "x", protocol="strict", traces_from=tmp_path / "s"),
        )
    with pytest.raises(QucoError, match="made with --strict"):
        run_eval(
            cfg,
            "hotpotqa",
            Questions(limit=1),
            EvalOptions(out_dir=tmp_path / "y", traces_from=tmp_path / "h"),
        )


# -- 3. QuCo-RAG's loop as published ------------------------------------------------------------------------


def test_quco_drafts_carry_no_passages_after_the_first_prompt(real_parts) -> None:
    for carry, expected in ((False, [True, False]), (True, [True, True])):
        pipe, _ = make_pipeline(
            real_parts, "quco", [], entity_threshold=1e12, cooccurrence_threshold=0, head_threshold=0,
            carry_passages=carry,
        )  # fmt: skip
        gen = BudgetGenerator([FACTS[0], "So the answer is yes."])
        trace = _with(pipe, gen).answer(QUESTION)
        assert trace.steps[0].decision == "retrieve"
        assert ["Background passages" in p for p in gen.prompts] == expected


def test_quco_drops_a_negation_sentence_and_goes_on(real_parts) -> None:
    draft = f"{FACTS[0]} The text does not mention Ed Wood. Ed Wood was a filmmaker."
    pipe, _ = make_pipeline(real_parts, "quco", [], **NO_FLAGS)
    gen = BudgetGenerator([draft, "So the answer is yes."])
    trace = _with(pipe, gen).answer(QUESTION)
    assert trace.steps[0].kept == FACTS[0]  # the negation and what follows it are dropped
    assert gen.prompts[1].endswith(f"Answer: {FACTS[0]}")  # the outer loop goes on from the kept text
    assert trace.stop_reason == "answer" and trace.prediction == f"{FACTS[0]} So the answer is yes."
    pipe, _ = make_pipeline(real_parts, "quco", [], negation_stops=True, **NO_FLAGS)
    trace = _with(pipe, BudgetGenerator([draft])).answer(QUESTION)
    assert trace.stop_reason == "check_stop" and trace.prediction == FACTS[0]


def test_quco_phrase_lists_and_case_are_the_published_ones() -> None:
    assert (
        len(CHATTY_PHRASES) == 14
        and "of course" in CHATTY_PHRASES
        and "i hope this helps" not in CHATTY_PHRASES
    )
    assert "No information" in NEGATION_PHRASES
    quco = QuCoRAG()
    assert quco._has("No information is given.", NEGATION_PHRASES)
    assert not quco._has("There is no information on him.", NEGATION_PHRASES)  # case-sensitive
    assert not quco._has("Does not matter.", NEGATION_PHRASES)
    assert not quco._has("The answer is yes.", ("the answer is",))
    assert QuCoRAG({"case_sensitive": False})._has("There is no information on him.", NEGATION_PHRASES)
    # chatty sentences: matched in any case, dropped from every generation
    assert quco.clean(["Of course, here it is.", "Paris is in France.", "I hope this helps."]) == [
        "Paris is in France.",
        "I hope this helps.",
    ]


def test_quco_filters_chatty_sentences_from_a_regeneration(real_parts) -> None:
    draft = "Scott Derrickson was born in Stockholm. So the answer is no."
    regenerated = "Sure, here is the fact. Scott Derrickson was born in Denver. So the answer is yes."
    pipe, gen = make_pipeline(real_parts, "quco", [draft, regenerated], stage1=False)
    trace = pipe.answer(QUESTION)
    assert trace.steps[0].decision == "retrieve"
    # the chatty first sentence is dropped; the next one is kept, with the answer that follows it
    assert trace.steps[0].kept == "Scott Derrickson was born in Denver. So the answer is yes."


def test_quco_stage_two_query_and_passage_options(real_parts) -> None:
    """Ours, off by default: the question before "head relation", and new passages merged before the old."""
    draft = "Scott Derrickson was born in Stockholm. So the answer is no."
    regenerated = "Scott Derrickson was born in Denver. So the answer is yes."
    runs = {}
    for query, passages in (
        ("head_relation", "replace"),
        ("question_head_relation", "replace"),
        ("head_relation", "merge"),
    ):
        pipe, gen = make_pipeline(
            real_parts, "quco", [draft, regenerated], entity_threshold=1e12,
            sentence_query=query, stage2_passages=passages,
        )  # fmt: skip
        trace = pipe.answer(QUESTION)
        before, step = trace.steps[0], trace.steps[1]
        assert before.decision == "retrieve" and step.decision == "retrieve"
        runs[query, passages] = (before, step, gen.prompts[-1])
    _, step, _ = runs["head_relation", "replace"]
    assert step.queries == ["Scott Derrickson born in"]
    _, step, _ = runs["question_head_relation", "replace"]
    assert step.queries == [f"{QUESTION} Scott Derrickson born in"]
    for passages in ("replace", "merge"):
        before, step, regen = runs["head_relation", passages]
        new_ids = [r.id for r in step.retrieved]
        old_ids = [r.id for r in before.retrieved if r.id not in new_ids]
        assert old_ids
        listed = regen.split("Background passages")[-1].split("Answer the question below")[0]
        shown = sum(f"[{i}] " in listed for i in range(1, 20))
        # replace: the regeneration reads only the stage-2 passages; merge: the question's ones after them
        assert shown == len(new_ids) + (len(old_ids) if passages == "merge" else 0)


def test_quco_stage_one_without_an_entity_does_not_retrieve(real_parts) -> None:
    """Published: no entity (or an extraction that fails) leaves the question without stage-1 retrieval."""
    pipe, gen = make_pipeline(real_parts, "quco", ["So the answer is yes."])
    trace = pipe.answer("what is it?")
    before = trace.steps[0]
    assert before.signals["entities"] == [] and before.decision == "skip" and not before.retrieved
    assert before.triggers[0].scores == [None] and not before.triggers[0].fired
    assert "Background passages" not in gen.prompts[0] and trace.counters.retrievals == 0


# -- 4. DRAGIN scores the sentence that states the answer ---------------------------------------------------


def test_dragin_and_its_random_control_check_the_answer_sentence() -> None:
    from quco.signals.spans import candidate_sentences

    assert method_class("dragin")().params.scan_answer_sentence is True
    assert method_class("random")().params.scan_answer_sentence is True
    sentences = ["Paris is big.", "So the answer is Paris."]
    assert [s for _, s, _ in candidate_sentences(sentences, [[0], [1]], stop_at_answer=False)] == sentences


# -- 6. bugs found by reading -------------------------------------------------------------------------------


def test_displayed_answer_keeps_initials_and_abbreviations() -> None:
    assert extract_answer("So the answer is John F. Kennedy.") == "John F. Kennedy"
    assert extract_answer("So the answer is John F. Kennedy. He was president.") == "John F. Kennedy"
    assert extract_answer("the answer is St. Louis, Missouri. Next") == "St. Louis, Missouri"
    assert extract_answer("So the answer is 1.5 million.") == "1.5 million"
    assert extract_answer("So the answer is U.S. Navy.") == "U.S. Navy"
    assert extract_answer("So the answer is Paris.\nQuestion: x") == "Paris"


def test_nested_timers_count_each_second_once(real_parts, monkeypatch: pytest.MonkeyPatch) -> None:
    """An LLM extractor's call inside "extraction" is LLM time only: the components sum to the wall time."""
    import quco.engine.context as context

    clock = iter([0.0, 1.0, 3.0, 3.5])  # extraction starts, llm starts, llm ends, extraction ends
    monkeypatch.setattr(context.time, "perf_counter", lambda: next(clock))
    pipe, _ = make_pipeline(real_parts, "wo-rag", [])
    ctx = RunContext(parts=pipe.parts, trace=Trace(question="q", method="wo-rag"))
    with ctx.timed("extraction"), ctx.timed("llm"):
        pass
    assert ctx.trace.counters.seconds == {"llm": 2.0, "extraction": 1.5}


# -- 7. QuCo-RAG as a first-class trigger -------------------------------------------------------------------


def test_calibrate_quco_stage_one_from_its_records(real_parts, tmp_path: Path) -> None:
    from quco.eval.calibrate.search import calibrate, fire_rate, write_threshold

    pipe, _ = make_pipeline(real_parts, "quco", ["So the answer is yes."] * 2)
    result = calibrate(pipe, "hotpotqa", offset=0, limit=2, target="rate", rate=0.5, param="entity_threshold")
    assert result.param == "entity_threshold" and len(result.scores) == 2
    assert result.predicted_rate == fire_rate(result.scores, result.threshold, "below") == 0.5
    config = tmp_path / "quco.yaml"
    config.write_text("method: quco\nparams:\n  entity_threshold: 100000  # published\n", "utf-8")
    write_threshold(config, result.threshold, "calibrated", "entity_threshold")
    assert load_config(config).params["entity_threshold"] == result.threshold


def test_random_control_on_quco_loop_matched_per_stage(real_parts, tmp_path: Path) -> None:
    from quco.methods.quco_random import claim_rate, question_rate

    draft = "Scott Derrickson was born in Stockholm. So the answer is no."
    regenerated = (
        "Scott Derrickson was born in Denver. Ed Wood was an American filmmaker. So the answer is yes."
    )
    pipe, _ = make_pipeline(real_parts, "quco", [draft, regenerated])
    trace = pipe.answer(QUESTION)
    results = tmp_path / "quco" / "results.jsonl"
    results.parent.mkdir()
    results.write_text(json.dumps({"id": "1", "trace": trace.to_dict()}) + "\n", "utf-8")
    stage1, claims = question_rate([trace]), claim_rate([trace])
    assert (stage1.questions, stage1.without_entities) == (1, 0) and trace.steps[0].signals["entities"]
    judged = [
        c
        for s in trace.steps
        if s.stage == "generate"
        for x in s.signals["sentences"]
        for c in x.get("claims", [])
    ]
    assert claims.claims == len(judged) > 0 and claims.flagged == sum(c["flagged"] for c in judged)

    # the evaluation reads the matched run and builds the control with its rates; the method never reads it
    unresolved = real_parts[0].model_copy(
        update={"method": "quco-random", "params": {"match_run": str(results.parent), "seed": 3}}
    )
    resolved, rates = matched_config(unresolved)
    assert rates == {"p_stage1": stage1.per_question, "p_claim": claims.per_claim}
    assert "match_run" not in resolved.params and resolved.params["seed"] == 3
    with pytest.raises(ConfigError, match="match_run"):
        method_class("quco-random")(unresolved.params).setup(None)
    pipe, gen = make_pipeline(
        real_parts, "quco-random", ["Ed Wood was born in Poughkeepsie. So the answer is yes."] * 3,
        **resolved.params,
    )  # fmt: skip
    method = pipe.method
    assert (method.p1, method.p2) == (stage1.per_question, claims.per_claim)
    answered = pipe.answer(QUESTION)
    before = answered.steps[0]
    assert (before.triggers[0].signal, before.triggers[0].param, before.triggers[0].threshold) == (
        "draw",
        "p_stage1",
        method.p1,
    )
    assert answered.counters.corpus_queries == 0  # chance instead of the corpus
    for step in answered.steps[1:]:
        for record in step.triggers:
            assert record.param == "p_claim" and record.threshold == method.p2


def test_random_control_draws_only_for_questions_with_entities(real_parts) -> None:
    """Stage 1 draws only for a question in which QuCo-RAG's extractor finds an entity (QuCo-RAG cannot retrieve
    for one without), and the matched rate is over those questions."""
    from quco.methods.quco_random import question_rate

    bare = "is it so?"
    pipe, _ = make_pipeline(real_parts, "quco-random", ["So the answer is yes."], p_stage1=1.0, stage2=False)
    trace = pipe.answer(bare)
    before = trace.steps[0]
    assert before.signals["entities"] == [] and before.decision != "retrieve"
    assert before.triggers[0].scores == [None] and trace.counters.retrievals == 0
    pipe, _ = make_pipeline(real_parts, "quco-random", ["So the answer is yes."], p_stage1=1.0, stage2=False)
    fired = pipe.answer(QUESTION)
    assert fired.steps[0].signals["entities"] and fired.steps[0].queries == [QUESTION]
    quco, _ = make_pipeline(
        real_parts, "quco", ["So the answer is yes."] * 2, entity_threshold=1e12, stage2=False
    )
    runs = [quco.answer(bare), quco.answer(QUESTION)]
    assert [t.steps[0].decision == "retrieve" for t in runs] == [False, True]
    rate = question_rate(runs)
    assert (rate.questions, rate.fired, rate.without_entities, rate.per_question) == (1, 1, 1, 1.0)


def test_random_control_draws_only_for_claims_and_queries_as_quco(real_parts) -> None:
    """A sentence without a claim is never flagged, whatever the chance; a flagged sentence queries once per
    flagged claim, in QuCo-RAG's form; an old per-sentence chance is refused with what to do."""
    from quco.errors import ConfigError

    no_claim = "Thus, they are of the same kind. So the answer is yes."
    pipe, _ = make_pipeline(real_parts, "quco-random", [no_claim], stage1=False, p_claim=1.0)
    trace = pipe.answer(QUESTION)
    (step,) = [s for s in trace.steps if s.stage == "generate"]
    assert step.decision != "retrieve" and step.triggers[0].scores == [None]
    two = "Scott Derrickson was born in Denver and Ed Wood was born in Poughkeepsie. So the answer is yes."
    pipe, _ = make_pipeline(
        real_parts, "quco-random", [two, "So the answer is yes."], stage1=False, p_claim=1.0,
        sentence_query="question_head_relation",
    )  # fmt: skip
    trace = pipe.answer(QUESTION)
    fired = next(s for s in trace.steps if s.decision == "retrieve")
    claims = fired.signals["sentences"][0]["claims"]
    assert len(claims) >= 2 and all(c["flagged"] for c in claims)
    assert fired.queries == list(
        dict.fromkeys(f"{QUESTION} {c['triplet'][0]} {c['triplet'][1]}" for c in claims)
    )
    with pytest.raises(ConfigError, match="p_stage2 .* was replaced by p_claim"):
        method_class("quco-random")({"p_stage2": 0.1})


# -- 8. the same-prompt ablation ----------------------------------------------------------------------------


def test_same_prompt_ablation_configs_swap_the_layouts(real_parts) -> None:
    for dataset in ("hotpotqa", "2wikimultihopqa"):
        quco = load_config(CONFIGS / dataset / "quco-baseline-prompt.yaml")
        sr = load_config(CONFIGS / dataset / "sr-rag-quco-prompt.yaml")
        assert (quco.method, quco.prompt.template) == ("quco", "baseline")
        assert (sr.method, sr.prompt.template) == ("sr-rag", "quco")
        base = load_config(CONFIGS / dataset / "quco.yaml")
        assert quco.model_copy(update={"prompt": base.prompt}) == base  # nothing else differs


def test_sweep_and_cost_matched_random_control_read_quco_records(real_parts, tmp_path: Path) -> None:
    """Stage 2's records replay at a new threshold, and the cost-matched random trigger matches a QuCo-RAG run."""
    from quco.signals.chance import retrieval_rate
    from quco.signals.replay import replay, sweep, trace_params

    draft = "Scott Derrickson was born in Stockholm. So the answer is no."
    regenerated = "Scott Derrickson was born in Denver. So the answer is yes."
    pipe, _ = make_pipeline(real_parts, "quco", [draft, regenerated], stage1=False)
    trace = pipe.answer(QUESTION)
    assert trace.steps[0].decision == "retrieve"
    assert set(trace_params([trace])) == {"cooccurrence_threshold", "head_threshold"}
    cooc = next(r for r in trace.steps[0].triggers if r.param == "cooccurrence_threshold")
    assert (cooc.signal, cooc.scores, cooc.fired_at) == (
        "min_cooccurrence",
        [0.0],
        0,
    )  # Stockholm: never together
    # at its own threshold the replay makes the recorded decision; at 0 nothing is below it and nothing fires
    assert [(d.fire, d.changed) for d in replay(trace, 1, "cooccurrence_threshold").decisions] == [
        (True, False)
    ]
    points = sweep([trace], [0, 1], "cooccurrence_threshold")
    assert [p.retrievals_per_question for p in points] == [0.0, 1.0]

    run = tmp_path / "quco"
    run.mkdir()
    (run / "results.jsonl").write_text(json.dumps({"id": "1", "trace": trace.to_dict()}) + "\n", "utf-8")
    unresolved = real_parts[0].model_copy(update={"method": "random", "params": {"match_run": str(run)}})
    resolved, _ = matched_config(unresolved)
    pipe, _ = make_pipeline(real_parts, "random", ["So the answer is yes."], **resolved.params)
    rate = retrieval_rate([trace])
    assert pipe.method.p == rate.per_candidate == 1.0  # one judged sentence, and it fired
