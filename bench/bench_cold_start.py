"""Cold and warm start of ``quco ask`` on the embedded default, and where the cold seconds go.

Targets (quiet 2-core machine): the first ``quco ask`` on an empty cache, model conversion and index builds
included, within 60 s; a warm ``quco ask`` within 5 s of start-up. Three measurements, each in fresh processes:

1. **breakdown**: one process, a fresh cache, the default pipeline's parts built one after the other with a
   timer each (imports, GGUF assembly, GGUF conversion split into reading / tokenizer / weights / writing,
   model load, BM25 build, statistics-index build, spaCy, first answer);
2. **cold**: ``quco ask QUESTION`` in a new process on another fresh cache (wall time, and the start-up and
   answer seconds it prints);
3. **warm**: the same command again on that cache, ``--warm`` times.

The machine's load average is printed with each figure: on a busy machine wall times are upper bounds, and the
CPU seconds beside them (this process's, or the child's) say what the work itself cost.

    python bench/bench_cold_start.py [--warm 2] [--keep] [--question "..."] [--skip-breakdown]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUESTION = "Who was born first, Albert Einstein or Niels Bohr?"
ROOT = Path(__file__).resolve().parents[1]


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def _env(cache: Path) -> dict[str, str]:
    env = {**os.environ, "QUCO_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


# ------------------------------------------------------------------------------------------------ breakdown


def phase_breakdown(question: str) -> dict:
    """Runs inside a fresh process whose QUCO_CACHE_DIR is empty."""
    times: dict[str, float] = {}
    cpu: dict[str, float] = {}

    def timed(name: str, fn):  # noqa: ANN001, ANN202
        start, cpu_start = time.perf_counter(), time.process_time()
        value = fn()
        times[name] = round(time.perf_counter() - start, 2)
        cpu[name] = round(time.process_time() - cpu_start, 2)
        return value

    timed("import quco", lambda: __import__("quco.cli"))

    def import_hf():  # noqa: ANN202
        from quco.llm import hf

        return hf

    hf = timed("import torch + transformers", import_hf)
    from quco.config import load_config
    from quco.pipeline import Pipeline, shared_generator

    cfg = load_config()
    models = hf._models_dir()
    out_dir = models / hf._DEFAULT_HF_DIR
    gguf = timed("assemble GGUF from the package", hf.default_gguf_path)
    timed("convert GGUF (total)", lambda: hf._ensure_converted(out_dir, lambda: gguf))
    marker = json.loads((out_dir / hf._MARKER).read_text(encoding="utf-8"))
    conversion = marker.get("seconds", {})
    timed("load the converted model", lambda: shared_generator(cfg.generator))

    from quco.corpus_stats import build_corpus_stats
    from quco.retrieval import build_retriever
    from quco.world.corpora import resolve_corpus

    source = resolve_corpus(cfg.retriever.corpus)
    timed("build the BM25 index", lambda: build_retriever(cfg.retriever, progress=False, corpus=source))
    timed(
        "build the statistics index",
        lambda: build_corpus_stats(cfg.corpus_stats, source.docs, source.fingerprint(), progress=False),
    )
    from quco.text import build_text

    text = build_text(cfg.text)
    timed("load spaCy", lambda: text.splitter.split("Niels Bohr was born in Copenhagen. He died in 1962."))
    pipe = timed("assemble the pipeline (parts reused)", lambda: Pipeline.from_config(cfg, progress=False))
    trace = timed("first answer", lambda: pipe.answer(question))
    return {
        "seconds": times,
        "cpu_seconds": cpu,
        "conversion": conversion,
        "converter": marker.get("converter"),
        "answer": trace.answer,
        "llm_calls": trace.counters.llm_calls,
        "answer_seconds_by_component": trace.counters.seconds,
    }


# ------------------------------------------------------------------------------------------------ ask


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_ask(cache: Path, question: str) -> dict:
    start, cpu_start = time.perf_counter(), _children_cpu()
    proc = subprocess.run(
        [sys.executable, "-m", "quco.cli", "ask", question],
        env=_env(cache),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    wall = time.perf_counter() - start
    cpu = _children_cpu() - cpu_start
    if proc.returncode != 0:
        raise SystemExit(f"quco ask failed ({proc.returncode}): {proc.stderr[-2000:]}")
    m = re.search(r"start-up ([\d.]+)s, answer ([\d.]+)s", proc.stdout)
    answer = re.search(r"^answer: (.*?)\s+\[stop", proc.stdout, re.MULTILINE)
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "startup_s": float(m.group(1)) if m else None,
        "answer_s": float(m.group(2)) if m else None,
        "answer": answer.group(1) if answer else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phase", choices=["breakdown"], help=argparse.SUPPRESS)
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--warm", type=int, default=2, help="warm runs after the cold one")
    ap.add_argument("--skip-breakdown", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the temporary caches")
    args = ap.parse_args()
    if args.phase == "breakdown":
        print(json.dumps(phase_breakdown(args.question)))
        return

    print(f"bench_cold_start: {_load()}")
    caches = []
    results: dict = {"load_before": _load()}
    try:
        if not args.skip_breakdown:
            cache = Path(tempfile.mkdtemp(prefix="quco-bench-cold-"))
            caches.append(cache)
            start = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, __file__, "--phase", "breakdown", "--question", args.question],
                env=_env(cache),
                capture_output=True,
                text=True,
                timeout=3600,
            )
            if proc.returncode != 0:
                raise SystemExit(f"breakdown failed: {proc.stderr[-3000:]}")
            breakdown = json.loads(proc.stdout.strip().splitlines()[-1])
            breakdown["process_wall_s"] = round(time.perf_counter() - start, 2)
            results["breakdown"] = breakdown
            print(
                f"\ncold breakdown (one process, empty cache; {breakdown['process_wall_s']} s wall in all):"
            )
            print(f"  {'':40s} {'wall':>9s} {'CPU':>9s}")
            for name, sec in breakdown["seconds"].items():
                print(f"  {name:40s} {sec:7.2f} s {breakdown['cpu_seconds'][name]:7.2f} s")
                if name == "convert GGUF (total)":
                    for part, psec in breakdown["conversion"].items():
                        print(f"    {part:38s} {psec:7.2f} s")
            print(
                f"  converter: {breakdown['converter']}; answer {breakdown['answer']!r}; LLM calls {breakdown['llm_calls']}"
            )
            print(f"  answer seconds by component: {breakdown['answer_seconds_by_component']}")
            print(f"  ({_load()})")

        cache = Path(tempfile.mkdtemp(prefix="quco-bench-ask-"))
        caches.append(cache)
        cold = run_ask(cache, args.question)
        results["cold"] = cold
        print(
            f"\ncold `quco ask` (new process, empty cache): {cold['wall_s']} s wall, {cold['cpu_s']} s CPU "
            f"(start-up {cold['startup_s']} s, answer {cold['answer_s']} s; answer {cold['answer']!r}) ({_load()})"
        )
        results["warm"] = []
        for i in range(args.warm):
            warm = run_ask(cache, args.question)
            results["warm"].append(warm)
            print(
                f"warm `quco ask` #{i + 1}: {warm['wall_s']} s wall, {warm['cpu_s']} s CPU (start-up {warm['startup_s']} s, "
                f"answer {warm['answer_s']} s) ({_load()})"
            )
    finally:
        if not args.keep:
            for cache in caches:
                shutil.rmtree(cache, ignore_errors=True)
    results["load_after"] = _load()
    print("\n" + json.dumps(results))


if __name__ == "__main__":
    main()
