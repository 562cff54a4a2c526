"""Few-shot prompts for the LLM extractors, and a loader for QuCo-style prompt files.

The built-in prompts are our own text and examples (training-style multi-hop questions and chain-of-
thought sentences). They ask for the same output shape as the published QuCo extractor, so a model
fine-tuned for it, or the published prompt file loaded with ``load_external_prompts``, drop in unchanged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from quco.errors import ConfigError
from quco.llm.base import Prompt

PLACEHOLDER = "{sentence}"
CONTEXT_SLOT = "{context}"
CONTEXT_LABEL = "Earlier text"

# Keys of the published QuCo-RAG prompt file (src/prompt_templates.json).
QUCO_ENTITY_KEY = "entity_extraction_prompt_for_question"
QUCO_TRIPLET_KEY = "entity_extraction_prompt"


@dataclass(frozen=True)
class FewShot:
    """An instruction and worked examples, rendered as chat turns."""

    instruction: str
    examples: tuple[tuple[str | tuple[str, str], str], ...]  # (input or (earlier text, input), reply)
    request: str  # the user's words before the quoted input, e.g. "Names in this question"

    def _user(self, text: str | tuple[str, str]) -> str:
        earlier = ""
        if isinstance(text, tuple):
            earlier, text = text
        ask = f'{self.request}: "{text}"'
        if earlier and earlier.strip():
            return f'{CONTEXT_LABEL}: "{" ".join(earlier.split())}"\n{ask}'
        return ask

    def messages(self, text: str, context: str | None = None) -> list[dict[str, str]]:
        turns = [{"role": "system", "content": self.instruction}]
        for example, reply in self.examples:
            turns += [
                {"role": "user", "content": self._user(example)},
                {"role": "assistant", "content": reply},
            ]
        turns.append({"role": "user", "content": self._user((context or "", text))})
        return turns


@dataclass(frozen=True)
class ExtractorPrompts:
    """Two templates, each with one placeholder where the question or sentence goes."""

    entities: str
    triplets: str
    placeholder: str = PLACEHOLDER
    source: str = "builtin"
    # The same prompts as chat turns (instruction as the system turn, each example as a user turn and
    # the model's reply), for chat models; None: the flat template goes in as one user turn.
    entity_turns: FewShot | None = None
    triplet_turns: FewShot | None = None

    def render_entities(self, question: str) -> str:
        return self._fill(self.entities, question)

    def entity_messages(self, question: str) -> list[dict[str, str]] | None:
        return self.entity_turns.messages(question) if self.entity_turns else None

    def triplet_messages(self, sentence: str, context: str | None = None) -> list[dict[str, str]] | None:
        return self.triplet_turns.messages(sentence, context) if self.triplet_turns else None

    def render_triplets(self, sentence: str, context: str | None = None) -> str:
        """The triplet prompt; a template with a ``{context}`` line shows the text before the sentence
        there (so the model can name who "he" is), and drops the line when there is none."""
        template = self.triplets
        if CONTEXT_SLOT in template:
            line = f"{CONTEXT_LABEL}: {' '.join(context.split())}\n" if context and context.strip() else ""
            template = template.replace(CONTEXT_SLOT + "\n", line)
        return self._fill(template, sentence)

    def _fill(self, template: str, text: str) -> str:
        # The slot is the last one: an instruction may quote the placeholder, the task comes at the end.
        before, _, after = template.rpartition(self.placeholder)
        return before + text + after


ENTITY_INSTRUCTION = (
    "Task: copy out the names a question mentions, so that each can be looked up. Names are people, "
    "places, organisations, works (films, books, songs, albums, magazines), events and other proper names, "
    "written exactly as in the question. Leave out question words, dates, numbers, nationalities and "
    "ordinary nouns. Do not answer the question. Reply with a JSON list of one-element lists in the order "
    "of the question, or [] when the question names nothing."
)
ENTITY_TASK = "Now the question to read. Copy its names; do not answer it."
ENTITY_REQUEST = "Copy the names from this question (do not answer it)"

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
    "Task: write the facts a sentence states as a JSON list, so that each can be checked.\n"
    "- A statement gives one [head, relation, tail] per fact. Head and tail are names, titles, dates, "
    'numbers or nationalities copied from the sentence; the relation is a few words, such as "directed by" '
    'or "born in".\n'
    '- Never use a pronoun or a description ("he", "it", "the film") as head or tail: use the name '
    "it stands for, from the earlier text when it is given.\n"
    "- A question gives one [entity, relation] per named thing it asks about, since the answer is unknown.\n"
    "- A sentence that states no fact about a named thing (a conclusion, a comparison, the final answer) "
    "gives []."
)
TRIPLET_TASK = "Now the sentence to read. Reply with its JSON list only."
TRIPLET_REQUEST = "Facts stated by this sentence alone"

TRIPLET_EXAMPLES: list[tuple[str | tuple[str, str], list[list[str]]]] = [
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
    (
        ("The Eiffel Tower was designed by the company of Gustave Eiffel.", "He was born in Dijon."),
        [["Gustave Eiffel", "born in", "Dijon"]],
    ),
    (
        ("Who directed the film Wild Strawberries?", "The film was released in 1957."),
        [["Wild Strawberries", "released in", "1957"]],
    ),
]


def _few_shot(
    instruction: str,
    examples: list[tuple[str | tuple[str, str], list[list[str]]]],
    label: str,
    out: str,
    task: str,
    context: bool = False,
) -> str:
    parts = [instruction, "", "Examples:", ""]
    for text, tuples in examples:
        if isinstance(text, tuple):  # (earlier text, sentence)
            parts.append(f"{CONTEXT_LABEL}: {text[0]}")
            text = text[1]
        parts += [f"{label}: {text}", f"{out}: {json.dumps(tuples, ensure_ascii=False)}", ""]
    parts += [task, ""]
    if context:
        parts.append(CONTEXT_SLOT)
    parts += [f"{label}: {PLACEHOLDER}", f"{out}:"]
    return "\n".join(parts)


def _turns(instruction: str, examples: list, request: str) -> FewShot:
    return FewShot(
        instruction, tuple((text, json.dumps(t, ensure_ascii=False)) for text, t in examples), request
    )


def builtin_prompts() -> ExtractorPrompts:
    """Our own few-shot prompts (the default of the LLM extractors)."""
    return ExtractorPrompts(
        entity_turns=_turns(ENTITY_INSTRUCTION, ENTITY_EXAMPLES, ENTITY_REQUEST),
        triplet_turns=_turns(TRIPLET_INSTRUCTION, TRIPLET_EXAMPLES, TRIPLET_REQUEST),
        entities=_few_shot(ENTITY_INSTRUCTION, ENTITY_EXAMPLES, "Question", "Entities", ENTITY_TASK),
        triplets=_few_shot(
            TRIPLET_INSTRUCTION, TRIPLET_EXAMPLES, "Sentence", "Facts", TRIPLET_TASK, context=True
        ),
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


class PromptedExtractor:
    """What the LLM extractors share: their prompts, output budget, and how a prompt reaches the model.

    ``chat`` wraps the few-shot prompt in the model's chat template (``quco.llm.chat.ChatFormat``), as the
    published extractor does; None sends it as raw text.
    """

    name = "llm"

    def __init__(
        self,
        prompts: ExtractorPrompts | None = None,
        max_new_tokens: int = 256,
        chat: Callable[[str], str] | None = None,
    ) -> None:
        self.prompts = prompts or builtin_prompts()
        self.max_new_tokens = max_new_tokens
        self.chat = chat

    def _wrap(self, raw: str, messages: list[dict[str, str]] | None, *blanks: str) -> Prompt:
        """The prompt as the model sees it (``_render``), declaring as shared the characters every call
        repeats: those it has in common with the same prompt for empty inputs (``blanks``: the raw prompt for
        "", with and without an earlier text), so the part ends where the input's turn or line begins. A
        backend may evaluate that part once and reuse its state (llama.cpp does, with outputs unchanged); to
        anything else the prompt is the plain string."""
        full = self._render(raw, messages)
        blank_turns = [*messages[:-1], {**messages[-1], "content": ""}] if messages else None
        empty = [self._render(b, blank_turns) for b in blanks]
        common = os.path.commonprefix([full, *empty])
        return Prompt(full, len(common.rstrip(" ")))

    def _render(self, raw: str, messages: list[dict[str, str]] | None) -> str:
        """``raw`` as the model sees it: as is without ``chat``; otherwise our examples as conversation turns
        where the prompts have them (``messages``), else ``raw`` as one user turn, as published."""
        if self.chat is None:
            return raw
        render = getattr(self.chat, "render_messages", None)
        if messages is not None and render is not None:
            return render(messages)
        return self.chat(raw)
