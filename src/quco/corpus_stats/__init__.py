"""Corpus statistics for QuCo-RAG: n-gram and co-occurrence counts from local Infini-gram indexes or the API."""

from quco.corpus_stats.base import CorpusStats, CountResult, Phrase
from quco.corpus_stats.build import Manifest, StatsIndexError, build_local_index
from quco.corpus_stats.cache import CachedCorpusStats
from quco.corpus_stats.factory import build_corpus_stats, default_index_dir, ensure_local_index
from quco.corpus_stats.local import LocalInfiniGram
from quco.corpus_stats.rates import CountThreshold, count_for_rate, per_billion


def __getattr__(name: str):
    # The HTTP client and server import httpx/uvicorn; load them only when asked for.
    if name == "InfiniGramAPI":
        from quco.corpus_stats.api import InfiniGramAPI

        return InfiniGramAPI
    if name in ("serve_stats", "StatsService", "create_app"):
        from quco.corpus_stats import server

        return getattr(server, name)
    raise AttributeError(name)


__all__ = [
    "CachedCorpusStats",
    "CorpusStats",
    "CountResult",
    "CountThreshold",
    "InfiniGramAPI",
    "LocalInfiniGram",
    "Manifest",
    "Phrase",
    "StatsIndexError",
    "StatsService",
    "build_corpus_stats",
    "build_local_index",
    "count_for_rate",
    "create_app",
    "default_index_dir",
    "ensure_local_index",
    "per_billion",
    "serve_stats",
]
