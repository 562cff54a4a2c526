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


# Words whose period does not end a sentence.
_ABBREVIATIONS = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "st",
        "jr",
        "sr",
        "no",
        "nos",
        "vs",
        "inc",
        "co",
        "corp",
        "ltd",
        "bros",
        "gen",
        "col",
        "lt",
        "capt",
        "sgt",
        "prof",
        "rev",
        "hon",
        "gov",
        "sen",
        "rep",
        "mt",
        "ft",
        "jan",
        "feb",
        "mar",
        "apr",
        "aug",
        "sept",
        "sep",
        "oct",
        "nov",
        "dec",
    ]
)
_PERIOD = re.compile(r"\.(?=\s|$)")


def sentence_end(text: str) -> int | None:
    """Position of the first period that ends a sentence: not after an initial ("John F. Kennedy"), an
    abbreviation ("St. Louis") or a word with inner periods ("U.S."), and not inside a number ("1.5")."""
    for m in _PERIOD.finditer(text):
        words = text[: m.start()].split()
        word = words[-1].strip("\"'([") if words else ""
        if (len(word) == 1 and word.isupper()) or "." in word or word.lower() in _ABBREVIATIONS:
            continue
        return m.start()
    return None


def extract_stated(prediction: str) -> str | None:
    """The display rule: text after the first "the answer is" (any case), to the end of its sentence."""
    match = _ANSWER_RE.search(prediction)
    if not match:
        return None
    rest = prediction[match.end() :].split("\n", 1)[0].strip()
    end = sentence_end(rest)
    if end is not None:
        rest = rest[:end]
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
    """What happens to a prediction after generation, before it is scored.

    ``strict``: nothing; a prediction without an answer is scored as missing. ``published``: as QuCo-RAG's
    ``evaluate.py`` (and DRAGIN's, with 20 tokens): the prediction is cut at the first "Question:", "#10000000" or
    "Note:" that does not open it; if it then lacks "answer is" (case-sensitive), the LLM continues
    "<reasoning> So the answer is" for ``max_new_tokens`` (one counted call, role ``answer_reprompt``).
    """

    name: str = "strict"
    reprompt: bool = False
    max_new_tokens: int = 128
    cut_at: tuple[str, ...] = ()
    marker: str = MARKER
    # The re-prompt stops where the published code cuts its continuation anyway (same text, fewer tokens).
    stop: tuple[str, ...] = ()


STRICT = AnswerProtocol()
PUBLISHED = AnswerProtocol(
    "published", reprompt=True, cut_at=("Question:", "#10000000", "Note:"), stop=("Question:", "Note:")
)
PROTOCOLS = {"strict": STRICT, "published": PUBLISHED}
# Datasets whose published evaluation re-prompts for a missing answer (QuCo-RAG's evaluate.py).
PUBLISHED_PROTOCOL_DATASETS = ("hotpotqa", "2wikimultihopqa")


def protocol_named(name: str, max_new_tokens: int | None = None) -> AnswerProtocol:
    from dataclasses import replace

    from quco.errors import ConfigError

    if name not in PROTOCOLS:
        raise ConfigError(f"unknown answer protocol '{name}'; use one of {', '.join(PROTOCOLS)}")
    protocol = PROTOCOLS[name]
    return replace(protocol, max_new_tokens=max_new_tokens) if max_new_tokens else protocol


def cut_prediction(prediction: str, cut_at: tuple[str, ...], *, at_start: bool = False) -> str:
    """The prediction up to the first of ``cut_at`` (a marker at position 0 is kept unless ``at_start``)."""
    text = prediction
    for word in cut_at:
        pos = text.find(word)
        if pos > 0 or (at_start and pos == 0):
            text = text[:pos]
    return text


def wants_reprompt(prediction: str, protocol: AnswerProtocol) -> bool:
    """The (cut) prediction states no answer and the protocol re-prompts for one."""
    return protocol.reprompt and protocol.marker not in cut_prediction(prediction, protocol.cut_at)


def reprompt_tail(prediction: str, protocol: AnswerProtocol) -> str:
    """The reasoning the re-prompt continues, ending in "So the answer is"."""
    return f"{cut_prediction(prediction, protocol.cut_at).strip()} So the answer is".strip()
