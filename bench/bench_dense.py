"""Dense index build time and query latency; Recall@3 of DTR's retrieval paths; UGT retrieval rates.

Usage: python bench/bench_dense.py [--questions 300] [--llm-questions 100] [--pseudo-tokens 128] [--work DIR]
       [--threads N] [--rebuild] [--no-llm]

On the HotpotQA paragraph pool (4,937 paragraphs) and dev questions 0..N-1 from ``quco.paths.data_dir()``:
- build time of the dense index (bundled all-MiniLM-L6-v2), load time, query latency;
- Recall@3 of the gold supporting paragraphs (matched by title) for BM25 on the question, dense on the
  question, dense on the pseudo-passage, and DPR-AIS (5 + 5 candidates, keep 3) with each AIS score;
- the share of questions UGT sends to retrieval at several thresholds.
The LLM-dependent rows (pseudo-passage, DPR-AIS, UGT) use the first ``--llm-questions`` questions, and the
question-only rows are repeated on that subset so that all rows of one table compare like with like.

The LLM outputs (direct answers with logprobs, pseudo-passages; default model gemma3-270m) are cached in
the work directory (default ``<cache>/bench/dtr``) one question at a time, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from quco.paths import cache_dir, data_dir
from quco.retrieval.bm25 import ensure_index
from quco.retrieval.dense import DenseRetriever, Embedder, build_dense_index
from quco.signals.dtr import AIS_SCORES, ais_select, mean_nll

POOL = "hotpotqa/corpus/hotpot_dev_first500_pooled_paragraphs.jsonl.gz"
DEV = "hotpotqa/hotpot_dev_0_300_unified.jsonl"
THRESHOLDS = (0.001, 0.005, 0.25, 0.5, 1.0, 1.5, 2.0)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def load_questions(n: int) -> list[dict[str, Any]]:
    with (data_dir() / DEV).open(encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh][:n]
    for row in rows:
        row["gold"] = {p["title"] for p in row["context_paragraphs"] if p["is_supporting"]}
    return rows


def recall(rows: list[dict[str, Any]], titles: list[list[str]]) -> dict[str, float]:
    """Mean share of gold paragraphs retrieved, share of questions with all / any gold retrieved (in %)."""
    frac, full, anyhit = [], [], []
    for row, got in zip(rows, titles, strict=True):
        hit = len(row["gold"] & set(got))
        frac.append(hit / len(row["gold"]))
        full.append(hit == len(row["gold"]))
        anyhit.append(hit > 0)
    return {k: 100 * statistics.mean(v) for k, v in (("recall", frac), ("all", full), ("any", anyhit))}


# -- LLM outputs, cached per question ----------------------------------------------------------------------


def llm_outputs(
    rows: list[dict[str, Any]], work: Path, pseudo_tokens: int, direct_tokens: int, threads: int | None
) -> list[dict]:
    from quco.config import GeneratorConfig
    from quco.llm import build_generator
    from quco.methods.dtr import DIRECT_PROMPT, PSEUDO_PROMPT, first_paragraph, short_answer

    path = work / f"llm_outputs_p{pseudo_tokens}_d{direct_tokens}.jsonl"
    done: dict[str, dict] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                done[rec["id"]] = rec
    todo = [r for r in rows if r["_id"] not in done]
    if todo:
        generator = build_generator(GeneratorConfig(threads=threads))
        t_start = time.perf_counter()
        with path.open("a", encoding="utf-8") as fh:
            for i, row in enumerate(todo, start=1):
                q = row["question"]
                t0 = time.perf_counter()
                direct = generator.generate(
                    DIRECT_PROMPT.format(question=q), max_new_tokens=direct_tokens, stop=["\n"], logprobs=True
                )[0]
                t1 = time.perf_counter()
                pseudo = generator.generate(
                    PSEUDO_PROMPT.format(question=q), max_new_tokens=pseudo_tokens, stop=["\nQuestion:"]
                )[0]
                t2 = time.perf_counter()
                rec = {
                    "id": row["_id"],
                    "direct": short_answer(direct.text),
                    "logprobs": direct.logprobs or [],
                    "pseudo": first_paragraph(pseudo.text),
                    "pseudo_tokens": len(pseudo.token_ids),
                    "direct_s": round(t1 - t0, 3),
                    "pseudo_s": round(t2 - t1, 3),
                }
                fh.write(json.dumps(rec) + "\n")
                fh.flush()
                done[rec["id"]] = rec
                if i % 10 == 0 or i == len(todo):
                    rate = (time.perf_counter() - t_start) / i
                    print(f"  generated {i}/{len(todo)} ({rate:.1f} s/question)", flush=True)
    return [done[r["_id"]] for r in rows]


# -- main --------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument(
        "--pseudo-tokens", type=int, default=128, help="pseudo-passage budget (method default)"
    )
    parser.add_argument("--direct-tokens", type=int, default=32, help="direct-answer budget (method default)")
    parser.add_argument("--work", type=Path, default=None, help="default: <cache>/bench/dtr")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the dense index even if present")
    parser.add_argument("--no-llm", action="store_true", help="skip the pseudo-passage and UGT parts")
    parser.add_argument("--llm-questions", type=int, default=100, help="questions for the LLM-dependent rows")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for the LLM")
    args = parser.parse_args()
    work = args.work or cache_dir() / "bench" / "dtr"
    work.mkdir(parents=True, exist_ok=True)
    pool = data_dir() / POOL
    rows = load_questions(args.questions)
    questions = [r["question"] for r in rows]
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {len(rows)} HotpotQA dev questions"
    )

    # -- dense index: build, load, latency --
    t0 = time.perf_counter()
    embedder = Embedder()
    print(f"embedder load (incl. imports): {time.perf_counter() - t0:.1f} s, dim {embedder.dim}")
    index_dir = work / "dense-hotpot-pool"
    if args.rebuild or not (index_dir / "manifest.json").is_file():
        t0 = time.perf_counter()
        build_dense_index(pool, index_dir, embedder, progress=True)
        print(f"dense build: {time.perf_counter() - t0:.1f} s wall")
    loads = []
    for _ in range(5):
        t0 = time.perf_counter()
        dense = DenseRetriever.load(index_dir, embedder=embedder)
        loads.append(time.perf_counter() - t0)
    m = dense.manifest
    print(
        f"dense index: {len(dense)} passages, {m['model_identity']}; build {m['build_seconds']:.1f} s "
        f"(embedding {m['encode_seconds']:.1f} s = {len(dense) / max(m['encode_seconds'], 1e-9):.0f} passages/s, "
        f"built {m['built_at']}); load median {statistics.median(loads) * 1000:.1f} ms; "
        f"embeddings {os.path.getsize(index_dir / 'embeddings.npy') / 2**20:.1f} MiB"
    )
    dense.search(questions[:5], 3)  # warm up
    single, knn_only = [], []
    for q in questions:
        t0 = time.perf_counter()
        dense.search([q], 3)
        single.append((time.perf_counter() - t0) * 1000)
    qv = embedder.encode(questions)
    for v in qv:
        t0 = time.perf_counter()
        dense.search_vectors(v[None, :], 3)
        knn_only.append((time.perf_counter() - t0) * 1000)
    t0 = time.perf_counter()
    dense.search_vectors(qv, 3)
    batch_ms = (time.perf_counter() - t0) * 1000
    print(
        f"dense query latency (k=3, n={len(questions)}): encode+search p50 {percentile(single, 0.5):.1f} ms, "
        f"p95 {percentile(single, 0.95):.1f} ms; FAISS search only p50 {percentile(knn_only, 0.5):.2f} ms; "
        f"batch of {len(questions)} vectors {batch_ms:.1f} ms"
    )

    # -- Recall@3 --
    titles_in_pool = {dense.passage(i).title for i in range(len(dense))}
    missing = sum(len(r["gold"] - titles_in_pool) for r in rows)
    print(f"gold paragraphs not in the pool: {missing} of {sum(len(r['gold']) for r in rows)}")
    bm25, _ = ensure_index(pool, work / "bm25-hotpot-pool", progress=False)
    bm25_titles = [[p.title for p in h] for h in bm25.search(questions, 3)]
    _, q_rows = dense.search_vectors(qv, 3)
    dense_titles = [[dense.passage(int(i)).title for i in r] for r in q_rows]
    tables: dict[str, dict[str, dict[str, float]]] = {}
    tables[f"HotpotQA dev 0-{len(rows) - 1}"] = {
        "BM25, question": recall(rows, bm25_titles),
        "dense, question": recall(rows, dense_titles),
    }

    outputs: list[dict] = []
    if not args.no_llm:
        n = min(args.llm_questions, len(rows))
        sub = rows[:n]
        print(f"LLM outputs for {n} questions (gemma3-270m; cached in {work}):")
        outputs = llm_outputs(sub, work, args.pseudo_tokens, args.direct_tokens, args.threads)
        pseudos = [o["pseudo"] for o in outputs]
        empty = sum(not p for p in pseudos)
        sub_q = qv[:n]
        pv = embedder.encode([p or r["question"] for p, r in zip(pseudos, sub, strict=True)])
        _, p_rows = dense.search_vectors(pv, 3)
        results = {
            "BM25, question": recall(sub, bm25_titles[:n]),
            "dense, question": recall(sub, dense_titles[:n]),
            "dense, pseudo-passage": recall(sub, [[dense.passage(int(i)).title for i in r] for r in p_rows]),
        }
        _, q5 = dense.search_vectors(sub_q, 5)
        _, p5 = dense.search_vectors(pv, 5)
        pools = [list(dict.fromkeys([*map(int, a), *map(int, b)])) for a, b in zip(q5, p5, strict=True)]
        results["DPR candidates (5+5, upper bound)"] = recall(
            sub, [[dense.passage(i).title for i in c] for c in pools]
        )
        for kind in AIS_SCORES:
            picked = []
            for cand, a, b in zip(pools, sub_q, pv, strict=True):
                emb = np.asarray(dense.embeddings[np.asarray(cand)])
                s1, s2 = (emb @ a).tolist(), (emb @ b).tolist()
                order, _ = ais_select(s1, s2, 3, kind, float(a @ b))
                picked.append([dense.passage(cand[i]).title for i in order])
            results[f"DPR-AIS, {kind}"] = recall(sub, picked)
        tables[f"HotpotQA dev 0-{n - 1}, with gemma3-270m pseudo-passages"] = results
        print(
            f"pseudo-passages: {len(pseudos) - empty} non-empty, {empty} empty (question used instead); "
            f"mean {statistics.mean(o['pseudo_tokens'] for o in outputs):.0f} tokens; "
            f"generation {statistics.mean(o['pseudo_s'] for o in outputs):.1f} s/passage"
        )

    for title, results in tables.items():
        print(f"\nRecall@3 of the gold supporting paragraphs (%), {title}:")
        print(f"  {'retrieval':36s} {'recall':>7s} {'all gold':>9s} {'any gold':>9s}")
        for name, r in results.items():
            print(f"  {name:36s} {r['recall']:7.1f} {r['all']:9.1f} {r['any']:9.1f}")

    if outputs:
        us = [mean_nll(o["logprobs"]) for o in outputs]
        finite = [u for u in us if np.isfinite(u)]
        print(
            f"\nUGT: mean NLL of the direct answer (n={len(us)}, {len(us) - len(finite)} empty answers): "
            f"min {min(finite):.3f}, p25 {percentile(finite, 0.25):.3f}, median {percentile(finite, 0.5):.3f}, "
            f"p75 {percentile(finite, 0.75):.3f}, max {max(finite):.3f}"
        )
        for t in THRESHOLDS:
            share = 100 * sum(u >= t for u in us) / len(us)
            print(f"  threshold {t:<6g} -> {share:5.1f}% of questions retrieve")
    (work / "results.json").write_text(json.dumps(tables, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
