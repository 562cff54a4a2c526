"""Any JSONL (or JSON list) of questions: {id?, question, answers | answer | golden_answers, kind?, meta?}.

The field names cover our own form and FlashRAG's (``golden_answers``, ``metadata``), so a user's file
rarely needs converting.
"""

from __future__ import annotations

from pathlib import Path

from quco.datasets.base import (
    KINDS,
    DatasetError,
    Example,
    answer_list,
    check_unique_ids,
    need,
    need_text,
    read_records,
)


def load_generic(path: Path, kind: str | None = None, name: str = "jsonl") -> list[Example]:
    """Read a generic question file; ``kind`` overrides a record's own ``kind`` (default "span")."""
    if kind is not None and kind not in KINDS:
        raise DatasetError(f"unknown answer kind '{kind}'; use one of {', '.join(KINDS)}")
    examples = []
    for pos, rec in enumerate(read_records(path)):
        d = rec.data
        question = need_text(rec, path, "question")
        golds = answer_list(need(rec, path, "answers", "answer", "golden_answers"), rec, path, "answers")
        rec_kind = kind or d.get("kind") or "span"
        if rec_kind not in KINDS:
            raise DatasetError(f"{path}: {rec.where} has kind {rec_kind!r}; use one of {', '.join(KINDS)}")
        if rec_kind != "span":
            golds = [g.lower() for g in golds]
        meta = d.get("meta") or d.get("metadata") or {}
        if not isinstance(meta, dict):
            raise DatasetError(f"{path}: {rec.where} field 'meta' must be an object")
        meta = {"index": pos, **meta}
        qid = d.get("id") or d.get("_id") or d.get("qid") or d.get("question_id") or d.get("__key__") or pos
        examples.append(Example(str(qid), question, golds, rec_kind, meta, name))  # type: ignore[arg-type]
    check_unique_ids(examples, path)
    return examples
