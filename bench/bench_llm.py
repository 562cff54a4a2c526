"""Benchmark the default HF generator: conversion load, cached load, greedy speed, analyze(), peak RSS.

Each phase runs in its own process so that load times and peak memory are those a user would see:
``convert`` converts the bundled GGUF into a fresh temporary cache (skip with ``--skip-convert``), ``cached``
loads from the normal cache (``quco.paths.cache_dir()``) and measures generation and analysis.

``--llamacpp MODEL`` instead measures the llama.cpp backend on a model (e.g. ``qwen2.5-coder-1.5b-instruct``, the
evaluation model, or ``gemma3-270m``): prompt evaluation of a real 8-exemplar HotpotQA prompt with passages in
batches of 256, 512 and 1024 tokens, the same prompt with its exemplars from the saved prefix state, the size
and save/restore cost of that state, and greedy decoding, in CPU seconds (what the machine's load barely
changes) beside wall seconds. It names the llama.cpp build it ran (its file and CPU features) and prints a
digest of the prompt's greedy answer with its logprobs: two builds (e.g. one compiled with other
``CMAKE_ARGS``, put first on ``PYTHONPATH``) are compared by running the bench once with each.

``--hf-reuse MODEL`` measures the transformers backend on a model's real 8-exemplar prompt (the one
``--llamacpp`` uses): the prompt evaluated in one pass, in the two passes of the shared-prefix rule, and with
the exemplars' saved cache (``--hf-reuse qwen2.5-coder-1.5b-instruct`` is the path DRAGIN and SeaKR take on the
evaluation model with ``generator.backend=hf`` or ``generator.analysis_backend=hf``), and whether the three give the same greedy answer; then the hidden states of four
continuations of that prompt (SeaKR's pattern), one pass each against the prompt's saved context.

    python bench/bench_llm.py [--threads N] [--skip-convert] [--new-tokens 64]
    python bench/bench_llm.py --llamacpp qwen2.5-coder-1.5b-instruct [--threads 1]
    python bench/bench_llm.py --hf-reuse qwen2.5-coder-1.5b-instruct [--threads 2] [--new-tokens 16]
"""

from __future__ import annotations

import argparse
import hashlib
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


def _real_prompt():  # noqa: ANN202 - a quco.llm.base.Prompt
    """SR-RAG's first prompt for HotpotQA dev question 0: 8 exemplars, its 3 first paragraphs, the question."""
    from quco.paths import data_dir
    from quco.prompts import build_prompt, load_exemplars, load_template
    from quco.retrieval.base import Passage

    with (data_dir() / "hotpotqa" / "hotpot_dev_0_300_unified.jsonl").open(encoding="utf-8") as fh:
        row = json.loads(fh.readline())
    docs = [Passage(str(i), p["title"], p["text"]) for i, p in enumerate(row["context_paragraphs"][:3])]
    return build_prompt(
        row["question"], load_exemplars("builtin:hotpotqa")[:8], load_template("baseline"), docs
    )


