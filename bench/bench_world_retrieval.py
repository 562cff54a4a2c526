"""Retrieval in the realistic world: haystack and BM25 build figures, query latency, Recall@3 pool vs haystack.

Usage: python bench/bench_world_retrieval.py [--dataset hotpotqa|pubmedqa] [--questions 300] [--build] [--bare]

- The haystack and its BM25 index are the ones the world configs use (``quco index world``; QUCO_WORLD_DIR).
- ``--build`` rebuilds the BM25 index of the haystack in a temporary directory, as a child process measured
  with /usr/bin/time (wall, CPU, peak RSS); ``--bare`` does the same for bare bm25s on the same passages
  (texts read with the csv module, then ``bm25s.tokenize`` + ``BM25.index`` + ``save``, same parameters),
  the reference the build is compared with.
- Query latency: one question per call, k=3, after a warm-up; HotpotQA dev questions.
- Recall@3 of the gold (supporting) paragraphs of HotpotQA dev 0-299 for the question as query, in the pool
  world (BM25 over the pool) and in the haystack. "needle": the pool paragraph itself is in the top 3 (by title
  and text); "title": any top-3 passage carries the gold title (in the haystack, also a passage of that
  Wikipedia article). recall = mean share of a question's gold paragraphs found; all / any = share of
  questions with every / at least one gold paragraph found.
- PubMedQA: Recall@3 of each question's own abstract (the pool passage: its context paragraphs), pool vs haystack.
Prints its figures; it is not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from quco.paths import data_dir
from quco.retrieval.bm25 import BM25Retriever, ensure_index
from quco.retrieval.corpus import CorpusSource
from quco.world.corpora import resolve_corpus
from quco.world.sources import pool_for

BARE = r"""
import csv, sys, time, bm25s, Stemmer
csv.field_size_limit(1 << 30)
t = time.perf_counter()
with open(sys.argv[1], encoding="utf-8", newline="") as fh:
    rows = csv.reader(fh, delimiter="\t"); next(rows)
    texts = [f"{r[2]}\n{r[1]}" for r in rows]
