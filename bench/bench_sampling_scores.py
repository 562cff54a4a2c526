"""Do batched samples give the uncertainty scores sequential samples give? SeaKR's EigenScore, both ways.

For each of ``--checks`` HotpotQA dev questions, SeaKR's first check (its 20 sampled first steps at T = 1.0,
top-k 50, top-p 0.9 from the 8-shot prompt, and the EigenScore of their hidden states) is made twice with the same
seeds on one llama.cpp model: the samples decoded one after another (generator.sample_batch=false) and together.
Batched decoding rounds in other last bits than a lone sequence, so where two tokens are nearly tied a seed can
draw another one: the scores should agree within that noise, not bit for bit.

    python bench/bench_sampling_scores.py [--checks 20] [--model qwen2.5-coder-1.5b-instruct]
                                          [--config configs/hotpotqa/seakr.yaml] [--threads N]

It prints the scores' quantiles and mean in each mode, the paired differences, how many samples are identical,
a two-sample Kolmogorov-Smirnov test and a paired Wilcoxon signed-rank test (scipy), the seconds per check in
each mode and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from quco.config import load_config
from quco.datasets import load_dataset
from quco.engine.context import RunContext
from quco.pipeline import Pipeline
from quco.prompts import build_prompt
from quco.trace import Trace

ROOT = Path(__file__).resolve().parents[1]
MODEL = "qwen2.5-coder-1.5b-instruct"


def describe(name: str, values: list[float]) -> str:
    q = np.quantile(values, [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0])
    return f"{name:<11} mean {statistics.mean(values):8.3f}  " + "  ".join(
        f"q{p:02d} {v:8.3f}" for p, v in zip([0, 10, 25, 50, 75, 90, 100], q, strict=True)
    )


def summarize(
    scores: dict[bool, list[float]],
    seconds: dict[bool, list[float]],
    cpu: dict[bool, list[float]],
    identical: str,
    loads: list[float],
    samples: int,
) -> None:
    """Print the distributions, their tests and the time per check (False: sequential, True: batched)."""
    seq, bat = scores[False], scores[True]
    diff = [b - a for a, b in zip(seq, bat, strict=True)]
    print(f"\nSeaKR EigenScore of the first check of {len(seq)} questions ({samples} samples each)")
    print(describe("sequential", seq))
    print(describe("batched", bat))
    print(describe("difference", diff))
    print(f"identical sampled steps: {identical}")
    try:
        from scipy import stats
    except ImportError:
        print("scipy is not installed: no test")
    else:
        ks = stats.ks_2samp(seq, bat)
        print(f"two-sample Kolmogorov-Smirnov: D = {ks.statistic:.3f}, p = {ks.pvalue:.3g}")
        if any(diff):
            w = stats.wilcoxon(seq, bat)
            print(f"paired Wilcoxon signed-rank: W = {w.statistic:.1f}, p = {w.pvalue:.3g}")
    wall = {mode: statistics.mean(v) for mode, v in seconds.items()}
    used = {mode: statistics.mean(v) for mode, v in cpu.items()}
    print(
        f"seconds per check: sequential {wall[False]:.2f}, batched {wall[True]:.2f} ({wall[False] / wall[True]:.2f}x); "
        f"CPU seconds per check: sequential {used[False]:.2f}, batched {used[True]:.2f} "
        f"({used[False] / used[True]:.2f}x); load average during the run {statistics.mean(loads):.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checks", type=int, default=20)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "hotpotqa" / "seakr.yaml")
    ap.add_argument("--threads", type=int, default=None, help="generator.threads (default: every core)")
    args = ap.parse_args()
    overrides = {"generator.backend": "llamacpp", "generator.model": args.model}
    if args.threads:
        overrides["generator.threads"] = args.threads
    cfg = load_config(args.config, overrides=overrides)
    pipe = Pipeline.from_config(cfg, progress=False)
    parts, method, gen = pipe.parts, pipe.method, pipe.parts.generator
    print(f"load average at start: {os.getloadavg()[0]:.2f}; model {args.model}", flush=True)
    scores: dict[bool, list[float]] = {False: [], True: []}
    seconds: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    same = total = 0
    loads = []
    examples = load_dataset("hotpotqa", limit=args.checks)
    # one check first, not recorded: the analyses' context is made and the exemplars' state is kept, as in a run
    warm = examples[0].question
    ctx = RunContext(parts=parts, trace=Trace(question=warm, method="seakr"))
    method._uncertainty(build_prompt(warm, parts.exemplars, parts.template), warm, "", ctx, "warm-up")
    for example in examples:
        question = example.question
        prompt = build_prompt(question, parts.exemplars, parts.template)
        steps: dict[bool, list[str]] = {}
        for batched in (False, True):
            gen.sample_batch = batched
            ctx = RunContext(parts=parts, trace=Trace(question=question, method="seakr"))  # same seeds
            start, start_cpu = time.perf_counter(), time.process_time()
            eig, steps[batched] = method._uncertainty(prompt, question, "", ctx, "draft")
            seconds[batched].append(time.perf_counter() - start)
            cpu[batched].append(time.process_time() - start_cpu)
            scores[batched].append(eig)
        loads.append(os.getloadavg()[0])
        same += sum(a == b for a, b in zip(steps[False], steps[True], strict=False))
        total += max(len(steps[False]), len(steps[True]))
        print(
            f"  {example.id}: sequential {scores[False][-1]:8.3f} ({seconds[False][-1]:5.1f} s, "
            f"{cpu[False][-1]:5.1f} s CPU)  batched {scores[True][-1]:8.3f} ({seconds[True][-1]:5.1f} s, "
            f"{cpu[True][-1]:5.1f} s CPU)",
            flush=True,
        )
    summarize(scores, seconds, cpu, f"{same}/{total}", loads, method.params.samples)
    gen.close()


if __name__ == "__main__":
    main()
