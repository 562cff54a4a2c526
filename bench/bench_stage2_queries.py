"""QuCo-RAG stage-2 query options, measured by the gold paragraphs each retrieval brings.

Usage: python bench/bench_stage2_queries.py --run RUN_DIR [--run RUN_DIR ...] [--config CONFIG.yaml] [--k 3]

Reads the stage-2 retrievals of recorded QuCo-RAG runs on HotpotQA (``quco eval`` output directories) and, for
each one, re-runs retrieval with every query option on the run's own flagged claims and sentence:

- ``head_relation``: "head relation" per flagged claim (the published query);
- ``full_triplet``: "head relation tail" per flagged claim;
- ``original_sentence``: the flagged sentence;
- ``question_head_relation``: the question followed by "head relation" per flagged claim;
- ``question``: the question alone (what SR-RAG and stage 1 search with), for reference.

Each option's passages are the top-k of each of its queries, merged in query order without duplicates (as the
loop merges them). The ``+ merge`` rows add the question's own top-k after them, the passages a merging loop
would keep instead of replacing them. A passage is gold when it carries the title of one of the question's
supporting paragraphs (in the haystack: the pool paragraph or a passage of that Wikipedia article). Per
retrieval it prints the mean share of the question's gold paragraphs among the passages read (recall), the
share of retrievals that read at least one (any), the share that read a gold paragraph the question's own
top-k does not hold (new), and the passages read.

The retriever is the ``retriever`` section of ``--config`` (default: the realistic world's HotpotQA config).
Prints its figures; it is not a timed test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from quco.config import load_config
from quco.paths import data_dir
from quco.retrieval import build_retriever
from quco.retrieval.base import Passage

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = "hotpotqa/hotpot_dev_0_300_unified.jsonl"


def flagged_claims(step: dict) -> tuple[str, list[list[str]]]:
    """The flagged sentence of a stage-2 retrieval and its flagged claims, as recorded in the trace."""
    sig = step.get("signals") or {}
    sentence = sig.get("flagged_sentence", "")
    for scanned in reversed(sig.get("sentences") or []):
        if scanned.get("sentence") == sentence:
            return sentence, [c["triplet"] for c in scanned.get("claims", []) if c.get("flagged")]
    return sentence, []


def head_relation(t: list[str]) -> str:
    return f"{t[0]} {t[1]}".strip()


OPTIONS: dict[str, Callable[[str, str, list[list[str]]], list[str]]] = {
    "head_relation": lambda q, s, ts: [head_relation(t) for t in ts],
    "full_triplet": lambda q, s, ts: [" ".join(x for x in t if x) for t in ts],
    "original_sentence": lambda q, s, ts: [s],
    "question_head_relation": lambda q, s, ts: [f"{q} {head_relation(t)}" for t in ts],
    "question": lambda q, s, ts: [q],
}


def merged(queries: list[str], hits: dict[str, list[Passage]]) -> list[Passage]:
    out: list[Passage] = []
    seen: set[str] = set()
    for q in dict.fromkeys(queries):
        for p in hits[q]:
            if p.id not in seen:
                seen.add(p.id)
                out.append(p)
    return out


def gold_found(passages: list[Passage], gold: set[str]) -> set[str]:
    return {p.title for p in passages if p.title in gold}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="append", required=True, help="a recorded QuCo-RAG run directory")
    ap.add_argument("--config", default=str(ROOT / "configs/world/hotpotqa/quco.yaml"))
    ap.add_argument("--k", type=int, default=3)
    args = ap.parse_args()

    with open(data_dir() / QUESTIONS, encoding="utf-8") as f:
        rows = {r["_id"]: r for r in map(json.loads, f)}
    items = []  # (question, sentence, flagged triplets, gold titles)
    for run in args.run:
        path = Path(run) / "results.jsonl"
        if not path.exists():
            sys.exit(f"no results.jsonl in {run}")
        with open(path, encoding="utf-8") as f:
            for rec in map(json.loads, f):
                row = rows.get(rec.get("id"))
                if row is None or rec.get("error"):
                    continue
                gold = {p["title"] for p in row["context_paragraphs"] if p["is_supporting"]}
                for step in (rec.get("trace") or {}).get("steps", []):
                    if step.get("stage") != "generate" or step.get("decision") != "retrieve":
                        continue
                    sentence, triplets = flagged_claims(step)
                    if sentence and triplets:
                        items.append((row["question"], sentence, triplets, gold))
    if not items:
        sys.exit("no stage-2 retrieval with flagged claims in the given runs")

    cfg = load_config(args.config)
    retriever = build_retriever(cfg.retriever, progress=False)
    queries = {q for qu, s, ts, _ in items for opt in OPTIONS.values() for q in opt(qu, s, ts)}
    ordered = sorted(queries)
    hits = dict(zip(ordered, retriever.search(ordered, args.k), strict=True))
    n_questions = len({qu for qu, *_ in items})
    print(f"{len(items)} stage-2 retrievals with flagged claims ({n_questions} questions); "
          f"retriever {cfg.retriever.corpus}, top {args.k} per query")  # fmt: skip
    print(f"{'query option':<32}{'recall':>8}{'any':>8}{'new':>8}{'passages':>10}{'queries':>9}")
    for name, option in OPTIONS.items():
        for merge in (False, True):
            if merge and name == "question":
                continue
            recall, anyhit, new, read, nq = [], [], [], [], []
            for question, sentence, triplets, gold in items:
                qs = option(question, sentence, triplets)
                own = gold_found(hits[question], gold)
                passages = merged(qs + ([question] if merge else []), hits)
                found = gold_found(passages, gold)
                recall.append(len(found) / len(gold))
                anyhit.append(bool(found))
                new.append(bool(found - own))
                read.append(len(passages))
                nq.append(len(set(qs)))
            label = f"{name} + merge" if merge else name
            print(f"{label:<32}{100 * statistics.mean(recall):>8.1f}{100 * statistics.mean(anyhit):>8.1f}"
                  f"{100 * statistics.mean(new):>8.1f}{statistics.mean(read):>10.2f}{statistics.mean(nq):>9.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
