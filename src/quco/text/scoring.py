"""Scoring extracted entities and claims against hand-written gold: the matching rules, in one place.

Two strings match *exactly* when they are equal after ``normalise`` (case, accents, articles, quotes,
punctuation, possessive and parenthetical notes removed). They match *leniently* when the words of one
are a contiguous run of the words of the other (“Horse” inside “King Horse pub restaurant chain”), which
forgives cut or padded spans but also rewards fragments, so both figures are reported.
Gold items may list aliases (equally right) and, for question entities, optional names (right but not
required: precision does not count them against an extractor, recall does not require them).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

_ARTICLES = ("the ", "a ", "an ")
_PARENS = re.compile(r"\s*\([^()]*\)")
_POSSESSIVE = re.compile(r"(?:'s|'|’s|’)$")
_NON_WORD = re.compile(r"[^\w\s]")


def normalise(text: str, keep_parens: bool = False) -> str:
    """Case-folded, accent-free words without articles, quotes, punctuation or a trailing possessive;
    parenthetical notes go too ("Venus (1929 Film)" = "Venus") unless ``keep_parens`` (running text, where
    "(born April 6, 1942)" is content)."""
    text = unicodedata.normalize("NFKD", text or "")
    text = "".join(c for c in text if not unicodedata.combining(c))
    if not keep_parens:
        text = _PARENS.sub("", text)
    text = text.strip()
    text = _POSSESSIVE.sub("", text.strip())
    text = text.replace("-", " ").replace("–", " ")
    text = _NON_WORD.sub(" ", text.casefold())
    text = " ".join(text.split())
    for article in _ARTICLES:
        if text.startswith(article):
            text = text[len(article) :]
            break
    return text


def _words(text: str) -> list[str]:
    return normalise(text).split()


def _contains(outer: list[str], inner: list[str]) -> bool:
    n = len(inner)
    return n > 0 and any(outer[i : i + n] == inner for i in range(len(outer) - n + 1))


def matches(predicted: str, gold: str | Iterable[str], lenient: bool = False) -> bool:
    """Whether ``predicted`` matches ``gold`` (one string, or a gold string with its aliases)."""
    golds = [gold] if isinstance(gold, str) else list(gold)
    p = normalise(predicted)
    if not p:
        return False
    for g in golds:
        gn = normalise(g)
        if not gn:
            continue
        if p == gn:
            return True
        if lenient:
            pw, gw = p.split(), gn.split()
            if _contains(pw, gw) or _contains(gw, pw):
                return True
    return False


@dataclass
class PR:
    """True positives over predictions (precision) and over gold items (recall), summed over items."""

    tp_pred: int = 0  # predictions that matched a gold item
    n_pred: int = 0  # predictions that were scored (optional matches are left out)
    tp_gold: int = 0  # gold items that some prediction matched
    n_gold: int = 0

    def add(self, other: PR) -> None:
        self.tp_pred += other.tp_pred
        self.n_pred += other.n_pred
        self.tp_gold += other.tp_gold
        self.n_gold += other.n_gold

    @property
    def precision(self) -> float | None:
        return self.tp_pred / self.n_pred if self.n_pred else None

    @property
    def recall(self) -> float | None:
        return self.tp_gold / self.n_gold if self.n_gold else None

    @property
    def f1(self) -> float | None:
        p, r = self.precision, self.recall
        if p is None or r is None or p + r == 0:
            return None if p is None or r is None else 0.0
        return 2 * p * r / (p + r)


@dataclass(frozen=True)
class GoldItem:
    """A gold string and its aliases."""

    text: str
    aliases: tuple[str, ...] = ()

    @property
    def forms(self) -> tuple[str, ...]:
        return (self.text, *self.aliases)


def score_set(
    predicted: Sequence[str],
    gold: Sequence[GoldItem],
    optional: Sequence[GoldItem] = (),
    lenient: bool = False,
) -> PR:
    """Set precision/recall of predicted strings (duplicates after normalising count once)."""
    preds = list(dict.fromkeys(normalise(p) for p in predicted if normalise(p)))
    pr = PR(n_gold=len(gold))
    hit_gold = [False] * len(gold)
    for p in preds:
        found = [i for i, g in enumerate(gold) if matches(p, g.forms, lenient)]
        if found:
            pr.tp_pred += 1
            pr.n_pred += 1
            for i in found:
                hit_gold[i] = True
        elif any(matches(p, o.forms, lenient) for o in optional):
            continue  # right but not required: neither a hit nor a miss
        else:
            pr.n_pred += 1
    pr.tp_gold = sum(hit_gold)
    return pr


@dataclass(frozen=True)
class GoldClaim:
    head: GoldItem
    relation: str
    tail: GoldItem | None


def score_pairs(
    predicted: Sequence[tuple[str, str | None]], gold: Sequence[GoldClaim], lenient: bool = False
) -> PR:
    """(head, tail) pairs, unordered, since co-occurrence is symmetric; 2-tuples pair a head with None."""
    seen: list[tuple[str, str]] = []
    for h, t in predicted:
        key = (normalise(h), normalise(t) if t else "")
        if key[0] and key not in seen:
            seen.append(key)
    pr = PR(n_gold=len(gold), n_pred=len(seen))
    hit_gold = [False] * len(gold)
    for h, t in seen:
        found = []
        for i, g in enumerate(gold):
            if g.tail is None:
                ok = not t and matches(h, g.head.forms, lenient)
            else:
                ok = bool(t) and (
                    (matches(h, g.head.forms, lenient) and matches(t, g.tail.forms, lenient))
                    or (matches(t, g.head.forms, lenient) and matches(h, g.tail.forms, lenient))
                )
            if ok:
                found.append(i)
        if found:
            pr.tp_pred += 1
            for i in found:
                hit_gold[i] = True
    pr.tp_gold = sum(hit_gold)
    return pr


@dataclass
class ClaimScores:
    """Head, tail and pair scores of one extractor over a set of sentences, plus empty-list agreement."""

    heads: PR = field(default_factory=PR)
    tails: PR = field(default_factory=PR)
    pairs: PR = field(default_factory=PR)
    heads_lenient: PR = field(default_factory=PR)
    tails_lenient: PR = field(default_factory=PR)
    empty_right: int = 0  # gold says "no fact" and the extractor returned nothing
    empty_gold: int = 0
    sentences: int = 0

    def add_sentence(self, predicted: Sequence[tuple[str, str | None]], gold: Sequence[GoldClaim]) -> None:
        self.sentences += 1
        heads = [GoldItem(g.head.text, g.head.aliases) for g in gold]
        tails = [g.tail for g in gold if g.tail is not None]
        uniq_heads = _unique_items(heads)
        uniq_tails = _unique_items(tails)
        pred_heads = [h for h, _ in predicted]
        pred_tails = [t for _, t in predicted if t]
        self.heads.add(score_set(pred_heads, uniq_heads))
        self.tails.add(score_set(pred_tails, uniq_tails))
        self.heads_lenient.add(score_set(pred_heads, uniq_heads, lenient=True))
        self.tails_lenient.add(score_set(pred_tails, uniq_tails, lenient=True))
        self.pairs.add(score_pairs(predicted, gold))
        if not gold:
            self.empty_gold += 1
            self.empty_right += not predicted


def _unique_items(items: Sequence[GoldItem]) -> list[GoldItem]:
    out: list[GoldItem] = []
    keys: set[str] = set()
    for item in items:
        key = normalise(item.text)
        if key not in keys:
            keys.add(key)
            out.append(item)
    return out
