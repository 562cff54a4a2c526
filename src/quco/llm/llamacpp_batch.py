"""The n sampled continuations of one prompt, decoded together in one llama.cpp context (``llamacpp`` sampling).

The generating context evaluates the prompt once, by its batching rule (``quco.llm.batching``), and its state is
restored into sequence 0 of a second context of the same model, whose KV cache is unified across sequences:
copying the prompt's cells to sequences 1..n-1 (``llama_memory_seq_cp``) only tags them, so the prompt is held
once. Each decoding step is then one batch with one row per sequence still running, at the same position, each
row with its own logits; every sequence draws from its own seeded sampler (the chain llama-cpp-python builds for
one sequence). Decoding n tokens in one batch reads the weights once instead of n times, which is what a step on
a CPU is bound by.

The result depends only on the prompt, the sampling settings and the seeds: the second context is cleared and
the prompt's state restored before every call, and which rows a step holds depends on nothing but the
sequences of that call. It is not the same computation as decoding each sequence alone: llama.cpp computes a
step of one row by other kernels than a step of several, and on the evaluation model (Q4_K) the two ways'
log-probabilities differ by 0.09 nats on average and up to 0.6 (steps of 20 rows and of 256 agree bit for bit;
``bench/bench_batch_rows.py``). So the same seed draws another token wherever that difference moves the draw;
neither way is the model's exact distribution, and the bench finds neither more spread out than the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from quco.errors import QucoError
from quco.llm.llamacpp_state import restore_sequence

CELLS_STEP = 1024  # the context's cells grow in steps of this many, never shrink


class SampleBatchError(QucoError):
    """llama.cpp could not make the sampling context or decode a step of it."""


class SampleBatch:
    """A context of ``llama``'s model for decoding several sequences over one prompt state, made on first use and
    grown (made anew) when a call needs more sequences or cells than it has. ``callback``: a graph callback for
    the context (``quco.llm.llamacpp_analysis`` reads hidden states with it)."""

    def __init__(self, llama: Any, llama_cpp: Any, callback: Any = None) -> None:
        self._llama = llama
        self._llama_cpp = llama_cpp
        self._callback = callback
        self._ctx: Any = None
        self._batch: Any = None
        self.sequences = 0  # sequences the context holds at most
        self.cells = 0  # KV cells it holds (shared by every sequence)
        self.n_vocab = int(llama.n_vocab())

    def _ensure(self, sequences: int, cells: int) -> None:
        if self._ctx is not None and sequences <= self.sequences and cells <= self.cells:
            return
        from llama_cpp import _internals

        self.close()
        sequences, cells = max(sequences, self.sequences), max(cells, self.cells)
        cells = -(-cells // CELLS_STEP) * CELLS_STEP
        params = type(self._llama.context_params).from_buffer_copy(self._llama.context_params)
        params.n_ctx = cells
        params.n_seq_max = sequences
        params.kv_unified = True  # the prompt's cells are held once, whatever the number of sequences
        params.n_batch = params.n_ubatch = max(int(params.n_batch), sequences)
        if self._callback is not None:
            params.cb_eval = self._callback
            params.cb_eval_user_data = None
        try:
            self._ctx = _internals.LlamaContext(model=self._llama._model, params=params, verbose=False)
        except ValueError as exc:
            raise SampleBatchError(
                f"llama.cpp could not create a context for {sequences} sequences and {cells} cells: {exc}"
            ) from exc
        self._batch = _internals.LlamaBatch(n_tokens=int(params.n_batch), embd=0, n_seq_max=1, verbose=False)
        self.sequences, self.cells = sequences, cells

    @property
    def context(self) -> Any:
        """The ``_internals.LlamaContext`` the steps run in (for a sampler to read a row's logits)."""
        return self._ctx

    def start(self, state: bytes, prompt_tokens: int, sequences: int, new_tokens: int) -> None:
        """Restore a prompt's evaluated state (``prompt_tokens`` positions) into sequence 0 and share it with
        sequences 1..``sequences``-1, in a context with room for ``new_tokens`` more positions in each."""
        if sequences > int(self._llama_cpp.llama_max_parallel_sequences()):
            raise SampleBatchError(
                f"llama.cpp decodes at most {self._llama_cpp.llama_max_parallel_sequences()} sequences together, "
                f"not {sequences}"
            )
        self._ensure(sequences, prompt_tokens + sequences * new_tokens)
        if not restore_sequence(self._llama_cpp, self._ctx, state):
            raise SampleBatchError("llama.cpp could not restore a prompt state for sampling")
        for seq in range(1, sequences):
            self._ctx.kv_cache_seq_cp(0, seq, -1, -1)

    def step(
        self,
        tokens: Sequence[int],
        seqs: Sequence[int],
        pos: int | Sequence[int],
        logits: Sequence[bool] | None = None,
    ) -> None:
        """Decode one row per token: token i of sequence ``seqs[i]`` at position ``pos`` (one for all, or one per
        row), with its logits unless ``logits`` says otherwise."""
        batch = self._batch.batch
        positions = [pos] * len(tokens) if isinstance(pos, int) else pos
        wanted = [True] * len(tokens) if logits is None else logits
        for i, (token, seq, at, want) in enumerate(zip(tokens, seqs, positions, wanted, strict=True)):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, at, 1, want
            batch.seq_id[i][0] = seq
        batch.n_tokens = len(tokens)
        try:
            self._ctx.decode(self._batch)
        except RuntimeError as exc:
            raise SampleBatchError(
                f"llama.cpp could not decode {len(tokens)} rows of {len(set(seqs))} sequences: {exc}"
            ) from exc

    def logits(self, row: int) -> np.ndarray:
        """The logits of row ``row`` of the last step (a view, valid until the next step)."""
        return np.ctypeslib.as_array(self._ctx.get_logits_ith(row), shape=(self.n_vocab,))

    def forget(self) -> None:
        if self._ctx is not None:
            self._ctx.kv_cache_clear()

    def close(self) -> None:
        if self._batch is not None:
            self._batch.close()
            self._batch = None
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None


__all__ = ["SampleBatch", "SampleBatchError"]
