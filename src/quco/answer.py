"""Reading the short answer out of a chain-of-thought prediction ("... So the answer is X."), and the answer
protocol that decides what happens when a prediction states none.

One ``extract_answer`` serves the whole package: without a dataset it reads the answer for display (the trace's
``answer``); with one it applies that dataset's rule from the published evaluation (QuCo-RAG's
``get_real_prediction``), which is what EM and F1 are computed on.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

MARKER = "answer is"
# End-of-sequence strings a decoder may leave in the text; the published code strips the first two.
EOS_STRINGS = ("</s>", "<|endoftext|>", "<eos>", "<end_of_turn>", "<|im_end|>", "<|eot_id|>")

_ANSWER_RE = re.compile(r"the answer is\s*:?\s*", re.IGNORECASE)

# text -> sentences; defaults to spaCy's parser-based sentences, as QuCo-RAG's 2Wiki extraction uses.
Splitter = Callable[[str], list[str]]


def has_answer(text: str) -> bool:
    return bool(_ANSWER_RE.search(text))


def _strip_eos(text: str) -> str:
    changed = True
    while changed:
        changed = False
        stripped = text.rstrip()
        for eos in EOS_STRINGS:
            if stripped.endswith(eos):
                text = stripped[: -len(eos)]
                changed = True
    return text


def _spacy_sentences(text: str) -> list[str]:
    from quco.text.nlp import SPLIT_DISABLE, load_spacy

    nlp = load_spacy("auto")
    return [s.text for s in nlp(text, disable=list(SPLIT_DISABLE)).sents]


def extract_2wiki(prediction: str, splitter: Splitter | None = None) -> str | None:
    """QuCo-RAG's 2WikiMultihopQA rule: in the first sentence with "answer is", the text after its last one."""
    if MARKER not in prediction:
        return None
    for sent in (splitter or _spacy_sentences)(prediction):
        if MARKER in sent:
            answer = _strip_eos(sent[sent.rfind(MARKER) + len(MARKER) + 1 :])
            return answer.rstrip(".").strip()
    # The marker straddles a sentence boundary: fall back to the text after its last occurrence.
    return _strip_eos(prediction[prediction.rfind(MARKER) + len(MARKER) + 1 :]).strip().rstrip(".")


def extract_hotpotqa(prediction: str) -> str | None:
    """QuCo-RAG's HotpotQA rule: text after the first "answer is", cut at the first "." if "answer" recurs."""
    if MARKER not in prediction:
        return None
    rest = prediction[prediction.find(MARKER) + len(MARKER) + 1 :]
    if "answer" in rest.lower():
        dot = rest.find(".")
        if dot != -1:
            rest = rest[:dot]
    return _strip_eos(rest).strip()


def extract_stated(prediction: str) -> str | None:
    """The display rule: text after the first "the answer is" (any case), to the end of its sentence."""
    match = _ANSWER_RE.search(prediction)
    if not match:
        return None
    rest = prediction[match.end() :].split("\n", 1)[0].strip()
    # A sentence-final period ends the answer; periods inside abbreviations or numbers do not.
    cut = re.search(r"\.(\s|$)", rest)
    if cut:
        rest = rest[: cut.start()]
    return rest.strip().strip('"').strip() or None


def extract_answer(
    prediction: str, dataset: str | None = None, splitter: Splitter | None = None
) -> str | None:
    """The short answer in ``prediction``; None when there is none (a missing answer).

    ``dataset`` None: the display rule (``extract_stated``). "2wikimultihopqa": QuCo-RAG's 2Wiki rule; any other
    dataset: its HotpotQA rule (the rule the published evaluation applies to both of its datasets' kin).
    """
    if dataset is None:
        answer = extract_stated(prediction)
    elif dataset == "2wikimultihopqa":
        answer = extract_2wiki(prediction, splitter)
    else:
        answer = extract_hotpotqa(prediction)
    if answer is None or not answer.strip():
        return None
    return answer


# -- the answer protocol ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnswerProtocol:
    """What the pipeline does after generation about the stated answer.

    ``strict``: nothing; a prediction without an answer is scored as missing. ``reprompt``: when no answer can be
    read, the LLM continues "<reasoning> So the answer is" for ``max_new_tokens`` (one counted call).
    """

    name: str = "strict"
    reprompt: bool = False
    max_new_tokens: int = 20
    stop: tuple[str, ...] = ("\n",)


STRICT = AnswerProtocol()

# Text after which a continuation is not part of the answer (as the published re-prompt cleans it).
_CUT_AT = ("\nQuestion:", ". Question:", "Note:")


def _reasoning(prediction: str) -> str:
    text = prediction
    for cut in _CUT_AT:
        pos = text.find(cut)
        if pos != -1:
            text = text[:pos]
    return text.strip()


def wants_reprompt(prediction: str, protocol: AnswerProtocol) -> bool:
    """No answer can be read from the prediction: no "answer is", or nothing after it."""
    return protocol.reprompt and not extract_hotpotqa(prediction)


def reprompt_tail(prediction: str, protocol: AnswerProtocol) -> str:
    """The reasoning the re-prompt continues, ending in "So the answer is"."""
    cot = _reasoning(prediction)
    bare = cot.rstrip(". ")
    return bare if bare.endswith(MARKER) else f"{cot} So the answer is".strip()
