"""Benchmark the default HF generator: conversion load, cached load, greedy speed, analyze(), peak RSS.

Each phase runs in its own process so that load times and peak memory are those a user would see:
``convert`` converts the bundled GGUF into a fresh temporary cache (skip with ``--skip-convert``), ``cached``
loads from the normal cache (``quco.paths.cache_dir()``) and measures generation and analysis.

    python bench/bench_llm.py [--threads N] [--skip-convert] [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT = (
    "Question: Who directed the film Titanic (1997)?\nAnswer: The film Titanic was directed by James Cameron.\n\n"
    "Question: Where is the Eiffel Tower?\nAnswer:"
)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _config(threads: int | None):
    from quco.config import GeneratorConfig

    return GeneratorConfig(threads=threads)


def phase_convert(threads: int | None) -> dict:
    from quco.llm import build_generator

    start, cpu = time.perf_counter(), time.process_time()
    gen = build_generator(_config(threads))
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    assert gen.load_source == "converted", gen.load_source
    return {
        "convert_load_s": seconds,
        "convert_load_cpu_s": cpu_seconds,
        "convert_peak_rss_mb": _peak_rss_mb(),
    }


def _analysis_text(tokenizer, n_tokens: int) -> str:
    """About ``n_tokens`` tokens of real HotpotQA paragraphs (from the evaluation data directory)."""
    from quco.paths import data_dir

    path = data_dir() / "hotpotqa" / "hotpot_dev_0_300_unified.jsonl"
    paragraphs: list[str] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            paragraphs.extend(p["text"] for p in json.loads(line)["context_paragraphs"])
            if len(paragraphs) > 40:
                break
    ids = tokenizer("\n".join(paragraphs), add_special_tokens=False)["input_ids"][: n_tokens - 1]
    return tokenizer.decode(ids)


def phase_cached(threads: int | None, new_tokens: int) -> dict:
    from quco.llm import build_generator

    start, cpu = time.perf_counter(), time.process_time()
    gen = build_generator(_config(threads))  # imports torch (after setting its OpenMP wait policy)
    out: dict = {"cached_load_s": time.perf_counter() - start, "load_source": gen.load_source}
    out["cached_load_cpu_s"] = time.process_time() - cpu
    import torch

    out["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY", "")
    out["threads"] = torch.get_num_threads()
    gen.generate("Hello", max_new_tokens=2)  # warm-up

    for label, scores in (("plain", False), ("logprobs_entropy", True)):
        start, cpu = time.perf_counter(), time.process_time()
        g = gen.generate(PROMPT, max_new_tokens=new_tokens, logprobs=scores, entropy=scores)[0]
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
        out[f"greedy_{label}_tok_s"] = len(g.token_ids) / seconds
        # CPU time per token barely depends on what else runs on the machine (wall time does)
        out[f"greedy_{label}_cpu_ms_per_tok"] = 1000 * cpu_seconds / len(g.token_ids)
        out[f"greedy_{label}_tokens"] = len(g.token_ids)

    start = time.perf_counter()
    gens = gen.generate(
        PROMPT, max_new_tokens=new_tokens, temperature=1.0, n=3, seed=0, logprobs=True, entropy=True
    )
    seconds = time.perf_counter() - start
    out["sample_n3_tok_s"] = sum(len(g.token_ids) for g in gens) / seconds

    text = _analysis_text(gen.tokenizer, 500)
    for label, kwargs in (
        ("attention", {"attention_layer": -1}),
        ("all", {"attention_layer": -1, "hidden_layers": (-1,), "scores": True}),
    ):
        start, cpu = time.perf_counter(), time.process_time()
        a = gen.analyze(text, **kwargs)
        out[f"analyze_500_{label}_s"] = time.perf_counter() - start
        out[f"analyze_500_{label}_cpu_s"] = time.process_time() - cpu
        out["analyze_tokens"] = len(a.token_ids)
    out["cached_peak_rss_mb"] = _peak_rss_mb()
    return out


def _run_phase(phase: str, args: argparse.Namespace, env: dict[str, str]) -> dict:
    cmd = [sys.executable, __file__, "--phase", phase, "--new-tokens", str(args.new_tokens)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--skip-convert", action="store_true")
    parser.add_argument("--phase", choices=["convert", "cached"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.phase == "convert":
        print(json.dumps(phase_convert(args.threads)))
        return
    if args.phase == "cached":
        print(json.dumps(phase_cached(args.threads, args.new_tokens)))
        return

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2 cores assumed)")
    results: dict = {}
    if not args.skip_convert:
        with tempfile.TemporaryDirectory(prefix="quco-bench-") as tmp:
            results.update(_run_phase("convert", args, {**env, "QUCO_CACHE_DIR": str(Path(tmp))}))
    results.update(_run_phase("cached", args, env))
    print(f"load average at end:   {os.getloadavg()[0]:.2f}")
    rows = [
        ("first load, GGUF conversion (s)", "convert_load_s"),
        ("  CPU seconds", "convert_load_cpu_s"),
        ("peak RSS during conversion (MB)", "convert_peak_rss_mb"),
        ("cached load (s)", "cached_load_s"),
        ("  CPU seconds", "cached_load_cpu_s"),
        ("torch threads", "threads"),
        ("OMP_WAIT_POLICY", "omp_wait_policy"),
        ("greedy tok/s, text only", "greedy_plain_tok_s"),
        ("  CPU ms per token", "greedy_plain_cpu_ms_per_tok"),
        ("greedy tok/s, logprobs + entropy", "greedy_logprobs_entropy_tok_s"),
        ("  CPU ms per token", "greedy_logprobs_entropy_cpu_ms_per_tok"),
        ("sampling n=3 tok/s (all samples), logprobs + entropy", "sample_n3_tok_s"),
        ("analyze() 500 tokens, attention only (s)", "analyze_500_attention_s"),
        ("  CPU seconds", "analyze_500_attention_cpu_s"),
        ("analyze() 500 tokens, attention + hidden + scores (s)", "analyze_500_all_s"),
        ("  CPU seconds", "analyze_500_all_cpu_s"),
        ("peak RSS, cached load + generation + analyze (MB)", "cached_peak_rss_mb"),
    ]
    for label, key in rows:
        if key in results:
            value = results[key]
            print(f"{label:58s} {value:10.2f}" if isinstance(value, float) else f"{label:58s} {value:>10}")


if __name__ == "__main__":
    main()
