"""The extraction gold set, its scoring rules, chat templates, and the benchmark's code paths."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from quco.errors import ConfigError
from quco.llm.chat import ChatFormat, chat_format_of
from quco.retrieval.base import Passage
from quco.text import RuleEntityExtractor, RuleTripletExtractor, build_text, extractor_chat
from quco.text.scoring import ClaimScores, GoldClaim, GoldItem, matches, normalise, score_pairs, score_set

ROOT = Path(__file__).resolve().parents[1]
GOLD = ROOT / "bench" / "data" / "extraction_gold"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_extraction", ROOT / "bench" / "bench_extraction.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------------ gold


def test_gold_questions_are_well_formed_and_outside_the_evaluation_range(data_root: Path):
    rows = _jsonl(GOLD / "questions.jsonl")
    assert len(rows) == 100 and len({r["id"] for r in rows}) == 100
    assert sum(r["dataset"] == "hotpotqa" for r in rows) == 50
    assert sum(r["dataset"] == "2wikimultihopqa" for r in rows) == 50
    reserved = {
        json.loads(line)["_id"] for line in (data_root / "hotpotqa" / "hotpot_dev_0_300_unified.jsonl").open()
    }
    for r in rows:
        assert r["entities"], r["id"]  # every question names something to count
        for name in r["entities"] + r.get("optional", []):
            assert normalise(name) in normalise(r["question"]), (r["id"], name)  # written as in the question
        if r["dataset"] == "hotpotqa":
            assert r["id"].removeprefix("hotpotqa-") not in reserved  # never dev 0-299
    # The 2Wiki-style questions are ours, grounded in the 2Wiki paragraph corpus.
    import gzip

    with gzip.open(data_root / "2wikimultihopqa/corpus/hipporag_2wikimultihopqa_corpus.json.gz") as fh:
        corpus = json.load(fh)
    titles = {p["title"] for p in corpus}
    for r in rows:
        if r["dataset"] == "2wikimultihopqa":
            assert set(r["supporting_titles"]) <= titles, r["id"]


def test_gold_claims_are_well_formed():
    rows = _jsonl(GOLD / "claims.jsonl")
    questions = {r["id"] for r in _jsonl(GOLD / "questions.jsonl")}
    assert len(rows) == 100 and len({r["id"] for r in rows}) == 100
    tags = set()
    for r in rows:
        assert r["question_id"] in questions
        assert r["sentence"].strip()
        tags.update(r.get("tags", []))
        for c in r["claims"]:
            assert c["head"].strip() and isinstance(c["relation"], str)
            # A tail is copied from the sentence; a head is too unless it was resolved from the context.
            if c.get("tail"):
                assert normalise(c["tail"]) in normalise(r["sentence"]), (r["id"], c["tail"])
            if normalise(c["head"]) not in normalise(r["sentence"]):
                assert {"pronoun", "descriptive"} & set(r.get("tags", [])), (r["id"], c["head"])
    # The categories the set must cover.
    assert {"pronoun", "descriptive", "date", "nationality", "question", "no-fact", "hallucinated"} <= tags


# --------------------------------------------------------------------------------------------- scoring


def test_normalise_and_matching_rules():
    assert normalise("The Ape Man") == normalise("ape man") == "ape man"
    assert normalise("Venus (1929 Film)") == "venus"
    assert normalise("Puttin' On the Ritz") == "puttin on the ritz"
    assert normalise("Eliška Krásnohorská's") == "eliska krasnohorska"
    assert matches("Koch family", "Koch") is False
    assert matches("Koch", "Koch family", lenient=True)
    assert matches("Horse", "King Horse pub restaurant chain", lenient=True)
    assert not matches("Hor", "Horse", lenient=True)  # words, not characters
    assert matches("Emperor Nicholas II", ["Nicholas II", "Emperor Nicholas II"])


def test_score_set_counts_optional_names_neither_way():
    gold = [GoldItem("Croydon Airport")]
    optional = [GoldItem("England"), GoldItem("Europe")]
    pr = score_set(["England", "Croydon Airport", "Europe", "airport"], gold, optional)
    assert (pr.tp_pred, pr.n_pred, pr.tp_gold, pr.n_gold) == (1, 2, 1, 1)
    assert pr.precision == 0.5 and pr.recall == 1.0
    assert score_set([], gold).precision is None and score_set([], gold).recall == 0.0


def test_claim_scores_pairs_are_unordered_and_two_tuples_need_no_tail():
    gold = [
        GoldClaim(GoldItem("Bugsy"), "directed by", GoldItem("Barry Levinson")),
        GoldClaim(GoldItem("Golmaal Again"), "release date", None),
    ]
    pr = score_pairs([("Barry Levinson", "Bugsy"), ("Golmaal Again", None), ("Bugsy", "1991")], gold)
    assert (pr.tp_pred, pr.n_pred, pr.tp_gold, pr.n_gold) == (2, 3, 2, 2)
    scores = ClaimScores()
    scores.add_sentence([("Bugsy", "Barry Levinson")], gold[:1])
    scores.add_sentence([], [])
    scores.add_sentence([("Thus", "Bugsy")], [])
    assert scores.heads.recall == 1.0 and scores.tails.precision == 0.5
    assert (scores.empty_right, scores.empty_gold, scores.sentences) == (1, 2, 3)


# ------------------------------------------------------------------------------------------- retrieval


def test_a_passage_bears_on_a_claim_when_it_states_the_true_value():
    bench = _bench()
    claim = {"evidence": ["Barry Levinson"], "facts": ["April 6, 1942"]}
    right = Passage(
        id="1", title="Barry Levinson", text="Barry Levinson (born April 6, 1942) is an American filmmaker."
    )
    no_fact = Passage(id="2", title="Barry Levinson", text="Levinson's best-known works are Diner and Bugsy.")
    other = Passage(
        id="3", title="Bugsy", text="Bugsy is a 1991 film directed by Barry Levinson, born April 6, 1942."
    )
    assert bench.bears_on(right, claim)
    assert not bench.bears_on(no_fact, claim) and not bench.bears_on(other, claim)
    assert bench.bears_on(no_fact, {"evidence": ["Barry Levinson"]})  # no facts named: the article suffices
    assert bench.queries_for(
        [("Bugsy", "directed by", "Barry Levinson"), ("Bugsy", "directed by", None)], "s", "head_relation"
    ) == ["Bugsy directed by"]
    assert bench.queries_for([("Bugsy", "directed by", "Barry Levinson")], "s", "full_triplet") == [
        "Bugsy directed by Barry Levinson"
    ]


def test_stage2_retrieval_path_on_a_real_pool(
    small_hotpot_corpus: Path, hotpot_dev: list[dict], tmp_path: Path
):
    """The benchmark's retrieval column, end to end on a real BM25 index over real paragraphs."""
    from quco.config import RetrieverConfig
    from quco.retrieval import build_retriever

    bench = _bench()
    retriever = build_retriever(
        RetrieverConfig(corpus=str(small_hotpot_corpus), index_dir=str(tmp_path / "idx")), progress=False
    )
    row = hotpot_dev[0]  # "Were Scott Derrickson and Ed Wood of the same nationality?"
    sentence = {
        "id": "s1",
        "sentence": "Scott Derrickson is an American director.",
        "claims": [
            {"head": "Scott Derrickson", "relation": "nationality", "tail": "American",
             "evidence": ["Scott Derrickson"], "facts": ["American"]}
        ],
    }  # fmt: skip
    assert "Scott Derrickson" in {p["title"] for p in row["context_paragraphs"]}
    rs = bench.RetrievalScore()
    hit = bench.score_retrieval(retriever, 3, sentence, ["Scott Derrickson nationality"], rs)
    assert hit is True and (rs.sentences, rs.hits, rs.queries) == (1, 1, 1)
    miss = bench.score_retrieval(retriever, 3, {**sentence, "id": "s2"}, [], rs)
    assert miss is False and (rs.sentences, rs.hits) == (2, 1)
    assert bench.score_retrieval(retriever, 3, {**sentence, "claims": []}, ["x"], rs) is None


