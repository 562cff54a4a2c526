"""The realistic world to measure in: Wikipedia articles as the statistics corpus, a 100-word-passage haystack
for retrieval, and the guard that records which world a run used (see docs/world.md)."""

from quco.world.sources import (
    ARTICLE_FILES,
    POOLS,
    Pool,
    article_paths,
    pool_for,
    world_dir,
)

__all__ = ["ARTICLE_FILES", "POOLS", "Pool", "article_paths", "pool_for", "world_dir"]