def phase_llamacpp(model: str, threads: int | None, new_tokens: int) -> dict:
    import llama_cpp

    from quco.config import GeneratorConfig
    from quco.llm import build_generator

    gen = build_generator(GeneratorConfig(backend="llamacpp", model=model, threads=threads or 1))
    prompt = _real_prompt()
    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    features = [f.split("=")[0].split(":")[-1].strip() for f in info.split("|") if f.strip().endswith("= 1")]
    out: dict = {
        "model": model, "threads": threads or 1, "library": llama_cpp.__file__, "features": features,
    }  # fmt: skip

    def timed(fn):  # noqa: ANN001, ANN202
        start, cpu = time.perf_counter(), time.process_time()
        value = fn()
        return value, time.perf_counter() - start, time.process_time() - cpu

    gen.reuse = False
    for chunk in (256, 512, 1024):
        gen.chunk = chunk
        g, wall, cpu = timed(lambda: gen.generate(prompt, max_new_tokens=1)[0])
        out["prompt_tokens"], out["shared_tokens"] = g.prompt_tokens, gen._key and len(gen._key)
        out[f"prefill_{chunk}_s"], out[f"prefill_{chunk}_cpu_s"] = wall, cpu
        out[f"prefill_{chunk}_tok_per_cpu_s"] = g.prompt_tokens / cpu
    gen.reuse = True
    gen.generate(prompt, max_new_tokens=1)  # saves the exemplar state
    gen.generate("An unrelated prompt.", max_new_tokens=1)
    g, out["prefill_reuse_s"], out["prefill_reuse_cpu_s"] = timed(
        lambda: gen.generate(prompt, max_new_tokens=1)[0]
    )
    out["prefill_reuse_evaluated"] = g.prompt_tokens_evaluated
    state = next(iter(gen._states.values()))
    out["state_mb"] = len(state) / 2**20
    key = next(iter(gen._states))
    _, out["state_save_ms"], _ = timed(gen._save)
    _, out["state_restore_ms"], _ = timed(lambda: gen._restore(state, key))
    out["state_save_ms"] *= 1000
    out["state_restore_ms"] *= 1000
    # decoding: a short prompt that keeps going, with 1 and with new_tokens tokens; the difference is decoding
    counting = "Counting from 1 to 500: " + ", ".join(str(i) for i in range(1, 21)) + ","
    for label, kw in (("plain", {}), ("scores", {"logprobs": True, "entropy": True})):
        _, wall1, cpu1 = timed(lambda kw=kw: gen.generate(counting, max_new_tokens=1, **kw))
        g, wall, cpu = timed(lambda kw=kw: gen.generate(counting, max_new_tokens=new_tokens, **kw)[0])
        n = len(g.token_ids) - 1
        out[f"decode_{label}_tokens"] = n
        out[f"decode_{label}_tok_s"] = n / (wall - wall1)
        out[f"decode_{label}_cpu_ms_per_tok"] = 1000 * (cpu - cpu1) / n
    # the answer, to compare builds: same tokens? how far apart are the logprobs?
    g = gen.generate(prompt, max_new_tokens=new_tokens, logprobs=True)[0]
    out["answer_text"] = g.text
    out["answer_digest"] = hashlib.sha256(json.dumps(g.token_ids).encode()).hexdigest()[:16]
    out["answer_logprobs"] = [round(x, 6) for x in g.logprobs]
    out["peak_rss_mb"] = _peak_rss_mb()
    return out


def phase_hf_reuse(model: str, threads: int | None, new_tokens: int) -> dict:
    """The real prompt on the hf backend: one pass, the shared-prefix rule's two passes, the saved cache."""
    from quco.config import GeneratorConfig
    from quco.llm import build_generator

    gen = build_generator(GeneratorConfig(model=model, threads=threads))
    prompt = _real_prompt()
    import torch

    out: dict = {"model": model, "threads": torch.get_num_threads(), "load_source": gen.load_source}
    gen.generate("Hello", max_new_tokens=2)  # warm-up
    runs = []
    for label, shared_prefix, reuse in (("one pass", False, False), ("two passes", True, False),
                                        ("saved exemplars", True, True)):  # fmt: skip
        gen.shared_prefix, gen.reuse = shared_prefix, reuse
        if reuse:
            gen.generate(prompt, max_new_tokens=1)  # saves the exemplars' cache
            gen.generate("An unrelated prompt.", max_new_tokens=1)
        times = []
        for _ in range(2):
            start, cpu = time.perf_counter(), time.process_time()
            first = gen.generate(prompt, max_new_tokens=1)[0]
            times.append((time.perf_counter() - start, time.process_time() - cpu))
        g = gen.generate(prompt, max_new_tokens=new_tokens, logprobs=True)[0]
        digest = hashlib.sha256(json.dumps(g.token_ids).encode()).hexdigest()[:16]
        runs.append({
            "label": label, "wall_s": [t[0] for t in times], "cpu_s": [t[1] for t in times],
            "prompt_tokens": first.prompt_tokens, "evaluated": first.prompt_tokens_evaluated,
            "answer": g.text, "digest": digest, "logprob_sum": sum(g.logprobs or []),
        })  # fmt: skip
    out["runs"] = runs
    # SeaKR's pattern: hidden states of several continuations of one prompt (its middle layer)
    from quco.llm.base import Prompt

    steps = [" Scott Derrickson is American.", " Ed Wood was American.", " Both were American.", " Yes."]
    layer = gen.model.config.get_text_config().num_hidden_layers // 2
    analyses = []
    for label, text_of, reuse in (
        ("one pass each", lambda s: str(prompt) + s, False),
        ("context saved", lambda s: Prompt(str(prompt) + s, shared=len(prompt)), True),
    ):
        gen.reuse = reuse
        gen.clear_cache()
        start, cpu = time.perf_counter(), time.process_time()
        states = [gen.analyze(text_of(s), hidden_layers=[layer]).hidden[layer][-1] for s in steps]
        analyses.append({
            "label": label, "wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu,
            "states": states,
        })  # fmt: skip
    a, b = analyses
    out["analyses"] = [{k: v for k, v in x.items() if k != "states"} for x in analyses]
    out["analysis_steps"], out["analysis_layer"] = len(steps), layer
    out["analysis_max_diff"] = max(
        float(abs(x - y).max()) for x, y in zip(a["states"], b["states"], strict=True)
    )
    out["peak_rss_mb"] = _peak_rss_mb()
    return out


