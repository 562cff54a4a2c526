"""Corpus statistics for QuCo-RAG: n-gram and co-occurrence counts from local Infini-gram indexes or the API."""

from quco.corpus_stats.base import CorpusStats, CountResult, Phrase
from quco.corpus_stats.build import Manifest, StatsIndexError, build_local_index
from quco.corpus_stats.factory import build_corpus_stats, default_index_dir
from quco.corpus_stats.local import LocalInfiniGram

__all__ = [
    "CorpusStats",
    "CountResult",
    "LocalInfiniGram",
    "Manifest",
    "Phrase",
    "StatsIndexError",
    "build_corpus_stats",
    "build_local_index",
    "default_index_dir",
]
