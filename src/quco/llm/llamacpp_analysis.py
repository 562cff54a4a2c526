"""Hidden states and attention of a llama.cpp model, read during its own forward pass (``llamacpp`` analysis).

llama.cpp names every block's output in its compute graph (``l_out-<block>``); a graph callback set on a
second context of the same model copies the rows of the blocks asked for while a text is evaluated. The
generating context is never touched, so reading states does not disturb the prompt state generation reuses.

Layers are numbered as in transformers' ``hidden_states``: layer ``L`` is the output of block ``L`` (1-based),
so hidden layer ``L`` is llama.cpp's ``l_out-(L-1)``. Layer 0 (the embeddings) and the last layer are not
offered: llama.cpp's last block keeps only the rows whose logits are wanted, and transformers' last state is
also normed.

Like generation (``quco.llm.batching``), the states depend on nothing but the text: a text's declared shared
levels (``Prompt.inner`` and ``Prompt.shared``: the exemplars, then the prompt that sampled continuations
share) are evaluated level by level, each in batches of ``chunk`` tokens from the level's start over the
state of the level before it, and every level's state is saved and restored before the next level runs,
whether it was computed now or kept from an earlier text. A kept level therefore stands in for its passes
exactly. The generating context evaluates a prompt by the same rule (its shared prefix, then the rest), so when
it has just evaluated the prompt a text's levels end with, it hands that state over (``offer``) and a read of
the last position's states (``last_only``, SeaKR's) evaluates only the continuation.

Attention weights (DRAGIN's, ETC's) come the same way, from the softmax of a block's attention
(``kq_soft_max-<block>``, the context runs without flash attention), averaged over the heads, with the text
evaluated afresh in batches of ``chunk`` from position 0.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from quco.errors import ConfigError, QucoError
from quco.llm.batching import keep_recent
from quco.llm.llamacpp_batch import SampleBatch
from quco.llm.llamacpp_state import restore_sequence, save_sequence


class AnalysisError(QucoError):
    """llama.cpp could not evaluate a text or did not produce the tensors asked for."""


def block_of(layer: int, n_layers: int) -> int:
    """The llama.cpp block whose output is hidden layer ``layer`` (negative counts from the end, as in hf)."""
    index = layer + n_layers + 1 if layer < 0 else layer
    if not 1 <= index <= n_layers - 1:
        raise ConfigError(
            f"the 'llamacpp' backend reads hidden layers 1..{n_layers - 1} of this {n_layers}-layer model "
            f"(or -{n_layers}..-2), not {layer}; use the 'hf' backend for the embeddings or the last layer"
        )
    return index - 1


def _ggml(llama_cpp: Any) -> Any:
    """ggml's tensor accessors, from the library llama-cpp-python ships."""
    from llama_cpp import _ctypes_extensions

    lib = _ctypes_extensions.load_shared_library("ggml-base", Path(llama_cpp.__file__).parent / "lib")
    lib.ggml_get_name.restype, lib.ggml_get_name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    lib.ggml_nelements.restype, lib.ggml_nelements.argtypes = ctypes.c_int64, [ctypes.c_void_p]
    lib.ggml_get_data_f32.restype = ctypes.POINTER(ctypes.c_float)
    lib.ggml_get_data_f32.argtypes = [ctypes.c_void_p]
    return lib


