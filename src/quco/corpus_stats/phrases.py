"""Phrases and alias sets: normalising what callers pass, and printing it readably."""

from __future__ import annotations

from quco.corpus_stats.base import Phrase


def aliases(phrase: Phrase) -> list[str]:
    """A phrase or an OR-set of aliases -> distinct, stripped, non-empty alias strings (order kept)."""
    items = [phrase] if isinstance(phrase, str) else list(phrase)
    out: list[str] = []
    for item in items:
        text = " ".join(str(item).split())
        if text and text not in out:
            out.append(text)
    return out


def describe(phrase: Phrase) -> str:
    """Readable form: ``Paris`` or ``(Paris OR Lutetia)``; quotes mark the alias boundaries when needed."""
    items = aliases(phrase)
    if not items:
        return '""'
    if len(items) == 1:
        return items[0]
    return "(" + " OR ".join(items) + ")"


def describe_pair(a: Phrase, b: Phrase) -> str:
    return f"{describe(a)} AND {describe(b)}"


def drop_extensions(seqs: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Keep only alias token sequences that do not start with another alias.

    Two different sequences can only match at the same corpus position if one is a prefix of the other, so
    after this step the occurrence sets are disjoint and an OR count is the exact sum of the counts.
    """
    uniq = sorted(set(seqs), key=len)
    kept: list[tuple[int, ...]] = []
    for s in uniq:
        if not any(s[: len(k)] == k for k in kept):
            kept.append(s)
    return kept
