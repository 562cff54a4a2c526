"""The realistic world's raw material: the Wikipedia article shards and each dataset's paragraph pool.

Files are named relative to ``quco.paths.data_dir()`` and identified by their sha256 (as listed in the data's
SOURCES.md), so a copy elsewhere is still recognised. Everything built from them (the haystack, its BM25
index, the statistics index) lives under :func:`world_dir`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from quco.errors import ConfigError
from quco.paths import cache_dir, data_dir

ARTICLE_FILES: tuple[str, ...] = tuple(f"wikipedia/enwiki_2015_articles_{i:02d}.jsonl.gz" for i in range(4))
ARTICLE_SHA256: dict[str, str] = {
    ARTICLE_FILES[0]: "dbd1a8f237f6fb1a9cceab7910361eb778828aabd7baa0b16f4919a0c9de8d63",
    ARTICLE_FILES[1]: "22383c9bd250d1fdfb7d94294171236f380a48182e071274c158c3ef74e8a7cf",
    ARTICLE_FILES[2]: "45f31303dd012bd152bb311e191593e3f3321083fb6c0007f4ff3830a174b7b7",
    ARTICLE_FILES[3]: "9f563330c6aacdf20d56345f102ee8afc67e84a4ce0c9694654e041a8008e2ca",
}
ARTICLE_COUNT = 30_539


@dataclass(frozen=True)
class Pool:
    """A dataset's paragraph pool: the context paragraphs of a set of its questions, deduplicated."""

    dataset: str
    file: str  # relative to data_dir()
    sha256: str
    records: int
    description: str
    # Whether the gold paragraphs of the evaluated questions (rows 0-299 of the data) are in the pool.
    holds_evaluated_gold: bool


POOLS: dict[str, Pool] = {
    "hotpotqa": Pool(
        "hotpotqa",
        "hotpotqa/corpus/hotpot_dev_first500_pooled_paragraphs.jsonl.gz",
        "c5921c30aaa6d7b1db20043a88fa632587d1f62ec1f52d16fe87a16eb9f28932",
        4937,
        "every context paragraph of HotpotQA dev questions 0-499 (gold and distractors), deduplicated",
        True,
    ),
    "2wikimultihopqa": Pool(
        "2wikimultihopqa",
        "2wikimultihopqa/corpus/hipporag_2wikimultihopqa_corpus.json.gz",
        "98185d9207944debaeafff09730502787f02e582ee77bfe0d216eacdbecc5a45",
        6119,
        "context paragraphs of HippoRAG's random 1,000-question 2WikiMultihopQA dev sample; it does not hold "
        "the gold paragraphs of dev questions 0-999",
        False,
    ),
    # PubMedQA has no separate paragraph file: the pool is the PQA-L file itself, read as one passage per
    # abstract (its context paragraphs joined; no title, no conclusion; see retrieval.corpus).
    "pubmedqa": Pool(
        "pubmedqa",
        "pubmedqa/ori_pqal_0_300.json",
        "c4f5686c7777c099b626fedf9bf32897d3e7a084d1db93a492371bc7f7fee1f5",
        300,
        "the context paragraphs of the abstracts of PubMedQA PQA-L questions 0-299, one passage per abstract "
        "(conclusions left out)",
        True,
    ),
}
_ALIASES = {
    "hotpot": "hotpotqa",
    "2wiki": "2wikimultihopqa",
    "wikimultihopqa": "2wikimultihopqa",
    "pubmed": "pubmedqa",
}


def pool_for(dataset: str) -> Pool:
    key = _ALIASES.get(dataset.strip().lower(), dataset.strip().lower())
    if key not in POOLS:
        raise ConfigError(f"no paragraph pool is known for dataset {dataset!r}; known: {', '.join(POOLS)}")
    return POOLS[key]


def article_paths() -> list[Path]:
    return [data_dir() / f for f in ARTICLE_FILES]


def world_dir() -> Path:
    """Root of the realistic world's built artefacts: ``QUCO_WORLD_DIR``, else ``<cache>/world``."""
    root = os.environ.get("QUCO_WORLD_DIR")
    path = Path(root).expanduser() if root else cache_dir() / "world"
    path.mkdir(parents=True, exist_ok=True)
    return path
