"""(head, relation, tail) triplets from a dependency parse, and from an LLM.

The rule extractor reads one clause per predicate: the subject resolves to a name mention (directly, via
"the film X", "X's father", "the director of X"), and every name or value mention governed by the
predicate without crossing another clause is a tail. QuCo-RAG only counts head and tail in a corpus
(the relation just feeds the retrieval query), so the rules favour a correct (head, tail) pair over a
polished relation, and give nothing for sentences that state no fact between two mentions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from spacy.tokens import Token

from quco.text.base import LLMCall, Triplet
from quco.text.lexicon import (
    DEMONYMS,
    PERSON_NOUNS,
    PERSON_PRONOUNS,
    THING_NOUNS,
    THING_PRONOUNS,
)
from quco.text.mentions import ROLE_CUES, WH_WORDS, Mention, Parsed, parse
from quco.text.parsing import parse_tuples
from quco.text.prompts import PromptedExtractor

log = logging.getLogger(__name__)

# Dependency labels of a token that starts its own clause (a new predicate).
_CLAUSE_DEPS = frozenset({"ROOT", "conj", "relcl", "advcl", "ccomp", "csubj", "parataxis", "pcomp"})
_SUBJECT_DEPS = ("nsubj", "nsubjpass", "csubj")
_RELATIVE_PRONOUNS = frozenset({"who", "whom", "which", "that", "whose"})
# Prepositions that compare two mentions rather than relate them ("older than Y", "born before Y").
_COMPARISON_PREPS = frozenset({"than"})
_ORDER_PREPS = frozenset({"before", "after"})
_DO_SUPPORT = frozenset({"do", "does", "did"})
_PATH_DEPS_SKIP = frozenset({"punct", "cc", "advmod", "appos", "conj", "det", "case"})
_TRANSPARENT_DEPS = frozenset({"conj", "appos", "npadvmod"})
# Verbs that carry no relation in a question ("Were X and Y of the same nationality?").
_LIGHT_VERBS = frozenset({"be", "have", "do"})
# Nouns that only introduce a name ("the director of film X").
_ROLE_NOUNS = frozenset(
    {"film", "movie", "band", "album", "song", "book", "novel", "series", "magazine", "city"}
)


def is_question(sentence: str) -> bool:
    """A sentence is a question when it ends with "?" (generated questions always do)."""
    return sentence.rstrip().rstrip("\"'”’)").endswith("?")


@dataclass(frozen=True)
class Antecedent:
    """A name that a later pronoun or descriptive noun may stand for; ``person`` is None when unknown."""

    text: str
    person: bool | None


_THING_LABELS = frozenset({"WORK_OF_ART", "ORG", "GPE", "LOC", "FAC", "EVENT", "PRODUCT", "LAW"})


@dataclass
class Context:
    """Names of the text before a sentence, most likely antecedent first, and for descriptive nouns the
    name the text attached to them ("a book about the Koch family": book -> Koch family)."""

    antecedents: list[Antecedent]
    nouns: dict[str, str]


def read_context(context: str, model: str = "auto") -> Context:
    """The last sentence's names come before the earlier ones, and in each sentence its subject before
    its other names (a later "he" usually continues the subject)."""
    parsed = parse(context, model)
    doc = parsed.doc
    out: list[Antecedent] = []
    for sent in reversed(list(doc.sents)):
        names = [m for m in parsed.mentions if m.kind == "name" and sent.start <= m.start < sent.end]
        subjects = [m for m in names if _root(parsed, m).dep_ in ("nsubj", "nsubjpass")]
        for m in subjects + [m for m in names if m not in subjects]:
            out.append(Antecedent(m.text, _personhood(parsed, m)))
    nouns: dict[str, str] = {}
    for tok in doc:
        word = tok.lower_
        if tok.pos_ != "NOUN" or word not in PERSON_NOUNS | THING_NOUNS or parsed.at(tok.i) is not None:
            continue
        linked = [parsed.at(c.i) for c in tok.children if c.dep_ in ("appos", "compound", "nmod")]
        if word in THING_NOUNS:  # "a book about X", "the film called X"; a director "of X" is not X
            for c in tok.children:
                if c.dep_ in ("prep", "acl") and c.lower_ in ("about", "of", "called", "named", "titled"):
                    linked += [parsed.at(p.i) for p in c.subtree if p.dep_ in ("pobj", "oprd", "dobj")]
        if word in THING_NOUNS and tok.i + 1 < len(doc) and parsed.at(tok.i + 1) is not None:
            linked.append(parsed.at(tok.i + 1))  # "the film Bugsy"
        name = next((m for m in linked if m is not None and m.kind == "name"), None)
        if name is not None:
            nouns[word] = name.text
    return Context(out, nouns)


def antecedents(context: str, model: str = "auto") -> list[Antecedent]:
    """Names of the context, most likely antecedent first (see ``read_context``)."""
    return read_context(context, model).antecedents


def _personhood(parsed: Parsed, m: Mention) -> bool | None:
    doc = parsed.doc
    if m.start > 0 and doc[m.start - 1].lower_ in ROLE_CUES:
        return False  # "the film X"
    if m.label == "PERSON":
        return True
    if m.label in _THING_LABELS:
        return False
    return None


def _antecedent_for(parsed: Parsed, person: bool | None) -> Mention | None:
    """The first antecedent compatible with the wanted kind (a person, a thing, or either)."""
    pool = parsed.context.antecedents if parsed.context is not None else []
    for strict in (True, False):
        for a in pool:
            if person is None or a.person is person or (not strict and a.person is None):
                return Mention(-1, -1, a.text, "name", "PERSON" if a.person else "")
    return None


def _stand_in(parsed: Parsed, tok: Token) -> Mention | None:
    """The name a pronoun ("she", "its") or a definite descriptive noun ("the film", "the Duchess")
    stands for, from the context; None when there is no context or no compatible name."""
    if parsed.context is None:
        return None
    word = tok.lower_
    if tok.pos_ == "PRON":
        if word in PERSON_PRONOUNS:
            return _antecedent_for(parsed, True)
        if word in THING_PRONOUNS:
            return _antecedent_for(parsed, False)
        return None
    if not any(c.dep_ == "det" and c.lower_ in ("the", "this", "that") for c in tok.children):
        return None
    if word in parsed.context.nouns:  # the question's "book about the Koch family" is "the book"
        return Mention(-1, -1, parsed.context.nouns[word], "name", "")
    if word in PERSON_NOUNS:
        return _antecedent_for(parsed, True)
    if word in THING_NOUNS:
        return _antecedent_for(parsed, False)
    return None


@dataclass(frozen=True)
class _Head:
    mention: Mention
    noun: str | None  # "nationality" in "X's nationality is Y": the relation, not a verb


class RuleTripletExtractor:
    """Triplets from spaCy's dependency parse; questions give (entity, relation) 2-tuples."""

    name = "rules"

    def __init__(self, model: str = "auto") -> None:
        self.model = model

    def triplets(
        self, sentence: str, llm: LLMCall | None = None, context: str | None = None
    ) -> list[Triplet]:
        """Claims of one sentence; with ``context`` (the question and the text before the sentence) a
        pronoun or descriptive subject ("She", "The film") becomes the name it stands for."""
        if not sentence or not sentence.strip():
            return []
        parsed = parse(sentence, self.model)
        if is_question(sentence):
            return _dedupe(question_tuples(parsed))
        if context and context.strip():
            parsed.context = read_context(context, self.model)
        return _dedupe(_declarative(parsed))


