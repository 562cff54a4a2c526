"""How much do a llama.cpp model's logits depend on how many rows a decoding step holds?

One text (the opening of a Wikipedia article from the data directory, ``--tokens`` tokens) is evaluated three
ways in one llama.cpp context of the model: in one batch, in batches of ``--rows`` tokens, and one token at a
time (what sequential decoding does). For each way it prints the mean entropy of the next-token distributions,
the mean negative log-likelihood of the text's own next tokens, and how far its log-probabilities are from the
one-batch ones (over tokens with p > 1e-3 in one batch); then a paired Wilcoxon test of the per-position entropies
(one token at a time against one batch). Last, what a decoding step costs by its rows: over the state of the
text's first half, ``--steps`` steps of 1, 2, 4, ... ``--rows`` sequences decoded together as batched sampling
decodes them (``quco.llm.llamacpp_batch``), with milliseconds per step and tokens per second.

Sequential sampling draws every token after the first from one-row steps; batched sampling
(``generator.sample_batch``) from steps with a row per sequence still running. Where the two ways' log-probabilities
differ, a seed can draw another token; whether either way is more or less spread out is the entropy test.

    python bench/bench_batch_rows.py [--model qwen2.5-coder-1.5b-instruct] [--tokens 256] [--rows 20] [--steps 16]
                                     [--threads N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time

import numpy as np

from quco.config import GeneratorConfig
from quco.llm.llamacpp import _import_llama_cpp, resolve_gguf
from quco.llm.llamacpp_batch import SampleBatch
from quco.llm.llamacpp_state import save_sequence
from quco.machine import usable_cores
from quco.paths import data_dir
from quco.world.sources import ARTICLE_FILES

MODEL = "qwen2.5-coder-1.5b-instruct"


def article_text(chars: int = 4000) -> str:
    """The opening of the first article of the first Wikipedia shard."""
    with gzip.open(data_dir() / ARTICLE_FILES[0], "rt", encoding="utf-8") as fh:
        return json.loads(fh.readline())["text"][:chars]


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def evaluate(llama: object, chunks: list[list[int]]) -> np.ndarray:
    """Log-probabilities of every position, the text evaluated afresh in ``chunks``."""
    ctx = llama._ctx  # type: ignore[attr-defined]
    ctx.kv_cache_clear()
    llama.n_tokens = 0  # type: ignore[attr-defined]
    vocab = llama.n_vocab()  # type: ignore[attr-defined]
    rows = []
    for chunk in chunks:
        llama.eval(chunk)  # type: ignore[attr-defined]
        rows.append(np.ctypeslib.as_array(ctx.get_logits(), shape=(len(chunk), vocab)).copy())
    return log_softmax(np.concatenate(rows))


def step_costs(llama: object, llama_cpp: object, ids: list[int], most: int, steps: int) -> None:
    """Seconds per decoding step of 1, 2, 4, ... ``most`` sequences over the state of ``ids``' first half."""
    half = len(ids) // 2
    evaluate(llama, [ids[:half]])
    state = save_sequence(llama_cpp, llama._ctx)  # type: ignore[attr-defined]
    assert state is not None
    batch = SampleBatch(llama, llama_cpp)
    counts = sorted({1, most} | {2**k for k in range(1, most.bit_length()) if 2**k < most})
    one = None
    for rows in counts:
        batch.start(state, half, rows, steps)
        start = time.perf_counter()
        for s in range(steps):
            batch.step([ids[half + s % (len(ids) - half)]] * rows, list(range(rows)), half + s)
        per_step = (time.perf_counter() - start) / steps
        one = one or per_step
        print(
            f"{rows:>3} rows per step: {1000 * per_step:7.1f} ms per step ({per_step / one:5.2f}x one row), "
            f"{rows / per_step:6.1f} tokens/s ({rows * one / per_step:4.2f}x one row's); load {os.getloadavg()[0]:.2f}"
        )
    batch.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument(
        "--rows", type=int, default=20, help="rows per batch of the middle way (batched sampling: n)"
    )
    ap.add_argument("--steps", type=int, default=16, help="decoding steps timed per number of rows")
    ap.add_argument("--threads", type=int, default=None, help="threads (default: every core)")
    args = ap.parse_args()
    path = resolve_gguf(GeneratorConfig(backend="llamacpp", model=args.model))
    threads = args.threads or usable_cores()
    llama_cpp = _import_llama_cpp()
    llama = llama_cpp.Llama(
        model_path=str(path),
        n_ctx=max(512, args.tokens + 16),
        n_threads=threads,
        n_threads_batch=threads,
        n_batch=max(512, args.tokens),
        n_ubatch=max(512, args.tokens),
        logits_all=True,
        verbose=False,
    )
    ids = llama.tokenize(article_text().encode())[: args.tokens]
    print(
        f"model {args.model} ({path.name}); {len(ids)} tokens; {threads} threads; load {os.getloadavg()[0]:.2f}"
    )
    ways = {
        "one batch": [ids],
        f"batches of {args.rows}": [ids[i : i + args.rows] for i in range(0, len(ids), args.rows)],
        "one at a time": [[t] for t in ids],
    }
    logp = {name: evaluate(llama, chunks) for name, chunks in ways.items()}
    base = logp["one batch"]
    seen = np.exp(base) > 1e-3
    following = np.array(ids[1:])
    entropy = {}
    for name, lp in logp.items():
        entropy[name] = -(np.exp(lp) * lp).sum(axis=1)[:-1]
        nll = -lp[np.arange(len(following)), following]
        d = np.abs(lp - base)[seen]
        print(
            f"{name:<16} mean entropy {entropy[name].mean():.4f}  mean NLL {nll.mean():.4f}  "
            f"|d logp| from one batch (p > 1e-3): mean {d.mean():.3e}, max {d.max():.3e}"
        )
    one, batch = entropy["one at a time"], entropy["one batch"]
    try:
        from scipy import stats
    except ImportError:
        print("scipy is not installed: no test")
    else:
        if np.any(one != batch):
            w = stats.wilcoxon(one, batch)
            print(
                f"entropy, one at a time minus one batch: mean {np.mean(one - batch):+.4f}, higher at "
                f"{int((one > batch).sum())} of {len(one)} positions; paired Wilcoxon p = {w.pvalue:.3g}"
            )
    step_costs(llama, llama_cpp, ids, args.rows, args.steps)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    llama.close()


if __name__ == "__main__":
    main()
