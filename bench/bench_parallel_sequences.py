"""Decoding two sequences at once in one llama.cpp context: how much faster, and is it the same computation?

The third way of using both cores that the evaluation-model work compared (beside one process with every core as
a thread, and one process per core): two questions' continuations decoded in parallel, one token of each per
step, in one context. Each sequence gets the same prompt evaluated in one batch, then ``--steps`` greedy tokens
are decoded alone and then two at a time, with llama.cpp's unified KV cache and with one cache per sequence.
It prints milliseconds per step, tokens per second over both sequences, and whether the first sequence's logits
are bit-identical to decoding it alone (what `quco eval`'s reproducibility rule needs).

    python bench/bench_parallel_sequences.py [--model qwen2.5-coder-1.5b-instruct] [--steps 32] [--threads 2]
                                            [--prompt-tokens 500]

Wall-clock figures depend on the machine's load, printed beside them.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import time

import numpy as np

from quco.llm.llamacpp import _import_llama_cpp
from quco.llm.models import model_path
from quco.model_catalog import known_model

TEXT = (
    "Scott Derrickson is an American director, screenwriter and producer. He lives in Los Angeles, California. "
    "Edward Davis Wood Jr. was an American filmmaker, actor, writer, producer, and director. "
)


def _load(llama_cpp, path: str):  # noqa: ANN001, ANN202
    params = llama_cpp.llama_model_default_params()
    model = llama_cpp.llama_model_load_from_file(path.encode(), params)
    if not model:
        raise SystemExit(f"cannot load {path}")
    return model


def _context(llama_cpp, model, n_seq: int, unified: bool, threads: int, n_ctx: int):  # noqa: ANN001, ANN202
    p = llama_cpp.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = n_ctx * n_seq, 1024, 1024, n_seq
    p.n_threads = p.n_threads_batch = threads
    p.kv_unified = unified
    return llama_cpp.llama_init_from_model(model, p)


def _decode(llama_cpp, ctx, n_vocab: int, tokens, positions, seqs, want) -> list[np.ndarray]:  # noqa: ANN001
    batch = llama_cpp.llama_batch_init(len(tokens), 0, max(seqs) + 1)
    try:
        for i, (t, p, s) in enumerate(zip(tokens, positions, seqs, strict=True)):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, p, 1
            batch.seq_id[i][0] = s
            batch.logits[i] = 1 if i in want else 0
        batch.n_tokens = len(tokens)
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")
        return [
            np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()
            for i in want
        ]
    finally:
        llama_cpp.llama_batch_free(batch)


def run_mode(
    llama_cpp, model, vocab, prompt: list[int], n_seq: int, unified: bool, args
) -> tuple[float, list]:  # noqa: ANN001
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    ctx = _context(llama_cpp, model, n_seq, unified, args.threads, 4096)
    try:
        seqs = list(range(n_seq))
        nxt = {}
        for s in seqs:
            (logits,) = _decode(
                llama_cpp,
                ctx,
                n_vocab,
                prompt,
                list(range(len(prompt))),
                [s] * len(prompt),
                [len(prompt) - 1],
            )
            nxt[s] = int(np.argmax(logits))
        first: list[np.ndarray] = []
        pos = len(prompt)
        start = time.perf_counter()
        for _ in range(args.steps):
            out = _decode(
                llama_cpp, ctx, n_vocab, [nxt[s] for s in seqs], [pos] * n_seq, seqs, list(range(n_seq))
            )
            first.append(out[0])
            for s, logits in zip(seqs, out, strict=True):
                nxt[s] = int(np.argmax(logits))
            pos += 1
        return (time.perf_counter() - start) / args.steps, first
    finally:
        llama_cpp.llama_free(ctx)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=500)
    args = ap.parse_args()
    llama_cpp = _import_llama_cpp()
    quiet = llama_cpp.llama_log_callback(lambda *a: None)  # kept alive: llama.cpp calls it until exit
    llama_cpp.llama_log_set(quiet, ctypes.c_void_p(0))
    path = str(model_path(known_model(args.model)))
    model = _load(llama_cpp, path)
    vocab = llama_cpp.llama_model_get_vocab(model)
    text = (TEXT * (1 + args.prompt_tokens // 20)).encode()
    buf = (llama_cpp.llama_token * (len(text) + 8))()
    n = llama_cpp.llama_tokenize(vocab, text, len(text), buf, len(buf), True, True)
    prompt = list(buf[:n])[: args.prompt_tokens]
    print(
        f"model {args.model}, {len(prompt)}-token prompt, {args.steps} greedy steps, {args.threads} threads"
    )
    alone = None
    for name, n_seq, unified in (("1 sequence", 1, True), ("2 sequences, one KV cache per sequence", 2, False),
                                 ("2 sequences, unified KV cache", 2, True)):  # fmt: skip
        load = os.getloadavg()[0]
        per_step, first = run_mode(llama_cpp, model, vocab, prompt, n_seq, unified, args)
        same = ""
        if alone is None:
            alone = first
        else:
            equal = sum(np.array_equal(a, b) for a, b in zip(alone, first, strict=True))
            diff = max(float(np.abs(a - b).max()) for a, b in zip(alone, first, strict=True))
            same = f"  first sequence's logits bit-identical to alone at {equal}/{len(first)} steps (max |Δ| {diff:.3g})"
        print(
            f"  {name:<40} {1000 * per_step:7.1f} ms/step  {n_seq / per_step:6.2f} tok/s  load {load:.2f}{same}"
        )
    llama_cpp.llama_model_free(model)


if __name__ == "__main__":
    main()