# ----------------------------------------------------------------------------------------------- questions


def question_tuples(parsed: Parsed) -> list[Triplet]:
    """One (entity, relation) per name mention; the relation is the noun or verb that governs it."""
    out = []
    for m in parsed.mentions:
        if m.kind != "name":
            continue
        rel = _question_relation(parsed, m)
        if rel:
            out.append(Triplet(m.text, rel))
    return out


def _question_relation(parsed: Parsed, m: Mention) -> str | None:
    tok = _root(parsed, m)
    seen = 0
    while seen < 12:
        seen += 1
        head = tok.head
        if tok.dep_ == "poss" and head.pos_ in ("NOUN", "PROPN") and parsed.at(head.i) is None:
            return _noun_phrase(head)
        if (
            tok.dep_ in ("appos", "compound")
            and head.pos_ == "NOUN"
            and parsed.at(head.i) is None
            and head.lower_ not in _ROLE_NOUNS
        ):
            return _noun_phrase(head)  # "the director of film X" parsed as "director ... X" (appos)
        if tok.dep_ == "pobj" and head.dep_ == "prep" and head.lower_ == "of":
            owner = head.head
            if owner.pos_ == "NOUN" and parsed.at(owner.i) is None and not _role_word(owner):
                return _noun_phrase(owner)
        if tok.dep_ == "ROOT" or head.i == tok.i:
            break
        if (
            tok.pos_ in ("VERB", "AUX")
            and tok.dep_ in _CLAUSE_DEPS | {"acl", "xcomp"}
            and tok.i != _root(parsed, m).i
        ):
            break
        tok = head
    verb = tok if tok.pos_ in ("VERB", "AUX") else tok.head
    if verb.pos_ not in ("VERB", "AUX"):
        return None
    if verb.lemma_ in _LIGHT_VERBS:
        # "Were X and Y of the same nationality?", "Which film has the director born first, X or Y?":
        # the verb says nothing; the noun the question asks about does.
        for t in parsed.doc:
            if (
                t.pos_ in ("NOUN", "ADJ")
                and t.dep_ not in ("amod", "compound")
                and parsed.at(t.i) is None
                and t.lower_ not in WH_WORDS
                and t.lower_ not in _ROLE_NOUNS
            ):
                return _noun_phrase(t)
        return verb.lower_
    return " ".join([verb.lower_] + [c.lower_ for c in verb.children if c.dep_ == "prt"])


