"""Reading the short answer out of a chain-of-thought prediction ("... So the answer is X.")."""

from __future__ import annotations

import re

_ANSWER_RE = re.compile(r"the answer is\s*:?\s*", re.IGNORECASE)


def has_answer(text: str) -> bool:
    return bool(_ANSWER_RE.search(text))


def extract_answer(prediction: str) -> str:
    """Text after the first "the answer is", up to the end of its line, without a trailing period.

    Returns "" when the prediction never states an answer; the evaluation counts that as wrong unless its
    answer re-prompt is switched on.
    """
    match = _ANSWER_RE.search(prediction)
    if not match:
        return ""
    rest = prediction[match.end() :].split("\n", 1)[0].strip()
    # A sentence-final period ends the answer; periods inside abbreviations or numbers do not.
    cut = re.search(r"\.(\s|$)", rest)
    if cut:
        rest = rest[: cut.start()]
    return rest.strip().strip('"').strip()
