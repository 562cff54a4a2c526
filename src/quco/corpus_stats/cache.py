"""A persistent SQLite cache in front of any ``CorpusStats``, shared by runs and processes.

Keys hold everything that changes an answer: backend, index identity (for local indexes the corpus checksum
and tokenizer, so a rebuilt index never serves stale counts), co-occurrence semantics and window parameters,
the kind of lookup, and the alias sets. Only answered lookups are stored: an ``unknown`` is retried next time.
SQLite in WAL mode with a busy timeout lets several processes read and write the same file at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from quco.corpus_stats.base import CorpusStats, CountResult, Phrase
from quco.corpus_stats.phrases import aliases
from quco.paths import cache_dir

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS counts (
    key TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    query TEXT NOT NULL,
    count INTEGER NOT NULL,
    exact INTEGER NOT NULL,
    total_tokens INTEGER,
    created REAL NOT NULL
)
"""


def default_cache_path() -> Path:
    return cache_dir() / "corpus-stats" / f"counts-v{SCHEMA_VERSION}.sqlite"


def namespace_of(stats: CorpusStats) -> dict[str, Any]:
    """What identifies the answers of ``stats``: backend, index identity and query parameters."""
    ns: dict[str, Any] = {"backend": stats.name, "index": stats.index}
    for attr in ("cooccurrence", "max_diff_tokens", "max_clause_freq", "url"):
        if hasattr(stats, attr):
            ns[attr] = getattr(stats, attr)
    manifests = getattr(stats, "manifests", None)
    if manifests:
        ns["corpora"] = [m.corpus_sha256 for m in manifests]
        ns["tokenizer"] = manifests[0].tokenizer_sha256
    return ns


class CachedCorpusStats:
    """Wraps a backend; answers from the cache when it can (``cached=True``), counts hits and misses."""

    def __init__(self, inner: CorpusStats, path: Path | str | None = None, timeout_s: float = 30.0) -> None:
        self.inner = inner
        self.name = inner.name
        self.index = inner.index
        self.path = Path(path) if path else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self.namespace = json.dumps(namespace_of(inner), sort_keys=True)
        self.hits = 0
        self.misses = 0
        self._local = threading.local()
        self._lock = threading.Lock()
        with self._conn() as conn:
            conn.execute(_SCHEMA)

    def __getattr__(self, name: str) -> Any:  # cooccurrence, tokenizer, ... of the wrapped backend
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def total_tokens(self) -> int | None:
        return self.inner.total_tokens

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
            self._local.conn = conn
        return conn

    def _key(self, kind: str, sides: list[list[str]]) -> tuple[str, str]:
        # Alias order does not change an OR; side order is kept (a window count need not be symmetric).
        query = json.dumps([kind, [sorted(s) for s in sides]], ensure_ascii=False)
        key = hashlib.sha256(f"{self.namespace}\n{query}".encode()).hexdigest()
        return key, query

    def _lookup(self, keys: list[str]) -> dict[str, tuple[int, int, int | None]]:
        found: dict[str, tuple[int, int, int | None]] = {}
        conn = self._conn()
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            sql = f"SELECT key, count, exact, total_tokens FROM counts WHERE key IN ({marks})"
            for key, count, exact, total in conn.execute(sql, chunk):
                found[key] = (count, exact, total)
        return found

    def _store(self, rows: list[tuple[str, str, CountResult]]) -> None:
        rows = [r for r in rows if r[2].status == "ok" and r[2].count is not None]
        if not rows:
            return
        conn = self._conn()
        now = time.time()
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT OR REPLACE INTO counts VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(k, self.namespace, q, r.count, int(r.exact), r.total_tokens, now) for k, q, r in rows],
            )
            conn.execute("COMMIT")
        except sqlite3.Error as exc:  # a cache that cannot write must not fail the lookup
            log.warning("corpus-stats cache write failed (%s): %s", self.path, exc)
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    def _run(self, kind: str, items: list[list[list[str]]], compute) -> list[CountResult]:
        started = time.perf_counter()
        keyed = [self._key(kind, sides) for sides in items]
        try:
            found = self._lookup([k for k, _ in keyed])
        except sqlite3.Error as exc:
            log.warning("corpus-stats cache read failed (%s): %s", self.path, exc)
            found = {}
        out: list[CountResult | None] = [None] * len(items)
        todo = []
        for i, ((key, _q), sides) in enumerate(zip(keyed, items, strict=True)):
            if key in found:
                count, exact, total = found[key]
                out[i] = CountResult(
                    query=_describe(kind, sides),
                    count=count,
                    exact=bool(exact),
                    backend=self.name,
                    index=self.index,
                    status="ok",
                    cached=True,
                    total_tokens=total,
                )
            else:
                todo.append(i)
        hit_seconds = (time.perf_counter() - started) / max(1, len(items) - len(todo))
        for r in out:
            if r is not None:
                r.seconds = hit_seconds
        if todo:
            fresh = compute([items[i] for i in todo])
            self._store([(keyed[i][0], keyed[i][1], r) for i, r in zip(todo, fresh, strict=True)])
            for i, r in zip(todo, fresh, strict=True):
                out[i] = replace(r, cached=False)
        with self._lock:
            self.hits += len(items) - len(todo)
            self.misses += len(todo)
        return [r for r in out if r is not None]

    # ------------------------------------------------------------------ CorpusStats

    def count(self, phrase: Phrase) -> CountResult:
        return self.count_many([phrase])[0]

    def cooccur(self, a: Phrase, b: Phrase) -> CountResult:
        return self.cooccur_many([(a, b)])[0]

    def count_many(self, phrases: Sequence[Phrase]) -> list[CountResult]:
        items = [[aliases(p)] for p in phrases]
        return self._run("count", items, lambda todo: self.inner.count_many([s[0] for s in todo]))

    def cooccur_many(self, pairs: Sequence[tuple[Phrase, Phrase]]) -> list[CountResult]:
        items = [[aliases(a), aliases(b)] for a, b in pairs]
        return self._run("cooccur", items, lambda todo: self.inner.cooccur_many([(s[0], s[1]) for s in todo]))

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses}

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def _describe(kind: str, sides: list[list[str]]) -> str:
    from quco.corpus_stats.phrases import describe, describe_pair

    if kind == "count":
        return describe(sides[0])
    return describe_pair(sides[0], sides[1])
