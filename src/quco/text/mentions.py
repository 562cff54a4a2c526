"""Mentions: the spans of a parsed sentence that can be looked up in a corpus (names, dates, numbers).

spaCy's small model finds entity *spans* well but labels them poorly, and it misses or cuts titles
("Twenty Plus Two", "Coolie No. 1"). So a mention is the union of a named entity and a run of
proper nouns (with title connectors such as "of", "de", "&"); labels only decide name vs value.
Quoted titles are merged into one token before parsing, and parentheticals are removed, because both
derail the parser and neither helps a corpus lookup ("Lonny (magazine)" is counted as "Lonny").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from spacy.tokens import Doc, Token

from quco.text.lexicon import DEMONYM_PREFIXES, DEMONYMS, RANK_TITLES
from quco.text.nlp import load_spacy

# Labels whose spans are values (usable as a triplet tail, never as an entity to count on its own).
VALUE_LABELS = frozenset({"DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "CARDINAL", "NORP", "LANGUAGE"})
DROP_LABELS = frozenset({"ORDINAL"})
# Value labels whose tokens can never be part of a name run (month names are tagged PROPN).
_HARD_VALUE_LABELS = frozenset({"DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "NORP", "LANGUAGE"})
WH_WORDS = frozenset({"who", "whom", "whose", "what", "which", "when", "where", "why", "how"})
# Lower-case words that may sit inside a name ("Republic of Macedonia", "Fred de Cordova").
NAME_CONNECTORS = frozenset(
    {"of", "the", "de", "del", "della", "da", "di", "du", "des", "la", "le", "van", "von", "der", "den", "y"}
)
_JOINERS = frozenset({"&", "-", "–", "."})
_QUOTES = frozenset({'"', "“", "”", "``", "''"})
_DETERMINERS = frozenset({"the", "a", "an", "this", "that", "these", "those", "his", "her", "its", "their"})
_DATE_WORDS = frozenset(
    [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "century",
        "centuries",
        "year",
        "years",
        "decade",
        "decades",
        "day",
        "days",
        "week",
        "weeks",
        "month",
        "months",
        "today",
        "yesterday",
        "tomorrow",
        "era",
        "bc",
        "ad",
        "bce",
        "ce",
        "morning",
        "evening",
        "night",
        "noon",
        "midnight",
        "spring",
        "summer",
        "autumn",
        "fall",
        "winter",
    ]
)
_YEAR_PREFIX = re.compile(r"^(?:the\s+)?(?:year|years)\s+(?=\d)", re.IGNORECASE)
_PARENS = re.compile(r"\s*\([^()]*\)|\s*\[[^\[\]]*\]")
_MAX_QUOTE_TOKENS = 12
_MAX_GAP = 3
# Particles inside personal and place names ("Cieli di Toscana", "Ludwig van Beethoven"): a gap of these
# joins two name words even when NER calls them two entities.
_NAME_PARTICLES = frozenset({"de", "del", "della", "da", "di", "du", "des", "van", "von", "der", "den", "y"})
_VERSUS = frozenset({"v.", "vs.", "v", "vs"})  # "Korematsu v. United States" is one name (a court case)
_ALTERNATIVES = frozenset({"or", "nor"})  # "The Ape Man or The Ape" is two names
# Nouns that introduce a title ("the film Romance on the Run"): what follows is one name up to the first
# lower-case content word, lower-case function words included.
ROLE_CUES = frozenset(
    {"film", "films", "movie", "movies", "album", "song", "novel", "book", "band", "magazine", "series",
     "play", "opera", "documentary", "poem", "game", "show", "single"}
)  # fmt: skip
_TITLE_FUNCTION_WORDS = frozenset(
    {"of", "on", "the", "a", "an", "and", "to", "for", "at", "by", "in", "with", "from", "de", "la", "le",
     "'s", "’s", "'", "’", "-", "–", ":", "&"}
)  # fmt: skip
# Lower-case head nouns that belong to the name before them ("Koch family", "Distribution of Industry act").
GENERIC_HEADS = frozenset({"family", "act", "relations", "dynasty", "clan"})


@dataclass(frozen=True)
class Mention:
    start: int  # first token index
    end: int  # one past the last token
    text: str
    kind: str  # "name" or "value"
    label: str = ""  # the NER label when one overlapped (only informative)


@dataclass
class Parsed:
    """A parsed sentence with its mentions and a token -> mention index."""

    doc: Doc
    mentions: list[Mention]
    by_token: dict[int, Mention] = field(default_factory=dict)
    # What the surrounding text says a pronoun or "the film" may stand for (quco.text.triplets.Context).
    context: Any = None

    def at(self, i: int) -> Mention | None:
        return self.by_token.get(i)


def clean_text(text: str) -> str:
    """Drop parentheticals and bracketed notes (repeatedly, for nesting) and squeeze whitespace."""
    previous = None
    while previous != text:
        previous = text
        text = _PARENS.sub("", text)
    return re.sub(r"\s+", " ", text).strip()


def parse(text: str, model: str = "auto") -> Parsed:
    """Clean, merge quoted titles into single tokens, run the full pipeline, find mentions."""
    nlp = load_spacy(model)
    doc = nlp.make_doc(clean_text(text))
    quoted = _merge_quotes(doc)
    doc = nlp(doc)
    mentions = _find_mentions(doc, quoted)
    by_token = {i: m for m in mentions for i in range(m.start, m.end)}
    return Parsed(doc=doc, mentions=mentions, by_token=by_token)


def _merge_quotes(doc: Doc) -> set[int]:
    """Merge the inside of each short double-quoted title into one token; return the merged indices."""
    opens = [t.i for t in doc if t.text in _QUOTES]
    spans: list[tuple[int, int]] = []
    for a, b in zip(opens[0::2], opens[1::2], strict=False):
        inner = doc[a + 1 : b]
        if 1 <= len(inner) <= _MAX_QUOTE_TOKENS and (inner.text[:1].isupper() or inner.text[:1].isdigit()):
            spans.append((a + 1, b))
    if not spans:
        return set()
    with doc.retokenize() as retok:
        for s, e in spans:
            if e - s > 1:
                retok.merge(doc[s:e], attrs={"TAG": "NNP", "POS": "PROPN"})
    merged: set[int] = set()
    shift = 0
    for s, e in spans:
        merged.add(s - shift)
        shift += e - s - 1
    return merged


def _is_capitalized(tok: Token) -> bool:
    return tok.text[:1].isupper() and any(c.isalpha() for c in tok.text) and tok.text != "I"


def _sentence_initial(tok: Token) -> bool:
    """True for the first word of the sentence, also after leading adverbs ("Thus, X ...")."""
    return all(t.pos_ in ("ADV", "CCONJ", "PUNCT", "SCONJ") for t in tok.sent[: tok.i - tok.sent.start])


def _ent_label(ent) -> str:
    """The NER label, except that a "DATE" with no number or calendar word is a mislabelled title
    ("Polish-Russian War")."""
    if ent.label_ in ("DATE", "TIME") and any(
        t.pos_ == "PROPN" and t.is_alpha and t.is_title and t.lower_ not in _DATE_WORDS for t in ent
    ):
        return "MISC"  # "Charlie Day" is a person
    after = ent.doc[ent.end] if ent.end < len(ent.doc) else None
    if (
        ent.label_ in ("DATE", "TIME")
        and ent[-1].is_title
        and after is not None
        and after.pos_ == "PROPN"
        and after.is_title
        and not after.ent_type_
    ):
        return "MISC"  # "20th Century" + "Fox" is a company
    if ent.label_ in ("DATE", "TIME") and not any(
        t.like_num or any(c.isdigit() for c in t.text) or t.lower_ in _DATE_WORDS for t in ent
    ):
        return "MISC"
    last = ent[-1]
    if (
        ent.label_ in VALUE_LABELS
        and last.pos_ == "PROPN"
        and last.text.isalpha()
        and last.lower_ not in _DATE_WORDS
    ):
        return "MISC"  # "888 7th Avenue" (QUANTITY) is a name
    return ent.label_


def _find_mentions(doc: Doc, quoted: set[int]) -> list[Mention]:
    ent_label: dict[int, str] = {}
    for ent in doc.ents:
        for t in ent:
            ent_label[t.i] = _ent_label(ent)

    def blocked(tok: Token) -> bool:
        label = ent_label.get(tok.i, "")
        if label in ("NORP", "LANGUAGE"):  # "German company" is a value; "the film Hypocrite" (NORP) is not
            return tok.pos_ != "PROPN"
        if label in _HARD_VALUE_LABELS:
            return True
        # "Twenty Plus Two" is a title even though NER calls "Twenty" CARDINAL; "1995" is not.
        return label in ("CARDINAL", "ORDINAL") and not (tok.text[:1].isupper() and tok.text.isalpha())

    def _title_word(tok: Token) -> bool:
        return (
            _is_capitalized(tok)
            and not _sentence_initial(tok)
            and not blocked(tok)
            and tok.lower_ not in WH_WORDS
        )

    def base_name(tok: Token) -> bool:
        if tok.i in quoted:
            return True
        if tok.lower_ in WH_WORDS or blocked(tok) or not any(c.isalnum() for c in tok.text):
            return False
        if tok.pos_ == "PROPN":
            return any(c.isupper() or c.isdigit() for c in tok.text)
        if _title_word(tok) and (
            (tok.i > 0 and _title_word(doc[tok.i - 1]))
            or (tok.i + 1 < len(doc) and _title_word(doc[tok.i + 1]))
        ):
            return True  # two capitalised words mid-sentence: a title the tagger did not see ("The Machine To Kill")
        # A sentence-initial singular subject without a determiner is a name the tagger missed ("Allure").
        return (
            _is_capitalized(tok)
            and _sentence_initial(tok)
            and tok.tag_ == "NN"
            and tok.dep_ in ("nsubj", "nsubjpass", "poss")
            and not any(c.dep_ == "det" for c in tok.children)
        )

    n = len(doc)
    name = [base_name(t) for t in doc]
    # "No. 1455 Flight", "No. 10 Downing Street": a numbered name, when a capitalised word follows the number.
    for t in doc:
        if t.text not in ("No", "No.") or not _is_capitalized(t):
            continue
        k = t.i + 1 + (t.text == "No" and t.i + 1 < n and doc[t.i + 1].text == ".")
        if (
            k + 1 < n
            and doc[k].like_num
            and any(c.isdigit() for c in doc[k].text)
            and _is_capitalized(doc[k + 1])
        ):
            for g in range(t.i, k + 1):
                name[g] = True
    # Capitalised words next to a name belong to it ("Laughter In Hell", "The Mask Of Fu Manchu").
    changed = True
    while changed:
        changed = False
        for t in doc:
            if name[t.i] or not _is_capitalized(t) or blocked(t):
                continue
            if _sentence_initial(t) and not (
                t.pos_ in ("NOUN", "VERB", "ADJ") and t.i + 1 < n and name[t.i + 1]
            ):
                continue  # "Answering Machine Music was ..." keeps its first word; "Thus", "In", "The" do not
            if t.lower_ in WH_WORDS and t.i + 1 < n and not name[t.i + 1]:
                continue
            if (t.i > 0 and name[t.i - 1]) or (t.i + 1 < n and name[t.i + 1]):
                name[t.i] = changed = True
    runs = _title_runs(doc, quoted, ent_label)
    for a, b in runs:
        for g in range(a, b):
            name[g] = True
    # Bridge short gaps of connectors between two name words, unless NER says they are two entities.
    i = 0
    while i < n:
        if not name[i]:
            i += 1
            continue
        j = i + 1
        while j < n and name[j]:
            j += 1
        k = j
        while k < n and k - j < _MAX_GAP and not name[k] and _gap_word(doc[k], quoted, blocked):
            k += 1
        if j < k < n and name[k] and (not _separate_entities(doc, j - 1, k) or _joins_anyway(doc, i, j, k)):
            for g in range(j, k):
                name[g] = True
            continue  # re-scan the now longer run from i
        # A hyphenated continuation belongs to the name ("Bo-ra", "Hye-young").
        while (
            j + 1 < n
            and doc[j].text in ("-", "–")
            and doc[j - 1].whitespace_ == ""
            and doc[j].whitespace_ == ""
            and doc[j + 1].is_alpha
            and not blocked(doc[j + 1])
        ):
            name[j] = name[j + 1] = True
            j += 2
        # A number right after a name completes it ("Reply 1988", "Coolie No. 1", "Local 282").
        while j < n and _attachable_number(doc[j], ent_label, quoted):
            if doc[j].text == "." and not (j + 1 < n and _attachable_number(doc[j + 1], ent_label, quoted)):
                break
            name[j] = True
            j += 1
        i = j

    spans: list[tuple[int, int, str]] = []  # (start, end, kind)
    i = 0
    while i < n:
        if name[i]:
            j = i
            while j < n and name[j]:
                j += 1
            spans.append((i, j, "name"))
            i = j
        else:
            i += 1
    for ent in doc.ents:
        label = _ent_label(ent)
        if label in DROP_LABELS:
            continue
        kind = "value" if label in VALUE_LABELS else "name"
        if kind == "name" and not any(_is_capitalized(t) or any(c.isdigit() for c in t.text) for t in ent):
            continue
        spans.append((ent.start, ent.end, kind))

    # Numbers the NER left out ("founded in 1990s") are values too.
    for t in doc:
        if t.i not in ent_label and not name[t.i] and t.pos_ == "NUM" and any(c.isdigit() for c in t.text):
            spans.append((t.i, t.i + 1, "value"))
    cut_runs = [(a, b) for a, b in runs if a > 0 and doc[a - 1].lower_ in ROLE_CUES]
    return _resolve(doc, spans, ent_label, runs, cut_runs)


def _title_run(doc: Doc, start: int, quoted: set[int], with_and: bool = True) -> int:
    """End of a title starting at ``start``: capitalised words and numbers, and lower-case function words
    followed by another capitalised word; it ends at "or", a lower-case content word or punctuation."""

    def strong(tok: Token, after_gap: bool) -> bool:
        if tok.i in quoted or (_is_capitalized(tok) and tok.lower_ not in WH_WORDS):
            return True
        return not after_gap and tok.text[:1].isdigit()

    words = _TITLE_FUNCTION_WORDS if with_and else _TITLE_FUNCTION_WORDS - {"and", "&"}
    n = len(doc)
    end = i = start
    after_gap = False
    while i < n:
        tok = doc[i]
        if strong(tok, after_gap):
            i += 1
            end = i
            after_gap = False
            continue
        glued = i > 0 and doc[i - 1].whitespace_ == "" and tok.text in ("'s", "’s", "'", "’", "-", "–")
        if i > start and (tok.lower_ in words or glued):
            j = i
            while j < n and j - i < 3 and (doc[j].lower_ in words or doc[j].text in ("'", "’")):
                j += 1
            if j < n and strong(doc[j], True):
                i = j
                after_gap = True
                continue
        break
    return end


def _title_runs(doc: Doc, quoted: set[int], ent_label: dict[int, str]) -> list[tuple[int, int]]:
    """Titles whose lower-case words the name rules would drop: after a role noun ("the film Romance on
    the Run"), after "of" ("the director of Chased by the Dogs"), and at the start of a sentence
    ("Battle in Seattle was directed by ..."). The last two need a function word inside and no person or
    place at the start, so that "Gus Meins in Frankfurt" stays a name and a place."""
    runs: list[tuple[int, int]] = []
    cued: list[tuple[int, int]] = []  # after a role noun: a title whatever its words
    n = len(doc)
    for t in doc:
        if t.i + 1 >= n:
            break
        nxt = doc[t.i + 1]
        if t.lower_ in ROLE_CUES and t.pos_ == "NOUN":
            if nxt.i in quoted or _is_capitalized(nxt) or nxt.text[:1].isdigit():
                plural = t.lower_.endswith("s") and t.lower_ != "series"
                end = _title_run(doc, t.i + 1, quoted, with_and=not plural)
                cued.append((t.i + 1, end))
                # "films A and B": the second title follows the "and".
                if plural and end + 1 < n and doc[end].lower_ == "and" and _is_capitalized(doc[end + 1]):
                    cued.append((end + 1, _title_run(doc, end + 1, quoted, with_and=False)))
        elif t.lower_ == "of" and _is_capitalized(nxt):
            runs.append((t.i + 1, _title_run(doc, t.i + 1, quoted, with_and=False)))
    for sent in doc.sents:
        first = next((t for t in sent if not (t.is_punct or t.pos_ in ("ADV", "CCONJ", "SCONJ"))), None)
        if (
            first is not None
            and _is_capitalized(first)
            and first.lower_ not in _NOT_TITLE_STARTS
            and first.lower_ not in WH_WORDS
            and first.pos_ not in ("AUX", "PRON", "PART", "INTJ", "SCONJ")
        ):
            runs.append((first.i, _title_run(doc, first.i, quoted, with_and=False)))
    out = []
    for a, b in runs:
        inner = doc[a:b]
        if b - a < 2 or ent_label.get(a, "") in ("PERSON", "GPE", "NORP", "LOC"):
            continue
        if any(ent_label.get(t.i, "") in _HARD_VALUE_LABELS - {"DATE"} for t in inner):
            continue
        if not any(t.lower_ in _TITLE_FUNCTION_WORDS and t.is_lower for t in inner):
            continue  # nothing the ordinary name rules would miss
        out.append((a, b))
    return sorted(set(out) | {(a, b) for a, b in cued if b > a})


_NOT_TITLE_STARTS = frozenset(
    {"in", "on", "at", "by", "for", "from", "after", "before", "during", "since", "as", "the", "a", "an",
     "both", "he", "she", "it", "they", "his", "her", "its", "their", "this", "that", "these", "those", "so",
     "thus", "therefore", "hence", "however", "although", "while", "when", "if", "there", "yes", "no"}
)  # fmt: skip


def _attachable_number(tok: Token, ent_label: dict[int, str], quoted: set[int]) -> bool:
    if tok.i in quoted or ent_label.get(tok.i, "") in _HARD_VALUE_LABELS:
        return False
    return tok.text == "." or (tok.like_num and any(c.isdigit() for c in tok.text))


def _gap_word(tok: Token, quoted: set[int], blocked) -> bool:
    if tok.i in quoted or blocked(tok):
        return False
    return (
        tok.lower_ in NAME_CONNECTORS
        or tok.lower_ in _VERSUS
        or tok.text in _JOINERS
        or _is_capitalized(tok)
        or tok.like_num
    )


def _joins_anyway(doc: Doc, start: int, j: int, k: int) -> bool:
    """Gaps that join two entities NER keeps apart: a case name ("A v. B"), a name particle ("Cieli di
    Toscana"), or "of" after a single given name ("Jobst of Limburg", "Amalia of Cleves")."""
    gap = [t.lower_ for t in doc[j:k]]
    if len(gap) == 1 and gap[0] in _VERSUS:
        return True
    if len(gap) == 1 and gap[0] in _NAME_PARTICLES:
        return True
    return (
        gap == ["of"] and j - start == 1 and doc[start].pos_ == "PROPN" and not _sentence_initial(doc[start])
    )


def _separate_entities(doc: Doc, left: int, right: int) -> bool:
    """True when NER puts the words on both sides of a gap into two different entities."""
    a = next((e for e in doc.ents if e.start <= left < e.end), None)
    b = next((e for e in doc.ents if e.start <= right < e.end), None)
    return a is not None and b is not None and a != b


def _resolve(
    doc: Doc,
    spans: list[tuple[int, int, str]],
    ent_label: dict[int, str],
    runs: list[tuple[int, int]] = (),
    cut_runs: list[tuple[int, int]] = (),
) -> list[Mention]:
    """Union overlapping name spans (name wins over value), trim determiners/possessives, build texts."""
    names = sorted((s, e) for s, e, k in spans if k == "name")
    merged: list[list[int]] = []
    for s, e in names:
        if merged and s < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    merged = [piece for s, e in merged for piece in _split_alternatives(doc, s, e)]
    merged = [piece for s, e in merged for piece in _split_at_runs(s, e, cut_runs)]
    merged = [(s, e) for s, e in merged if any(_is_capitalized(t) or t.like_num for t in doc[s:e])]
    starts = {a for a, _ in runs}
    taken = set()
    out: list[Mention] = []
    for s, e in merged:
        if s in starts:  # a title run keeps its first word ("Through a Glass Darkly")
            e = _trim(doc, s + 1, e)[1] if e - s > 1 else e
        else:
            s, e = _trim(doc, s, e)
        s, e = _trim_descriptors(doc, s, e)
        if s >= e:
            continue
        root = next((t for t in doc[s:e] if not s <= t.head.i < e or t.head.i == t.i), doc[e - 1])
        if e < len(doc) and doc[e].lower_ in GENERIC_HEADS and root.head.i == e and e not in taken:
            e += 1  # "the Koch family": the family is what is named
        taken.update(range(s, e))
        label = next((ent_label[i] for i in range(s, e) if i in ent_label), "")
        out.append(Mention(s, e, _span_text(doc, s, e), "name", label))
    for s, e, k in spans:
        if k != "value" or any(i in taken for i in range(s, e)):
            continue
        s, e = _trim(doc, s, e)
        if s >= e or any(i in taken for i in range(s, e)):
            continue
        taken.update(range(s, e))
        text = _YEAR_PREFIX.sub("", _span_text(doc, s, e))  # "the year 1995" is counted as "1995"
        out.append(Mention(s, e, text, "value", ent_label.get(s, "")))
    out = _join_styled_names(doc, out)
    taken = {i for m in out for i in range(m.start, m.end)}
    # Nationalities the NER missed or folded into a name are values ("Ethel Houbiers French").
    for t in doc:
        if t.i not in taken and t.lower_ in DEMONYMS and _is_capitalized(t):
            s = (
                t.i - 1
                if t.i > 0 and doc[t.i - 1].lower_ in DEMONYM_PREFIXES and t.i - 1 not in taken
                else t.i
            )
            taken.update(range(s, t.i + 1))
            out.append(Mention(s, t.i + 1, doc[s : t.i + 1].text, "value", "NORP"))
    out.sort(key=lambda m: m.start)
    return out


_STYLE_TITLES = frozenset(
    {"prince", "princess", "duke", "duchess", "king", "queen", "count", "countess", "earl", "margrave",
     "landgrave", "elector", "archduke", "archduchess", "grand", "lord", "baron", "baroness", "viscount",
     "marquess", "emperor", "empress", "bishop", "abbot", "sultan", "khan", "shah"}
)  # fmt: skip


def _join_styled_names(doc: Doc, mentions: list[Mention]) -> list[Mention]:
    """ "Karl Frederick, Prince of Anhalt-Bernburg" is one name: a name, a comma, and a title "of" a place."""
    names = sorted((m for m in mentions if m.kind == "name"), key=lambda m: m.start)
    out = [m for m in mentions if m.kind != "name"]
    i = 0
    while i < len(names):
        m = names[i]
        if i + 1 < len(names):
            nxt = names[i + 1]
            words = [t.lower_ for t in doc[nxt.start : nxt.end]]
            if (
                nxt.start == m.end + 1
                and doc[m.end].text == ","
                and words[0] in _STYLE_TITLES
                and "of" in words[1:3]
            ):
                out.append(Mention(m.start, nxt.end, _span_text(doc, m.start, nxt.end), "name", m.label))
                i += 2
                continue
        out.append(m)
        i += 1
    return sorted(out, key=lambda m: m.start)


def _split_at_runs(s: int, e: int, runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Cut a merged name span where a title run begins or ends ("films The Brink's Job and They ...")."""
    cuts = sorted({p for a, b in runs for p in (a, b) if s < p < e})
    bounds = [s, *cuts, e]
    return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if a < b]


def _split_alternatives(doc: Doc, s: int, e: int) -> list[tuple[int, int]]:
    """Cut a name span at "or" ("The Ape Man or The Ape" names two films)."""
    pieces = []
    start = s
    for i in range(s, e):
        if doc[i].lower_ in _ALTERNATIVES and doc[i].pos_ == "CCONJ" and start < i < e - 1:
            pieces.append((start, i))
            start = i + 1
    pieces.append((start, e))
    return [(a, b) for a, b in pieces if a < b]


def _is_demonym(doc: Doc, i: int) -> bool:
    return doc[i].lower_ in DEMONYMS or (
        doc[i].lower_ in DEMONYM_PREFIXES and i + 1 < len(doc) and doc[i + 1].lower_ in DEMONYMS
    )


def _trim_descriptors(doc: Doc, s: int, e: int) -> tuple[int, int]:
    """Drop nationalities at either end of a name, and a leading rank or office when a full name of two
    or more words follows ("Prussian General Carl von Clausewitz" -> "Carl von Clausewitz")."""
    # A leading nationality goes only before a rank or a person ("Prussian General ..."), not from an
    # organisation's name ("British Army", "American Continental Army").
    while (
        s < e
        and _is_demonym(doc, s)
        and e - s > 1
        and (
            doc[s + 1].lower_.rstrip(".") in RANK_TITLES
            or (doc[s].pos_ == "ADJ" and doc[e - 1].ent_type_ == "PERSON")
        )
    ):
        s += 1
    while e > s and _is_demonym(doc, e - 1) and e - s > 1:
        e -= 1
    while s < e and doc[s].lower_.rstrip(".") in RANK_TITLES and e - s >= 3:
        s += 1
    if s < e and all(_is_demonym(doc, i) for i in range(s, e)):
        return s, s  # only a nationality: a value, not a name
    return s, e


def _trim(doc: Doc, s: int, e: int) -> tuple[int, int]:
    while s < e and (
        doc[s].lower_ in _DETERMINERS
        and not (doc[s].text[:1].isupper() and _keeps_article(doc, s, e))
        or doc[s].is_punct
        or doc[s].text in _QUOTES
        or doc[s].lower_ in WH_WORDS
        or (_sentence_initial(doc[s]) and doc[s].pos_ in ("AUX", "ADP", "ADV", "PRON", "SCONJ", "PART"))
    ):
        s += 1
    while e > s and (
        (doc[e - 1].is_alpha and doc[e - 1].is_lower and doc[e - 1].pos_ in ("VERB", "AUX"))
        or doc[e - 1].tag_ == "POS"
        or doc[e - 1].text in ("'s", "'", "’s", "’")
        or doc[e - 1].is_punct
        or doc[e - 1].lower_ in NAME_CONNECTORS
        or doc[e - 1].lower_ == "and"
    ):
        e -= 1
    return s, e


def _keeps_article(doc: Doc, s: int, e: int) -> bool:
    """A capitalised article belongs to a title mid-sentence ("directed The Phantom Hour") or when NER put
    it inside the entity at the start of a sentence ("The Sensational Trial was directed by ...")."""
    if doc[s].lower_ not in ("the", "a", "an") or e - s < 2:
        return False
    if not _sentence_initial(doc[s]):
        return True
    return any(ent.start == s and ent.label_ not in VALUE_LABELS for ent in doc.ents)


def _span_text(doc: Doc, s: int, e: int) -> str:
    text = doc[s:e].text
    for q in _QUOTES:
        text = text.replace(q, "")
    text = text.strip(" ,;:")
    if e == len(doc) and text.endswith(".") and not text.endswith(".."):
        text = text[:-1]  # "World War I." at the end of the sentence: the period ends the sentence
    # A title that ended with its own period before the sentence period ("The Operation M.D..").
    return re.sub(r"\.\.+$", ".", text)