def _role_word(tok: Token) -> bool:
    """A noun that only introduces a name ("film" in "the director of film X")."""
    return any(c.dep_ in ("appos", "compound") for c in tok.children) and tok.lower_ in _ROLE_NOUNS


# ------------------------------------------------------------------------------------------- declaratives


def _declarative(parsed: Parsed) -> list[Triplet]:
    doc = parsed.doc
    predicates = [t for t in doc if _is_predicate(t)]
    if not predicates:
        return []
    owner: dict[int, Token] = {}  # mention start -> predicate that governs it
    out: list[Triplet] = []
    mentions = [_count_phrase(parsed, m) or m for m in parsed.mentions]
    for m in mentions:
        pred = _governing_predicate(_root(parsed, m), predicates)
        if pred is not None:
            owner[m.start] = pred
    for pred in predicates:
        subjects = _subjects(pred)
        if not subjects:
            continue
        subject_tokens = {t.i for subject in subjects for t in subject.subtree}
        resolved = [(subj, _resolve_head(parsed, subj, pred)) for subj in subjects]
        found = next(((subj, head) for subj, head in resolved if head is not None), None)
        if found is None:
            continue
        subject = found[0]
        # "Both A and B are in Queensland": each conjoined subject is a head.
        for subj in [subject, *(c for c in subject.conjuncts if c.i > subject.i)]:
            head = found[1] if subj.i == subject.i else _resolve_head(parsed, subj, pred)
            if head is None:
                continue
            for m in mentions:
                if m is head.mention or m.start in subject_tokens:
                    continue
                if (owner[m.start].i if m.start in owner else -1) != pred.i:
                    continue
                if m.text.lower() == head.mention.text.lower():
                    continue
                rel = _relation(parsed, pred, head, m)
                if rel is not None:
                    out.append(Triplet(head.mention.text, rel, m.text))
            out.extend(_copula_noun_tails(parsed, pred, head))
    out.extend(_participle_triplets(parsed, predicates))
    out.extend(_apposition_triplets(parsed))
    return out


def _count_phrase(parsed: Parsed, m: Mention) -> Mention | None:
    """ "published 16 bestselling novels": a written number counting the object is a claim; the tail is
    the whole count ("16 bestselling novels"), which a corpus can check together with the head."""
    doc = parsed.doc
    if (
        m.kind != "value"
        or m.label not in ("CARDINAL", "QUANTITY", "")
        or not any(c.isdigit() for c in m.text)
    ):
        return None
    root = _root(parsed, m)
    noun = root.head
    if root.dep_ != "nummod" or noun.pos_ != "NOUN" or noun.i < m.end or parsed.at(noun.i) is not None:
        return None
    if noun.dep_ not in ("dobj", "pobj", "attr", "npadvmod"):
        return None
    end = noun.i + 1
    return Mention(m.start, end, doc[m.start : end].text, "value", "COUNT")


