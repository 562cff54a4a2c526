"""The published prompts, assembled: QuCo-RAG's faithful preset and the baselines' published-prompt configs.

The expected texts are written out here from the published code (ZhishanQ/QuCo-RAG at 0bf02a4): ``src/data.py``
(the exemplar lists, the question line ``Question: {q}\\nAnswer:`` with HotpotQA's instruction prefix, a shot as
``{cot} So the answer is {answer}.``), ``src/generate_quco.py`` (``"Examples:\\n"``, each shot followed by one
newline, the passage block only when there are passages, then the instruction and the question line),
``src/generate_baselines.py`` (the same shots without the header; SR-RAG's passages under the ``llama-2``
template's "Context:"), and ``src/prompt_templates.json`` (the wording of ``new_prompt_v1`` and ``llama-2``).
Only the shots' questions and reasoning are read, from the shared copy of the exemplar lists.

The prompts are the ones that reach the real default model: the pipeline is built from the config files and its
generator records every prompt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import quco.pipeline
from quco.answer import PUBLISHED, STRICT, reprompt_tail
from quco.config import GeneratorConfig, load_config
from quco.datasets import load_dataset
from quco.pipeline import Pipeline, shared_generator

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[1]
WORLD = ROOT / "configs" / "world"

# src/prompt_templates.json, "new_prompt_v1" (its "initial" section; "hallucination" is the same)
V1_CONTEXT_HEADER = "\nBackground information that may be potentially useful in addressing your question:\n"
V1_INSTRUCTION = (
    "\nPlease answer the following questions. The format of the answers should be the same as the examples "
    "given before. Specifically, you need to think through the answer to this question step by step. Each "
    "sentence should only present a fact statement. Avoid using pronouns like He/She/It or possessive pronouns "
    'like His/Her/Its, but instead use specific names. At the end of your answer, use "So the answer is" to '
    "provide your answer.\n"
)
# src/data.py, HotpotQA.test_input_template
HOTPOTQA_PREFIX = "Answer the following question following the format of the example above.\n"


def shots(dataset_class: str, n: int, data_root: Path) -> str:
    """The first ``n`` published exemplars as the published ``BaseDataset.format`` writes them, one newline each."""
    data = json.loads((data_root / "fewshot" / "quco_rag_src_data_py_exemplars.json").read_text("utf-8"))
    records = data["classes"][dataset_class]["examplars"]["examplars"][:n]
    assert len(records) == n
    return "".join(
        f"Question: {r['question']}\nAnswer: {r['cot']} So the answer is {r['answer']}.\n" for r in records
    )


class PromptRecorder:
    """The real default model, keeping every prompt it is given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.prompts: list[str] = []
        self.name = inner.name
        self.capabilities = inner.capabilities
        self.max_context_tokens = inner.max_context_tokens

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def generate(self, prompt: str, **kwargs: Any) -> Any:
        self.prompts.append(str(prompt))
        return self.inner.generate(prompt, **kwargs)


@pytest.fixture(scope="module")
def small_world(tmp_path_factory: pytest.TempPathFactory, small_hotpot_corpus: Path) -> dict[str, Any]:
    """Overrides that put a realistic-world config on a small real corpus (the prompt does not depend on it)."""
    tmp = tmp_path_factory.mktemp("published")
    return {
        "retriever.corpus": str(small_hotpot_corpus),
        "retriever.index_dir": str(tmp / "bm25"),
        "corpus_stats.corpus": str(small_hotpot_corpus),
        "corpus_stats.index_dir": str(tmp / "infini"),
        "generation.max_new_tokens": 8,
        "generation.max_steps": 1,
    }


def prompts(
    config: Path, overrides: dict[str, Any], question: str, protocol: Any = STRICT
) -> tuple[list[str], Any]:
    """Every prompt the model got for ``question``, and the trace."""
    model = PromptRecorder(shared_generator(GeneratorConfig()))
    cfg = load_config(config, overrides=overrides)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(quco.pipeline, "shared_generator", lambda _cfg: model)
        pipe = Pipeline.from_config(cfg, progress=False)
    trace = pipe.answer(question, protocol)
    assert model.prompts, "the model was never called"
    return model.prompts, (pipe, trace)


def first_prompt(config: Path, overrides: dict[str, Any], question: str) -> tuple[str, Pipeline]:
    seen, (pipe, _) = prompts(config, overrides, question)
    return seen[0], pipe


