"""Corpus statistics at Wikipedia scale: build figures, count / co-occurrence latency, window exactness.

Usage: python bench/bench_world_stats.py [--dataset hotpotqa] [--entities 300] [--pairs 200] [--build DIR]
       [--bare] [--cold] [--scan-pairs 200]

The index is the realistic world's statistics index (the 30,539 Wikipedia articles plus the dataset's paragraph
pool) as the configs find it (``quco index world``; QUCO_WORLD_DIR). ``--build DIR`` builds a fresh copy in DIR
first and times it; ``--bare`` then re-runs the engine's own suffix-array build on the same token files, the
"bare engine" the build is compared with. Queries are real: titles of the context paragraphs of HotpotQA dev
questions 0-299 (disambiguation in parentheses removed), counted twice, the second (warm) pass timed:
- ``count`` with the engine's default prefetching (madvise per binary-search step) and with ours (none);
- window co-occurrence (the engine's 1000-token CNF count), window_exact, and document co-occurrence;
- window exactness: every pair's window count is re-done by a plain numpy scan of the token files, once with
  the engine's rule (nearest neighbour on each side, spans across a document separator dropped) and once as
  "the other phrase within 1000 tokens in the same document".
Prints its figures; it is not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from quco.corpus_stats.build import Manifest, build_local_index, index_size_bytes
from quco.corpus_stats.factory import default_index_dir
from quco.corpus_stats.local import LocalInfiniGram
from quco.corpus_stats.verify import IndexScan
from quco.corpus_stats.windows import near_same_document, positions
from quco.paths import data_dir
from quco.world.corpora import corpus_docs
from quco.world.sources import ARTICLE_COUNT


def entity(title: str) -> str:
    return re.sub(r"\s*\([^)]*\)$", "", title).strip()


def queries(n_entities: int, n_pairs: int) -> tuple[list[str], list[tuple[str, str]]]:
    rng = random.Random(13)
    with open(data_dir() / "hotpotqa/hotpot_dev_0_300_unified.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    pairs: list[tuple[str, str]] = []
    ents: list[str] = []
    for r in rows:
        titles = list(dict.fromkeys(entity(p["title"]) for p in r["context_paragraphs"]))
        sup = list(dict.fromkeys(entity(p["title"]) for p in r["context_paragraphs"] if p["is_supporting"]))
        ents += titles
        if len(sup) >= 2:
            pairs.append((sup[0], sup[1]))
        if len(titles) >= 2:
            a, b = rng.sample(titles, 2)
            pairs.append((a, b))
    ents = list(dict.fromkeys(e for e in ents if e))
    rng.shuffle(ents)
    pairs = list(dict.fromkeys(p for p in pairs if p[0] != p[1]))
    return ents[:n_entities], pairs[:n_pairs]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def evict(index: Path) -> None:
    """Drop the index's files from the page cache (only these files; no privileges needed)."""
    for path in index.iterdir():
        with open(path, "rb") as fh:
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def timed(fn, items, warm: bool = True) -> tuple[list[float], list]:  # noqa: ANN001
    if warm:
        fn(items[0])
    times, results = [], []
    for item in items:
        t = time.perf_counter()
        results.append(fn(item))
        times.append(time.perf_counter() - t)
    return times, results


def line(name: str, times: list[float], extra: str = "") -> None:
    print(
        f"  {name:<44} n={len(times):>4}  p50 {pct(times, 0.5) * 1e3:8.3f} ms  p95 {pct(times, 0.95) * 1e3:8.3f} ms  {extra}"
    )


def rusage_children() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def timed_child(cmd: list[str]) -> tuple[float, float]:
    """Run ``cmd`` to completion; its wall seconds and the CPU seconds of its process tree."""
    cpu0, _ = rusage_children()
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t, rusage_children()[0] - cpu0


# The engine's own indexing script end to end: its step 1 (a fork pool of --cpus workers, one ``encode`` per
# document line) and its suffix-array build. Its tokenizer choices are hub downloads (gpt2, llama, olmo), so the
# script gets the index's own tokenizer in place of "gpt2"; everything else runs as shipped.
SCRIPT = r"""
import sys, transformers
import infini_gram.indexing as ix
from quco.corpus_stats.tokenizer import load_tokenizer
spec = sys.argv[1]
class Tok:
    def __init__(self):
        self.t = load_tokenizer(spec)
    def encode(self, text):
        return self.t.encode(text)
transformers.AutoTokenizer.from_pretrained = lambda *a, **k: Tok()
sys.argv = ["indexing", "--tokenizer", "gpt2"] + sys.argv[2:]
ix.main()
"""


