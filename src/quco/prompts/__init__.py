"""Few-shot chain-of-thought prompts: exemplars, templates and prompt assembly.

Exemplars and templates are data. The built-in ones were written for this project; ``load_exemplars`` and
``load_template`` also read external files (for instance the papers' own exemplar and template files) so a
paper-faithful prompt can be used unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from quco.errors import ConfigError
from quco.llm.base import Prompt
from quco.retrieval.base import Passage

_BUILTIN_EXEMPLARS = {
    "hotpotqa": "exemplars_hotpotqa.json",
    "2wikimultihopqa": "exemplars_2wikimultihopqa.json",
    # Eight short biomedical yes/no/maybe questions written for this project (4 yes, 3 no, 1 maybe, close to
    # PQA-L's label mix). None is taken from, or paraphrases, a PubMedQA question: PQA-L records 0-199 are
    # evaluated and 200-299 calibrate, so exemplars from either would leak. Each ends "So the answer is
    # yes|no|maybe.", the label the scorer reads first after "answer is".
    "pubmedqa": "exemplars_pubmedqa.json",
}


@dataclass(frozen=True)
class Exemplar:
    question: str
    cot: str
    answer: str

    def render(self) -> str:
        reasoning = f"{self.cot} " if self.cot else ""
        return f"Question: {self.question}\nAnswer: {reasoning}So the answer is {self.answer}.\n\n"


@dataclass(frozen=True)
class TemplateSection:
    context_header: str
    doc_format: str
    post_doc: str
    instruction: str


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    exemplar_header: str
    initial: TemplateSection
    hallucination: TemplateSection


def _exemplar_from(record: dict[str, Any], where: str) -> Exemplar:
    if "question" not in record:
        raise ConfigError(f"exemplar without 'question' in {where}")
    if "cot" in record:
        return Exemplar(
            str(record["question"]), str(record["cot"]).strip(), str(record.get("answer", "")).strip()
        )
    # A single answer string that carries the reasoning and ends with "So the answer is X."
    text = str(record.get("answer", "")).strip()
    marker = "So the answer is"
    if marker in text:
        cot, ans = text.rsplit(marker, 1)
        return Exemplar(str(record["question"]), cot.strip(), ans.strip().rstrip(".").strip())
    return Exemplar(str(record["question"]), "", text)


def _find_list(data: Any, key: str | None) -> list[dict[str, Any]]:
    """Find the exemplar list in the shapes we know: a list, or {classes: {Name: {attr: {examplars: [...]}}}}."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        classes = data.get("classes", data)
        if key is not None:
            node = classes.get(key) if isinstance(classes, dict) else None
            if node is None:
                raise ConfigError(f"no exemplar set '{key}'; available: {', '.join(sorted(classes))}")
        elif isinstance(classes, dict) and len(classes) == 1:
            node = next(iter(classes.values()))
        else:
            names = ", ".join(sorted(classes)) if isinstance(classes, dict) else ""
            raise ConfigError(f"exemplar file holds several sets; pick one with FILE#NAME ({names})")
        if isinstance(node, list):
            return node
        if isinstance(node, dict):
            for value in node.values():
                if isinstance(value, dict) and isinstance(value.get("examplars"), list):
                    return value["examplars"]
                if isinstance(value, list):
                    return value
            if isinstance(node.get("examplars"), list):
                return node["examplars"]
    raise ConfigError("exemplar file has no list of {question, cot, answer} records")


@lru_cache(maxsize=32)
def load_exemplars(spec: str) -> tuple[Exemplar, ...]:
    """``builtin:hotpotqa``, ``builtin:2wikimultihopqa``, ``builtin:pubmedqa``, or ``FILE[#SET]`` (JSON list,
    JSONL, or a class map)."""
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        if name not in _BUILTIN_EXEMPLARS:
            raise ConfigError(
                f"unknown built-in exemplars '{name}'; known: {', '.join(sorted(_BUILTIN_EXEMPLARS))}"
            )
        text = resources.files("quco.prompts").joinpath("data", _BUILTIN_EXEMPLARS[name]).read_text("utf-8")
        return tuple(_exemplar_from(r, spec) for r in json.loads(text))
    path_str, _, key = spec.partition("#")
    path = Path(path_str).expanduser()
    if not path.is_file():
        raise ConfigError(f"exemplar file not found: {path}")
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read exemplar file {path}: {exc}") from exc
    try:
        if path.suffix == ".jsonl":
            records = [json.loads(line) for line in raw.splitlines() if line.strip()]
        else:
            records = _find_list(json.loads(raw), key or None)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"exemplar file {path} is not valid JSON: {exc}") from exc
    exemplars = tuple(_exemplar_from(r, str(path)) for r in records)
    if not exemplars:
        raise ConfigError(f"exemplar file {path} holds no exemplars")
    return exemplars


def _section(data: dict[str, Any], where: str) -> TemplateSection:
    try:
        return TemplateSection(
            context_header=data.get("context_header", ""),
            doc_format=data["doc_format"],
            post_doc=data.get("post_doc", ""),
            instruction=data.get("instruction", ""),
        )
    except KeyError as exc:
        raise ConfigError(f"template section in {where} lacks {exc}") from exc


@lru_cache(maxsize=32)
def load_template(spec: str) -> PromptTemplate:
    """A built-in layout name (``quco``, ``baseline``) or ``FILE#KEY`` of a JSON file in the same shape."""
    if "#" in spec or spec.endswith(".json"):
        path_str, _, key = spec.partition("#")
        path = Path(path_str).expanduser()
        if not path.is_file():
            raise ConfigError(f"template file not found: {path}")
        table = json.loads(path.read_text(encoding="utf-8"))
        name = key or spec
    else:
        table = json.loads(
            resources.files("quco.prompts").joinpath("data", "templates.json").read_text("utf-8")
        )
        key = spec
        name = spec
    if key not in table:
        known = ", ".join(k for k, v in table.items() if isinstance(v, dict) and "initial" in v)
        raise ConfigError(f"unknown prompt template '{key}'; known: {known}")
    entry = table[key]
    return PromptTemplate(
        name=name,
        exemplar_header=entry.get("exemplar_header", "Examples:\n"),
        initial=_section(entry["initial"], spec),
        hallucination=_section(entry.get("hallucination", entry["initial"]), spec),
    )


def build_prompt(
    question: str,
    exemplars: Sequence[Exemplar],
    template: PromptTemplate,
    docs: Sequence[Passage] = (),
    prefix: str = "",
    regenerate: bool = False,
) -> Prompt:
    """Exemplars, then (if any) passages and the instruction, then the question and the text written so far."""
    section = template.hallucination if regenerate else template.initial
    parts = [template.exemplar_header if exemplars else ""]
    parts.extend(e.render() for e in exemplars)
    shared = sum(map(len, parts))  # the exemplars open every prompt of a run: a backend may keep their state
    if docs:
        parts.append(section.context_header)
        parts.extend(section.doc_format.format(index=i + 1, doc=d.as_context()) for i, d in enumerate(docs))
        parts.append(section.post_doc)
    parts.append(section.instruction)
    parts.append(f"Question: {question}\nAnswer:")
    if prefix:
        parts.append(" " + prefix.strip())
    return Prompt("".join(parts), shared)
