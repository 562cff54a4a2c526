"""Question entities: the named things whose corpus frequency decides QuCo-RAG's first retrieval."""

from __future__ import annotations

import re

from quco.errors import ConfigError
from quco.text.base import LLMCall
from quco.text.mentions import WH_WORDS, parse
from quco.text.parsing import parse_tuples
from quco.text.prompts import PromptedExtractor

# ", A or B?" / ": A or B?" at the end of a comparison question; each side is one name.
_ALTERNATIVES = re.compile(r"[,:]\s*(?P<a>[^,:?]+?)\s+or\s+(?P<b>[^,:?]+?)\s*[?.]?\s*$")
_QUOTED = re.compile(r"[\"“]([^\"“”]{2,60})[\"”]")
_MAX_ALTERNATIVE_WORDS = 10
_GENERIC_NOUNS = frozenset({"what", "which", "who", "one", "ones", "thing", "things", "type", "kind", "name"})


def _title_like(text: str) -> bool:
    words = text.split()
    if not words or len(words) > _MAX_ALTERNATIVE_WORDS:
        return False
    first = words[1] if words[0].lower() == "the" and len(words) > 1 else words[0]
    return first[:1].isupper() or first[:1].isdigit() or first[:1] in "\"“'"


def _alternatives(text: str) -> list[tuple[int, int]]:
    m = _ALTERNATIVES.search(text)
    if m is None or not (_title_like(m.group("a")) and _title_like(m.group("b"))):
        return []
    out = []
    for group in ("a", "b"):
        a, b = m.span(group)
        if text[a : a + 4] == "the ":  # "the Carondelet Canal": the article is not part of the name
            a += 4
        out.append((a, b))
    return out


def _quoted(text: str) -> list[tuple[int, int]]:
    return [m.span(1) for m in _QUOTED.finditer(text)]


def _fallback(parsed) -> list[tuple[int, int, str]]:
    """Full dates and noun phrases with a modifier ("English engineer", "pub restaurant chain")."""
    doc = parsed.doc
    out: list[tuple[int, int, str]] = []
    for m in parsed.mentions:
        if m.kind == "value" and m.label == "DATE" and sum(t.like_num for t in doc[m.start : m.end]) >= 2:
            out.append((doc[m.start].idx, doc[m.end - 1].idx + len(doc[m.end - 1]), m.text))
    for chunk in doc.noun_chunks:
        toks = [t for t in chunk if t.pos_ not in ("DET", "PRON") and t.lower_ not in WH_WORDS]
        if len(toks) < 2 or toks[-1].lower_ in _GENERIC_NOUNS:
            continue
        if any(t.like_num for t in toks):
            continue
        a, b = toks[0].idx, toks[-1].idx + len(toks[-1])
        if not any(a < e and s < b for s, e, _ in out):
            out.append((a, b, doc.text[a:b]))
    return out


def _dedupe(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        key = item.casefold()
        if item and key not in seen and key not in WH_WORDS:
            seen.add(key)
            out.append(item)
    return out


class RuleEntityExtractor:
    """Named mentions of the parse (entities united with proper-noun runs and titles); dates and numbers
    are left out because a frequent "2014" would lift the mean count that decides retrieval.

    Three question-level rules add what the mention rules miss: the alternatives of a comparison
    ("..., Romance on the Run or The Wilby Conspiracy?") are taken whole; a quoted phrase is a name even
    in lower case ("ghost man"); and a question that names nothing falls back to its most specific noun
    phrases and full dates ("English engineer", "15 December 1857"), so that stage 1 has something to
    count instead of skipping retrieval.
    """

    name = "rules"

    def __init__(self, model: str = "auto") -> None:
        self.model = model

    def question_entities(self, question: str, llm: LLMCall | None = None) -> list[str]:
        if not question or not question.strip():
            return []
        parsed = parse(question, self.model)
        doc = parsed.doc
        found: list[tuple[int, int, str]] = []  # (start char, end char, text)
        for a, b in _alternatives(doc.text) + _quoted(doc.text):
            text = doc.text[a:b].strip(" \"'“”‘’")
            if text and not any(a < e and s < b for s, e, _ in found):
                found.append((a, b, text))
        for m in parsed.mentions:
            if m.kind != "name":
                continue
            a, b = doc[m.start].idx, doc[m.end - 1].idx + len(doc[m.end - 1])
            if not any(a < e and s < b for s, e, _ in found):
                found.append((a, b, m.text))
        if not found:
            found = _fallback(parsed)
        found.sort()
        return _dedupe([t for _, _, t in found])


class LLMEntityExtractor(PromptedExtractor):
    """Entities by prompting the extractor LLM; the first element of each returned tuple, as QuCo does."""

    def _prompt(self, question: str) -> str:
        return self._wrap(
            self.prompts.render_entities(question),
            self.prompts.entity_messages(question),
            self.prompts.render_entities(""),
        )

    def question_entities(self, question: str, llm: LLMCall | None = None) -> list[str]:
        if llm is None:
            raise ConfigError("the 'llm' entity extractor needs an LLM call: run it through the engine")
        if not question or not question.strip():
            return []
        output = llm(self._prompt(question.strip()), self.max_new_tokens)
        return _dedupe([item[0] for item in parse_tuples(output) if item])
