"""Question entities: the named things whose corpus frequency decides QuCo-RAG's first retrieval."""

from __future__ import annotations

from quco.errors import ConfigError
from quco.text.base import LLMCall
from quco.text.mentions import WH_WORDS, parse
from quco.text.parsing import parse_tuples
from quco.text.prompts import ExtractorPrompts, builtin_prompts


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
    """Named mentions of the parse (entities united with proper-noun runs); dates and numbers are left out
    because a frequent "2014" would lift the mean count that decides retrieval."""

    name = "rules"

    def __init__(self, model: str = "auto") -> None:
        self.model = model

    def question_entities(self, question: str, llm: LLMCall | None = None) -> list[str]:
        if not question or not question.strip():
            return []
        parsed = parse(question, self.model)
        return _dedupe([m.text for m in parsed.mentions if m.kind == "name"])


class LLMEntityExtractor:
    """Entities by prompting the extractor LLM; the first element of each returned tuple, as QuCo does."""

    name = "llm"

    def __init__(self, prompts: ExtractorPrompts | None = None, max_new_tokens: int = 64) -> None:
        self.prompts = prompts or builtin_prompts()
        self.max_new_tokens = max_new_tokens

    def question_entities(self, question: str, llm: LLMCall | None = None) -> list[str]:
        if llm is None:
            raise ConfigError("the 'llm' entity extractor needs an LLM call: run it through the engine")
        if not question or not question.strip():
            return []
        output = llm(self.prompts.render_entities(question.strip()), self.max_new_tokens)
        return _dedupe([item[0] for item in parse_tuples(output) if item])
