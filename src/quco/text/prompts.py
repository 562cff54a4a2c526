"""Few-shot prompts for the LLM extractors, and a loader for QuCo-style prompt files.

The built-in prompts are our own text and examples (training-style multi-hop questions and chain-of-
thought sentences). They ask for the same output shape as the published QuCo extractor, so a model
fine-tuned for it, or the published prompt file loaded with ``load_external_prompts``, drop in unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from quco.errors import ConfigError

PLACEHOLDER = "{sentence}"

# Keys of the published QuCo-RAG prompt file (src/prompt_templates.json).
QUCO_ENTITY_KEY = "entity_extraction_prompt_for_question"
QUCO_TRIPLET_KEY = "entity_extraction_prompt"


@dataclass(frozen=True)
class ExtractorPrompts:
    """Two templates, each with one placeholder where the question or sentence goes."""

    entities: str
    triplets: str
    placeholder: str = PLACEHOLDER
    source: str = "builtin"

    def render_entities(self, question: str) -> str:
        return self._fill(self.entities, question)

    def render_triplets(self, sentence: str) -> str:
        return self._fill(self.triplets, sentence)

    def _fill(self, template: str, text: str) -> str:
        # The slot is the last one: an instruction may quote the placeholder, the task comes at the end.
        before, _, after = template.rpartition(self.placeholder)
        return before + text + after


ENTITY_INSTRUCTION = (
    "List the named things a question asks about: people, places, organisations, works (films, books, "
    "songs, albums) and events, written exactly as in the question. Leave out question words, dates, "
    "numbers and ordinary nouns. Answer with a JSON list of one-element lists, in the order of the question, "
    "or [] when the question names nothing."
)

ENTITY_EXAMPLES: list[tuple[str, list[list[str]]]] = [
    (
        "Which film came out earlier, Nosferatu or The Cabinet of Dr. Caligari?",
        [["Nosferatu"], ["The Cabinet of Dr. Caligari"]],
    ),
    ("Who is the spouse of the director of film Wild Strawberries?", [["Wild Strawberries"]]),
    (
        "Were Ernest Hemingway and William Faulkner of the same nationality?",
        [["Ernest Hemingway"], ["William Faulkner"]],
    ),
    ("The Eiffel Tower stands in a city on which river?", [["Eiffel Tower"]]),
    ("In which year was the university where Alan Turing earned his doctorate founded?", [["Alan Turing"]]),
    ("When did Louis XIV of France's mother die?", [["Louis XIV of France"]]),
    ("What instrument did the lead singer of the band Queen play?", [["Queen"]]),
    ("Is it usually warmer in summer than in winter?", []),
]

TRIPLET_INSTRUCTION = (
    "Write the facts a sentence states as a JSON list.\n"
    "- A statement gives one [head, relation, tail] per fact. Head and tail are names, titles, dates or "
    "numbers copied from the sentence (never pronouns); the relation is a few words.\n"
    "- A question gives one [entity, relation] per named thing it asks about, since the answer is unknown.\n"
    "- A sentence that states no fact between named things (a conclusion, a comparison, the final answer) "
    "gives []."
)

TRIPLET_EXAMPLES: list[tuple[str, list[list[str]]]] = [
    (
        "Which film came out earlier, Nosferatu or The Cabinet of Dr. Caligari?",
        [["Nosferatu", "release date"], ["The Cabinet of Dr. Caligari", "release date"]],
    ),
    ("Nosferatu was directed by F. W. Murnau.", [["Nosferatu", "directed by", "F. W. Murnau"]]),
    (
        "F. W. Murnau was born on 28 December 1888 in Bielefeld.",
        [["F. W. Murnau", "born on", "28 December 1888"], ["F. W. Murnau", "born in", "Bielefeld"]],
    ),
    ("Thus, The Cabinet of Dr. Caligari came out first.", []),
    (
        "Ernest Hemingway's third wife was Martha Gellhorn, a war correspondent.",
        [
            ["Ernest Hemingway", "wife", "Martha Gellhorn"],
            ["Martha Gellhorn", "occupation", "war correspondent"],
        ],
    ),
    ("Therefore, they do not have the same nationality.", []),
    ("Who is the spouse of the director of film Wild Strawberries?", [["Wild Strawberries", "director"]]),
    (
        "The Eiffel Tower is located in Paris, which lies on the Seine.",
        [["Eiffel Tower", "located in", "Paris"], ["Paris", "lies on", "Seine"]],
    ),
    ("William Faulkner was born two years before Ernest Hemingway.", []),
    (
        "Alan Turing earned his doctorate at Princeton University, which was founded in 1746.",
        [
            ["Alan Turing", "doctorate at", "Princeton University"],
            ["Princeton University", "founded in", "1746"],
        ],
    ),
    (
        "Queen's lead singer Freddie Mercury played the piano.",
        [["Queen", "lead singer", "Freddie Mercury"], ["Freddie Mercury", "played", "piano"]],
    ),
    ("So the answer is Bielefeld.", []),
]


def _few_shot(instruction: str, examples: list[tuple[str, list[list[str]]]], label: str, out: str) -> str:
    parts = [instruction, ""]
    for text, tuples in examples:
        parts += [f"{label}: {text}", f"{out}: {json.dumps(tuples, ensure_ascii=False)}", ""]
    parts += [f"{label}: {PLACEHOLDER}", f"{out}:"]
    return "\n".join(parts)


def builtin_prompts() -> ExtractorPrompts:
    """Our own few-shot prompts (the default of the LLM extractors)."""
    return ExtractorPrompts(
        entities=_few_shot(ENTITY_INSTRUCTION, ENTITY_EXAMPLES, "Question", "Entities"),
        triplets=_few_shot(TRIPLET_INSTRUCTION, TRIPLET_EXAMPLES, "Sentence", "Facts"),
    )


def load_external_prompts(
    path: str | Path, entity_key: str = QUCO_ENTITY_KEY, triplet_key: str = QUCO_TRIPLET_KEY
) -> ExtractorPrompts:
    """Read a QuCo-style JSON prompt file (two templates with a ``{}`` or ``{sentence}`` slot), unchanged."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            f"extractor prompt file '{p}' does not exist: give a JSON file with '{triplet_key}'"
        )
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f"extractor prompt file '{p}' is not readable JSON ({exc}): fix or replace it"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(
            f"extractor prompt file '{p}' must hold a JSON object with '{entity_key}', '{triplet_key}'"
        )
    templates = []
    for key in (entity_key, triplet_key):
        value = data.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"extractor prompt file '{p}' has no text under '{key}': add it")
        templates.append(value)
    placeholder = next((ph for ph in ("{}", PLACEHOLDER) if all(ph in t for t in templates)), None)
    if placeholder is None:
        raise ConfigError(
            f"extractor prompt file '{p}': each template needs one '{{}}' or '{PLACEHOLDER}' slot for the sentence"
        )
    return ExtractorPrompts(
        entities=templates[0], triplets=templates[1], placeholder=placeholder, source=str(p)
    )
