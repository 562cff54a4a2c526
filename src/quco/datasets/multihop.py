"""Loaders for the multi-hop span datasets: 2WikiMultihopQA, HotpotQA and MuSiQue.

Each accepts the official release format and the forms found in the shared data directory; the record
shape decides, so a file can be passed without saying which variant it is.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from quco.datasets.base import (
    DatasetError,
    Example,
    answer_list,
    check_unique_ids,
    jsonl_records,
    need,
    need_text,
    open_text,
    read_records,
)

log = logging.getLogger(__name__)


# -- 2WikiMultihopQA ---------------------------------------------------------------------------------------


def read_2wiki_aliases(path: Path) -> dict[str, list[str]]:
    """``id_aliases.json`` of the official release: one JSON object per line, {Q_id, aliases, demonyms}."""
    aliases: dict[str, list[str]] = {}
    try:
        with open_text(path) as fh:
            records = list(jsonl_records(path, fh))
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DatasetError(f"cannot read 2WikiMultihopQA aliases file {path}: {exc}") from exc
    for rec in records:
        item = rec.data
        if "Q_id" not in item:
            raise DatasetError(f"{path}: {rec.where} has no field 'Q_id'; expected {{Q_id, aliases}}")
        # Only 'aliases' count as gold, as in the published evaluation (demonyms are not used).
        aliases[str(item["Q_id"])] = [str(a) for a in item.get("aliases") or []]
    return aliases


def load_2wikimultihopqa(path: Path, aliases_path: Path | None = None) -> list[Example]:
    """Official ``dev.json`` (+ ``id_aliases.json`` beside it) or the {test_id, question, answer-list} form."""
    records = read_records(path)
    if aliases_path is None and (path.parent / "id_aliases.json").is_file():
        aliases_path = path.parent / "id_aliases.json"
    aliases = read_2wiki_aliases(aliases_path) if aliases_path is not None else {}
    examples = []
    for pos, rec in enumerate(records):
        question = need_text(rec, path, "question")
        if "_id" in rec.data:  # official release
            golds = answer_list(need(rec, path, "answer"), rec, path, "answer")
            answer_id = rec.data.get("answer_id")
            if answer_id and aliases:
                golds += [a for a in aliases.get(str(answer_id), []) if a.strip() and a not in golds]
            meta: dict[str, Any] = {"index": pos}
            for key in ("type", "answer_id"):
                if rec.data.get(key) is not None:
                    meta[key] = rec.data[key]
            qid = str(rec.data["_id"])
        else:  # DRAGIN/PRAG-style {test_id, question, answer (gold + aliases)}
            golds = answer_list(need(rec, path, "answer", "answers"), rec, path, "answer")
            qid = str(rec.data.get("test_id", pos))
            meta = {"index": int(rec.data["test_id"]) if "test_id" in rec.data else pos}
        examples.append(Example(qid, question, golds, "span", meta, "2wikimultihopqa"))
    if records and "_id" in records[0].data and not aliases:
        log.warning("%s: no id_aliases.json found beside it; scoring against the gold answer only", path)
    check_unique_ids(examples, path)
    return examples


# -- HotpotQA ---------------------------------------------------------------------------------------------


def _supporting_titles(value: Any) -> list[str]:
    """Titles of the supporting facts, from the official [[title, sent], ...] or the HF {title: [...]} layout."""
    titles: list[str] = []
    if isinstance(value, dict):
        raw = value.get("title") or []
    elif isinstance(value, list):
        raw = [item[0] for item in value if isinstance(item, list | tuple) and item]
    else:
        raw = []
    for t in raw:
        if isinstance(t, str) and t not in titles:
            titles.append(t)
    return titles


def _flagged_titles(paragraphs: Any) -> list[str]:
    """Titles of the context paragraphs flagged ``is_supporting`` (the IRCoT-processed layout)."""
    titles: list[str] = []
    for para in paragraphs if isinstance(paragraphs, list) else []:
        title = para.get("title") if isinstance(para, dict) and para.get("is_supporting") else None
        if isinstance(title, str) and title not in titles:
            titles.append(title)
    return titles


def load_hotpotqa(path: Path) -> list[Example]:
    """Official distractor/fullwiki JSON, the HF layout, the unified JSONL, or the IRCoT-processed JSONL."""
    records = read_records(path)
    examples = []
    for pos, rec in enumerate(records):
        d = rec.data
        if "question_text" in d:  # IRCoT processed: answers in answers_objects[].spans
            question = need_text(rec, path, "question_text")
            spans = [s for obj in need(rec, path, "answers_objects") for s in (obj.get("spans") or [])]
            golds = answer_list(spans, rec, path, "answers_objects")
            qid = str(need(rec, path, "question_id"))
        else:
            question = need_text(rec, path, "question")
            golds = answer_list(need(rec, path, "answer"), rec, path, "answer")
            qid = str(d.get("_id") or d.get("id") or d.get("dev_index") or pos)
        meta: dict[str, Any] = {}
        if d.get("dev_index") is not None:
            meta["index"] = int(d["dev_index"])
        else:
            meta["index"] = pos
        for key in ("type", "level"):
            if d.get(key) is not None:
                meta[key] = d[key]
        titles = _supporting_titles(d.get("supporting_facts")) or _flagged_titles(
            d.get("context_paragraphs") or d.get("contexts")
        )
        if titles:
            meta["supporting_titles"] = titles
        examples.append(Example(qid, question, golds, "span", meta, "hotpotqa"))
    check_unique_ids(examples, path)
    return examples


# -- MuSiQue ----------------------------------------------------------------------------------------------


def load_musique(path: Path) -> list[Example]:
    """MuSiQue-Ans records {id, question, answer, answer_aliases, answerable, question_decomposition}."""
    examples = []
    for pos, rec in enumerate(read_records(path)):
        question = need_text(rec, path, "question")
        golds = answer_list(need(rec, path, "answer"), rec, path, "answer")
        for alias in rec.data.get("answer_aliases") or []:
            if isinstance(alias, str) and alias.strip() and alias.strip() not in golds:
                golds.append(alias.strip())
        meta: dict[str, Any] = {"index": pos}
        if "answerable" in rec.data:
            meta["answerable"] = bool(rec.data["answerable"])
        decomposition = rec.data.get("question_decomposition")
        if isinstance(decomposition, list):
            meta["hops"] = len(decomposition)
        examples.append(Example(str(need(rec, path, "id")), question, golds, "span", meta, "musique"))
    check_unique_ids(examples, path)
    return examples
