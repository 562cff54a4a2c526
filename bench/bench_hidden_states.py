"""SeaKR's hidden-state reads on llama.cpp against transformers: seconds per read, agreement, reproducibility.

SeaKR reads, for each sampled continuation of a prompt, the hidden state of its last token at the middle layer.
This bench builds a few-shot HotpotQA prompt (the builtin exemplars and one dev question's question), takes
``--samples`` continuations sampled by llama.cpp, and reads their states as SeaKR does (the prompt declared as
the shared context, the exemplars as its inner level) on the ``llamacpp`` backend and, with ``--hf``, on the same
model loaded in transformers. It prints seconds per read (the first read of a prompt evaluates it; the others
only their continuation), the cosine and relative difference of the two engines' last-token states, the
EigenScores of the samples from each, and whether llama.cpp's states are bit-identical with every saving off
and in reverse order. With ``--hf`` it also reads the last layer's attention over four of the continuations
(the kind of text DRAGIN re-reads) on both engines and prints the seconds and the differences.

    python bench/bench_hidden_states.py [--model qwen2.5-coder-1.5b-instruct] [--samples 20] [--hf]

Wall-clock figures depend on the machine's load, printed beside them.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from quco.config import GeneratorConfig
from quco.llm import build_generator
from quco.llm.base import Prompt, shared_levels
from quco.prompts import build_prompt, load_exemplars, load_template
from quco.signals.eigen import eigen_score

QUESTION = "Were Scott Derrickson and Ed Wood of the same nationality?"


def _reads(gen, context: Prompt, samples: list[str], layer: int) -> tuple[list[np.ndarray], list[float]]:  # noqa: ANN001
    states, seconds = [], []
    for s in samples:
        text = Prompt(str(context) + s, shared=len(context), inner=shared_levels(context))
        start = time.perf_counter()
        analysis = gen.analyze(text, hidden_layers=[layer])
        seconds.append(time.perf_counter() - start)
        states.append(analysis.hidden[layer])
    return states, seconds


def _line(name: str, seconds: list[float]) -> str:
    rest = seconds[1:] or [float("nan")]
    return f"  {name:<12} first read {seconds[0]:6.2f} s, then {np.mean(rest):5.2f} s per read (mean of {len(rest)})"


def _attention(lc, hf, text: str) -> None:  # noqa: ANN001
    """DRAGIN's read: the last layer's attention over a generated text, on both engines."""
    start = time.perf_counter()
    mine = lc.analyze(text, attention_layer=-1)
    t_lc = time.perf_counter() - start
    start = time.perf_counter()
    theirs = hf.analyze(text, attention_layer=-1)
    t_hf = time.perf_counter() - start
    a, b = mine.attention, theirs.attention
    diff = np.abs(a - b)
    received = np.corrcoef(a[1:].max(0), b[1:].max(0))[0, 1]
    print(
        f"  last-layer attention over {len(mine.token_ids)} tokens: llama.cpp {t_lc:.2f} s, transformers {t_hf:.2f} s; "
        f"|difference| max {diff.max():.4f}, mean {diff.mean():.5f}; attention received correlates at {received:.5f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--hf", action="store_true", help="also read the states on transformers and compare")
    args = ap.parse_args()

    lc = build_generator(GeneratorConfig(backend="llamacpp", model=args.model))
    layer = lc.num_layers // 2
    prompt = build_prompt(QUESTION, load_exemplars("builtin:hotpotqa")[:8], load_template("baseline"))
    samples = [
        g.text
        for g in lc.generate(prompt, max_new_tokens=32, stop=["\n", ". "], n=args.samples, temperature=1.0,
                             top_k=50, top_p=0.9, seed=42)
    ]  # fmt: skip
    samples = [s for s in samples if s.strip()]
    print(
        f"model {args.model}, layer {layer} of {lc.num_layers}, {len(samples)} samples, load {os.getloadavg()[0]:.1f}"
    )
    mine, t_lc = _reads(lc, prompt, samples, layer)
    lc.reuse = False
    again, _ = _reads(lc, prompt, samples[::-1], layer)
    lc.reuse = True
    same = all(np.array_equal(a, b) for a, b in zip(mine, again[::-1], strict=True))
    print(_line("llama.cpp", t_lc))
    print(f"  llama.cpp states bit-identical with every saving off, in reverse order: {same}")
    score = eigen_score(np.stack([m[-1] for m in mine]), 1e-3)
    print(f"  EigenScore from llama.cpp states: {score:.4f}")
    if args.hf:
        hf = build_generator(GeneratorConfig(backend="hf", model=args.model))
        theirs, t_hf = _reads(hf, prompt, samples, layer)
        print(_line("transformers", t_hf))
        cos = [
            float(a[-1] @ b[-1] / np.linalg.norm(a[-1]) / np.linalg.norm(b[-1]))
            for a, b in zip(mine, theirs, strict=True)
        ]
        rel = [
            float(np.linalg.norm(a[-1] - b[-1]) / np.linalg.norm(b[-1]))
            for a, b in zip(mine, theirs, strict=True)
        ]
        print(
            f"  last-token states: cosine {min(cos):.5f}-{max(cos):.5f}, relative difference {min(rel):.4f}-{max(rel):.4f}"
        )
        other = eigen_score(np.stack([t[-1] for t in theirs]), 1e-3)
        print(f"  EigenScore from transformers states: {other:.4f}")
        _attention(lc, hf, "".join(samples[:4]).strip())
    print(f"  load after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
