"""Content words, as the DRAGIN-family code picks them: spaCy POS tags and a loose substring match."""

from __future__ import annotations

from collections.abc import Iterable

CONTENT_POS = frozenset({"NOUN", "ADJ", "VERB", "PROPN", "NUM"})
# SeaKR's query filter keeps adverbs too and drops these words.
SEAKR_POS = CONTENT_POS | {"ADV"}
SEAKR_STOP = frozenset({"thus", "answer", "is", "so"})


def content_words(text: str, nlp, pos: Iterable[str] = CONTENT_POS) -> set[str]:
    """The texts of the spaCy tokens of ``text`` whose POS is a content tag."""
    tags = set(pos)
    return {t.text for t in nlp(text) if t.pos_ in tags}


def is_content(word: str, real_words: set[str]) -> bool:
    """The published ``match``: a word counts when any content word occurs inside it."""
    return any(r in word for r in real_words)


def filter_pos(text: str, nlp, pos: Iterable[str] = SEAKR_POS, stop: Iterable[str] = SEAKR_STOP) -> str:
    """The words of ``text`` with a kept POS tag, minus stop words, joined by spaces (SeaKR's filter)."""
    tags, drop = set(pos), set(stop)
    return " ".join(t.text for t in nlp(text.strip()) if t.pos_ in tags and t.text not in drop)
