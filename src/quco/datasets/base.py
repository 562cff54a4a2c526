"""The example type every loader returns, file reading with located errors, and question selection.

Loaders differ only in how a record maps to an ``Example``; reading, error messages and the
first-N / seeded-sample selection are shared so that every dataset behaves the same way.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from quco.errors import QucoError

Kind = Literal["span", "yesno", "yesnomaybe"]
KINDS: tuple[str, ...] = ("span", "yesno", "yesnomaybe")


class DatasetError(QucoError):
    """A dataset file is missing, unreadable, or has a record without a field the loader needs."""


@dataclass
class Example:
    """One evaluation question with every accepted gold answer (gold first, then aliases)."""

    id: str
    question: str
    answers: list[str]
    kind: Kind = "span"
    meta: dict[str, Any] = field(default_factory=dict)
    dataset: str = "jsonl"  # selects the answer-extraction rule (quco.eval.score.metrics)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "answers": list(self.answers),
            "kind": self.kind,
            "meta": dict(self.meta),
            "dataset": self.dataset,
        }


# A record as read from a file, with where it came from (for error messages).
@dataclass(frozen=True)
class Record:
    where: str  # "record 12", "line 40", "key '21645374'"
    data: dict[str, Any]


def open_text(path: Path):
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def is_jsonl(path: Path) -> bool:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return name.endswith((".jsonl", ".ndjson"))


def read_records(path: Path) -> list[Record]:
    """Records of a JSON list, a JSON object keyed by id (PubMedQA), or JSONL (optionally gzip)."""
    if not path.is_file():
        raise DatasetError(f"dataset file not found: {path}; set QUCO_DATA_DIR or pass an existing file")
    try:
        with open_text(path) as fh:
            if is_jsonl(path):
                return list(jsonl_records(path, fh))
            try:
                data = json.load(fh)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path} is not valid JSON (line {exc.lineno}): {exc.msg}") from exc
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DatasetError(f"cannot read dataset file {path}: {exc}") from exc
    if isinstance(data, list):
        out = []
        for i, item in enumerate(data):
            if not isinstance(item, dict):
                raise DatasetError(f"{path}: record {i} is a {type(item).__name__}, expected a JSON object")
            out.append(Record(f"record {i}", item))
        return out
    if isinstance(data, dict):
        out = []
        for key, item in data.items():
            if not isinstance(item, dict):
                raise DatasetError(
                    f"{path}: key '{key}' holds a {type(item).__name__}, expected a JSON object"
                )
            out.append(Record(f"key '{key}'", {"__key__": key, **item}))
        return out
    raise DatasetError(f"{path} holds a JSON {type(data).__name__}; expected a list or an object of records")


def jsonl_records(path: Path, fh) -> Iterator[Record]:
    for lineno, line in enumerate(fh, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: line {lineno} is not valid JSON: {exc.msg}") from exc
        if not isinstance(item, dict):
            raise DatasetError(f"{path}: line {lineno} is a {type(item).__name__}, expected a JSON object")
        yield Record(f"line {lineno}", item)


def need(rec: Record, path: Path, *names: str) -> Any:
    """The first present, non-null field among ``names``; otherwise a DatasetError naming file and record."""
    for name in names:
        value = rec.data.get(name)
        if value is not None:
            return value
    wanted = " or ".join(f"'{n}'" for n in names)
    raise DatasetError(f"{path}: {rec.where} has no field {wanted}; fix the record or use another loader")


def need_text(rec: Record, path: Path, *names: str) -> str:
    value = need(rec, path, *names)
    if not isinstance(value, str | int | float) or isinstance(value, bool) or not str(value).strip():
        raise DatasetError(
            f"{path}: {rec.where} field '{names[0]}' must be non-empty text, got {value!r:.60}"
        )
    return str(value).strip()


def answer_list(value: Any, rec: Record, path: Path, name: str) -> list[str]:
    """Gold answers as a de-duplicated list of strings; a bare string becomes a one-item list."""
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise DatasetError(f"{path}: {rec.where} field '{name}' holds {item!r:.60}; expected text")
        text = str(item).strip()
        if text and text not in out:
            out.append(text)
    if not out:
        raise DatasetError(f"{path}: {rec.where} field '{name}' has no non-empty answer")
    return out


def check_unique_ids(examples: Sequence[Example], path: Path) -> None:
    seen: set[str] = set()
    for ex in examples:
        if ex.id in seen:
            raise DatasetError(
                f"{path}: question id '{ex.id}' occurs twice; ids must be unique to resume runs"
            )
        seen.add(ex.id)


def select(
    examples: Sequence[Example],
    limit: int | None = None,
    offset: int = 0,
    sample: int | None = None,
    seed: int = 0,
) -> list[Example]:
    """First ``limit`` examples from ``offset`` in file order (as the published code evaluates).

    With ``sample``: a seeded random subset of that size drawn from those examples (all of them when no
    ``limit``), kept in file order. The subset is the prefix of one seeded permutation of them, so a larger
    sample with the same seed contains the smaller one (runs can grow).
    """
    if offset < 0:
        raise DatasetError(f"offset must be >= 0, got {offset}")
    if limit is not None and limit < 0:
        raise DatasetError(f"limit must be >= 0, got {limit}")
    chosen = list(examples)[offset:]
    if limit is not None:
        chosen = chosen[:limit]
    if sample is not None:
        if sample < 0:
            raise DatasetError(f"sample must be >= 0, got {sample}")
        if sample > len(chosen):
            raise DatasetError(
                f"cannot sample {sample} questions from {len(chosen)} (offset {offset}, limit {limit})"
            )
        order = list(range(len(chosen)))
        random.Random(seed).shuffle(order)
        keep = sorted(order[:sample])
        chosen = [chosen[i] for i in keep]
    return chosen
