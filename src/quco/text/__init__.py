"""Text tools: sentence splitting, question entities and (head, relation, tail) triplets.

``build_text(config)`` gives the three tools a method uses; the rule-based ones read spaCy's parse,
the LLM ones prompt the extractor model through the ``LLMCall`` the engine passes in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from quco.text.base import EntityExtractor, LLMCall, SentenceSplitter, Triplet, TripletExtractor
from quco.text.entities import LLMEntityExtractor, RuleEntityExtractor
from quco.text.nlp import load_spacy
from quco.text.parsing import parse_tuples
from quco.text.prompts import ExtractorPrompts, builtin_prompts, load_external_prompts
from quco.text.sentences import SpacySentenceSplitter
from quco.text.triplets import LLMTripletExtractor, RuleTripletExtractor, is_question

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


def build_text(config, prompts: ExtractorPrompts | str | Path | None = None) -> TextTools:
    """Build the text tools a ``quco.config.TextConfig`` asks for.

    ``prompts`` (an ``ExtractorPrompts`` or the path of a QuCo-style JSON file) replaces our built-in
    few-shot prompts for the LLM extractors; a config field ``extractor_prompts`` does the same.
    spaCy is loaded lazily, on the first sentence, so building is instant.
    """
    if prompts is None:
        prompts = getattr(config, "extractor_prompts", None)
    if prompts is not None and not isinstance(prompts, ExtractorPrompts):
        prompts = load_external_prompts(prompts)
    model = config.spacy_model
    max_new = config.extractor_max_new_tokens
    entities: EntityExtractor = (
        LLMEntityExtractor(prompts, max_new)
        if config.entity_extractor == "llm"
        else RuleEntityExtractor(model)
    )
    triplets: TripletExtractor = (
        LLMTripletExtractor(prompts, max_new)
        if config.triplet_extractor == "llm"
        else RuleTripletExtractor(model)
    )
    return TextTools(
        splitter=SpacySentenceSplitter(model), entities=entities, triplets=triplets, spacy_model=model
    )
