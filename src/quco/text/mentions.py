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

from spacy.tokens import Doc, Token

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
        if j < k < n and name[k] and not _separate_entities(doc, j - 1, k):
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
    return _resolve(doc, spans, ent_label)


def _attachable_number(tok: Token, ent_label: dict[int, str], quoted: set[int]) -> bool:
    if tok.i in quoted or ent_label.get(tok.i, "") in _HARD_VALUE_LABELS:
        return False
    return tok.text == "." or (tok.like_num and any(c.isdigit() for c in tok.text))


def _gap_word(tok: Token, quoted: set[int], blocked) -> bool:
    if tok.i in quoted or blocked(tok):
        return False
    return tok.lower_ in NAME_CONNECTORS or tok.text in _JOINERS or _is_capitalized(tok) or tok.like_num


def _separate_entities(doc: Doc, left: int, right: int) -> bool:
    """True when NER puts the words on both sides of a gap into two different entities."""
    a = next((e for e in doc.ents if e.start <= left < e.end), None)
    b = next((e for e in doc.ents if e.start <= right < e.end), None)
    return a is not None and b is not None and a != b


def _resolve(doc: Doc, spans: list[tuple[int, int, str]], ent_label: dict[int, str]) -> list[Mention]:
    """Union overlapping name spans (name wins over value), trim determiners/possessives, build texts."""
    names = sorted((s, e) for s, e, k in spans if k == "name")
    merged: list[list[int]] = []
    for s, e in names:
        if merged and s < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    taken = set()
    out: list[Mention] = []
    for s, e in merged:
        s, e = _trim(doc, s, e)
        if s >= e:
            continue
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
    out.sort(key=lambda m: m.start)
    return out


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
        doc[e - 1].tag_ == "POS"
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
    # A title that ended with its own period before the sentence period ("The Operation M.D..").
    return re.sub(r"\.\.+$", ".", text)