def bare_engine_script(index: Path, docs: Any) -> None:
    """The engine's indexing script on the same documents (written as JSONL first, not timed)."""
    m = Manifest.read(index)
    work = Path(tempfile.mkdtemp(prefix="bare-script-", dir=index.parent))
    try:
        (work / "data").mkdir()
        with open(work / "data" / "docs.jsonl", "w", encoding="utf-8") as f:
            for _, text in docs():
                f.write(json.dumps({"text": text}) + "\n")
        p = m.build_params
        cmd = [
            sys.executable, "-c", SCRIPT, m.tokenizer, "--data_dir", str(work / "data"), "--save_dir",
            str(work / "idx"), "--temp_dir", str(work / "tmp"), "--token_dtype", m.token_dtype, "--cpus",
            str(p["cpus"]), "--mem", str(p["mem_gib"]), "--shards", "1", "--ulimit", str(p["ulimit"]),
        ]  # fmt: skip
        wall, cpu = timed_child(cmd)
        width = {"u8": 1, "u16": 2, "u32": 4}[m.token_dtype]
        tokens = (work / "idx" / "tokenized.0").stat().st_size // width
        print(
            f"  bare engine (its indexing script, tokenizing + suffix arrays, {p['cpus']} CPUs): {wall:.1f} s wall, "
            f"{cpu:.1f} s CPU, {tokens - m.doc_count:,} tokens"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bare_engine_build(index: Path) -> None:
    """The engine's own suffix-array build, on a copy of the same token files (nothing else)."""
    m = Manifest.read(index)
    work = Path(tempfile.mkdtemp(prefix="bare-sa-", dir=index.parent))
    try:
        for i in range(len(m.shards)):
            for role in ("tokenized", "offset"):
                os.link(index / f"{role}.{i}", work / f"{role}.{i}")
        p = m.build_params
        cmd = [
            sys.executable, "-m", "infini_gram.indexing", "--data_dir", str(work), "--save_dir", str(work),
            "--temp_dir", str(work), "--token_dtype", m.token_dtype, "--cpus", str(p["cpus"]),
            "--mem", str(p["mem_gib"]), "--shards", str(len(m.shards)), "--ulimit", str(p["ulimit"]),
        ]  # fmt: skip
        wall, cpu = timed_child(cmd)
        print(f"  bare engine (suffix arrays only, same token files): {wall:.1f} s wall, {cpu:.1f} s CPU")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def scan_check(scan: IndexScan, pairs, wres, eres, limit: int) -> None:  # noqa: ANN001
    """Window counts against a plain numpy scan of the token files."""
    agree = same_doc = zero_flip = checked = exact_ok = only_pool = 0
    examples = []
    t = time.perf_counter()
    for (a, b), r, e in list(zip(pairs, wres, eres, strict=True))[:limit]:
        if not r.exact:
            continue
        ref = scan.window([a], [b], 1000)
        checked += 1
        agree += r.count in [rule for rule, _ in ref]
        exact_ok += e.count in [s for _, s in ref]
        same = [s for rule, s in ref if rule == r.count] or [s for _, s in ref]
        same_doc += r.count in same
        if r.count == 0 and min(same) > 0:
            zero_flip += 1
            examples.append((a, b, min(same)))
            pa, pb = positions(scan.tokens, scan.encode([a])), positions(scan.tokens, scan.encode([b]))
            rare, other = (pa, pb) if len(pa) <= len(pb) else (pb, pa)
            near = rare[near_same_document(rare, other, scan.doc_starts, 1000)]
            docs = np.searchsorted(scan.doc_starts, near, side="right") - 1
            only_pool += bool((docs >= ARTICLE_COUNT).all())  # documents after the articles are the pool's
    print(
        f"window exactness on {checked} pairs (plain numpy scan of the token files, {time.perf_counter() - t:.0f} s):"
    )
    print(f"  engine count == engine rule re-done on the tokens: {agree}/{checked}")
    print(f"  engine count == same-document 1000-token window:   {same_doc}/{checked}; engine 0 where that count is "
          f"not: {zero_flip} (all such co-occurrences in pool paragraphs for {only_pool})")  # fmt: skip
    print(f"  window_exact == same-document 1000-token window:   {exact_ok}/{checked}")
    for a, b, n in examples[:3]:
        print(f"    e.g. {a!r} & {b!r}: window 0, same-document window {n}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--entities", type=int, default=300)
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--scan-pairs", type=int, default=200, help="pairs checked against the plain scan")
    ap.add_argument("--build", type=Path, default=None, help="build a fresh index here first and time it")
    ap.add_argument("--bare", action="store_true", help="also time the engine's suffix-array build alone")
    ap.add_argument(
        "--bare-script", action="store_true", help="also time the engine's indexing script end to end"
    )
    ap.add_argument(
        "--cold", action="store_true", help="also time a first pass with the index out of the page cache"
    )
    args = ap.parse_args()
    print(f"machine load: {os.getloadavg()}")

    docs = corpus_docs(f"wiki-articles+pool:{args.dataset}")
    if args.build is not None:
        index = args.build.expanduser().resolve()
        t, c = time.perf_counter(), time.process_time()
        build_local_index(docs(), index, progress=True, total_docs=docs.expected_docs)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"build: {time.perf_counter() - t:.1f} s wall, {time.process_time() - c:.1f} s CPU in this process "
              f"(+ suffix-array children {rusage_children()[0]:.1f} s CPU); peak RSS {rss:.0f} MB")  # fmt: skip
    else:
        index = default_index_dir(docs.fingerprint, "wordpiece", docs.source.index_home)
        if not index.is_dir():
            sys.exit(
                f"no index at {index}: run `quco index world --dataset {args.dataset}` or pass --build DIR"
            )
    m = Manifest.read(index)
    size = index_size_bytes(index)
    print(f"index {index}: {m.doc_count:,} documents, {m.token_count:,} tokens")
    print(
        f"  built in {m.build_seconds:.1f} s (tokenizing {m.tokenize_seconds} s, suffix arrays {m.suffix_array_seconds} s)"
    )
    print(f"  engine files {size / 1e6:.0f} MB = {size / m.token_count:.2f} bytes/token")
    if args.bare:
        bare_engine_build(index)
    if args.bare_script:
        bare_engine_script(index, docs)

    ents, pairs = queries(args.entities, args.pairs)
    print(f"queries: {len(ents)} entities, {len(pairs)} entity pairs (HotpotQA dev 0-299 context titles)")
    if args.cold:
        for prefetch in (True, False):
            evict(index)  # the files leave the page cache; a fresh engine reads what it needs from disk
            cold = LocalInfiniGram(index, prefetch=prefetch)
            ct, _ = timed(cold.count, ents, warm=False)
            line(f"count, cold, {'engine default prefetching' if prefetch else 'no prefetching'}", ct)
            del cold
    t = time.perf_counter()
    ours = LocalInfiniGram(index)
    print(f"  open: {1e3 * (time.perf_counter() - t):.1f} ms")
    engine_default = LocalInfiniGram(index, prefetch=True)
    for stats, name in (
        (engine_default, "count, engine default prefetching"),
        (ours, "count, no prefetching"),
    ):
        timed(stats.count, ents)  # first pass: page cache
        ct, counts = timed(stats.count, ents)
        line(name, ct, f"(found {sum(r.count > 0 for r in counts)}/{len(counts)})")
    results = {}
    for mode in ("window", "window_exact", "document"):
        stats = LocalInfiniGram(index, cooccurrence=mode, max_diff_tokens=1000)
        timed(lambda p, s=stats: s.cooccur(*p), pairs)
        times, res = timed(lambda p, s=stats: s.cooccur(*p), pairs)
        line(f"{mode} co-occurrence", times, f"(non-zero {sum(r.count > 0 for r in res)})")
        results[mode] = res
    print(f"  window counts not subsampled: {sum(r.exact for r in results['window'])}/{len(pairs)}")
    scan_check(IndexScan(ours), pairs, results["window"], results["window_exact"], args.scan_pairs)


if __name__ == "__main__":
    main()
