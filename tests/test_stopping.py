"""Stop predicates that end a continuation once the sentences a method reads are whole (real spaCy splitter)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from quco.methods.quco import QuCoParams, QuCoRAG
from quco.text.sentences import SpacySentenceSplitter

SPLITTER = SpacySentenceSplitter()


def quco_stop(**params: object):  # noqa: ANN201 - a StopWhen or None
    ctx = SimpleNamespace(parts=SimpleNamespace(text=SimpleNamespace(splitter=SPLITTER)))
    return QuCoRAG(QuCoParams(**params)).draft_stop(ctx)  # type: ignore[arg-type]


def grown_until_stop(text: str, **params: object) -> str:
    """``text`` fed word by word, as a decoder would, up to where the predicate stops it."""
    done, grown = quco_stop(stop_after_answer=True, **params), ""
    for word in text.split(" "):
        grown += (" " if grown else "") + word
        if done(grown):
            return grown
    return grown


def read(text: str) -> list[str]:
    """The sentences QuCo-RAG's scan reads: up to the first one stating the answer."""
    out = []
    for sentence in SPLITTER.split(text):
        out.append(sentence)
        if "the answer is" in sentence:
            break
    return out


def test_off_by_default() -> None:
    assert quco_stop() is None


def test_stops_one_whole_word_into_the_sentence_after_the_answer() -> None:
    text = "Ed Wood was American. So the answer is yes. So the answer is yes. So the answer is"
    assert grown_until_stop(text) == "Ed Wood was American. So the answer is yes. So the"


@pytest.mark.parametrize(
    "text",
    [
        "Ed Wood was American. So the answer is J. R. R. Tolkien. He wrote The Hobbit in 1937.",
        "The film was released in the U.S. in 1999. So the answer is 1999. Question: Who directed it?",
        'So the answer is "Hey Pa! There\'s a Goat on the Roof". The game came out first.',
        "So the answer is St. Louis, Missouri. St. Louis is a city.",
        "So the answer is 1.5 million. It is a large number.\nQuestion: next",
    ],
)
def test_what_is_read_from_the_cut_text_is_what_the_whole_text_gives(text: str) -> None:
    cut = grown_until_stop(text)
    assert len(cut) < len(text)  # every one of these goes on past its answer ...
    assert read(cut) == read(text)  # ... and the cut keeps every sentence the scan reads


@pytest.mark.parametrize(
    "text",
    [
        # a disclaimer ends the scan before the answer: the rest is dropped but generation goes on, as published
        "The passages do not mention him. So the answer is unknown. So the answer is unknown.",
        # a chatty sentence is filtered out, so its answer does not end the scan; nor does an unfinished one
        "Sure, the answer is yes. Ed Wood was American.",
        "So the answer is yes",
        # the mark is matched as published (case-sensitive)
        "The answer is yes. The answer is yes. The answer is yes.",
    ],
)
def test_never_stops_before_the_scan_could_end(text: str) -> None:
    assert grown_until_stop(text) == text


def test_case_insensitive_matching_stops_on_any_case() -> None:
    text = "The answer is yes. The answer is yes. The answer"
    assert grown_until_stop(text, case_sensitive=False) == "The answer is yes. The answer"


@pytest.mark.model
def test_the_default_model_stops_after_its_answer_with_the_same_sentences_read() -> None:
    from quco.config import load_config
    from quco.llm.registry import build_generator

    gen = build_generator(load_config().generator)
    prompt = (
        "Question: What is the capital of France?\\nAnswer: France is a country in Europe. So the answer is Paris.\\n\\n"
        "Question: What is the capital of Italy?\\nAnswer: Italy is a country in Europe. So the answer is Rome.\\n\\n"
        "Question: What is the capital of Spain?\\nAnswer:"
    )
    full = gen.generate(prompt, max_new_tokens=48, stop=())[0]
    short = gen.generate(prompt, max_new_tokens=48, stop=(), stop_when=quco_stop(stop_after_answer=True))[0]
    assert "the answer is" in read(full.text)[-1] and len(SPLITTER.split(full.text)) > len(read(full.text))
    assert read(short.text) == read(full.text)
    assert short.finish_reason == "stop" and len(short.token_ids) < len(full.token_ids)
    assert full.text.startswith(short.text)  # greedy: the cut text is the start of the whole one
