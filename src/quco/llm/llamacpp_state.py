"""Saving and restoring the state of a llama.cpp context's sequence 0 (its KV cells), for exact reuse."""

from __future__ import annotations

import ctypes
from typing import Any


def save_sequence(llama_cpp: Any, context: Any) -> bytes | None:
    """The state of the sequence ``context`` (an ``_internals.LlamaContext``) holds; None if llama.cpp fails."""
    ctx = context.ctx
    size = llama_cpp.llama_state_seq_get_size(ctx, 0)
    buf = (ctypes.c_uint8 * size)()
    n = llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0)
    return bytes(buf)[:n] if n > 0 else None


def restore_sequence(llama_cpp: Any, context: Any, state: bytes) -> bool:
    """Clear ``context``'s cache and restore a saved state into it, so that the restored cells start at the first
    cell, as always; False if llama.cpp fails."""
    context.kv_cache_clear()
    buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
    return llama_cpp.llama_state_seq_set_data(context.ctx, buf, len(state), 0) != 0
