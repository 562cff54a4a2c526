"""The realistic world's corpus names, resolved to the files retrieval reads (docs/world.md).

- ``wiki-articles``: the 30,539 Wikipedia articles (four files, read in order as one corpus);
- ``wiki-articles+pool:DATASET``: those plus the dataset's paragraph pool;
- ``haystack:DATASET`` (or ``haystack:DIR``, or a haystack directory itself): the 100-word-passage haystack of
  the articles plus the pool, built on first use.

Anything else (``wiki-summaries``, a corpus file, a list of them) is left to :mod:`quco.retrieval.corpus`.
Pipeline assembly and the command line resolve names here and hand indexes the resolved corpus.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from quco.errors import CorpusFormatError
from quco.paths import data_dir
from quco.retrieval.corpus import (
    Corpus,
    CorpusDocs,
    CorpusSet,
    CorpusSource,
    CorpusSpec,
    OnError,
)
from quco.retrieval.corpus import corpus_docs as files_docs
from quco.retrieval.corpus import resolve_corpus as resolve_files
from quco.world.haystack import MANIFEST, resolve_haystack
from quco.world.sources import ARTICLE_COUNT, article_paths, pool_for, world_dir

WIKI_ARTICLES = "wiki-articles"
ARTICLES_PLUS_POOL = "wiki-articles+pool:"
HAYSTACK = "haystack:"


def _resolve_one(spec: str | os.PathLike[str]) -> Corpus:
    text = str(spec).strip()
    if text.startswith(HAYSTACK):
        passages, home = resolve_haystack(text[len(HAYSTACK) :])
        return CorpusSource(text, passages, "tsv", False, home)
    if text == WIKI_ARTICLES or text.startswith(ARTICLES_PLUS_POOL):
        files = [str(p) for p in article_paths()]
        home, expected = world_dir() / "articles", ARTICLE_COUNT
        if text != WIKI_ARTICLES:
            pool = pool_for(text[len(ARTICLES_PLUS_POOL) :])
            files.append(str(data_dir() / pool.file))
            home, expected = world_dir() / pool.dataset, expected + pool.records
        parts = [CorpusSource.resolve(f) for f in files]
        return CorpusSet(text, tuple(parts), home, expected_docs=expected)
    path = Path(text).expanduser() if text else None
    if path is not None and path.is_dir() and (path / MANIFEST).is_file():
        passages, home = resolve_haystack(str(path))
        return CorpusSource(text, passages, "tsv", False, home)
    return CorpusSource.resolve(spec)


def resolve_corpus(spec: CorpusSpec) -> Corpus:
    """A corpus name (the world's above, ``wiki-summaries``), a path, or a list of them -> the corpus to read."""
    return resolve_files(spec, _resolve_one)


def resolve_source(spec: CorpusSpec) -> CorpusSource:
    """Like :func:`resolve_corpus` for uses that read one file (a dense index)."""
    corpus = resolve_corpus(spec)
    if isinstance(corpus, CorpusSet):
        raise CorpusFormatError(
            f"corpus {corpus.name!r} is several files; this use needs one file (try 'haystack:...' for retrieval)"
        )
    return corpus


def corpus_docs(corpus: CorpusSpec | Any, on_error: OnError = "stop") -> CorpusDocs:
    """:func:`quco.retrieval.corpus.corpus_docs` with the world's corpus names."""
    return files_docs(corpus, on_error, resolve=resolve_corpus)
