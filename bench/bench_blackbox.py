"""Black-box sampling benchmark: what one check's n samples cost, and what stopping them early saves.

Usage: python bench/bench_blackbox.py [--backend llamacpp|hf] [--questions N] [--threads T]

For each of the first N HotpotQA dev questions the default model drafts the first sentence greedily (8-shot
prompt, as configs/blackbox/eigv-jaccard.yaml), then the check's 10 samples at T = 1.0 are drawn two ways:
  * length                - every sample runs to sentence_tokens (sample_stop: length)
  * sentence              - a sample stops once its first sentence is complete (sample_stop: sentence, default)
It prints seconds and sampled tokens per check, and how many samples equal those of "length" (the scored
first sentences). Prints its figures; it is not a timed test. Samples decoded together against one after
another: bench/bench_sampling.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "blackbox" / "eigv-jaccard.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["llamacpp", "hf"], default="llamacpp")
    ap.add_argument("--questions", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    from quco.config import load_config
    from quco.datasets import load_dataset
    from quco.engine.context import RunContext
    from quco.engine.method import Draft
    from quco.methods.blackbox import BlackBoxRAG
    from quco.pipeline import Pipeline
    from quco.prompts import build_prompt
    from quco.trace import Trace

    cfg = load_config(
        CONFIG, overrides={"generator.backend": args.backend, "generator.threads": args.threads}
    )
    pipe = Pipeline.from_config(cfg, progress=False)
    parts = pipe.parts
    split = parts.text.splitter.split
    modes = ["length", "sentence"]
    seconds: dict[str, list[float]] = {m: [] for m in modes}
    tokens: dict[str, list[int]] = {m: [] for m in modes}
    same: dict[str, int] = dict.fromkeys(modes, 0)
    total = 0
    for example in load_dataset("hotpotqa", limit=args.questions):
        question = example.question
        ctx = RunContext(parts=parts, trace=Trace(question=question, method="blackbox"))
        prompt = build_prompt(question, parts.exemplars, parts.template)
        gen = ctx.generate(prompt, max_new_tokens=64)[0]
        draft = Draft(gen.text.strip(), split(gen.text), gen, prefix="", prompt=prompt)
        got: dict[str, list[str]] = {}
        for mode in modes:
            stop = "sentence" if mode == "sentence" else "length"
            method = BlackBoxRAG({**cfg.params, "sample_stop": stop})
            before = ctx.trace.counters.generated_tokens.get("sampler", 0)
            t0 = time.perf_counter()
            got[mode] = method.sample(draft, question, ctx)
            seconds[mode].append(time.perf_counter() - t0)
            tokens[mode].append(ctx.trace.counters.generated_tokens["sampler"] - before)
        total += len(got["length"])
        for mode in modes:
            same[mode] += sum(a == b for a, b in zip(got[mode], got["length"], strict=True))
        print(f"question {example.id}: prompt {gen.prompt_tokens} tokens; draft {draft.text!r}", flush=True)

    print(
        f"\n{args.backend}, {args.threads} thread(s), {args.questions} questions, 1 check each, n = 10 samples"
    )
    print(f"{'samples':24} {'s/check (mean)':>15} {'tokens/check':>13} {'same as length':>15}")
    for mode in modes:
        print(
            f"{mode:24} {statistics.mean(seconds[mode]):15.2f} {statistics.mean(tokens[mode]):13.1f} "
            f"{same[mode]:>8}/{total}"
        )


if __name__ == "__main__":
    main()