t1 = time.perf_counter()
tokens = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
t2 = time.perf_counter()
model = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
model.index(tokens, show_progress=False)
t3 = time.perf_counter()
model.save(sys.argv[2])
print(f"bare bm25s: read {t1 - t:.1f} s, tokenize {t2 - t1:.1f} s, index {t3 - t2:.1f} s, save {time.perf_counter() - t3:.1f} s")
"""


def measured(cmd: list[str], label: str) -> None:
    """Run a child under /usr/bin/time and print its wall, CPU and peak RSS."""
    fmt = "%e %U %S %M"
    proc = subprocess.run(["/usr/bin/time", "-f", fmt, *cmd], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"{label} failed:\n{proc.stderr[-2000:]}")
    for out_line in proc.stdout.strip().splitlines()[-2:]:
        print(f"  {out_line}")
    wall, user, system, rss = proc.stderr.strip().splitlines()[-1].split()
    cpu = float(user) + float(system)
    print(f"  {label}: {float(wall):.1f} s wall, {cpu:.1f} s CPU, peak RSS {int(rss) / 1024:.0f} MB")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def norm(text: str) -> str:
    return " ".join(text.split())


def recall(rows: list[dict], hits: list[list], rule: str) -> dict[str, float]:
    frac, full, anyhit = [], [], []
    for row, got in zip(rows, hits, strict=True):
        gold = [p for p in row["context_paragraphs"] if p["is_supporting"]]
        found = 0
        for g in gold:
            if rule == "title":
                found += any(h.title == g["title"] for h in got)
            else:
                found += any(h.title == g["title"] and norm(h.text) == norm(g["text"]) for h in got)
        frac.append(found / len(gold))
        full.append(found == len(gold))
        anyhit.append(found > 0)
    return {k: 100 * statistics.mean(v) for k, v in (("recall", frac), ("all", full), ("any", anyhit))}


def latency(retriever: BM25Retriever, questions: list[str], k: int) -> tuple[float, float]:
    retriever.search(questions[:5], k)
    times = []
    for q in questions:
        t = time.perf_counter()
        retriever.search([q], k)
        times.append((time.perf_counter() - t) * 1e3)
    return pct(times, 0.5), pct(times, 0.95)


def pubmed_recall(pool: BM25Retriever, world: BM25Retriever, n: int, k: int) -> None:
    """PubMedQA: is a question's own abstract (its contexts, as the pool passage) in the top k?"""
    records = json.loads((data_dir() / pool_for("pubmedqa").file).read_text(encoding="utf-8"))
    rows = list(records.values())[:n]
    questions = [r["QUESTION"] for r in rows]
    for name, retriever in (("pool", pool), ("haystack", world)):
        p50, p95 = latency(retriever, questions, k)
        print(f"{name}: single query k={k}: p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    print(f"Recall@{k} of the question's own abstract, question as query, PQA-L 0-{len(rows) - 1}:")
    for name, retriever in (("pool", pool), ("haystack", world)):
        hits = retriever.search(questions, k)
        found = [
            any(norm(h.text) == norm(" ".join(r["CONTEXTS"])) for h in got)
            for r, got in zip(rows, hits, strict=True)
        ]
        from_pool = sum(h.id.startswith("pubmedqa-pool:") or h.id in records for got in hits for h in got)
        print(
            f"  {name:<10}{100 * statistics.mean(found):6.1f}% ({sum(found)}/{len(rows)}); "
            f"{from_pool}/{sum(map(len, hits))} retrieved passages are abstracts"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--questions", type=int, default=300)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument(
        "--build", action="store_true", help="rebuild the haystack's BM25 index in a temp dir, timed"
    )
    ap.add_argument("--bare", action="store_true", help="time bare bm25s on the same passages")
    args = ap.parse_args()
    print(f"machine load: {os.getloadavg()}")

    haystack = resolve_corpus(f"haystack:{args.dataset}")
    manifest = json.loads((haystack.path.parent / "manifest.json").read_text(encoding="utf-8"))
    print(
        f"haystack {haystack.path}: {manifest['passages']:,} passages ({manifest['article_passages']:,} from "
        f"articles, {manifest['pool_passages']:,} pool), {manifest['file_bytes'] / 1e6:.0f} MB, "
        f"built in {manifest['build_seconds']:.1f} s"
    )
    work = Path(tempfile.mkdtemp(prefix="bench-world-"))
    try:
        if args.build:
            measured(
                [sys.executable, "-m", "quco.cli", "index", "bm25", "--corpus", str(haystack.path.parent),
                 "--out", str(work / "bm25")],
                "quco index bm25 (read + store + tokenize + index + save)",
            )  # fmt: skip
        if args.bare:
            measured([sys.executable, "-c", BARE, str(haystack.path), str(work / "bare")], "bare bm25s")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    t = time.perf_counter()
    world, reused = ensure_index(haystack, progress=False)
    print(
        f"BM25 index {world.index_dir} ({'opened' if reused else 'built'} in {time.perf_counter() - t:.2f} s)"
    )
    size = sum(p.stat().st_size for p in world.index_dir.rglob("*") if p.is_file())
    print(f"  {len(world):,} passages, vocabulary {world.manifest['vocabulary']:,}, {size / 1e6:.0f} MB on disk, "
          f"build recorded {world.manifest['build_seconds']:.1f} s")  # fmt: skip
    pool_path = data_dir() / pool_for(args.dataset).file
    pool, _ = ensure_index(CorpusSource.resolve(pool_path), progress=False)

    if args.dataset == "pubmedqa":
        pubmed_recall(pool, world, args.questions, args.k)
        return
    if args.dataset != "hotpotqa":
        return
    with (data_dir() / "hotpotqa/hotpot_dev_0_300_unified.jsonl").open(encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh][: args.questions]
    questions = [r["question"] for r in rows]
    for name, retriever in (("pool", pool), ("haystack", world)):
        p50, p95 = latency(retriever, questions, args.k)
        print(f"{name}: single query k={args.k}: p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    print(f"Recall@{args.k} of gold paragraphs, question as query, HotpotQA dev 0-{len(rows) - 1}:")
    print(f"  {'world':<10}{'match':<8}{'recall':>8}{'all':>8}{'any':>8}")
    for name, retriever in (("pool", pool), ("haystack", world)):
        hits = retriever.search(questions, args.k)
        for rule in ("needle", "title"):
            r = recall(rows, hits, rule)
            print(f"  {name:<10}{rule:<8}{r['recall']:8.1f}{r['all']:8.1f}{r['any']:8.1f}")


if __name__ == "__main__":
    main()
