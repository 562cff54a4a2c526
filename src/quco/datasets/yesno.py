"""Loaders for the label datasets: PubMedQA (yes/no/maybe) and StrategyQA (yes/no).

PubMedQA keeps all three labels; the published ETC loader maps "maybe" to "no", which hides a third of
the hard cases, so we do not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quco.datasets.base import DatasetError, Example, Record, check_unique_ids, need, need_text, read_records


def _label(value: Any, rec: Record, path: Path, field: str, allowed: tuple[str, ...]) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value).strip().lower()
    text = {"true": "yes", "false": "no"}.get(text, text)
    if text not in allowed:
        raise DatasetError(f"{path}: {rec.where} field '{field}' is {value!r}; expected one of {allowed}")
    return text


def load_pubmedqa(path: Path) -> list[Example]:
    """``ori_pqal.json`` (or its test/train splits): an object keyed by PMID with QUESTION and final_decision."""
    examples = []
    for pos, rec in enumerate(read_records(path)):
        question = need_text(rec, path, "QUESTION", "question")
        label = _label(need(rec, path, "final_decision"), rec, path, "final_decision", ("yes", "no", "maybe"))
        pmid = str(rec.data.get("__key__") or need(rec, path, "pubid", "id"))
        meta: dict[str, Any] = {"index": pos}
        if rec.data.get("YEAR") is not None:
            meta["year"] = str(rec.data["YEAR"])
        examples.append(Example(pmid, question, [label], "yesnomaybe", meta, "pubmedqa"))
    check_unique_ids(examples, path)
    return examples


def load_strategyqa(path: Path) -> list[Example]:
    """StrategyQA records {qid, question, answer: bool, facts, decomposition}."""
    examples = []
    for pos, rec in enumerate(read_records(path)):
        question = need_text(rec, path, "question")
        label = _label(need(rec, path, "answer"), rec, path, "answer", ("yes", "no"))
        meta: dict[str, Any] = {"index": pos}
        decomposition = rec.data.get("decomposition")
        if isinstance(decomposition, list):
            meta["steps"] = len(decomposition)
        examples.append(Example(str(need(rec, path, "qid")), question, [label], "yesno", meta, "strategyqa"))
    check_unique_ids(examples, path)
    return examples