# ---------------------------------------------------------------------------------------------- chat


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_chat_format_renders_one_user_turn():
    chat = ChatFormat(CHATML, source="test")
    assert (
        chat("List the entities.")
        == "<|im_start|>user\nList the entities.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert chat.render("x", system="Be brief.").startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    with pytest.raises(ConfigError, match="failed"):
        ChatFormat("{{ raise_exception('no system role') }}")("x")
    with pytest.raises(ConfigError, match="compile"):
        ChatFormat("{% for %}")("x")


def test_extractor_chat_modes():
    assert extractor_chat(None, "auto") is None and extractor_chat(object(), "off") is None
    with pytest.raises(ConfigError, match="chat template"):
        extractor_chat(None, "on")
    with pytest.raises(ConfigError, match="auto, on or off"):
        extractor_chat(None, "sometimes")


# ------------------------------------------------------------------------------------------ real model


@pytest.mark.model
def test_llm_extractors_through_the_engine_with_the_real_default_model():
    """The LLM extractors' path on the real default model: build with the generator, call through the
    engine's counted llm_call, parse whatever comes back. (Gemma-3-270m's GGUF has no chat template, so
    auto mode sends the raw prompt; the evaluation model's template is exercised by the benchmark.)"""
    from quco.config import PipelineConfig, TextConfig
    from quco.engine.context import Parts, RunContext
    from quco.pipeline import shared_generator
    from quco.prompts import load_template
    from quco.trace import Trace

    config = PipelineConfig.model_validate({"generator": {"backend": "llamacpp", "max_context_tokens": 2048}})
    gen = shared_generator(config.generator)
    assert chat_format_of(gen) is None
    tools = build_text(
        TextConfig(entity_extractor="llm", triplet_extractor="llm", extractor_max_new_tokens=24),
        generator=gen,
    )
    assert tools.entities.chat is None
    parts = Parts(config=config, generator=gen, text=tools, exemplars=[], template=load_template("quco"))
    ctx = RunContext(parts, Trace(question="q", method="test"))
    ents = tools.entities.question_entities(
        "Who was born first, Sherry Hormann or Gus Triandos?", ctx.llm_call("extractor")
    )
    trips = tools.triplets.triplets(
        "Bugsy was directed by Barry Levinson.", ctx.llm_call("extractor"), context=""
    )
    assert isinstance(ents, list) and all(isinstance(e, str) for e in ents)
    assert isinstance(trips, list)
    c = ctx.trace.counters
    assert c.llm_calls == {"extractor": 2} and c.prompt_tokens["extractor"] > 200
    assert 0 < c.generated_tokens["extractor"] <= 48

    # The instruction and examples are declared shared: another question evaluates little more than its own
    # tokens, and gets what evaluating its whole prompt gives.
    q2 = "Which film came out first, Nosferatu or The Cabinet of Dr. Caligari?"
    sent, evaluated = c.prompt_tokens["extractor"], c.prompt_tokens_evaluated["extractor"]
    again = tools.entities.question_entities(q2, ctx.llm_call("extractor"))
    sent, evaluated = c.prompt_tokens["extractor"] - sent, c.prompt_tokens_evaluated["extractor"] - evaluated
    assert sent > 200 and evaluated < 40, (sent, evaluated)
    gen.reuse = False
    try:
        whole = tools.entities.question_entities(q2, ctx.llm_call("extractor"))
    finally:
        gen.reuse = True
    assert whole == again


# ------------------------------------------------------------------------------------------ rules


def test_rules_on_the_brief_examples():
    ents = RuleEntityExtractor()
    assert ents.question_entities(
        "Which film came out first, Romance on the Run or The Wilby Conspiracy?"
    ) == [
        "Romance on the Run",
        "The Wilby Conspiracy",
    ]
    assert ents.question_entities("When did the director of film A Romance of the Air die?") == [
        "A Romance of the Air"
    ]
    assert ents.question_entities("Who is the maternal grandfather of John III, Duke of Cleves?") == [
        "John III, Duke of Cleves"
    ]
    assert (
        ents.question_entities(
            'What Cantonese slang term can mean both "ghost man" and to refer to Westerners?'
        )[0]
        == "ghost man"
    )
    trips = RuleTripletExtractor()
    ctx = "When was the director of film Bugsy born? Bugsy was directed by Barry Levinson."
    assert [t.as_list() for t in trips.triplets("He was born on April 6, 1942.", context=ctx)] == [
        ["Barry Levinson", "born on", "April 6, 1942"]
    ]
    assert [t.as_list() for t in trips.triplets("The film was released in 1991.", context=ctx)] == [
        ["Bugsy", "released in", "1991"]
    ]
    assert trips.triplets("He was born on April 6, 1942.") == []  # no context: no guess
    assert ["Gus Meins", "nationality", "American"] in [
        t.as_list() for t in trips.triplets("Gus Meins was an American film director.")
    ]
