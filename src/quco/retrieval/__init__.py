"""Retrieval: the ``Retriever`` seam, corpus reading, and the embedded BM25 backend.

The backends are imported on first use so that code needing only the seam does not pay for bm25s/scipy.
"""

from __future__ import annotations

import importlib
from typing import Any

from quco.retrieval.base import Passage, Retriever

_LAZY = {
    "DenseRetriever": "quco.retrieval.dense",
    "Embedder": "quco.retrieval.dense",
    "build_dense_index": "quco.retrieval.dense",
    "ensure_dense_index": "quco.retrieval.dense",
    "index_dense": "quco.retrieval.dense",
    "DenseIndexError": "quco.retrieval.dense",
    "EmbedderError": "quco.retrieval.dense",
    "BM25Params": "quco.retrieval.bm25",
    "BM25Retriever": "quco.retrieval.bm25",
    "IndexIntegrityError": "quco.retrieval.bm25",
    "IndexReport": "quco.retrieval.corpus",
    "build_retriever": "quco.retrieval.bm25",
    "ensure_index": "quco.retrieval.bm25",
    "index_corpus": "quco.retrieval.bm25",
    "WIKI_SUMMARIES": "quco.retrieval.corpus",
    "CorpusDocs": "quco.retrieval.corpus",
    "CorpusReport": "quco.retrieval.corpus",
    "CorpusSource": "quco.retrieval.corpus",
    "SkippedLine": "quco.retrieval.corpus",
    "corpus_docs": "quco.retrieval.corpus",
    "corpus_source": "quco.retrieval.corpus",
    "document_text": "quco.retrieval.corpus",
}

__all__ = ["Passage", "Retriever", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'quco.retrieval' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
