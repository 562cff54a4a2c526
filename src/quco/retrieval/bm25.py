"""BM25 retrieval on bm25s + PyStemmer: an on-disk index that is built once, verified, and loaded in ms.

An index directory holds the bm25s arrays (``bm25/``), the passages (``passages.bin`` + offsets) and a
``manifest.json`` written last. The build happens in a temporary directory that is renamed into place only
after the number of indexed passages has been checked against the number read, so a directory with a
manifest is always a complete index.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import filterfalse
from pathlib import Path
from typing import Any, Literal

import bm25s
import Stemmer
from bm25s.stopwords import STOPWORDS_EN
from tqdm import tqdm

from quco import storage
from quco.config import RetrieverConfig
from quco.errors import IndexIntegrityError
from quco.paths import cache_dir
from quco.retrieval.base import Passage
from quco.retrieval.bm25_stream import EMPTY_TOKEN, StreamingBM25Builder, tqdm_progress
from quco.retrieval.corpus import (
    Corpus,
    CorpusReport,
    CorpusSpec,
    IndexReport,
    OnError,
    check_on_error,
    corpus_manifest,
    resolve_corpus,
)
from quco.retrieval.store import PassageStore, PassageStoreWriter
from quco.storage import MANIFEST_NAME, ArtefactFormat

log = logging.getLogger(__name__)

INDEX_FORMAT = "quco-bm25"
INDEX_VERSION = 1  # bump when the on-disk layout or the tokenisation changes
_BM25_SUBDIR = "bm25"
Builder = Literal["streaming", "bm25s"]
_TOKEN_RE = re.compile(r"(?u)\b\w\w+\b")  # bm25s's (and scikit-learn's) default token pattern


@dataclass(frozen=True)
class BM25Params:
    """What determines the index contents besides the corpus; stored in the manifest and compared on reuse."""

    k1: float = 1.2  # Lucene/Elasticsearch defaults, which the published QuCo-RAG and DRAGIN runs used
    b: float = 0.75
    method: str = "lucene"
    stemmer: str = "english"
    stopwords: str = "en"
    index_title: bool = True  # index "title text", like the published multi_match over title and text


class _Analyzer:
    """Lower-case, split, drop English stopwords, stem; one stemmer per thread (PyStemmer is not thread-safe)."""

    def __init__(self, language: str) -> None:
        self._language = language
        self._local = threading.local()
        self._stop = frozenset(STOPWORDS_EN)

    def _stemmer(self) -> Any:
        st = getattr(self._local, "stemmer", None)
        if st is None:
            st = self._local.stemmer = Stemmer.Stemmer(self._language)
        return st

    def words(self, text: str) -> list[str]:
        return [w for w in _TOKEN_RE.findall(text.lower()) if w not in self._stop]

    def stems(self, text: str) -> list[str]:
        words = self.words(text)
        return self._stemmer().stemWords(words) if words else []


class _WordIds(dict):
    """Surface word -> stem id; a word not seen before is stemmed once, in ``__missing__``."""

    def __init__(self, stem: Any) -> None:
        super().__init__()
        self._stem = stem
        self.stem_to_id: dict[str, int] = {}

    def __missing__(self, word: str) -> int:
        stem = self._stem(word)
        tid = self.stem_to_id.setdefault(stem, len(self.stem_to_id))
        self[word] = tid
        return tid


class _VocabBuilder:
    """Maps surface words to stem ids while indexing, stemming each distinct word once.

    The per-word work runs in C (``findall``, ``filterfalse`` with a set's ``__contains__``, ``map`` with a
    dict's ``__getitem__``); Python code runs only for a word never seen before. The lists share their int
    objects with the table, so a corpus of 50M tokens costs 8 bytes per token.
    """

    def __init__(self, analyzer: _Analyzer) -> None:
        self._analyzer = analyzer
        self._table = _WordIds(analyzer._stemmer().stemWord)
        self._is_stop = analyzer._stop.__contains__

    @property
    def stem_to_id(self) -> dict[str, int]:
        return self._table.stem_to_id

    def ids(self, text: str) -> list[int]:
        words = _TOKEN_RE.findall(text.lower())
        return list(map(self._table.__getitem__, filterfalse(self._is_stop, words)))


def passage_index_text(title: str, text: str, index_title: bool) -> str:
    """The text a passage is indexed under."""
    return f"{title}\n{text}" if index_title and title else text


def truncate_query(query: str, max_words: int) -> str:
    """Keep the last ``max_words`` words, as the published Elasticsearch code keeps the last 64 tokens."""
    words = query.split()
    return " ".join(words[-max_words:]) if max_words > 0 else " ".join(words)


FORMAT = ArtefactFormat(
    format=INDEX_FORMAT,
    version=INDEX_VERSION,
    label="BM25 index",
    kind="BM25",
    build_hint="`quco index`",
    error=IndexIntegrityError,
)


class BM25Retriever:
    """Top-k BM25 search over one corpus; build with :meth:`build`, open with :meth:`load`."""

    name = "bm25"

    def __init__(
        self,
        bm25: bm25s.BM25,
        store: PassageStore,
        manifest: dict[str, Any],
        index_dir: Path,
        max_query_words: int = 64,
        n_threads: int = 0,
    ) -> None:
        self._bm25 = bm25
        self._store = store
        self.manifest = manifest
        self.index_dir = index_dir
        self.max_query_words = max_query_words
        self.n_threads = n_threads
        self._analyzer = _Analyzer(manifest["params"]["stemmer"])
        self._vocab: dict[str, int] = bm25.vocab_dict
        self._num_docs = int(bm25.scores["num_docs"])

    # -- properties ----------------------------------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        return str(self.manifest["fingerprint"])

    @property
    def params(self) -> BM25Params:
        return BM25Params(**self.manifest["params"])

    def __len__(self) -> int:
        return self._num_docs

    def passage(self, index: int, score: float = 0.0) -> Passage:
        pid, title, text = self._store.get(index)
        return Passage(id=pid, title=title, text=text, score=score)

    # -- search --------------------------------------------------------------------------------------------

    def query_token_ids(self, query: str) -> list[int]:
        """Vocabulary ids of the (truncated) query's stems; words the corpus never uses are dropped."""
        stems = self._analyzer.stems(truncate_query(query, self.max_query_words))
        vocab = self._vocab
        return [vocab[s] for s in stems if s in vocab]

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages per query, best first; only passages sharing a term with the query are returned,
        so an empty or all-stopword query gets an empty list."""
        if isinstance(queries, str):
            raise TypeError("search() takes a list of queries, not a single string")
        results: list[list[Passage]] = [[] for _ in queries]
        k = min(int(k), self._num_docs)
        if k <= 0:
            return results
        token_ids = [self.query_token_ids(q or "") for q in queries]
        live = [i for i, ids in enumerate(token_ids) if ids]
        if not live:
            return results
        docs, scores = self._bm25.retrieve(
            [token_ids[i] for i in live],
            k=k,
            show_progress=False,
            n_threads=self.n_threads if len(live) > 1 else 0,
            return_as="tuple",
        )
        for row, qi in enumerate(live):
            for doc, score in zip(docs[row].tolist(), scores[row].tolist(), strict=True):
                if score <= 0.0:
                    break  # sorted: the rest share no term with the query
                results[qi].append(self.passage(int(doc), float(score)))
        return results

    # -- build and load ------------------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        source: CorpusSpec,
        index_dir: str | os.PathLike[str],
        *,
        params: BM25Params | None = None,
        on_error: OnError = "stop",
        progress: bool = True,
        max_query_words: int = 64,
        builder: Builder = "streaming",
    ) -> BM25Retriever:
        """Read the corpus, index it, verify the counts, and move the result atomically to ``index_dir``.

        An existing index at ``index_dir`` is replaced only once the new one is complete (the build goes
        through :func:`quco.storage.ensure_built`, never reusing). ``builder``:
        ``"streaming"`` (bounded memory, :mod:`quco.retrieval.bm25_stream`) or ``"bm25s"`` (bm25s's own
        in-memory ``BM25.index``, about 3 GB per million passages; kept as the reference the streaming build
        is checked against). Both write the same files.
        """
        if builder not in ("streaming", "bm25s"):
            raise ValueError(f"unknown BM25 builder {builder!r}; use 'streaming' or 'bm25s'")
        corpus = resolve_corpus(source)
        retriever, _ = storage.ensure_built(
            Path(index_dir).expanduser(),
            lambda tmp: _write_index(corpus, tmp, params or BM25Params(), on_error, progress, builder),
            reusable=lambda _: False,
            load=lambda target: cls.load(target, max_query_words=max_query_words),
        )
        return retriever

    @classmethod
    def load(
        cls, index_dir: str | os.PathLike[str], *, max_query_words: int = 64, n_threads: int = 0
    ) -> BM25Retriever:
        """Open a complete index (memory-mapped); refuses one without a manifest or with mismatched counts."""
        index_dir = Path(index_dir).expanduser()
        manifest = FORMAT.open_manifest(index_dir)
        try:
            bm25 = bm25s.BM25.load(str(index_dir / _BM25_SUBDIR), mmap=True, show_progress=False)
            store = PassageStore(index_dir)
        except (OSError, ValueError, KeyError) as exc:
            raise IndexIntegrityError(f"index {index_dir} is damaged ({exc}); delete it and rebuild") from exc
        expected = manifest.get("passages")
        indexed = int(bm25.scores["num_docs"])
        if not expected == indexed == len(store):
            raise IndexIntegrityError(
                f"index {index_dir} is inconsistent: manifest says {expected} passages, the BM25 matrix has "
                f"{indexed}, the passage store {len(store)}; delete it and rebuild"
            )
        return cls(bm25, store, manifest, index_dir, max_query_words=max_query_words, n_threads=n_threads)


def _write_index(
    source: Corpus, tmp: Path, params: BM25Params, on_error: OnError, progress: bool, builder: Builder
) -> None:
    """Read the corpus, index it into the empty directory ``tmp``, verify the counts, write the manifest last."""
    t0 = time.perf_counter()
    fingerprint = source.fingerprint()
    report = CorpusReport()
    analyzer = _Analyzer(params.stemmer)
    vocab = _VocabBuilder(analyzer)
    bm25 = bm25s.BM25(k1=params.k1, b=params.b, method=params.method)
    streaming = StreamingBM25Builder(bm25, tmp / "bm25-work") if builder == "streaming" else None
    corpus_ids: list[list[int]] = []
    add = streaming.add if streaming is not None else corpus_ids.append
    bar = tqdm(
        total=source.size_bytes(),
        unit="B",
        unit_scale=True,
        desc=f"Reading {source.paths[0].name}" + (" …" if len(source.paths) > 1 else ""),
        disable=not progress,
    )

    def advance(pos: int) -> None:
        bar.update(pos - bar.n)

    with bar, PassageStoreWriter(tmp) as writer:
        for p in source.iter_passages(on_error=on_error, report=report, progress=advance):
            writer.add(p.id, p.title, p.text)
            add(vocab.ids(passage_index_text(p.title, p.text, params.index_title)))
    if streaming is not None:
        indexed = streaming.finish(tmp / _BM25_SUBDIR, vocab.stem_to_id, tqdm_progress(progress))
    else:
        bm25.index((corpus_ids, vocab.stem_to_id), show_progress=progress)
        del corpus_ids
        indexed = int(bm25.scores["num_docs"])
    _verify_counts(source, report, stored=writer.count, indexed=indexed)
    if streaming is None:
        bm25.save(str(tmp / _BM25_SUBDIR))
    manifest = {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        **corpus_manifest(source, fingerprint, report, indexed),
        "vocabulary": len(vocab.stem_to_id) + (EMPTY_TOKEN not in vocab.stem_to_id),  # + bm25s's ""
        "builder": builder,
        "params": asdict(params),
        "bm25s_version": bm25s.__version__,
        "build_seconds": round(time.perf_counter() - t0, 3),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    storage.write_json(tmp / MANIFEST_NAME, manifest)
    BM25Retriever.load(tmp)  # what is on disk must pass the same checks a later load applies
    log.info(
        "indexed %d passages from %s in %.1f s (%d lines skipped)",
        indexed,
        source.name,
        manifest["build_seconds"],
        report.skipped,
    )


def _verify_counts(source: Corpus, report: CorpusReport, *, stored: int, indexed: int) -> None:
    """The guard against silently partial indexes: every line is accounted for, every passage indexed."""
    if not report.accounted:
        raise IndexIntegrityError(
            f"reading {source.name} lost lines: {report.lines_read} read = {report.passages} passages + "
            f"{report.skipped} skipped + {report.ignored_lines} blank/header does not hold; nothing was written"
        )
    if not report.passages == stored == indexed:
        raise IndexIntegrityError(
            f"indexing {source.name} lost passages: read {report.passages}, stored {stored}, indexed {indexed}; "
            "nothing was written"
        )


# -- index management: reuse when possible, build otherwise ---------------------------------------------------


def default_index_dir(fingerprint: str, home: Path | None = None) -> Path:
    """``<cache>/bm25/<fingerprint>``, or ``<home>/bm25-<fingerprint>`` for a corpus with its own index home."""
    if home is not None:
        return home / f"bm25-{fingerprint[:16]}"
    return cache_dir() / "bm25" / fingerprint[:16]


def _reusable_manifest(
    index_dir: Path, fingerprint: str, params: BM25Params, explicit: bool
) -> dict[str, Any] | None:
    """The manifest of ``index_dir`` if it holds a complete index of this corpus with these parameters.

    A directory we cannot vouch for is rebuilt when it is our cache, and refused when the user named it.
    """
    manifest = FORMAT.reusable_manifest(
        index_dir,
        explicit=explicit,
        same_source=lambda m: m.get("fingerprint") == fingerprint,
        other_source=lambda m: (
            f"index {index_dir} was built from another corpus ({m.get('corpus')}); "
            "choose another index_dir or delete it"
        ),
    )
    if (
        manifest is None
        or manifest.get("version") != INDEX_VERSION
        or manifest.get("params") != asdict(params)
    ):
        return None
    return manifest


def ensure_index(
    source: CorpusSpec,
    index_dir: str | os.PathLike[str] | None = None,
    *,
    params: BM25Params | None = None,
    on_error: OnError = "stop",
    progress: bool = True,
    force: bool = False,
    accept_skipped: bool = False,
    max_query_words: int = 64,
) -> tuple[BM25Retriever, bool]:
    """(retriever, reused): load a matching index if one exists, else build it; safe across processes.

    An existing index built with bad lines skipped is rebuilt (and so fails loudly) under
    ``on_error="stop"`` unless ``accept_skipped``.
    """
    source = resolve_corpus(source)
    params = params or BM25Params()
    fingerprint = source.fingerprint()
    target, explicit = storage.build_target(
        index_dir, lambda: default_index_dir(fingerprint, source.index_home)
    )

    def reusable(directory: Path) -> bool:
        manifest = _reusable_manifest(directory, fingerprint, params, explicit)
        if manifest is None:
            return False
        skipped = manifest.get("skipped", 0)
        if skipped and on_error == "stop" and not accept_skipped:
            log.info("rebuilding %s: it was built skipping %d bad lines", directory, skipped)
            return False
        if skipped:
            log.warning("index %s was built with %d corpus lines skipped", directory, skipped)
        return True

    return storage.ensure_built(
        target,
        lambda tmp: _write_index(source, tmp, params, on_error, progress, "streaming"),
        reusable=reusable,
        load=lambda directory: BM25Retriever.load(directory, max_query_words=max_query_words),
        force=force,
    )


def build_retriever(
    config: RetrieverConfig, progress: bool = True, *, corpus: Corpus | None = None
) -> BM25Retriever:
    """The configured retriever: reuses the index of this corpus if one exists, else builds it once.

    ``corpus`` is the config's corpus already resolved (a corpus name of the realistic world is resolved by
    ``quco.world.corpora``); without it ``config.corpus`` must name files. An index built earlier with bad
    lines skipped (``quco index --on-error skip``) is reused as is.
    """
    retriever, _ = ensure_index(
        corpus if corpus is not None else config.corpus,
        config.index_dir,
        on_error="stop",
        progress=progress,
        accept_skipped=True,
        max_query_words=config.max_query_words,
    )
    return retriever


def index_corpus(
    path_or_name: CorpusSpec,
    out_dir: str | os.PathLike[str] | None = None,
    on_error: OnError = "stop",
    progress: bool = True,
    force: bool = False,
) -> IndexReport:
    """Build (or reuse) the BM25 index of a corpus and say what went in; used by ``quco index``."""
    t0 = time.perf_counter()
    check_on_error(on_error)
    source = resolve_corpus(path_or_name)
    retriever, reused = ensure_index(source, out_dir, on_error=on_error, progress=progress, force=force)
    return IndexReport.of(retriever, source.name, t0, reused)
