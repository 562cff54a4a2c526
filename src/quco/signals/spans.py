"""Where tokens, words and sentences sit in a generated text, by character offsets.

The published triggers match tokens to sentences by string search, which drifts when a token repeats or
the sentence splitter rewrites whitespace. Working on character offsets of the decoded pieces
(``"".join(pieces) == text``) keeps every signal attached to the text it came from.
"""

from __future__ import annotations

import string
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from quco.answer import has_answer

_PUNCT = set(string.punctuation) | {"“", "”", "‘", "’", "–", "—", "…"}


def token_spans(pieces: Sequence[str], offset: int = 0) -> list[tuple[int, int]]:
    """Character span of each decoded piece, given that the pieces concatenate to the text."""
    spans: list[tuple[int, int]] = []
    pos = offset
    for piece in pieces:
        spans.append((pos, pos + len(piece)))
        pos += len(piece)
    return spans


def token_positions(pieces: Sequence[str], offset: int = 0) -> list[int | None]:
    """Offset of each token's first visible character; None for whitespace-only tokens.

    An empty piece (part of a multi-byte character) takes the position of the piece that completes it.
    """
    spans = token_spans(pieces, offset)
    out: list[int | None] = []
    for piece, (start, _) in zip(pieces, spans, strict=True):
        stripped = len(piece) - len(piece.lstrip())
        out.append(start + stripped if piece.strip() else None)
    for i in range(len(out) - 1, -1, -1):  # empty pieces inherit the next visible position
        if pieces[i] == "" and i + 1 < len(out):
            out[i] = out[i + 1]
    return out


def locate(text: str, parts: Sequence[str], start: int = 0) -> list[tuple[int, int] | None]:
    """Span of each part in ``text``, searched in order and ignoring whitespace differences.

    Sentence splitters strip, and may insert a space after a glued period ("1950.So"), so a sentence is not
    always a literal substring; comparing the texts with whitespace removed finds it anyway.
    """
    visible = [i for i, ch in enumerate(text) if not ch.isspace() and i >= start]
    squeezed = "".join(text[i] for i in visible)
    spans: list[tuple[int, int] | None] = []
    pos = 0
    for part in parts:
        target = "".join(part.split())
        if not target:
            spans.append(None)
            continue
        j = squeezed.find(target, pos)
        if j < 0:
            spans.append(None)
            continue
        spans.append((visible[j], visible[j + len(target) - 1] + 1))
        pos = j + len(target)
    return spans


@dataclass
class Word:
    """A word of the generated text: the tokens that form it and its visible character span."""

    text: str
    start: int
    end: int
    tokens: list[int] = field(default_factory=list)


def _is_punct(piece: str) -> bool:
    s = piece.strip()
    return bool(s) and all(ch in _PUNCT for ch in s)


def group_words(pieces: Sequence[str], offset: int = 0, split_punct: bool = False) -> list[Word]:
    """Merge sub-word tokens into words.

    A token starts a new word when it begins with whitespace, follows a newline, or is the first one (the
    DRAGIN rule: the SentencePiece space marker). With ``split_punct`` (ETC's rule) a punctuation-only token
    is a word of its own and the token after it starts a new one. Whitespace-only tokens belong to no word.
    """
    spans = token_spans(pieces, offset)
    words: list[Word] = []
    current: Word | None = None
    break_next = True
    for i, piece in enumerate(pieces):
        if piece == "":  # part of a multi-byte character: it belongs with what follows
            if current is not None and not break_next:
                current.tokens.append(i)
            continue
        if not piece.strip():
            current, break_next = None, True
            continue
        lead = len(piece) - len(piece.lstrip())
        start = spans[i][0] + lead
        punct = split_punct and _is_punct(piece)
        new = break_next or lead > 0 or current is None or punct
        if new:
            current = Word(text="", start=start, end=spans[i][1], tokens=[i])
            words.append(current)
        else:
            assert current is not None
            current.tokens.append(i)
            current.end = spans[i][1]
        break_next = punct or piece.endswith("\n")
    full = "".join(pieces)
    for w in words:
        w.end = w.start + len(full[w.start - offset : w.end - offset].rstrip())
        w.text = full[w.start - offset : w.end - offset]
    return words


def assign(positions: Sequence[int | None], spans: Sequence[tuple[int, int] | None]) -> list[int | None]:
    """Index of the span that holds each position (None when none does)."""
    out: list[int | None] = []
    for pos in positions:
        hit = None
        if pos is not None:
            for k, span in enumerate(spans):
                if span is not None and span[0] <= pos < span[1]:
                    hit = k
                    break
        out.append(hit)
    return out


def tokens_in(spans: Sequence[tuple[int, int]], start: int, end: int) -> list[int]:
    """Indices of tokens whose span starts inside [start, end) and that cover at least one character."""
    return [i for i, (a, b) in enumerate(spans) if start <= a < end and b > a]


def group_by(owner: Sequence[int | None], n: int) -> list[list[int]]:
    """Indices grouped by their owner (0..n-1); unowned indices are dropped."""
    out: list[list[int]] = [[] for _ in range(n)]
    for i, o in enumerate(owner):
        if o is not None and 0 <= o < n:
            out[o].append(i)
    return out


def tokens_by_sentence(
    text: str, pieces: Sequence[str], sentences: Sequence[str], offset: int = 0
) -> list[list[int]]:
    """Token indices of each sentence of a generated text (``pieces`` decode to ``text``)."""
    spans = locate(text, sentences)
    if offset:
        spans = [None if s is None else (s[0] + offset, s[1] + offset) for s in spans]
    return group_by(assign(token_positions(pieces, offset), spans), len(sentences))


def words_by_sentence(words: Sequence[Word], spans: Sequence[tuple[int, int] | None]) -> list[list[int]]:
    """Word indices of each sentence, by where each word starts."""
    return group_by(assign([w.start for w in words], spans), len(spans))


def candidate_sentences(
    sentences: Sequence[str], groups: Sequence[list[int]], stop_at_answer: bool
) -> Iterator[tuple[int, str, list[int]]]:
    """Each sentence with its tokens or words (those with none skipped), in order; with ``stop_at_answer``
    the scan ends at the sentence that states the answer (DRAGIN does not check it)."""
    for si, sentence in enumerate(sentences):
        if stop_at_answer and has_answer(sentence):
            return
        if groups[si]:
            yield si, sentence, groups[si]