def _apposition_triplets(parsed: Parsed) -> list[Triplet]:
    """ "X's father, Y, studied at Z" and "the director of X, Y, ...": the noun links X and Y."""
    doc = parsed.doc
    out = []

    def comma_before(i: int) -> bool:
        return i > 0 and doc[i - 1].text == ","

    for tok in doc:
        if tok.pos_ != "NOUN" or parsed.at(tok.i) is not None:
            continue
        named = [parsed.at(c.i) for c in tok.children if c.dep_ == "appos"]
        named = [m for m in named if m is not None and m.kind == "name" and comma_before(m.start)]
        # "Robert Enrico, the director of X, ...": the noun is the apposition of the name.
        host = parsed.at(tok.head.i)
        if tok.dep_ == "appos" and host is not None and host.kind == "name" and comma_before(tok.left_edge.i):
            named.append(host)
        if not named:
            continue
        owner = None
        for c in tok.children:
            if c.dep_ == "poss":
                owner = _name_of(parsed, c, search=False)
            elif c.dep_ == "prep" and c.lower_ == "of":
                pobj = next((p for p in c.children if p.dep_ == "pobj"), None)
                owner = _name_of(parsed, pobj, search=False) if pobj is not None else None
            if owner is not None:
                break
        if owner is not None:
            out.extend(Triplet(owner.mention.text, _noun_phrase(tok), m.text) for m in named)
    return out


def _is_predicate(tok: Token) -> bool:
    if tok.dep_ == "conj" and tok.head.i != tok.i and tok.pos_ in ("VERB", "AUX"):
        # "a film written and directed by Y": a verb conjoined to a participle is a participle too.
        return _is_predicate(tok.head) or any(c.dep_ in _SUBJECT_DEPS for c in tok.children)
    if tok.pos_ == "VERB":
        return tok.dep_ in _CLAUSE_DEPS
    if tok.pos_ == "AUX":
        return tok.dep_ in _CLAUSE_DEPS and any(c.dep_ in _SUBJECT_DEPS for c in tok.children)
    return False


def _root(parsed: Parsed, m: Mention) -> Token:
    """The token of a mention whose head lies outside it."""
    span = parsed.doc[m.start : m.end]
    for t in span:
        if not (m.start <= t.head.i < m.end) or t.head.i == t.i:
            return t
    return span.root


def _governing_predicate(tok: Token, predicates: list[Token]) -> Token | None:
    pred_ids = {p.i for p in predicates}
    steps = 0
    while steps < 40:
        steps += 1
        if tok.i in pred_ids:
            return tok
        if tok.head.i == tok.i:
            return None
        tok = tok.head
    return None


def _subjects(pred: Token) -> list[Token]:
    """Subject tokens of a predicate; the parser sometimes gives two ("The film X was ...")."""
    found = [c for c in pred.children if c.dep_ in _SUBJECT_DEPS]
    if found:
        return found
    # "X was directed by Y and released in 1967": the second verb shares the first one's subject.
    if pred.dep_ == "conj" and pred.head.pos_ in ("VERB", "AUX"):
        return _subjects(pred.head)
    return []


def _resolve_head(parsed: Parsed, subject: Token, pred: Token) -> _Head | None:
    inside = parsed.at(subject.i)
    if inside is not None and inside.kind == "name":  # a title may end in a pronoun ("... Gavest Me")
        if inside.end - inside.start == 1 and subject.lower_ in PERSON_NOUNS | THING_NOUNS:
            stand_in = _stand_in(parsed, subject)  # "The Duchess was born ...": a role, not a name
            if stand_in is not None:
                return _Head(stand_in, None)
        return _Head(inside, None)
    if subject.lower_ in _RELATIVE_PRONOUNS and subject.head.dep_ == "relcl":
        noun = subject.head.head
        found = _name_of(parsed, noun, search=False)  # also for verbs conjoined to the clause
        if found is None and noun.dep_ in ("attr", "conj") and parsed.at(noun.i) is None:
            # "X was an actor who was involved in ...": the clause is about X, the copula's subject
            cop = noun.head
            while cop.dep_ == "conj" and cop.head.i != cop.i:
                cop = cop.head
            if cop.lemma_ == "be":
                subj = next((c for c in cop.children if c.dep_ in _SUBJECT_DEPS), None)
                if subj is not None:
                    return _resolve_head(parsed, subj, cop)
        return found
    if subject.pos_ == "PRON":
        stand_in = _stand_in(parsed, subject)
        return _Head(stand_in, None) if stand_in is not None else None
    head = _name_of(parsed, subject, search=True)
    if head is None and subject.pos_ in ("NOUN", "PROPN"):
        stand_in = _stand_in(parsed, subject)  # "The film was directed by ..."
        if stand_in is not None:
            return _Head(stand_in, None)
    return head


