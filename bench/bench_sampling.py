"""Sampled continuations decoded one after another against together: SeaKR's and a black-box trigger's speed.

Both methods check a step by sampling n continuations of one prompt (SeaKR: 20 at T = 1.0, top-k 50, top-p 0.9,
then the hidden state of each; the black-box trigger: 10 at T = 1.0). The llama.cpp backend decodes them

    sequential  one after another, each re-running the prompt's last token (generator.sample_batch=false)
    batched     together: the prompt evaluated once, then one batch per step with a row per sequence (default)

Each method answers the same HotpotQA dev questions once per mode, in that order, with one pipeline (the model
is loaded once), on the evaluation model:

    python bench/bench_sampling.py [--questions 2] [--model qwen2.5-coder-1.5b-instruct] [--methods seakr,blackbox]
                                   [--seakr-config configs/hotpotqa/seakr.yaml] [--threads N]
                                   [--blackbox-config configs/blackbox/eccentricity-jaccard.yaml]

It prints, per method and mode: seconds per question and questions per hour, the checks made (one check is one
set of n samples), LLM seconds per check (the samples and, for SeaKR, the hidden-state reads of that check: the
LLM time a check adds), LLM calls and generated tokens per question, and the load average sampled during the
cell, and the process's CPU seconds per question (steadier than wall clock when other work shares the cores). The
retrieval corpus makes no difference to the sampling: the default SeaKR config retrieves from the HotpotQA pool,
``configs/world/hotpotqa/seakr.yaml`` from the realistic world's haystack. The two modes draw the same seeds but not bit-identical samples, so their decisions, and with them the
number of checks, may differ: compare seconds per check for the sampling itself, and questions per hour for the
whole. Wall-clock figures on a shared machine: read them with the load beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_eval_speed import LoadSampler  # noqa: E402

from quco.config import load_config  # noqa: E402
from quco.datasets import load_dataset  # noqa: E402
from quco.pipeline import Pipeline  # noqa: E402
from quco.prompts import build_prompt  # noqa: E402

MODEL = "qwen2.5-coder-1.5b-instruct"
MODES = {"sequential": False, "batched": True}
# The method's entry point that makes one check's LLM calls (samples, and SeaKR's hidden-state reads).
CHECK_CALL = {"seakr": "_uncertainty", "blackbox": "sample"}


def timed_checks(method: Any, name: str) -> list[float]:
    """Wrap the method's check call on this instance; returns the list its durations are appended to."""
    spent: list[float] = []
    inner: Callable[..., Any] = getattr(method, CHECK_CALL[name])

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    setattr(method, CHECK_CALL[name], wrapper)
    return spent


def run_method(name: str, config: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    overrides = {"generator.backend": "llamacpp", "generator.model": args.model}
    if args.threads:
        overrides["generator.threads"] = args.threads
    cfg = load_config(config, overrides=overrides)
    pipe = Pipeline.from_config(cfg, progress=False)
    method_name = cfg.method
    checks = timed_checks(pipe.method, method_name)
    questions = load_dataset("hotpotqa", limit=args.questions)
    # not timed: the exemplars' state (and SeaKR's analyses' context) made once, as early in any run
    parts = pipe.parts
    warm = build_prompt(questions[0].question, parts.exemplars, parts.template)
    parts.generator.generate(warm, max_new_tokens=1)
    if method_name == "seakr":
        parts.generator.analyze(warm, hidden_layers=[pipe.method.layer], last_only=True)
    rows = []
    for mode, batched in MODES.items():
        pipe.parts.generator.sample_batch = batched
        checks.clear()
        seconds, cpu, calls, generated, answers = [], [], [], [], []
        with LoadSampler() as load:
            for example in questions:
                start, start_cpu = time.perf_counter(), time.process_time()
                trace = pipe.answer(example.question)
                seconds.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
                calls.append(trace.counters.total_llm_calls)
                generated.append(trace.counters.total_generated_tokens)
                answers.append(trace.answer)
                print(
                    f"  {name} {mode} {example.id}: {seconds[-1]:.1f} s, {len(checks)} checks so far, "
                    f"answer {trace.answer!r}",
                    flush=True,
                )
        per_q = statistics.mean(seconds)
        rows.append(
            {
                "method": name,
                "mode": mode,
                "s/question": per_q,
                "questions/h": 3600 / per_q,
                "cpu s/q": statistics.mean(cpu),
                "checks": len(checks),
                "LLM s/check": statistics.mean(checks) if checks else float("nan"),
                "calls/q": statistics.mean(calls),
                "gen tok/q": statistics.mean(generated),
                "load": statistics.mean(load.samples) if load.samples else os.getloadavg()[0],
                "answers": answers,
            }
        )
    pipe.parts.generator.close()
    return rows


def report(rows: list[dict[str, Any]], questions: int) -> None:
    print(f"\n{questions} HotpotQA dev questions per cell; load average at end: {os.getloadavg()[0]:.2f}")
    head = [
        "method",
        "mode",
        "s/question",
        "questions/h",
        "cpu s/q",
        "checks",
        "LLM s/check",
        "calls/q",
        "gen tok/q",
        "load",
    ]
    print("  ".join(f"{h:>12}" for h in head))
    for row in rows:
        print("  ".join(f"{row[h]:>12.2f}" if isinstance(row[h], float) else f"{row[h]!s:>12}" for h in head))
    for name in list(dict.fromkeys(r["method"] for r in rows)):
        seq, bat = (next(r for r in rows if r["method"] == name and r["mode"] == m) for m in MODES)
        same = sum(a == b for a, b in zip(seq["answers"], bat["answers"], strict=True))
        print(
            f"{name}: batched / sequential = {bat['questions/h'] / seq['questions/h']:.2f}x questions per hour, "
            f"{seq['LLM s/check'] / bat['LLM s/check']:.2f}x less LLM time per check; "
            f"same answer on {same}/{len(seq['answers'])} questions"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=2)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--methods", default="seakr,blackbox")
    ap.add_argument("--threads", type=int, default=None, help="generator.threads (default: every core)")
    ap.add_argument("--seakr-config", type=Path, default=ROOT / "configs" / "hotpotqa" / "seakr.yaml")
    ap.add_argument(
        "--blackbox-config", type=Path, default=ROOT / "configs" / "blackbox" / "eccentricity-jaccard.yaml"
    )
    args = ap.parse_args()
    configs = {"seakr": args.seakr_config, "blackbox": args.blackbox_config}
    print(
        f"load average at start: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores; model {args.model}",
        flush=True,
    )
    rows = []
    for name in args.methods.split(","):
        rows += run_method(name, configs[name], args)
    report(rows, args.questions)


if __name__ == "__main__":
    main()
