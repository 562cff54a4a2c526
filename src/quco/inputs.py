"""Checks on text that comes straight from a user (questions, corpus queries) before any model sees it.

Python strings can hold what no tokenizer accepts: lone surrogates, which is how Python carries bytes that
were not valid UTF-8 (command-line arguments, ``surrogateescape``) or a JSON ``"\\ud800"`` escape. Each is
reported in one line that names the position, never echoing the bad character itself (a terminal or a JSON
encoder would fail on it too).
"""

from __future__ import annotations

import re

from quco.errors import InputError

_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be tokenised, or None when it can."""
    if not isinstance(text, str):
        return f"expected text, got {type(text).__name__}"
    m = _SURROGATE.search(text)
    if m is None:
        return None
    code = ord(m.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: an undecodable byte
        what = f"byte 0x{code - 0xDC00:02x} that is not valid UTF-8"
    else:
        what = f"a lone surrogate U+{code:04X}"
    return f"character {m.start() + 1} is {what}; send UTF-8 text"


def check_text(text: str, what: str = "the question") -> str:
    """``text`` unchanged, or InputError naming the first character no tokenizer can take."""
    problem = text_problem(text)
    if problem is not None:
        raise InputError(f"{what} is not valid text: {problem}")
    return text


__all__ = ["check_text", "text_problem"]