def _name_of(parsed: Parsed, tok: Token, search: bool) -> _Head | None:
    """The name mention a noun phrase is about, and the noun that relates them (if not the name itself)."""
    m = parsed.at(tok.i)
    if m is not None:
        return _Head(m, None) if m.kind == "name" else None
    if tok.pos_ == "PRON":  # "His father was ...": the pronoun's name, when the context gives one
        stand_in = _stand_in(parsed, tok)
        return _Head(stand_in, None) if stand_in is not None else None
    noun = _noun_phrase(tok) if tok.pos_ == "NOUN" and tok.lower_ != "answer" else None
    owner = parsed.at(tok.head.i)
    if tok.dep_ == "appos" and owner is not None and owner.kind == "name":
        return _Head(owner, None)  # "Matt Busby, the manager who was born in Bellshill"
    for c in tok.children:  # "the film Hypocrite", "the band Hot Hot Heat"
        cm = parsed.at(c.i)
        if c.dep_ in ("appos", "compound", "nmod") and cm is not None and cm.kind == "name":
            has_of = any(p.dep_ == "prep" and p.lower_ == "of" for p in tok.children)
            return _Head(cm, noun if has_of else None)
    for c in tok.children:  # "X's nationality"
        if c.dep_ == "poss":
            inner = _name_of(parsed, c, search=False)
            if inner is not None:
                return _Head(inner.mention, noun)
    for c in tok.children:  # "the director of (film) X"
        if c.dep_ == "prep" and c.lower_ == "of":
            for p in c.children:
                if p.dep_ == "pobj":
                    inner = _name_of(parsed, p, search=False)
                    if inner is not None:
                        return _Head(inner.mention, noun)
    if tok.lower_ == "answer":
        return None
    if search:
        for t in tok.subtree:
            cm = parsed.at(t.i)
            if cm is not None and cm.kind == "name":
                return _Head(cm, noun)
    return None


def _noun_phrase(tok: Token, with_modifiers: bool = False) -> str:
    """A noun with its compound/adjective modifiers and hyphenated continuation ("father-in-law");
    ``with_modifiers`` also keeps verb-participle modifiers ("flowering plants")."""
    doc = tok.doc
    start = tok.i
    deps = ("compound", "amod", "nmod") if with_modifiers else ("compound", "amod")
    while (
        start > 0
        and doc[start - 1].dep_ in deps
        and doc[start - 1].head.i >= tok.i
        and not doc[start - 1].text[:1].isupper()  # a name in front is a mention, not part of the relation
    ):
        if (
            doc[start - 1].ent_type_ in ("NORP",)
            or doc[start - 1].tag_ in ("JJR", "JJS")
            or doc[start - 1].lower_ in ("same", "different", "other", "such")
        ):
            break
        start -= 1
    end = tok.i + 1
    while end + 1 < len(doc) and doc[end].text in ("-", "–") and doc[end - 1].whitespace_ == "":
        end += 2
    return doc[start:end].text.lower()


def _verb_phrase(pred: Token) -> list[Token]:
    parts = [
        c
        for c in pred.children
        if (c.dep_ in ("aux", "auxpass") and c.lower_ not in _DO_SUPPORT and c.lower_ != "to")
        or c.dep_ == "neg"
    ]
    parts.append(pred)
    parts.extend(c for c in pred.children if c.dep_ == "prt")
    return sorted(parts, key=lambda t: t.i)


