"""Sentence splitting of generated chain-of-thought text with spaCy's dependency parser."""

from __future__ import annotations

import re

from quco.text.nlp import SPLIT_DISABLE, load_spacy

# "born in 1950.So the answer" -> "born in 1950. So the answer": generated text sometimes drops the space.
_GLUED = re.compile(r"(?<=[a-z0-9)\"'])([.!?])(?=[A-Z][a-z])")
# An answer clause that the parser glued to the sentence before it ("... 1963. So the answer is X.").
_ANSWER_START = re.compile(r"(?<=[.!?])\s+(?=(?:So|Thus|Therefore|Hence),? the answer is\b)")
# Sentence ends that are really abbreviations: a title or a single initial ("Edward L." + "Cahn ...").
_TITLE_ABBREV = re.compile(
    r"(?:^|\s)(?:St|Dr|Mr|Mrs|Ms|Prof|Mt|Ft|Gen|Col|Lt|Capt|Sgt|Rev|Hon|Gov|Sen|Rep|vs)\.$"
)
_NUMBER_ABBREV = re.compile(r"(?:^|\s)No\.$")  # "Coolie No." + "1 ..."
_INITIAL = re.compile(r"(?:^|\s)[A-Z][a-z]*\s[A-Z]\.$")
_NOT_A_NAME_START = re.compile(
    r"^(?:It|He|She|They|We|I|You|The|This|That|These|Those|So|Thus|Therefore|Hence|However|In|On|A|An|"
    r"There|His|Her|Their|Its|But|And|Then|Also)\b"
)


class SpacySentenceSplitter:
    """Split text into stripped, non-empty sentences; each line of the text is split on its own.

    Lines are split separately because generated text puts list items and answers on new lines without
    a period, and the parser would otherwise join them.
    """

    def __init__(self, model: str = "auto") -> None:
        self.model = model

    def split(self, text: str) -> list[str]:
        if not text or not text.strip():
            return []
        nlp = load_spacy(self.model)
        out: list[str] = []
        lines = [ln.strip() for ln in text.splitlines()]
        lines = [_GLUED.sub(r"\1 ", ln) for ln in lines if ln]
        for doc in nlp.pipe(lines, disable=list(SPLIT_DISABLE)):
            pieces: list[str] = []
            for sent in doc.sents:
                for part in _ANSWER_START.split(sent.text):
                    part = part.strip()
                    if part:
                        pieces.append(part)
            out.extend(_merge_fragments(pieces))
        return out


def _merge_fragments(pieces: list[str]) -> list[str]:
    """Re-join pieces that the parser cut after an abbreviation, and stray punctuation-only pieces."""
    merged: list[str] = []
    for piece in pieces:
        if merged and (
            not any(ch.isalnum() for ch in piece)
            or _TITLE_ABBREV.search(merged[-1])
            or (_NUMBER_ABBREV.search(merged[-1]) and piece[:1].isdigit())
            or (_INITIAL.search(merged[-1]) and piece[:1].isupper() and not _NOT_A_NAME_START.match(piece))
        ):
            merged[-1] = f"{merged[-1]} {piece}" if piece[:1].isalnum() else merged[-1] + piece
        else:
            merged.append(piece)
    return merged