def test_faithful_preset_first_prompt_hotpotqa(
    small_world: dict, hotpot_dev: list[dict], data_root: Path
) -> None:
    """HotpotQA dev 0 with stage 1 firing (threshold raised), so that the first prompt holds its passages."""
    question = hotpot_dev[0]["question"]
    overrides = small_world | {"params.entity_threshold": float("inf")}
    prompt, pipe = first_prompt(WORLD / "hotpotqa" / "quco-published.yaml", overrides, question)
    passages = pipe.parts.retriever.search([question], 3)[0]
    assert len(passages) == 3 and all(p.title and p.text for p in passages)
    expected = (
        "Examples:\n"
        + shots("HotpotQA", 8, data_root)
        + V1_CONTEXT_HEADER
        + "".join(f"[{i}] {p.text}\n" for i, p in enumerate(passages, start=1))  # text only, no title
        + "\n"
        + V1_INSTRUCTION
        + HOTPOTQA_PREFIX
        + f"Question: {question}\nAnswer:"
    )
    assert prompt == expected


def test_faithful_preset_first_prompt_2wikimultihopqa(small_world: dict, data_root: Path) -> None:
    """2WikiMultihopQA dev 0 with stage 1 off: no passages, the instruction still comes before the question."""
    question = load_dataset("2wikimultihopqa", limit=1)[0].question
    overrides = small_world | {"params.stage1": False}
    prompt, _ = first_prompt(WORLD / "2wikimultihopqa" / "quco-published.yaml", overrides, question)
    expected = (
        "Examples:\n"
        + shots("WikiMultiHopQA", 6, data_root)
        + V1_INSTRUCTION
        + f"Question: {question}\nAnswer:"  # no prefix on 2WikiMultihopQA
    )
    assert prompt == expected


def test_the_answer_re_prompt_keeps_the_published_layout(
    small_world: dict, hotpot_dev: list[dict], data_root: Path
) -> None:
    """A prediction without an answer is continued as the published evaluation does: the shots, each followed by
    one newline, the question line with its prefix, the prediction and "So the answer is"."""
    question = hotpot_dev[0]["question"]
    overrides = small_world | {"params.stage1": False, "params.stage2": False, "generation.max_new_tokens": 4}
    seen, (_, trace) = prompts(WORLD / "hotpotqa" / "quco-published.yaml", overrides, question, PUBLISHED)
    step = trace.steps[-1]
    assert (step.stage, step.decision) == ("after", "reprompt"), "the prediction stated an answer"
    tail = reprompt_tail(step.draft, PUBLISHED)
    expected = shots("HotpotQA", 8, data_root) + HOTPOTQA_PREFIX + f"Question: {question}\nAnswer: {tail}"
    assert seen[-1] == expected


def test_published_sr_rag_and_wo_rag_first_prompts(
    small_world: dict, hotpot_dev: list[dict], data_root: Path
) -> None:
    """SR-RAG and Wo-RAG of QuCo-RAG's baselines: the ``llama-2`` template, no "Examples:" header."""
    question = hotpot_dev[0]["question"]
    prompt, pipe = first_prompt(WORLD / "hotpotqa" / "sr-rag-published.yaml", small_world, question)
    passages = pipe.parts.retriever.search([question], 3)[0]
    expected = (
        shots("HotpotQA", 8, data_root)
        + "\nContext:\n"
        + "".join(f"[{i}] {p.text}\n" for i, p in enumerate(passages, start=1))
        + "\n"
        + HOTPOTQA_PREFIX
        + f"Question: {question}\nAnswer:"
    )
    assert prompt == expected
    question = load_dataset("2wikimultihopqa", limit=1)[0].question
    prompt, _ = first_prompt(WORLD / "2wikimultihopqa" / "wo-rag-published.yaml", small_world, question)
    assert prompt == shots("WikiMultiHopQA", 6, data_root) + f"Question: {question}\nAnswer:"