def _print_hf_reuse(r: dict) -> None:
    print(
        f"transformers, {r['model']} ({r['load_source']}), {r['threads']} thread(s): the real prompt, 1 new token"
    )
    for run in r["runs"]:
        walls = ", ".join(f"{w:.1f}" for w in run["wall_s"])
        cpus = ", ".join(f"{c:.1f}" for c in run["cpu_s"])
        print(
            f"  {run['label']:16s} {walls} s ({cpus} CPU s), {run['evaluated']} of {run['prompt_tokens']} "
            f"tokens evaluated; answer digest {run['digest']}, logprob sum {run['logprob_sum']:.6f}"
        )
    print(f"  answer: {r['runs'][-1]['answer']!r}")
    print(
        f"  hidden states (layer {r['analysis_layer']}) of {r['analysis_steps']} continuations of the prompt:"
    )
    for a in r["analyses"]:
        print(f"    {a['label']:14s} {a['wall_s']:6.1f} s ({a['cpu_s']:.1f} CPU s)")
    print(f"    largest difference of the last token's state between the two: {r['analysis_max_diff']:.2e}")
    print(f"  peak RSS: {r['peak_rss_mb']:.0f} MB")


def _print_llamacpp(r: dict) -> None:
    print(f"llama.cpp, {r['model']}, {r['threads']} thread(s): prompt of {r['prompt_tokens']} tokens, "
          f"{r['shared_tokens']} of them exemplars")  # fmt: skip
    print(f"  build: {r['library']}; CPU features: {' '.join(r['features'])}")
    for chunk in (256, 512, 1024):
        print(
            f"  prompt in batches of {chunk:4d}: {r[f'prefill_{chunk}_s']:6.1f} s, "
            f"{r[f'prefill_{chunk}_cpu_s']:6.1f} CPU s, {r[f'prefill_{chunk}_tok_per_cpu_s']:5.1f} tokens per CPU s"
        )
    print(
        f"  exemplars from the saved state: {r['prefill_reuse_s']:6.1f} s, {r['prefill_reuse_cpu_s']:6.1f} CPU s, "
        f"{r['prefill_reuse_evaluated']} tokens evaluated"
    )
    print(
        f"  saved exemplar state: {r['state_mb']:.1f} MB, save {r['state_save_ms']:.0f} ms, "
        f"restore {r['state_restore_ms']:.0f} ms"
    )
    for label, what in (("plain", "text only"), ("scores", "logprobs + entropy")):
        print(
            f"  greedy decoding, {what}: {r[f'decode_{label}_tok_s']:.1f} tok/s, "
            f"{r[f'decode_{label}_cpu_ms_per_tok']:.0f} CPU ms per token ({r[f'decode_{label}_tokens']} tokens)"
        )
    lp = r["answer_logprobs"]
    print(
        f"  greedy answer: {r['answer_text']!r}, token digest {r['answer_digest']}, "
        f"{len(lp)} tokens, logprob sum {sum(lp):.6f}"
    )
    print(f"  peak RSS: {r['peak_rss_mb']:.0f} MB")


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
    parser.add_argument("--llamacpp", metavar="MODEL", help="measure the llama.cpp backend on MODEL instead")
    parser.add_argument("--hf-reuse", metavar="MODEL", help="measure the transformers backend's prefix reuse")
    args = parser.parse_args()

    for model, phase, show in ((args.hf_reuse, phase_hf_reuse, _print_hf_reuse),
                               (args.llamacpp, phase_llamacpp, _print_llamacpp)):  # fmt: skip
        if model:
            print(f"load average at start: {os.getloadavg()[0]:.2f}")
            result = phase(model, args.threads, args.new_tokens)
            print(f"load average at end:   {os.getloadavg()[0]:.2f}")
            show(result)
            return

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