class AnalysisReader:
    """Evaluates texts in a context of its own and returns the hidden states or attention asked for.

    Texts are evaluated in batches of ``chunk`` tokens (at most llama's ``n_batch``); ``keep`` levels (their
    saved state and rows) are kept, least recently used dropped first; with ``reuse`` off they are still computed
    and saved the same way, but never stand in for a pass. The generator sets all three before each read.
    """

    def __init__(self, llama: Any, llama_cpp: Any) -> None:
        from llama_cpp import _internals

        self._llama = llama
        self._llama_cpp = llama_cpp
        self._ggml = _ggml(llama_cpp)
        self.n_embd = int(llama_cpp.llama_model_n_embd(llama._model.model))
        self.n_head = int(llama_cpp.llama_model_n_head(llama._model.model))
        self.chunk = int(llama.n_batch)
        self.keep = 4
        self.reuse = True
        self._wanted: dict[bytes, int] = {}  # tensor name -> block, while a batch runs
        self._rows: dict[int, list[np.ndarray]] = {}  # block -> rows captured, batch after batch
        self._callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_tensor)  # kept alive with self
        params = type(llama.context_params).from_buffer_copy(llama.context_params)
        params.cb_eval = self._callback
        params.cb_eval_user_data = None
        try:
            self._ctx = _internals.LlamaContext(model=llama._model, params=params, verbose=False)
        except ValueError as exc:
            raise AnalysisError(f"llama.cpp could not create a context for analyses: {exc}") from exc
        self._batch = _internals.LlamaBatch(
            n_tokens=max(int(llama.n_batch), 1), embd=0, n_seq_max=1, verbose=False
        )
        self._levels: OrderedDict[tuple[Any, ...], tuple[bytes, dict[int, np.ndarray]]] = OrderedDict()
        # prompt states the generating context evaluated by the same rule, by (inner split, tokens); wanted once
        # hidden states have been read (attention reads evaluate afresh)
        self._offered: OrderedDict[tuple[int, tuple[int, ...]], bytes] = OrderedDict()
        self.wants_offers = False
        self._together: SampleBatch | None = None  # the context of ``read_together``, made on first use

    # -- the graph callback ---------------------------------------------------------------------------
    def _on_tensor(self, tensor: int, ask: bool, _user_data: int) -> bool:
        name = self._ggml.ggml_get_name(tensor)
        block = self._wanted.get(name)
        if block is None:
            return False
        if ask:
            return True
        n = int(self._ggml.ggml_nelements(tensor))
        data = np.ctypeslib.as_array(self._ggml.ggml_get_data_f32(tensor), shape=(n,))
        if name.startswith(b"kq_soft_max"):  # [n_kv, n_tokens, n_head] in ggml's order: mean over the heads
            n_tokens = self._batch.n_tokens()  # one batch is one micro-batch: chunk <= n_batch = n_ubatch
            self._rows[block].append(
                data.reshape(self.n_head, n_tokens, n // (self.n_head * n_tokens)).mean(0)
            )
        else:
            self._rows[block].append(data.reshape(n // self.n_embd, self.n_embd).copy())
        return True

    # -- evaluation -----------------------------------------------------------------------------------
    def offer(self, split: int, ids: Sequence[int], state: bytes) -> None:
        """A prompt state the generating context has just evaluated: its first ``split`` tokens (the shared
        prefix; 0 if none) in batches from position 0, saved and restored, then the rest in batches from there,
        which is how this reader evaluates the levels (``split``, ``len(ids)``). A later ``last_only`` read of a
        text with exactly those levels starts from it instead of evaluating them again."""
        keep_recent(self._offered, (split, tuple(ids)), state, 2)

    def read(
        self, ids: Sequence[int], cuts: Sequence[int], blocks: Sequence[int], last_only: bool = False
    ) -> tuple[dict[int, np.ndarray], int]:
        """Rows of ``blocks`` for every position of ``ids`` (block -> [len(ids), n_embd]; with ``last_only`` at
        least the last position's) and the tokens evaluated; ``cuts`` are the token ends of the text's shared
        levels, shortest first."""
        ids = list(ids)
        cuts = sorted(c for c in set(cuts) if 0 < c < len(ids))
        blocks = tuple(sorted(set(blocks)))
        self.wants_offers = True
        if last_only and self.reuse and 1 <= len(cuts) <= 2:
            offered = self._offered.get((cuts[0] if len(cuts) == 2 else 0, tuple(ids[: cuts[-1]])))
            if offered is not None:  # the same state this reader's own passes would restore
                self._restore(offered)
                return self._run(ids, cuts[-1], len(ids), blocks), len(ids) - cuts[-1]
        keys = [(blocks, tuple(ids[:cut])) for cut in cuts]
        found = (
            max((i for i, key in enumerate(keys) if key in self._levels), default=-1) if self.reuse else -1
        )
        kept: dict[int, np.ndarray] = {b: np.zeros((0, self.n_embd), np.float32) for b in blocks}
        start = evaluated = 0
        if found >= 0:
            self._levels.move_to_end(keys[found])
            state, kept = self._levels[keys[found]]
            start = cuts[found]
            self._restore(state)
        else:
            self._ctx.kv_cache_clear()
        for cut, key in zip(cuts[found + 1 :], keys[found + 1 :], strict=True):
            part = self._run(ids, start, cut, blocks)
            kept = {b: np.concatenate([kept[b], part[b]]) for b in blocks}
            evaluated, start = evaluated + cut - start, cut
            state = self._save()
            keep_recent(self._levels, key, (state, kept), max(self.keep, 1))
            self._restore(state)  # every level goes through a restore, computed now or kept
        part = self._run(ids, start, len(ids), blocks)
        hidden = {b: np.concatenate([kept[b], part[b]]) for b in blocks}
        return hidden, evaluated + len(ids) - start

    def read_together(
        self, texts: Sequence[tuple[Sequence[int], Sequence[int]]], blocks: Sequence[int]
    ) -> tuple[list[dict[int, np.ndarray]], list[int]] | None:
        """The last position's rows of ``blocks`` for several texts (each its tokens and its levels' cuts) that
        continue one prompt the generating context has offered (the same tokens and levels up to their last cut):
        the prompt's state is shared by one sequence per text in a context of their own, and the continuations
        are evaluated together, in batches of ``chunk`` rows. Returns per text {block: [1, n_embd]} and the tokens
        evaluated for it; None when the texts do not all continue one offered prompt (then read each alone).

        The rows are those of the positions ``read(..., last_only=True)`` reads, computed over the same state, in
        batches of other rows: equal to them up to the last bits llama.cpp's kernels round differently."""
        if not texts or not self.reuse:
            return None
        keys = set()
        for ids, cuts in texts:
            cuts = sorted(c for c in set(cuts) if 0 < c < len(ids))
            if not 1 <= len(cuts) <= 2:
                return None
            keys.add((cuts[0] if len(cuts) == 2 else 0, tuple(ids[: cuts[-1]])))
        if len(keys) != 1:
            return None
        key = keys.pop()
        state = self._offered.get(key)
        if state is None:
            return None
        self.wants_offers = True
        n = len(key[1])
        conts = [list(ids[n:]) for ids, _ in texts]
        if not all(conts):
            return None
        if self._together is None:
            self._together = SampleBatch(self._llama, self._llama_cpp, callback=self._callback)
        together = self._together
        together.start(state, n, len(conts), max(len(c) for c in conts))
        rows = [(token, n + j, k) for k, cont in enumerate(conts) for j, token in enumerate(cont)]
        last = list(np.cumsum([len(c) for c in conts]) - 1)
        wanted = {f"l_out-{b}".encode(): b for b in sorted(set(blocks))}
        parts: dict[int, list[np.ndarray]] = {b: [] for b in wanted.values()}
        for start in range(0, len(rows), self.chunk):
            piece = rows[start : start + self.chunk]
            self._wanted, self._rows = wanted, {b: [] for b in wanted.values()}
            try:
                together.step(
                    [t for t, _, _ in piece],
                    [k for _, _, k in piece],
                    [p for _, p, _ in piece],
                    [start + i in last for i in range(len(piece))],
                )
                for b, captured in self._rows.items():
                    parts[b].extend(captured)
            finally:
                self._wanted, self._rows = {}, {}
        out: dict[int, np.ndarray] = {}
        for b, captured in parts.items():
            out[b] = np.concatenate(captured) if captured else np.zeros((0, self.n_embd), np.float32)
            if len(out[b]) != len(rows):
                raise AnalysisError(
                    f"llama.cpp produced {len(out[b])} rows of block {b} for {len(rows)} tokens: this model's graph "
                    "does not name its block outputs 'l_out-<block>'; read hidden states with the 'hf' backend"
                )
        together.forget()
        return [{b: out[b][i : i + 1] for b in out} for i in last], [len(c) for c in conts]

    def attention(self, ids: Sequence[int], block: int) -> np.ndarray:
        """Attention weights of ``block`` over ``ids`` evaluated afresh (mean over heads): [len(ids), len(ids)],
        row i the weights query position i gives positions 0..i."""
        ids = list(ids)
        self._ctx.kv_cache_clear()
        name = f"kq_soft_max-{block}".encode()
        out = np.zeros((len(ids), len(ids)), np.float32)
        for start, end, rows in self._batches(ids, 0, len(ids), {name: block}):
            weights = rows[block]
            if weights.shape[0] != end - start or weights.shape[1] < end:
                raise AnalysisError(
                    f"llama.cpp gave attention weights of shape {weights.shape} for tokens {start}..{end}: this "
                    "model's graph does not name them 'kq_soft_max-<block>'; read attention with the 'hf' backend"
                )
            out[start:end, :end] = weights[:, :end]
        return out

    def _batches(
        self, ids: list[int], start: int, end: int, wanted: dict[bytes, int]
    ) -> Iterator[tuple[int, int, dict[int, np.ndarray]]]:
        """Evaluate ``ids[start:end]`` over the state of the first ``start`` tokens in batches of ``chunk``,
        yielding each batch's span and the tensors ``wanted`` (name -> key) captured while it ran."""
        pos = start
        while pos < end:
            piece = ids[pos : min(pos + self.chunk, end)]
            self._batch.set_batch(piece, n_past=pos, logits_all=False)
            self._wanted, self._rows = wanted, {k: [] for k in wanted.values()}
            try:
                self._ctx.decode(self._batch)
                captured = {
                    k: np.concatenate(r) if r else np.zeros((0, 0), np.float32) for k, r in self._rows.items()
                }
            except RuntimeError as exc:
                raise AnalysisError(f"llama.cpp could not evaluate the text: {exc}") from exc
            finally:
                self._wanted, self._rows = {}, {}
            yield pos, pos + len(piece), captured
            pos += len(piece)

    def _run(self, ids: list[int], start: int, end: int, blocks: tuple[int, ...]) -> dict[int, np.ndarray]:
        """Rows of ``blocks`` for ``ids[start:end]``, evaluated over the state of the first ``start`` tokens."""
        parts: dict[int, list[np.ndarray]] = {b: [] for b in blocks}
        for _, _, captured in self._batches(ids, start, end, {f"l_out-{b}".encode(): b for b in blocks}):
            for b in blocks:
                parts[b].append(captured[b])
        rows = {
            b: np.concatenate(r) if r else np.zeros((0, self.n_embd), np.float32) for b, r in parts.items()
        }
        for b, r in rows.items():
            if len(r) != end - start:
                raise AnalysisError(
                    f"llama.cpp produced {len(r)} rows of block {b} for {end - start} tokens: this model's graph "
                    "does not name its block outputs 'l_out-<block>'; read hidden states with the 'hf' backend"
                )
        return rows

    def _save(self) -> bytes:
        state = save_sequence(self._llama_cpp, self._ctx)
        if state is None:
            raise AnalysisError("llama.cpp could not save a level's state")
        return state

    def _restore(self, state: bytes) -> None:
        if not restore_sequence(self._llama_cpp, self._ctx, state):
            raise AnalysisError("llama.cpp could not restore a level's state")

    def forget(self) -> None:
        """Drop every kept level and offered state."""
        self._levels.clear()
        self._offered.clear()
        self._ctx.kv_cache_clear()

    def close(self) -> None:
        self.forget()
        if self._together is not None:
            self._together.close()
            self._together = None
        self._batch.close()
        self._ctx.close()


__all__ = ["AnalysisError", "AnalysisReader", "block_of"]
