"""Text tools: sentence splitting, question entities and (head, relation, tail) triplets.

``build_text(config)`` gives the three tools a method uses; the rule-based ones read spaCy's parse,
the LLM ones prompt the extractor model through the ``LLMCall`` the engine passes in.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quco.errors import ConfigError
from quco.llm.chat import ChatFormat, chat_format_of
from quco.text.base import EntityExtractor, LLMCall, SentenceSplitter, Triplet, TripletExtractor
from quco.text.entities import LLMEntityExtractor, RuleEntityExtractor
from quco.text.nlp import load_spacy
from quco.text.parsing import parse_tuples
from quco.text.prompts import ExtractorPrompts, builtin_prompts, load_external_prompts
from quco.text.sentences import SpacySentenceSplitter
from quco.text.triplets import LLMTripletExtractor, RuleTripletExtractor, is_question

log = logging.getLogger(__name__)

__all__ = [
    "EntityExtractor",
    "ExtractorPrompts",
    "LLMCall",
    "LLMEntityExtractor",
    "LLMTripletExtractor",
    "RuleEntityExtractor",
    "RuleTripletExtractor",
    "SentenceSplitter",
    "SpacySentenceSplitter",
    "TextTools",
    "Triplet",
    "TripletExtractor",
    "build_text",
    "builtin_prompts",
    "extractor_chat",
    "is_question",
    "load_external_prompts",
    "load_spacy",
    "parse_tuples",
]


@dataclass
class TextTools:
    splitter: SentenceSplitter
    entities: EntityExtractor
    triplets: TripletExtractor
    spacy_model: str = "auto"

    def nlp(self):  # noqa: ANN201 - a spaCy Language
        """The spaCy pipeline the tools share, for methods that tag words (DRAGIN, ETC, SeaKR)."""
        return load_spacy(self.spacy_model)


def build_text(
    config, prompts: ExtractorPrompts | str | Path | None = None, generator: Any = None
) -> TextTools:
    """Build the text tools a ``quco.config.TextConfig`` asks for.

    ``prompts`` (an ``ExtractorPrompts`` or the path of a QuCo-style JSON file) replaces our built-in
    few-shot prompts for the LLM extractors; a config field ``extractor_prompts`` does the same.
    ``generator`` is the model the LLM extractors will call: its chat template wraps their prompts
    (``extractor_chat``: "auto" when it has one, "on" requires one, "off" sends raw text).
    spaCy is loaded lazily, on the first sentence, so building is instant.
    """
    if prompts is None:
        prompts = getattr(config, "extractor_prompts", None)
    if prompts is not None and not isinstance(prompts, ExtractorPrompts):
        prompts = load_external_prompts(prompts)
    model = config.spacy_model
    max_new = config.extractor_max_new_tokens
    uses_llm = config.entity_extractor == "llm" or config.triplet_extractor == "llm"
    chat = extractor_chat(generator, getattr(config, "extractor_chat", "auto")) if uses_llm else None
    entities: EntityExtractor = (
        LLMEntityExtractor(prompts, max_new, chat)
        if config.entity_extractor == "llm"
        else RuleEntityExtractor(model)
    )
    triplets: TripletExtractor = (
        LLMTripletExtractor(prompts, max_new, chat)
        if config.triplet_extractor == "llm"
        else RuleTripletExtractor(model)
    )
    return TextTools(
        splitter=SpacySentenceSplitter(model), entities=entities, triplets=triplets, spacy_model=model
    )


def extractor_chat(generator: Any, mode: str = "auto") -> ChatFormat | None:
    """The chat format that wraps LLM-extractor prompts for ``generator`` under ``mode`` (auto/on/off)."""
    if mode not in ("auto", "on", "off"):
        raise ConfigError(f"text.extractor_chat must be auto, on or off, not {mode!r}")
    if mode == "off" or generator is None:
        if mode == "on":
            raise ConfigError(
                "text.extractor_chat=on needs the extractor's generator to read its chat template"
            )
        return None
    chat = chat_format_of(generator)
    if chat is None:
        if mode == "on":
            raise ConfigError(
                f"text.extractor_chat=on, but generator '{getattr(generator, 'name', generator)}' has no chat "
                "template to read (an OpenAI-compatible server applies its own with generator.chat=true); "
                "set text.extractor_chat=auto or off"
            )
        log.info("the extractor's generator has no chat template; LLM extractor prompts are sent as raw text")
    return chat
