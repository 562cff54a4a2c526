"""Stop predicates (``StopWhen``) that end a continuation once the sentences a method will read are complete.

A sentence is only known to be complete once the splitter sees the start of the next one. Both predicates wait
for a sentence-final mark (or a new line) followed by one whole word, then ask the splitter, at most once per
distinct text. What they stop on is what the whole continuation would give, up to the splitter seeing one word
of the following sentence instead of all of it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from quco.llm.base import StopWhen

Split = Callable[[str], list[str]]

# A sentence-final mark, then one whole word of what follows: only then can the sentence before it be complete.
_BOUNDARY = re.compile(r"[.!?][\"')\]]*\s+\S+\s")
# The same, or a new line followed by a whole word.
_BREAK = re.compile(r"([.!?][\"')\]]*\s+|\n\s*)\S+\s")


def _whole_words(text: str) -> str:
    """``text`` without its last, possibly still growing, word ("" if it has no whole word yet)."""
    cut = max(text.rfind(" "), text.rfind("\t"), text.rfind("\n")) + 1
    return text[:cut] if cut > 1 else ""


def first_sentence_done(split: Split) -> StopWhen:
    """True once ``split`` finds a second sentence (or a new line follows text)."""
    checked: dict[str, bool] = {}  # by text: one predicate serves all samples of a call, interleaved or not

    def done(text: str) -> bool:
        head = text.lstrip()
        if "\n" in head:  # the first line, and so its first sentence, is complete
            return True
        cut = max(head.rfind(" "), head.rfind("\t")) + 1  # whole words only: the last one may still grow
        if cut <= 1 or not _BOUNDARY.search(head[:cut]):
            return False
        words = head[:cut].rstrip()
        if words not in checked:
            checked[words] = len(split(words)) >= 2
        return checked[words]

    return done


def read_through_done(split: Split, complete: Callable[[list[str]], bool], mark: str) -> StopWhen:
    """True once the sentences a method will read are complete.

    ``complete(sentences)`` says whether the method would read no further than these sentences and the last
    one it reads is followed by another (so it is whole). ``mark`` is a string the last sentence read holds; the
    splitter runs only once a break with a whole word after it follows the mark.
    """
    checked: dict[str, bool] = {}

    def done(text: str) -> bool:
        words = _whole_words(text.lstrip())
        at = words.find(mark)
        if at < 0 or not _BREAK.search(words, at):
            return False
        words = words.rstrip()
        if words not in checked:
            checked[words] = complete(split(words))
        return checked[words]

    return done