def _relation(parsed: Parsed, pred: Token, head: _Head, tail: Mention) -> str | None:
    """The words from the predicate down to the tail, or None when the tail is not a stated fact."""
    child = _root(parsed, tail)
    if child.dep_ == "poss" and any(
        c.dep_ == "appos" and parsed.at(c.i) is not None for c in child.head.children
    ):
        return None  # "with Shire's husband, Jack Schwartzman": the husband is the object, not Shire
    prev_dep = child.dep_
    tok = child.head
    path: list[Token] = []
    steps = 0
    while tok.i != pred.i:
        steps += 1
        if steps > 40 or tok.head.i == tok.i:
            return None
        if tok.dep_ == "prep" and tok.lower_ in _COMPARISON_PREPS:
            return None
        if (
            tok.dep_ == "prep"
            and tok.lower_ in _ORDER_PREPS
            and tail.kind == "name"
            and prev_dep == "pobj"
            and child.head.i == tok.i
        ):
            return None  # "born before Y" compares; "rivalry after the abdication of Y" relates
        if tok.tag_ in ("JJR", "RBR", "JJS", "RBS"):
            return None
        other = parsed.at(tok.i)
        if other is not None and other is not tail:
            # Through "A and B" / "A, B" the tail shares A's relation; a date in between is a parser
            # attachment slip ("born on 4 May 1950 in Warsaw"); any other mention owns the tail.
            if prev_dep not in _TRANSPARENT_DEPS and other.kind != "value":
                return None
            r = _root(parsed, other)
            prev_dep, tok = r.dep_, r.head
            if r.head.i == r.i:
                return None
            continue
        if tok.dep_ == "conj" and tok.pos_ == "VERB" and tok.head.pos_ == "VERB":
            # "written and directed by Y": keep the verb that governs Y, skip the first conjunct.
            path.append(tok)
            prev_dep, tok = "conj", tok.head
            if tok.i == pred.i:
                break
            prev_dep, tok = tok.dep_, tok.head
            continue
        if tok.dep_ not in _PATH_DEPS_SKIP or (tok.dep_ == "appos" and tok.pos_ == "NOUN"):
            path.append(tok)
        prev_dep = tok.dep_
        tok = tok.head
    if tail.kind == "value" and not _plain_value(parsed, tail, path):
        return None
    words = [t.lower_ if t.pos_ != "NOUN" else _noun_phrase(t) for t in sorted(path, key=lambda t: t.i)]
    if _is_nationality(tail) and pred.lemma_ == "be":
        return "nationality"  # "X was an American director": the tail is X's nationality
    if head.noun and pred.lemma_ == "be" and not words:
        return head.noun
    # A relation is read as a query after the head ("X directed by", "X born in"): auxiliaries and a
    # copula that has other words beside it add nothing.
    verb = [t.lower_ for t in _verb_phrase(pred) if t.dep_ not in ("aux", "auxpass")]
    if pred.lemma_ == "be" and (words or head.noun):
        verb = [w for w in verb if w == "not"]
    rel = ([head.noun] if head.noun else []) + verb + words
    return " ".join(rel) or pred.lower_


def _is_nationality(m: Mention) -> bool:
    return m.kind == "value" and (m.label == "NORP" or m.text.split()[-1].casefold() in DEMONYMS)


def _plain_value(parsed: Parsed, tail: Mention, path: list[Token]) -> bool:
    """A date or number is a tail only as a direct argument ("founded in 2009", "was 15,140"),
    not inside a noun phrase ("won one award") or with an article ("of the two")."""
    doc = parsed.doc
    if tail.label == "CARDINAL" and (
        any(doc[i].lower_ in ("the", "these", "those") for i in range(tail.start, tail.end))
        or any(c.dep_ == "det" for c in _root(parsed, tail).children)
    ):
        return False
    if tail.label == "NORP":
        return True
    return all(t.pos_ in ("ADP", "AUX", "VERB", "PART") for t in path) and _root(parsed, tail).dep_ not in (
        "nummod",
        "quantmod",
    )


_KIND_NOUNS = frozenset(
    {"type", "kind", "sort", "genus", "species", "form", "breed", "family", "member", "variety"}
)


def _kind_of(noun: Token) -> Token | None:
    """The noun after "a type of" / "a genus of" (the kind a copula names), if any."""
    if noun.lower_ not in _KIND_NOUNS:
        return None
    for c in noun.children:
        if c.dep_ == "prep" and c.lower_ == "of":
            pobj = next((p for p in c.children if p.dep_ == "pobj" and p.pos_ == "NOUN"), None)
            if pobj is not None:
                return pobj
    return None


