"""Answer extraction and scoring, faithful to the scripts the published numbers come from.

Normalisation, EM and F1 follow the SQuAD / HotpotQA official evaluation (F1 with HotpotQA's yes/no/noanswer
rule), maximised over all gold answers and aliases as DRAGIN/QuCo-RAG do. Extraction after "answer is" follows
QuCo-RAG's per-dataset ``get_real_prediction``. Two deliberate differences, both documented in
docs/evaluation.md: a prediction without an answer is *missing* (scored wrong, never the whole reasoning), and
yes/no(/maybe) labels are parsed strictly (an unparseable answer is wrong, not "no"; "maybe" is kept).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MARKER = "answer is"
# End-of-sequence strings a decoder may leave in the text; the published code strips the first two.
EOS_STRINGS = ("</s>", "<|endoftext|>", "<eos>", "<end_of_turn>", "<|im_end|>", "<|eot_id|>")
YESNO_NO_ANSWER = ("yes", "no", "noanswer")

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")

# text -> sentences; defaults to spaCy's parser-based sentences, as QuCo-RAG's 2Wiki extraction uses.
Splitter = Callable[[str], list[str]]


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower-case, drop ASCII punctuation, drop a/an/the, squeeze whitespace.

    Only ``string.punctuation`` is removed, exactly as the official script: curly quotes, dashes and other
    Unicode punctuation survive, and accents are kept.
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def token_f1(prediction: str, gold: str) -> tuple[float, float, float]:
    """(F1, precision, recall) of one prediction against one gold, with the HotpotQA yes/no/noanswer rule."""
    pred = normalize_answer(prediction)
    ref = normalize_answer(gold)
    if pred in YESNO_NO_ANSWER and pred != ref:
        return 0.0, 0.0, 0.0
    if ref in YESNO_NO_ANSWER and pred != ref:
        return 0.0, 0.0, 0.0
    pred_toks, ref_toks = pred.split(), ref.split()
    same = sum((Counter(pred_toks) & Counter(ref_toks)).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision = same / len(pred_toks)
    recall = same / len(ref_toks)
    return 2 * precision * recall / (precision + recall), precision, recall


def f1_score(prediction: str, golds: Sequence[str]) -> float:
    """Maximum token F1 over the gold answers."""
    return max((token_f1(prediction, g)[0] for g in golds), default=0.0)


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


def parse_label(text: str, allow_maybe: bool) -> str | None:
    """The yes/no(/maybe) label an answer starts with, or None: "Yes, because ..." -> "yes"."""
    words = normalize_answer(text).split()
    if not words:
        return None
    allowed = ("yes", "no", "maybe") if allow_maybe else ("yes", "no")
    return words[0] if words[0] in allowed else None


def extract_answer(prediction: str, dataset: str, splitter: Splitter | None = None) -> str | None:
    """The short answer in ``prediction`` by ``dataset``'s rule; None when there is none (a missing answer)."""
    answer = (
        extract_2wiki(prediction, splitter) if dataset == "2wikimultihopqa" else extract_hotpotqa(prediction)
    )
    if answer is None or not answer.strip():
        return None
    return answer


@dataclass(frozen=True)
class Score:
    """How one prediction scored. For yes/no(/maybe) questions ``em`` and ``f1`` are both the accuracy."""

    answer: str  # the extracted answer ("" when missing); for label questions, the parsed label if any
    em: float
    f1: float
    missing: bool  # no answer could be extracted; counts as wrong


def score_prediction(
    prediction: str,
    golds: Sequence[str],
    kind: str = "span",
    dataset: str = "hotpotqa",
    splitter: Splitter | None = None,
) -> Score:
    """Extract the answer from a full prediction and score it against the gold answers."""
    answer = extract_answer(prediction, dataset, splitter)
    if answer is None:
        return Score("", 0.0, 0.0, True)
    if kind in ("yesno", "yesnomaybe"):
        label = parse_label(answer, allow_maybe=kind == "yesnomaybe")
        if label is None:
            return Score(answer, 0.0, 0.0, False)
        acc = float(label in {g.strip().lower() for g in golds})
        return Score(label, acc, acc, False)
    return Score(answer, exact_match(answer, golds), f1_score(answer, golds), False)
