"""How the ``llamacpp`` backend splits a prompt into batches, and how much evaluated state a prompt may reuse.

(The ``hf`` backend follows the same rule at its coarsest: a prompt's declared shared prefix is always
evaluated as a forward pass of its own, so that its saved cache can stand in for it exactly.)

llama.cpp's results depend in their last bits on how a prompt is split into batches (its CPU kernels take
other paths for a lone row than for a tile of rows). So every prompt is split by one rule that depends on the
prompt alone: batches of ``chunk`` tokens from position 0 up to the end of its declared shared prefix (the
few-shot exemplars), then batches of ``chunk`` tokens from there to the end. A state computed for one prompt
can stand in for the start of another only up to a batch end that both prompts have, with the same batch
ends before it and the same tokens: then the reused positions were computed exactly as a fresh evaluation of
the new prompt would compute them, and the output cannot depend on what was asked before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

# A declared shared prefix shorter than this many tokens is not worth a batch of its own.
MIN_SHARED_TOKENS = 16


def batch_ends(n: int, shared: int, chunk: int) -> list[int]:
    """End positions of the batches of an ``n``-token prompt whose first ``shared`` tokens are shared."""
    if n <= 0:
        return []
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    stops = [shared, n] if MIN_SHARED_TOKENS <= shared < n else [n]
    ends: list[int] = []
    start = 0
    for stop in stops:
        ends.extend(range(start + chunk, stop, chunk))
        ends.append(stop)
        start = stop
    return ends


def common_prefix(a: Sequence[int] | np.ndarray, b: Sequence[int] | np.ndarray) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def reusable(
    cached: Sequence[int] | np.ndarray, cached_ends: Sequence[int], ids: Sequence[int], ends: Sequence[int]
) -> int:
    """Leading positions of a cached state (tokens ``cached``, evaluated in batches ending at ``cached_ends``)
    that a prompt ``ids`` split at ``ends`` can reuse. Always less than ``len(ids)``: the last batch runs again,
    so that the next token's scores come from the same batch as in a fresh evaluation."""
    same = common_prefix(cached, ids)
    keep = 0
    for mine, theirs in zip(ends, cached_ends, strict=False):
        if mine != theirs or mine > same or mine >= len(ids):
            break
        keep = mine
    return keep


def keep_recent(store: OrderedDict, key: object, value: object, limit: int) -> None:
    """Put ``value`` under ``key`` as the most recently used, dropping the least recently used beyond ``limit``."""
    store[key] = value
    store.move_to_end(key)
    while len(store) > limit:
        store.popitem(last=False)


class SharedPrefixTokens:
    """The tokens of the shared prefixes prompts declare (``quco.llm.base.Prompt``), kept by text for reuse.

    ``tokenize`` turns a prefix's text into the tokens it would have at the start of a prompt (with BOS).
    """

    def __init__(self, tokenize: Callable[[str], list[int]], keep: int = 16) -> None:
        self._tokenize = tokenize
        self._keep = keep
        self._ids: OrderedDict[str, list[int]] = OrderedDict()

    def count(self, prompt: str, chars: int, ids: Sequence[int]) -> int:
        """Leading tokens of ``ids`` (the whole prompt's tokens) that belong to its first ``chars`` characters."""
        if chars <= 0:
            return 0
        text = prompt[:chars]
        head = self._ids.get(text)
        if head is None:
            head = self._tokenize(text)
        keep_recent(self._ids, text, head, self._keep)
        # the prefix's last tokens may merge with what follows it: only the tokens the prompt has in common
        return common_prefix(head, ids)


__all__ = [
    "MIN_SHARED_TOKENS",
    "SharedPrefixTokens",
    "batch_ends",
    "common_prefix",
    "keep_recent",
    "reusable",
]
