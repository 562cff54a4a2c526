"""Corpus-statistics benchmark: index build, count / co-occurrence latency, cache speedup, server round trips.

Usage: python bench/bench_corpus_stats.py [--pairs N] [--tokenizer wordpiece|bytes] [--keep]

The index covers all the text in ``quco.paths.data_dir()``: the Wikipedia summaries and the HotpotQA and
2WikiMultihopQA paragraph pools. Queries are real entity pairs: titles of the context paragraphs of HotpotQA
questions (disambiguation in parentheses removed). Prints its figures; it is not a timed test.
Targets on a 2-core machine: count p50 <= 1 ms, document co-occurrence p50 <= 30 ms, server p50 <= 5 ms.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from quco.corpus_stats.api import InfiniGramAPI
from quco.corpus_stats.build import build_local_index, index_size_bytes
from quco.corpus_stats.cache import CachedCorpusStats
from quco.corpus_stats.local import LocalInfiniGram
from quco.paths import cache_dir, data_dir


def corpus() -> Iterator[tuple[str, str]]:
    root = data_dir()
    with gzip.open(root / "wikipedia/enwiki_vital_level4_summaries.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            yield f"wiki:{r['id']}", f"{r['title']}\n{r['text']}"
    with gzip.open(
        root / "hotpotqa/corpus/hotpot_dev_first500_pooled_paragraphs.jsonl.gz", "rt", encoding="utf-8"
    ) as f:
        for i, line in enumerate(f):
            r = json.loads(line)
            yield f"hotpot:{i}", f"{r['title']}\n{r['text']}"
    with gzip.open(root / "2wikimultihopqa/corpus/hipporag_2wikimultihopqa_corpus.json.gz", "rt") as f:
        for i, r in enumerate(json.load(f)):
            yield f"2wiki:{i}", f"{r['title']}\n{r['text']}"


def entity(title: str) -> str:
    return re.sub(r"\s*\([^)]*\)$", "", title).strip()


def entity_pairs(n: int) -> list[tuple[str, str]]:
    """Pairs of context-paragraph titles of the same HotpotQA question (supporting pair first)."""
    rng = random.Random(13)
    pairs: list[tuple[str, str]] = []
    with open(data_dir() / "hotpotqa/hotpot_dev_0_300_unified.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    for r in rows:
        paras = r.get("context_paragraphs") or []
        sup = list(dict.fromkeys(entity(p["title"]) for p in paras if p.get("is_supporting")))
        ctx = list(dict.fromkeys(entity(p["title"]) for p in paras))
        if len(ctx) < 2:
            continue
        if len(sup) >= 2:
            pairs.append((sup[0], sup[1]))
        for _ in range(4):
            a, b = rng.sample(ctx, 2)
            pairs.append((a, b))
    seen, out = set(), []
    for p in pairs:
        if p not in seen and p[0] != p[1]:
            seen.add(p)
            out.append(p)
    return out[:n]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(fn: Callable, items: list) -> tuple[list[float], list]:
    times, results = [], []
    for item in items:
        t = time.perf_counter()
        results.append(fn(item))
        times.append(time.perf_counter() - t)
    return times, results


def line(name: str, times: list[float], extra: str = "") -> None:
    p50, p95 = pct(times, 0.5) * 1000, pct(times, 0.95) * 1000
    print(f"  {name:<38} n={len(times):>5}  p50 {p50:8.3f} ms  p95 {p95:8.3f} ms  {extra}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1200)
    ap.add_argument("--tokenizer", default="wordpiece")
    ap.add_argument("--keep", action="store_true", help="keep the index directory")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="quco-bench-", dir=cache_dir()))
    index = work / "all-data"
    try:
        t = time.perf_counter()
        build_local_index(corpus(), index, tokenizer=args.tokenizer, progress=False)
        build_s = time.perf_counter() - t
        stats = LocalInfiniGram(index)
        size = index_size_bytes(index)
        print(f"index: {stats.doc_count:,} documents, {stats.total_tokens:,} tokens ({args.tokenizer})")
        print(
            f"  build {build_s:.2f} s; engine files {size / 1e6:.1f} MB = {size / stats.total_tokens:.2f} bytes/token"
        )

        pairs = entity_pairs(args.pairs)
        entities = list(dict.fromkeys([a for a, _ in pairs] + [b for _, b in pairs]))
        print(f"queries: {len(entities)} entities, {len(pairs)} entity pairs from HotpotQA questions")
        window = LocalInfiniGram(index, cooccurrence="window", max_diff_tokens=1000)

        stats.count("warm up")
        ct, counts = timed(stats.count, entities)
        line("count", ct, f"(found: {sum(r.count > 0 for r in counts)}/{len(counts)})")
        wt, wres = timed(lambda p: window.cooccur(*p), pairs)
        line("window co-occurrence (1000 tokens)", wt, f"(non-zero: {sum(r.count > 0 for r in wres)})")
        dt, dres = timed(lambda p: stats.cooccur(*p), pairs)
        line("document co-occurrence", dt, f"(non-zero: {sum(r.count > 0 for r in dres)})")
        differ = [
            (p, d.count, w.count) for p, d, w in zip(pairs, dres, wres, strict=True) if d.count != w.count
        ]
        missed = [x for x in differ if x[2] == 0]
        print(
            f"  pairs where document and window counts differ: {len(differ)}; window 0 but document > 0: {len(missed)}"
        )
        for (a, b), d, w in missed[:3]:
            print(f"    e.g. {a!r} & {b!r}: document {d}, window {w}")

        cached = CachedCorpusStats(stats, work / "cache.sqlite")
        mt, _ = timed(lambda p: cached.cooccur(*p), pairs)
        ht, hres = timed(lambda p: cached.cooccur(*p), pairs)
        assert all(r.cached for r in hres)
        line("cached document co-occurrence: miss", mt)
        line("cached document co-occurrence: hit", ht)
        print(f"  cache-hit speedup (p50 uncached / p50 hit): {pct(dt, 0.5) / pct(ht, 0.5):.1f}x")

        proc = subprocess.Popen(
            [sys.executable, "-m", "quco.corpus_stats.server", str(index), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            url = re.search(r"(http://\S+/)", proc.stdout.readline()).group(1)
            api = InfiniGramAPI(url, index.name, total_tokens=stats.total_tokens)
            api_doc = InfiniGramAPI(url, index.name, total_tokens=stats.total_tokens, cooccurrence="document")
            api.count("warm up")
            st, sres = timed(api.count, entities)
            assert [r.count for r in sres] == [r.count for r in counts]
            line("server round trip: count", st)
            swt, _ = timed(lambda p: api.cooccur(*p), pairs)
            line("server round trip: window co-occurrence", swt)
            sdt, sdres = timed(lambda p: api_doc.cooccur(*p), pairs)
            assert [r.count for r in sdres] == [r.count for r in dres]
            line("server round trip: document co-occurrence", sdt)
            t = time.perf_counter()
            api.count_many(entities)
            conc = time.perf_counter() - t
            print(f"  server, {api.concurrency} concurrent requests: {len(entities) / conc:,.0f} counts/s")
            api.close()
            api_doc.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    finally:
        if args.keep:
            print(f"index kept at {index}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
