"""Answer extraction and scoring, faithful to the scripts the published numbers come from.

Normalisation, EM and F1 follow the SQuAD / HotpotQA official evaluation (F1 with HotpotQA's yes/no/noanswer
rule), maximised over all gold answers and aliases as DRAGIN/QuCo-RAG do. Extraction after "answer is" follows
QuCo-RAG's per-dataset ``get_real_prediction`` (``quco.answer.extract_answer``, the package's one reader of answers). Two deliberate differences, both documented in
docs/evaluation.md: a prediction without an answer is *missing* (scored wrong, never the whole reasoning), and
yes/no(/maybe) labels are parsed strictly (an unparseable answer is wrong, not "no"; "maybe" is kept).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from quco.answer import EOS_STRINGS, MARKER, Splitter, extract_2wiki, extract_answer, extract_hotpotqa

__all__ = [
    "EOS_STRINGS",
    "MARKER",
    "Score",
    "exact_match",
    "extract_2wiki",
    "extract_answer",
    "extract_hotpotqa",
    "f1_score",
    "normalize_answer",
    "parse_label",
    "score_prediction",
    "token_f1",
]

YESNO_NO_ANSWER = ("yes", "no", "noanswer")

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


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


def parse_label(text: str, allow_maybe: bool) -> str | None:
    """The yes/no(/maybe) label an answer starts with, or None: "Yes, because ..." -> "yes"."""
    words = normalize_answer(text).split()
    if not words:
        return None
    allowed = ("yes", "no", "maybe") if allow_maybe else ("yes", "no")
    return words[0] if words[0] in allowed else None


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
