"""Few-shot chain-of-thought prompts: exemplars, templates and prompt assembly.

Exemplars and templates are data. The built-in ones were written for this project; ``load_exemplars`` and
``load_template`` also read external files (for instance the papers' own exemplar and template files) so a
paper-faithful prompt can be used unchanged. ``published:NAME`` names the published QuCo-RAG files in the
evaluation data directory (``QUCO_DATA_DIR``), read where they are at run time: the exemplar lists of its
``src/data.py`` (``published:hotpotqa``, ``published:2wikimultihopqa``) and the generation templates of its
``src/prompt_templates.json`` (``published:new_prompt_v1``, ``published:new_prompt_v3``, ``published:llama-2``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
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
# The published QuCo-RAG exemplars (its src/data.py; the same lists as DRAGIN's) and generation templates, as files
# under the evaluation data directory, and the exemplar set each dataset name selects in the first.
PUBLISHED_EXEMPLARS = "fewshot/quco_rag_src_data_py_exemplars.json"
PUBLISHED_TEMPLATES = "fewshot/quco_rag/prompt_templates.json"
_PUBLISHED_SETS = {"hotpotqa": "HotpotQA", "2wikimultihopqa": "WikiMultiHopQA"}
PASSAGE_FORMATS = ("title_text", "text")


@dataclass(frozen=True)
class Exemplar:
    question: str
    cot: str
    answer: str

    def render(self, separator: str = "\n\n") -> str:
        """The worked example, then ``separator`` (ours: a blank line; the published code: one newline)."""
        reasoning = f"{self.cot} " if self.cot else ""
        return f"Question: {self.question}\nAnswer: {reasoning}So the answer is {self.answer}.{separator}"


@dataclass(frozen=True)
class TemplateSection:
    context_header: str
    doc_format: str
    post_doc: str
    instruction: str


# Layout settings beyond the sections, with the values every prompt had before they existed (ours).
LAYOUT_DEFAULTS: dict[str, str] = {
    "shot_separator": "\n\n",
    "question_prefix": "",
    "passage_format": "title_text",
}


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    exemplar_header: str
    initial: TemplateSection
    hallucination: TemplateSection
    shot_separator: str = LAYOUT_DEFAULTS["shot_separator"]  # after each exemplar
    question_prefix: str = LAYOUT_DEFAULTS["question_prefix"]  # before the question's "Question:" line
    # "title_text": a passage reads "Title: text" (ours); "text": its text alone (the published code's)
    passage_format: str = LAYOUT_DEFAULTS["passage_format"]

    def passage(self, doc: Passage) -> str:
        return doc.as_context() if self.passage_format == "title_text" else doc.text

    def identity(self) -> dict[str, Any]:
        """What the template is, for a run's identity: the layout settings appear only where they differ from
        ours, so a template that uses none of them is identified as it was before they existed."""
        data = asdict(self)
        for key, default in LAYOUT_DEFAULTS.items():
            if data[key] == default:
                del data[key]
        return data


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


def _published_file(relative: str) -> Path:
    from quco.paths import data_dir

    path = data_dir() / relative
    if not path.is_file():
        raise ConfigError(
            f"published prompt file not found: {path}; set QUCO_DATA_DIR to the evaluation data directory"
        )
    return path


@lru_cache(maxsize=32)
def load_exemplars(spec: str) -> tuple[Exemplar, ...]:
    """``builtin:hotpotqa``, ``builtin:2wikimultihopqa``, ``builtin:pubmedqa``, or ``FILE[#SET]`` (JSON list,
    JSONL, or a class map)."""
    if spec.startswith("published:"):
        name = spec.split(":", 1)[1]
        if name not in _PUBLISHED_SETS:
            raise ConfigError(
                f"unknown published exemplars '{name}'; known: {', '.join(sorted(_PUBLISHED_SETS))}"
            )
        spec = f"{_published_file(PUBLISHED_EXEMPLARS)}#{_PUBLISHED_SETS[name]}"
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
    """A built-in layout name (``quco``, ``baseline``), ``published:KEY`` (a template of the published QuCo-RAG
    file), or ``FILE#KEY`` of a JSON file in the same shape."""
    if spec.startswith("published:"):
        key = spec.split(":", 1)[1]
        table = json.loads(_published_file(PUBLISHED_TEMPLATES).read_text(encoding="utf-8"))
        name = spec
    elif "#" in spec or spec.endswith(".json"):
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
    layout = {k: entry[k] for k in LAYOUT_DEFAULTS if k in entry}
    if layout.get("passage_format", "title_text") not in PASSAGE_FORMATS:
        raise ConfigError(f"template '{key}': passage_format must be one of {', '.join(PASSAGE_FORMATS)}")
    return PromptTemplate(
        name=name,
        exemplar_header=entry.get("exemplar_header", "Examples:\n"),
        initial=_section(entry["initial"], spec),
        hallucination=_section(entry.get("hallucination", entry["initial"]), spec),
        **layout,
    )


def configured_template(prompt: Any, default: str, fresh: bool = False) -> PromptTemplate:
    """The template a config's ``prompt`` section resolves to: its ``template`` (or the method's ``default``)
    with the layout settings the section sets (``exemplar_header``, ``shot_separator``, ``question_prefix``,
    ``passage_format``; None keeps the template's). ``fresh``: read the files as they are now, not cached."""
    name = prompt.template or default
    template = load_template.__wrapped__(name) if fresh else load_template(name)
    keys = ("exemplar_header", *LAYOUT_DEFAULTS)
    changes = {k: v for k in keys if (v := getattr(prompt, k, None)) is not None}
    return replace(template, **changes) if changes else template


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
    parts.extend(e.render(template.shot_separator) for e in exemplars)
    shared = sum(map(len, parts))  # the exemplars open every prompt of a run: a backend may keep their state
    if docs:
        parts.append(section.context_header)
        parts.extend(
            section.doc_format.format(index=i + 1, doc=template.passage(d)) for i, d in enumerate(docs)
        )
        parts.append(section.post_doc)
    parts.append(section.instruction)
    parts.append(f"{template.question_prefix}Question: {question}\nAnswer:")
    if prefix:
        parts.append(" " + prefix.strip())
    return Prompt("".join(parts), shared)
