"""BM25 build memory and time, and query latency, as the corpus grows: bm25s's in-memory build against the streaming one.

Usage:
  python bench/bench_bm25_scale.py [--sizes 671094,1342188,2013282,5000000] [--builders bm25s,streaming]
                                   [--max-rss-gb 12] [--queries 500] [--k 10] [--identity] [--work DIR]
  python bench/bench_bm25_scale.py --summary-of SAVED_OUTPUT     # the fits of saved table lines

Corpora: the HotpotQA haystack of the realistic world (``quco index haystack --dataset hotpotqa``, 671,094
passages) and larger ones made by repeating its lines in order, each copy after the first under new ids
(``<id>#r<copy>``), cut at the requested size. Term statistics per passage stay those of the haystack; the
vocabulary does not grow as it would with new text (see docs/world.md, "At the scale of the paper").

Each build runs in a child process, which reports its own peak RSS (``VmHWM``). A watchdog
kills a build whose RSS passes ``--max-rss-gb``, and a size whose predicted peak (a least-squares line over
the sizes already measured with that builder) passes it is not run but predicted. Queries: the 300 HotpotQA
dev questions of ``hotpotqa/hotpot_dev_0_300_unified.jsonl`` and the first 200 of the 500-question sample
``hotpotqa/raw/insightspike_hotpotqa_sample500_not_in_300_1000.jsonl``, one search call each, top ``--k``.
``--identity`` compares the two builders' indexes of the first size: every array, and the top-k ids and scores
of every query. Print the machine's load with the figures (``uptime`` is printed first).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quco.paths import cache_dir, data_dir

QUESTION_FILES = (
    ("hotpotqa/hotpot_dev_0_300_unified.jsonl", 300),
    ("hotpotqa/raw/insightspike_hotpotqa_sample500_not_in_300_1000.jsonl", 200),
)
PREDICT_AT = 21_015_324  # passages of DPR's psgs_w100.tsv
ARRAYS = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy")


def questions(n: int) -> list[str]:
    out: list[str] = []
    for name, take in QUESTION_FILES:
        with (data_dir() / name).open(encoding="utf-8") as fh:
            out += [json.loads(line)["question"] for line in fh][:take]
    return out[:n]


def haystack_path() -> Path:
    from quco.world.sources import world_dir

    return world_dir() / "hotpotqa" / "haystack-w100" / "psgs_w100.tsv"


def make_corpus(haystack: Path, size: int, out: Path) -> Path:
    """The haystack's lines repeated in order, copy r >= 1 under ids ``<id>#r<r>``, cut at ``size`` passages."""
    written, copy = 0, 0
    with out.open("wb") as fo:
        while written < size:
            suffix = b"" if copy == 0 else b"#r%d" % copy
            with haystack.open("rb") as fh:
                header = fh.readline()
                if copy == 0:
                    fo.write(header)
                for line in fh:
                    if written == size:
                        break
                    pid, rest = line.split(b"\t", 1)
                    if b'"' in pid:
                        raise SystemExit(
                            f"{haystack}: a quoted id ({pid[:40]!r}) cannot be renamed by this bench"
                        )
                    fo.write(pid + suffix + b"\t" + rest)
                    written += 1
            copy += 1
    return out


def child_build(corpus: str, index_dir: str, builder: str) -> None:
    from quco.retrieval import BM25Retriever
    from quco.retrieval.bm25_stream import StreamingBM25Builder

    read_peak = [float("nan")]  # the streaming build's peak while reading and tokenizing (pass 1)
    finish = StreamingBM25Builder.finish

    def timed_finish(self, *args, **kwargs):
        read_peak[0] = peak_rss_gb()
        return finish(self, *args, **kwargs)

    StreamingBM25Builder.finish = timed_finish  # type: ignore[method-assign]
    t0 = time.perf_counter()
    r = BM25Retriever.build(corpus, index_dir, progress=False, builder=builder)  # type: ignore[arg-type]
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "seconds": time.perf_counter() - t0,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "passages": len(r),
                "peak_rss_gb": peak_rss_gb(),
                "read_peak_gb": read_peak[0],
            }
        )
    )


def child_query(index_dir: str, n: int, k: int) -> None:
    from quco.retrieval import BM25Retriever

    t0 = time.perf_counter()
    r = BM25Retriever.load(index_dir)
    load_ms = (time.perf_counter() - t0) * 1000
    qs = questions(n)
    r.search(qs[:5], k)
    times = []
    for q in qs:
        t0 = time.perf_counter()
        r.search([q], k)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    pick = lambda f: times[min(len(times) - 1, round(f * (len(times) - 1)))]  # noqa: E731
    print(
        json.dumps(
            {"load_ms": load_ms, "p50_ms": pick(0.5), "p95_ms": pick(0.95), "peak_rss_gb": peak_rss_gb()}
        )
    )


