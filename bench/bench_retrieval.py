"""BM25 build/load time and query latency on the two shipped corpora.

Usage: python bench/bench_retrieval.py [--queries N]
Queries are the HotpotQA dev questions from ``quco.paths.data_dir()``; indexes go to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from quco.paths import data_dir
from quco.retrieval import BM25Retriever

CORPORA = {
    "wiki-summaries": "wiki-summaries",
    "hotpot-pool": str(data_dir() / "hotpotqa/corpus/hotpot_dev_first500_pooled_paragraphs.jsonl.gz"),
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--k", type=int, default=3)
    args = parser.parse_args()
    with (data_dir() / "hotpotqa/hotpot_dev_0_300_unified.jsonl").open(encoding="utf-8") as fh:
        questions = [json.loads(line)["question"] for line in fh][: args.queries]

    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in CORPORA.items():
            index_dir = Path(tmp) / name
            t0 = time.perf_counter()
            BM25Retriever.build(spec, index_dir, progress=False)
            build_s = time.perf_counter() - t0
            loads = []
            for _ in range(5):
                t0 = time.perf_counter()
                retriever = BM25Retriever.load(index_dir)
                loads.append(time.perf_counter() - t0)
            retriever.search(questions[:5], args.k)  # warm up
            single = []
            for q in questions:
                t0 = time.perf_counter()
                retriever.search([q], args.k)
                single.append((time.perf_counter() - t0) * 1000)
            print(
                f"{name}: {len(retriever)} passages, vocabulary {retriever.manifest['vocabulary']}; "
                f"build {build_s:.2f} s; load median {statistics.median(loads) * 1000:.1f} ms"
            )
            print(
                f"  single query (k={args.k}, n={len(questions)}): p50 {percentile(single, 0.5):.2f} ms, "
                f"p95 {percentile(single, 0.95):.2f} ms"
            )
            for threads in (0, 2):
                retriever.n_threads = threads
                t0 = time.perf_counter()
                retriever.search(questions, args.k)
                batch_s = time.perf_counter() - t0
                print(
                    f"  batch of {len(questions)} (n_threads={threads}): {batch_s * 1000:.0f} ms, "
                    f"{len(questions) / batch_s:.0f} queries/s"
                )


if __name__ == "__main__":
    main()