def test_published_sources_are_read_from_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from quco.errors import ConfigError
    from quco.prompts import load_exemplars, load_template

    assert len(load_exemplars("published:hotpotqa")) == 11
    assert len(load_exemplars("published:2wikimultihopqa")) == 8
    assert load_template("published:new_prompt_v3").initial.instruction.endswith(
        "Think the question step by step.\n"
    )
    with pytest.raises(ConfigError, match="unknown published exemplars 'musique'"):
        load_exemplars("published:musique")
    monkeypatch.setenv("QUCO_DATA_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="set QUCO_DATA_DIR"):
        load_template.__wrapped__("published:llama-2")


# -- the first prompts written out in full -----------------------------------------------------------------------
# Written from reading the published code, not from ours: src/data.py (the first 8 HotpotQA and 6 WikiMultiHopQA
# exemplars, a shot as "Question: {q}\nAnswer: {cot} So the answer is {answer}.", HotpotQA's test line with its
# instruction prefix), src/generate_quco.py (QuCo_RAG.inference: "Examples:\n", each shot followed by "\n", the
# "initial" section's context header, "[i] doc" lines and post_doc only when stage 1 retrieved, then its
# instruction, then the question line) and src/prompt_templates.json ("new_prompt_v1"). The HotpotQA exemplar
# answer "The Phantom Hour." keeps its own full stop, so that shot ends "..". The three passages are the ones of
# TINY_CORPUS below, in BM25's order, each as its text alone (the published retriever returns the "txt" field).

HOTPOTQA_DEV0_FIRST_PROMPT = (
    "Examples:\n"
    "Question: Jeremy Theobald and Christopher Nolan share what profession?\n"
    "Answer: Jeremy Theobald is an actor and producer. Christopher Nolan is a director, producer, and"
    " screenwriter. Therefore, they both share the profession of being a producer. So the answer is "
    "producer.\n"
    "Question: What film directed by Brian Patrick Butler was inspired by a film directed by F.W. "
    "Murnau?\n"
    "Answer: Brian Patrick Butler directed the film The Phantom Hour. The Phantom Hour was inspired "
    "by the films such as Nosferatu and The Cabinet of Dr. Caligari. Of these Nosferatu was directed "
    "by F.W. Murnau. So the answer is The Phantom Hour..\n"
    "Question: How many episodes were in the South Korean television series in which Ryu Hye-young "
    "played Bo-ra?\n"
    "Answer: The South Korean television series in which Ryu Hye-young played Bo-ra is Reply 1988. "
    "The number of episodes Reply 1988 has is 20. So the answer is 20.\n"
    "Question: Were Lonny and Allure both founded in the 1990s?\n"
    "Answer: Lonny (magazine) was founded in 2009. Allure (magazine) was founded in 1991. Thus, of "
    "the two, only Allure was founded in 1990s. So the answer is no.\n"
    'Question: Vertical Limit stars which actor who also played astronaut Alan Shepard in "The Right '
    'Stuff"?\n'
    'Answer: The actor who played astronaut Alan Shepard in "The Right Stuff" is Scott Glenn. The '
    "movie Vertical Limit also starred Scott Glenn. So the answer is Scott Glenn.\n"
    "Question: What was the 2014 population of the city where Lake Wales Medical Center is located?\n"
    "Answer: Lake Wales Medical Center is located in the city of Polk County, Florida. The population"
    " of Polk County in 2014 was 15,140. So the answer is 15,140.\n"
    "Question: Who was born first? Jan de Bont or Raoul Walsh?\n"
    "Answer: Jan de Bont was born on 22 October 1943. Raoul Walsh was born on March 11, 1887. Thus, "
    "Raoul Walsh was born the first. So the answer is Raoul Walsh.\n"
    "Question: In what country was Lost Gravity manufactured?\n"
    "Answer: The Lost Gravity (roller coaster) was manufactured by Mack Rides. Mack Rides is a German"
    " company. So the answer is Germany.\n"
    "\n"
    "Background information that may be potentially useful in addressing your question:\n"
    "[1] Scott Derrickson is an American director. The nationality of Scott Derrickson is American.\n"
    "[2] Ed Wood was an American filmmaker.\n"
    "[3] Nationality is a legal relationship between a person and a state.\n"
    "\n"
    "\n"
    "Please answer the following questions. The format of the answers should be the same as the "
    "examples given before. Specifically, you need to think through the answer to this question step "
    "by step. Each sentence should only present a fact statement. Avoid using pronouns like He/She/It"
    " or possessive pronouns like His/Her/Its, but instead use specific names. At the end of your "
    'answer, use "So the answer is" to provide your answer.\n'
    "Answer the following question following the format of the example above.\n"
    "Question: Were Scott Derrickson and Ed Wood of the same nationality?\n"
    "Answer:"
)

WIKI_DEV0_FIRST_PROMPT = (
    "Examples:\n"
    "Question: When did the director of film Hypocrite (Film) die?\n"
    "Answer: The film Hypocrite was directed by Miguel Morayta. Miguel Morayta died on 19 June 2013. "
    "So the answer is 19 June 2013.\n"
    "Question: Are both Kurram Garhi and Trojkrsti located in the same country?\n"
    "Answer: Kurram Garhi is located in the country of Pakistan. Trojkrsti is located in the country "
    "of Republic of Macedonia. Thus, they are not in the same country. So the answer is no.\n"
    "Question: Do director of film Coolie No. 1 (1995 Film) and director of film The Sensational "
    "Trial have the same nationality?\n"
    "Answer: Coolie No. 1 (1995 film) was directed by David Dhawan. The Sensational Trial was "
    "directed by Karl Freund. David Dhawan's nationality is India. Karl Freund's nationality is "
    "Germany. Thus, they do not have the same nationality. So the answer is no.\n"
    "Question: Who is Boraqchin (Wife Of Ögedei)'s father-in-law?\n"
    "Answer: Boraqchin is married to Ögedei Khan. Ögedei Khan's father is Genghis Khan. Thus, "
    "Boraqchin's father-in-law is Genghis Khan. So the answer is Genghis Khan.\n"
    "Question: Who was born first out of Martin Hodge and Ivania Martinich?\n"
    "Answer: Martin Hodge was born on 4 February 1959. Ivania Martinich was born on 25 July 1995. "
    "Thus, Martin Hodge was born first. So the answer is Martin Hodge.\n"
    "Question: When did the director of film Laughter In Hell die?\n"
    "Answer: The film Laughter In Hell was directed by Edward L. Cahn. Edward L. Cahn died on August "
    "25, 1963. So the answer is August 25, 1963.\n"
    "\n"
    "Please answer the following questions. The format of the answers should be the same as the "
    "examples given before. Specifically, you need to think through the answer to this question step "
    "by step. Each sentence should only present a fact statement. Avoid using pronouns like He/She/It"
    " or possessive pronouns like His/Her/Its, but instead use specific names. At the end of your "
    'answer, use "So the answer is" to provide your answer.\n'
    "Question: Who is the mother of the director of film Polish-Russian War (Film)?\n"
    "Answer:"
)

# HOTPOTQA_DEV0_FIRST_PROMPT without passages: the faithful preset's first prompt when stage 1 does not fire (as in
# the realistic world, where HotpotQA dev 0's mean entity rate, 440 per billion tokens, is above 21.7).
HOTPOTQA_PASSAGE_BLOCK = (
    "\n"
    "Background information that may be potentially useful in addressing your question:\n"
    "[1] Scott Derrickson is an American director. The nationality of Scott Derrickson is American.\n"
    "[2] Ed Wood was an American filmmaker.\n"
    "[3] Nationality is a legal relationship between a person and a state.\n"
    "\n"
)
TINY_CORPUS = [  # titles that appear nowhere in the texts, so a title in the prompt would show
    {"id": "a", "title": "Derrickson (film director)", "text": "Scott Derrickson is an American director. "
     "The nationality of Scott Derrickson is American."},
    {"id": "b", "title": "Wood (filmmaker)", "text": "Ed Wood was an American filmmaker."},
    {"id": "c", "title": "Citizenship law", "text": "Nationality is a legal relationship between a person and "
     "a state."},
]  # fmt: skip


def test_first_prompts_written_out_in_full(tmp_path: Path) -> None:
    """The faithful preset's first prompt, as the real default model receives it, against the text above: HotpotQA
    dev 0 with stage 1 retrieving (threshold raised) over a three-passage corpus and with stage 1 not firing,
    and 2WikiMultihopQA dev 0 (stage 1 not firing)."""
    corpus = tmp_path / "tiny.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in TINY_CORPUS), encoding="utf-8")
    tiny = {
        "retriever.corpus": str(corpus),
        "retriever.index_dir": str(tmp_path / "bm25"),
        "corpus_stats.corpus": str(corpus),
        "corpus_stats.index_dir": str(tmp_path / "infini"),
        "generation.max_new_tokens": 4,
        "generation.max_steps": 1,
    }
    hotpot = load_dataset("hotpotqa", limit=1)[0].question
    assert hotpot == "Were Scott Derrickson and Ed Wood of the same nationality?"
    config = WORLD / "hotpotqa" / "quco-published.yaml"
    prompt, _ = first_prompt(config, tiny | {"params.entity_threshold": float("inf")}, hotpot)
    assert prompt == HOTPOTQA_DEV0_FIRST_PROMPT
    prompt, _ = first_prompt(config, tiny | {"params.stage1": False}, hotpot)
    assert HOTPOTQA_PASSAGE_BLOCK in HOTPOTQA_DEV0_FIRST_PROMPT
    assert prompt == HOTPOTQA_DEV0_FIRST_PROMPT.replace(HOTPOTQA_PASSAGE_BLOCK, "")
    wiki = load_dataset("2wikimultihopqa", limit=1)[0].question
    assert wiki == "Who is the mother of the director of film Polish-Russian War (Film)?"
    config = WORLD / "2wikimultihopqa" / "quco-published.yaml"
    prompt, _ = first_prompt(config, tiny | {"params.stage1": False}, wiki)
    assert prompt == WIKI_DEV0_FIRST_PROMPT