def _copula_noun_tails(parsed: Parsed, pred: Token, head: _Head) -> list[Triplet]:
    """ "X is an actor and producer": a copula with a common-noun attribute and no mention in it gives
    (X, is, actor), (X, is, producer): the noun can be counted together with X."""
    if pred.lemma_ != "be":
        return []
    out = []
    for c in pred.children:
        if c.dep_ != "attr" or c.pos_ != "NOUN":
            continue
        clause = {t.i for k in c.children if k.dep_ in ("relcl", "acl") for t in k.subtree}
        inner = {m.start: m for t in c.subtree if t.i not in clause and (m := parsed.at(t.i)) is not None}
        if inner and not all(_is_nationality(m) for m in inner.values()):
            continue
        for m in inner.values():  # "an American film director": the nationality comes as its own claim
            out.append(Triplet(head.mention.text, "nationality", m.text))
        kind_of = _kind_of(c)
        if kind_of is not None:  # "a genus of flowering plants", "a type of bird": the kind is the tail
            out.append(
                Triplet(head.mention.text, f"{c.lower_} of", _noun_phrase(kind_of, with_modifiers=True))
            )
            continue
        nouns = [c] + [t for t in c.conjuncts if t.pos_ == "NOUN"]
        verb = head.noun or " ".join(t.lower_ for t in _verb_phrase(pred))  # "The genre of X is jazz"
        out.extend(Triplet(head.mention.text, verb, _noun_phrase(n)) for n in nouns)
    return out


def _participle_triplets(parsed: Parsed, predicates: list[Token]) -> list[Triplet]:
    """ "X studied at Y, founded in 1441": a participle hanging off a name mention makes it a head."""
    out = []
    for tok in parsed.doc:
        if tok.dep_ != "acl" or tok.pos_ != "VERB":
            continue
        anchor = parsed.at(tok.head.i)
        if anchor is None or anchor.kind != "name":
            continue
        head = _Head(anchor, None)
        for m in parsed.mentions:
            if m is anchor:
                continue
            root = _root(parsed, m)
            if tok.i not in {a.i for a in root.ancestors}:
                continue
            gov = _governing_predicate(root, predicates + [tok])
            if gov is None or gov.i != tok.i:
                continue
            rel = _relation(parsed, tok, head, m)
            if rel is not None:
                out.append(Triplet(anchor.text, rel, m.text))
    return out


def _dedupe(items: list[Triplet]) -> list[Triplet]:
    seen = set()
    out = []
    for t in items:
        key = (t.head.lower(), t.relation.lower(), (t.tail or "").lower())
        if key not in seen and t.head:
            seen.add(key)
            out.append(t)
    return out


# ----------------------------------------------------------------------------------------------- LLM


class LLMTripletExtractor(PromptedExtractor):
    """Triplets by prompting the extractor LLM with few-shot examples and parsing its list output.

    Our prompts show the ``context`` (question and earlier text) so that the model can name what a pronoun
    stands for; the published prompts have no place for it and get the sentence alone, as in the published
    extractor.
    """

    def _prompt(self, sentence: str, context: str | None) -> str:
        return self._wrap(
            self.prompts.render_triplets(sentence, context),
            self.prompts.triplet_messages(sentence, context),
            self.prompts.render_triplets(""),
            self.prompts.render_triplets("", "-"),
        )

    def triplets(
        self, sentence: str, llm: LLMCall | None = None, context: str | None = None
    ) -> list[Triplet]:
        if llm is None:
            from quco.errors import ConfigError

            raise ConfigError("the 'llm' triplet extractor needs an LLM call: run it through the engine")
        if not sentence or not sentence.strip():
            return []
        output = llm(self._prompt(sentence.strip(), context), self.max_new_tokens)
        out = []
        for item in parse_tuples(output):
            parts = [p.strip() for p in item]
            if len(parts) >= 3 and parts[0] and parts[2]:
                out.append(Triplet(parts[0], parts[1], parts[2]))
            elif len(parts) == 2 and parts[0]:
                out.append(Triplet(parts[0], parts[1]))
        if not out and output.strip() and "[]" not in output:
            log.debug("extractor output had no tuples: %r", output[:200])
        return _dedupe(out)
