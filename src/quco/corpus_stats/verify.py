"""Plain scans of an index's token files, to check the engine's counts without its suffix arrays.

``positions`` finds a token sequence by comparing the token stream directly (numpy, no suffix array);
``window_rule`` re-implements the engine's documented CNF window rule on those positions, and
``window_same_document`` counts what the rule is meant to approximate: occurrences of the rarer phrase with
the other one within ``max_diff_tokens`` tokens *in the same document*. They differ only when both nearest
neighbours lie within the window and one of them sits in another document (the engine then drops the whole
span, stack.md §1); ``docs/corpus_stats.md`` reports how often that happens at full size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from quco.corpus_stats.local import LocalInfiniGram
from quco.corpus_stats.windows import positions, window_rule, window_same_document


class IndexScan:
    """The token stream of a local index (all shards, one global position space) with document starts."""

    def __init__(self, stats: LocalInfiniGram) -> None:
        self.stats = stats
        parts, starts, base = [], [], 0
        for shard in stats._shards:
            parts.append(np.asarray(shard.ds))
            starts.append(shard.starts + base)
            base += len(shard.ds)
        self.tokens = np.concatenate(parts) if len(parts) > 1 else parts[0]
        self.doc_starts = np.concatenate(starts)

    def encode(self, aliases: Sequence[str]) -> list[tuple[int, ...]]:
        return [tuple(self.stats.tokenizer.encode(a)) for a in aliases]

    def count(self, aliases: Sequence[str]) -> int:
        return len(positions(self.tokens, self.encode(aliases)))

    def window(self, a: Sequence[str], b: Sequence[str], max_diff: int = 1000) -> list[tuple[int, int]]:
        """(engine rule, same-document) window counts for the pair, taking the rarer side first as the engine
        does; on a tie both orders are returned (the engine's pick is then implementation-defined)."""
        pa, pb = positions(self.tokens, self.encode(a)), positions(self.tokens, self.encode(b))
        if len(pa) < len(pb):
            orders = [(pa, pb)]
        elif len(pb) < len(pa):
            orders = [(pb, pa)]
        else:
            orders = [(pa, pb), (pb, pa)]
        return [
            (
                window_rule(r, o, self.doc_starts, max_diff),
                window_same_document(r, o, self.doc_starts, max_diff),
            )
            for r, o in orders
        ]
