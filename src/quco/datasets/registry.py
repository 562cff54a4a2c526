"""Dataset names, their default files under ``data_dir()``, and ``load_dataset``.

A dataset is named by a short name ("hotpotqa"), a file path (the loader is guessed from the file name or
its folders, else the generic loader), or ``name:path`` to force a loader on any file (e.g. the official HotpotQA
``hotpot_dev_distractor_v1.json``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from quco.datasets.base import DatasetError, Example, select
from quco.datasets.generic import load_generic
from quco.datasets.multihop import load_2wikimultihopqa, load_hotpotqa, load_musique
from quco.datasets.yesno import load_pubmedqa, load_strategyqa
from quco.paths import data_dir


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    default_file: str | None  # relative to data_dir()
    loader: Callable[[Path], list[Example]]
    filename_hints: tuple[str, ...] = ()


DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in (
        DatasetInfo(
            "2wikimultihopqa",
            "2wikimultihopqa/dev_0_300_question_answer_aliases.json",
            load_2wikimultihopqa,
            ("2wiki", "wikimultihop"),
        ),
        DatasetInfo("hotpotqa", "hotpotqa/hotpot_dev_0_300_unified.jsonl", load_hotpotqa, ("hotpot",)),
        DatasetInfo("pubmedqa", "pubmedqa/ori_pqal_0_300.json", load_pubmedqa, ("pqal", "pubmed")),
        DatasetInfo("strategyqa", "strategyqa/strategyqa_train_0_300.json", load_strategyqa, ("strategyqa",)),
        DatasetInfo("musique", "musique/musique_sample100_0_30.json", load_musique, ("musique",)),
        DatasetInfo("jsonl", None, load_generic),
    )
}
ALIASES = {"2wiki": "2wikimultihopqa", "wikimultihopqa": "2wikimultihopqa", "hotpot": "hotpotqa"}


@dataclass(frozen=True)
class DatasetRef:
    """A resolved dataset: which loader and which file."""

    name: str
    path: Path


def _canonical(name: str) -> str | None:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    return key if key in DATASETS else None


def resolve_dataset(name_or_path: str | Path) -> DatasetRef:
    """Map a name, ``name:path`` or a path to the loader and file it means (the file is not read here)."""
    text = str(name_or_path)
    name = _canonical(text)
    if name is not None:
        info = DATASETS[name]
        if info.default_file is None:
            raise DatasetError(f"dataset '{name}' has no default file; pass '{name}:PATH'")
        return DatasetRef(name, data_dir() / info.default_file)
    if ":" in text:
        prefix, rest = text.split(":", 1)
        forced = _canonical(prefix)
        if forced is not None:
            return DatasetRef(forced, Path(rest).expanduser())
    path = Path(text).expanduser()
    if not path.exists():
        known = ", ".join(DATASETS)
        raise DatasetError(f"unknown dataset '{text}': not a file and not one of {known}")
    # The file name decides first, then the enclosing folders (e.g. hotpotqa/raw/ircot_dev.jsonl).
    for part in [path.name, *(p.name for p in path.resolve().parents)][:4]:
        lowered = part.lower()
        for info in DATASETS.values():
            if any(hint in lowered for hint in info.filename_hints):
                return DatasetRef(info.name, path)
    return DatasetRef("jsonl", path)


def load_dataset(
    name_or_path: str | Path,
    limit: int | None = None,
    offset: int = 0,
    sample: int | None = None,
    seed: int = 0,
) -> list[Example]:
    """Examples of a dataset: the first ``limit`` from ``offset`` in file order, or a seeded ``sample``."""
    ref = resolve_dataset(name_or_path)
    examples = DATASETS[ref.name].loader(ref.path)
    return select(examples, limit=limit, offset=offset, sample=sample, seed=seed)
