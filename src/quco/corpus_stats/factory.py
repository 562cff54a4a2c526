"""Configuration -> a ready ``CorpusStats``: opens (or first builds) the local index, or connects to the API."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from quco.config import CorpusStatsConfig
from quco.corpus_stats.base import CorpusStats
from quco.corpus_stats.build import (
    Manifest,
    StatsIndexError,
    check_index_path,
    write_local_index,
)
from quco.corpus_stats.local import LocalInfiniGram
from quco.corpus_stats.tokenizer import load_tokenizer, tokenizer_label
from quco.errors import ConfigError
from quco.paths import cache_dir
from quco.storage import ensure_built, staging_dir

log = logging.getLogger(__name__)


def default_index_dir(corpus_fingerprint: str, tokenizer: str, home: Path | None = None) -> Path:
    """``<cache>/infini-gram/<fingerprint>-<tokenizer label>``, or ``<home>/infini-gram-<fingerprint[:16]>-<label>``
    for a corpus with its own index home (the realistic world's corpora)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in corpus_fingerprint)
    if home is not None:
        return home / f"infini-gram-{safe[:16]}-{tokenizer_label(tokenizer)}"
    return cache_dir() / "infini-gram" / f"{safe}-{tokenizer_label(tokenizer)}"


def check_manifest(index_dir: Path, corpus_fingerprint: str | None, tokenizer: str) -> Manifest:
    """Refuse an index built from another corpus or with another tokenizer (counts would silently differ)."""
    manifest = Manifest.read(index_dir)
    if corpus_fingerprint is not None and manifest.corpus_fingerprint != corpus_fingerprint:
        raise StatsIndexError(
            f"index {index_dir} was built from corpus {manifest.corpus_fingerprint!r}, not {corpus_fingerprint!r}; "
            "delete it or point corpus_stats.index_dir elsewhere"
        )
    want = load_tokenizer(tokenizer)
    if manifest.tokenizer_sha256 != want.sha256:
        raise StatsIndexError(
            f"index {index_dir} was built with tokenizer {manifest.tokenizer}, not {want.name}; "
            "delete it, or set corpus_stats.tokenizer to match"
        )
    return manifest


def ensure_local_index(
    corpus_docs: Callable[[], Iterable[tuple[str, str]]],
    corpus_fingerprint: str,
    tokenizer: str,
    index_dir: Path,
    *,
    progress: bool = True,
    total_docs: int | None = None,
) -> tuple[Manifest, bool]:
    """(manifest, reused): open the index at ``index_dir`` if it holds this corpus under this tokenizer, else
    build it; one builder at a time, the others wait, then open what it built.

    An index of another corpus or tokenizer there is refused (counts would silently differ), not replaced.
    ``corpus_docs`` is only called when the index has to be built.
    """
    index_dir = Path(index_dir).expanduser().resolve()
    check_index_path(index_dir)
    tok = load_tokenizer(tokenizer)
    check_index_path(staging_dir(index_dir))

    def reusable(directory: Path) -> bool:
        if not directory.exists():
            return False
        check_manifest(directory, corpus_fingerprint, tokenizer)
        return True

    def write(tmp: Path) -> None:
        log.info("building corpus-statistics index %s", index_dir)
        write_local_index(
            corpus_docs(),
            tmp,
            tok,
            progress,
            corpus_fingerprint=corpus_fingerprint,
            total_docs=total_docs,
            target=index_dir,
        )

    return ensure_built(index_dir, write, reusable=reusable, load=Manifest.read, replace=False)


def open_or_build_local(
    config: CorpusStatsConfig,
    corpus_docs: Callable[[], Iterable[tuple[str, str]]],
    corpus_fingerprint: str,
    progress: bool = True,
    index_home: Path | None = None,
) -> LocalInfiniGram:
    # A corpus's ``docs`` method carries the corpus, which may name its own index home.
    home = index_home or getattr(getattr(corpus_docs, "__self__", None), "index_home", None)
    index_dir = (
        Path(config.index_dir).expanduser().resolve()
        if config.index_dir
        else default_index_dir(corpus_fingerprint, config.tokenizer, home)
    )
    ensure_local_index(corpus_docs, corpus_fingerprint, config.tokenizer, index_dir, progress=progress)
    return LocalInfiniGram(
        index_dir,
        cooccurrence=config.cooccurrence,
        max_diff_tokens=config.max_diff_tokens,
        max_clause_freq=config.max_clause_freq,
        load_to_ram=config.load_to_ram,
    )


def build_corpus_stats(
    config: CorpusStatsConfig,
    corpus_docs: Callable[[], Iterable[tuple[str, str]]],
    corpus_fingerprint: str,
    progress: bool = True,
    *,
    cache: bool | None = None,
    cache_path: Path | str | None = None,
) -> CorpusStats:
    """The configured backend. ``corpus_docs`` is only called when a local index has to be built.

    ``cache``: put the persistent SQLite cache in front (default: on for the API, where a lookup costs a
    network round trip; off for local indexes, whose counts take less time than a cache write).
    """
    stats: CorpusStats
    if config.backend == "local":
        stats = open_or_build_local(config, corpus_docs, corpus_fingerprint, progress=progress)
    elif config.backend == "api":
        from quco.corpus_stats.api import InfiniGramAPI

        stats = InfiniGramAPI.from_config(config)
    else:
        raise ConfigError(f"unknown corpus_stats.backend {config.backend!r}; use 'local' or 'api'")
    if cache if cache is not None else config.backend == "api":
        from quco.corpus_stats.cache import CachedCorpusStats

        stats = CachedCorpusStats(stats, cache_path)
    return stats