def run_child(args: list[str], max_rss_gb: float) -> tuple[dict | None, float, str | None]:
    """(the child's JSON line, its peak RSS in GB, why it failed); killed past ``max_rss_gb``."""
    proc = subprocess.Popen(
        [sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    killed = threading.Event()

    def watch() -> None:
        status = Path(f"/proc/{proc.pid}/status")
        while proc.poll() is None:
            try:
                rss_kb = next(
                    int(x.split()[1]) for x in status.read_text().splitlines() if x.startswith("VmRSS")
                )
            except (OSError, StopIteration, ValueError):
                return
            if rss_kb / 2**20 > max_rss_gb:
                killed.set()
                proc.kill()
                return
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()
    out, err = proc.communicate()
    if killed.is_set():
        return None, max_rss_gb, f"killed at {max_rss_gb:g} GB RSS"
    if proc.returncode != 0:
        return None, float("nan"), err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"
    got = json.loads(out.strip().splitlines()[-1])
    return got, got["peak_rss_gb"], None


def peak_rss_gb() -> float:
    """This process's peak resident set size so far, in GiB: ``VmHWM`` of its own address space.

    Not ``ru_maxrss``: Linux carries the parent's high-water mark into a child across ``exec``, so a child of a
    large parent would report the parent's peak.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """(slope per million passages, intercept) of a least-squares line, or None with fewer than 2 points."""
    if len(points) < 2:
        return None
    x = np.array([p[0] / 1e6 for p in points])
    y = np.array([p[1] for p in points])
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept)


def predict(line: tuple[float, float] | None, size: int) -> float:
    return float("nan") if line is None else line[0] * size / 1e6 + line[1]


@dataclass(frozen=True)
class Row:
    size: int
    rss: float  # GB (2**30 bytes)
    seconds: float  # wall
    p50: float  # ms
    p95: float
    cpu: float | None = None  # user + system seconds of the build process
    read: float = float("nan")  # streaming: peak RSS (GB) up to the end of pass 1


_ROW = re.compile(r"^(bm25s|streaming)\s+([\d,]+)((?:\s+(?:[\d.]+|nan))+)\s*$")


def summarize(results: dict[str, list[Row]]) -> None:
    """Least-squares lines over the measured sizes and their values at 21M passages."""
    for builder, rows in results.items():
        if len(rows) < 2:
            print(f"{builder}: fewer than two sizes measured, no fit")
            continue
        sizes = ", ".join(f"{r.size:,}" for r in rows)
        print(f"{builder} (sizes {sizes}):")
        series = [
            ("peak RSS", "GB", [r.rss for r in rows], 1.0),
            ("build", "h", [r.seconds for r in rows], 3600.0),
            ("query p50", "ms", [r.p50 for r in rows], 1.0),
            ("query p95", "ms", [r.p95 for r in rows], 1.0),
        ]
        if all(r.cpu is not None for r in rows):
            series.insert(2, ("build CPU", "h", [r.cpu for r in rows], 3600.0))
        if all(r.read == r.read for r in rows):  # no NaN
            series.insert(1, ("pass-1 RSS", "GB", [r.read for r in rows], 1.0))
        for label, unit, values, scale in series:
            line = fit([(r.size, v) for r, v in zip(rows, values, strict=True)])
            assert line is not None
            at = "; ".join(
                f"at {n:,}: {predict(line, n) / scale:.3g} {unit}" for n in (5_000_000, PREDICT_AT)
            )
            print(f"  {label:<10} = {line[0] / scale:.4g} {unit} per million passages + {line[1] / scale:.4g} {unit}; {at}")  # fmt: skip


def summarize_output(path: Path) -> None:
    """The fits of a saved run of this bench (its table lines), e.g. to add sizes measured in another run."""
    results: dict[str, list[Row]] = {}
    for line in path.read_text().splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        name, size, rest = m.groups()
        x = [float(v) for v in rest.split()]
        if len(x) == 6:  # peak RSS, build s, load ms, p50, p95, load average
            row = Row(int(size.replace(",", "")), x[0], x[1], x[3], x[4])
        elif len(x) == 7:  # peak RSS, build s, CPU s, load ms, p50, p95, load average
            row = Row(int(size.replace(",", "")), x[0], x[1], x[4], x[5], cpu=x[2])
        elif len(x) == 8:  # peak RSS, pass-1 RSS, build s, CPU s, load ms, p50, p95, load average
            row = Row(int(size.replace(",", "")), x[0], x[2], x[5], x[6], cpu=x[3], read=x[1])
        else:
            continue
        results.setdefault(name, []).append(row)
    summarize(results)


def compare(a: Path, b: Path, n: int, k: int) -> None:
    from quco.retrieval import BM25Retriever

    same_arrays = all(
        np.array_equal(np.load(a / "bm25" / name, mmap_mode="r"), np.load(b / "bm25" / name, mmap_mode="r"))
        for name in ARRAYS
    )
    ra, rb = BM25Retriever.load(a), BM25Retriever.load(b)
    qs = questions(n)
    same = hits = 0
    for q in qs:
        x = [(p.id, p.score) for p in ra.search([q], k)[0]]
        y = [(p.id, p.score) for p in rb.search([q], k)[0]]
        same += x == y
        hits += len(x)
    print(f"identity ({len(ra):,} passages): arrays {'identical' if same_arrays else 'DIFFER'}; "
          f"top-{k} ids and scores identical for {same}/{len(qs)} queries ({hits} passages compared)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes", default="671094,1342188,2013282,5000000", help="passage counts, comma-separated"
    )
    ap.add_argument("--builders", default="bm25s,streaming")
    ap.add_argument("--max-rss-gb", type=float, default=12.0)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--identity", action="store_true", help="compare the builders' indexes at the first size")
    ap.add_argument("--work", type=Path, default=None, help="scratch directory (default: under the cache)")
    ap.add_argument("--keep", action="store_true", help="keep corpora and indexes in --work")
    ap.add_argument("--summary-of", type=Path, help="print the fits of a saved output of this bench and stop")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.summary_of:
        summarize_output(args.summary_of)
        return
    if args.child:
        kind, *rest = args.child
        if kind == "build":
            child_build(*rest)
        else:
            child_query(rest[0], int(rest[1]), int(rest[2]))
        return

    haystack = haystack_path()
    if not haystack.exists():
        raise SystemExit(f"no haystack at {haystack}; build it with `quco index haystack --dataset hotpotqa`")
    sizes = [int(s) for s in args.sizes.split(",")]
    builders = args.builders.split(",")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-bm25-scale-", dir=cache_dir()))
    work.mkdir(parents=True, exist_ok=True)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min); "
          f"cores {os.cpu_count()}; haystack {haystack}")  # fmt: skip
    results: dict[str, list[Row]] = {b: [] for b in builders}
    print(f"{'builder':<10} {'passages':>10} {'peak RSS GB':>12} {'pass-1 GB':>9} {'build s':>9} {'CPU s':>8} {'load ms':>8} "
          f"{'p50 ms':>7} {'p95 ms':>7}  load avg")  # fmt: skip
    try:
        for size in sizes:
            corpus = haystack if size == 671_094 else work / f"psgs-{size}.tsv"
            if corpus != haystack and not corpus.exists():
                make_corpus(haystack, size, corpus)
            for builder in builders:
                line = fit([(r.size, r.rss) for r in results[builder]])
                if predict(line, size) > args.max_rss_gb:
                    print(f"{builder:<10} {size:>10,} {predict(line, size):>12.2f} {'(predicted, not run: over '}"
                          f"{args.max_rss_gb:g} GB)")  # fmt: skip
                    continue
                index_dir = work / f"index-{builder}-{size}"
                shutil.rmtree(index_dir, ignore_errors=True)
                got, peak, problem = run_child(
                    ["--child", "build", str(corpus), str(index_dir), builder], args.max_rss_gb
                )
                if problem:
                    print(f"{builder:<10} {size:>10,} {peak:>12.2f} {problem}")
                    continue
                q, _, _ = run_child(
                    ["--child", "query", str(index_dir), str(args.queries), str(args.k)], args.max_rss_gb
                )
                assert q is not None
                results[builder].append(
                    Row(
                        size,
                        peak,
                        got["seconds"],
                        q["p50_ms"],
                        q["p95_ms"],
                        got["cpu_s"],
                        got["read_peak_gb"],
                    )
                )
                print(f"{builder:<10} {size:>10,} {peak:>12.2f} {got['read_peak_gb']:>9.2f} {got['seconds']:>9.1f} {got['cpu_s']:>8.1f} {q['load_ms']:>8.1f} "
                      f"{q['p50_ms']:>7.2f} {q['p95_ms']:>7.2f}  {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
            if args.identity and size == sizes[0] and {"bm25s", "streaming"} <= set(builders):
                compare(work / f"index-bm25s-{size}", work / f"index-streaming-{size}", args.queries, args.k)
            if not args.keep:
                for builder in builders:
                    shutil.rmtree(work / f"index-{builder}-{size}", ignore_errors=True)
                if corpus != haystack:
                    corpus.unlink(missing_ok=True)
        print()
        summarize(results)
    finally:
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
