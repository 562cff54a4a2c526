"""Client for the Infini-gram HTTP API: the hosted service, or ``quco serve stats`` over local indexes.

Protocol (POST ``url``, JSON): ``{"index", "query_type": "count", "query", ["max_clause_freq", "max_diff_tokens"]}``
-> ``{"count", "approx", "latency"}`` or ``{"error"}``. Every request has a timeout; transport failures,
timeouts, HTTP 5xx and unreadable JSON are retried with exponential backoff and jitter; a lookup that
still fails comes back as ``status="unknown"`` with the reason, never as a silently skipped check. Requests
keep to a rate limit shared by every client of the server in the process (:mod:`quco.corpus_stats.ratelimit`);
an HTTP 429 pauses that limiter for its ``Retry-After``, slows it down, and the request is sent again. A request
the server rejects (HTTP 4xx, or an ``error`` field) is not retried: asking again would get the same answer.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import httpx

from quco.config import CorpusStatsConfig
from quco.corpus_stats.base import CountResult, Phrase, answer
from quco.corpus_stats.phrases import aliases, describe, describe_pair
from quco.corpus_stats.protocol import COOCCURRENCE_FIELD, QUERY_TERMS_FIELD, compose
from quco.corpus_stats.ratelimit import RateSetting, limiter_for, resolve_rate, retry_after_seconds
from quco.corpus_stats.rates import HOSTED_INDEX_TOKENS
from quco.errors import ConfigError
from quco.retry import RetryPolicy, send_with_retries

log = logging.getLogger(__name__)

BACKEND = "infini-gram-api"
MAX_TERMS_PER_CLAUSE = 4  # the hosted API's limit; more aliases are split into several requests
MAX_THROTTLED = 20  # 429 answers one request waits out (each for its Retry-After) before it counts as failed


class _Rejected(Exception):
    """The server answered and refused the request; retrying cannot help."""


class _Transient(Exception):
    """A failure worth retrying (timeout, connection, 429/5xx, unreadable answer)."""


def _answer(resp: httpx.Response) -> dict[str, Any]:
    """The decoded answer; raises _Transient (429/5xx, not a JSON object, no count) or _Rejected (4xx, error)."""
    try:
        data = resp.json()
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        data = None
    if resp.status_code == 429 or resp.status_code >= 500:
        detail = data.get("error") if isinstance(data, dict) else resp.text[:200]
        raise _Transient(f"HTTP {resp.status_code}: {detail}")
    if not isinstance(data, dict):
        raise _Transient(f"HTTP {resp.status_code} with a body that is not a JSON object: {resp.text[:80]!r}")
    if resp.status_code >= 400 or "error" in data:
        raise _Rejected(f"HTTP {resp.status_code}: {data.get('error', data)}")
    if not isinstance(data.get("count"), int):
        raise _Transient(f"answer has no integer 'count': {str(data)[:120]}")
    return data


def _key_from_env(name: str | None) -> str | None:
    if not name:
        return None
    key = os.environ.get(name)
    if not key:
        raise ConfigError(f"corpus_stats.api_key_env names {name}, but that environment variable is not set")
    return key


class InfiniGramAPI:
    """``CorpusStats`` over the Infini-gram API protocol."""

    name = BACKEND

    def __init__(
        self,
        url: str = "https://api.infini-gram.io/",
        index: str = "v4_olmo-2-0325-32b-instruct_llama",
        *,
        cooccurrence: Literal["window", "document"] = "window",
        max_diff_tokens: int = 1000,
        max_clause_freq: int = 500000,
        timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        concurrency: int = 8,
        total_tokens: int | None = None,
        transport: httpx.BaseTransport | None = None,
        api_key: str | None = None,
        rate_limit: RateSetting = "auto",
    ) -> None:
        self.url = url
        self.index = index
        self.cooccurrence = cooccurrence
        self.max_diff_tokens = int(max_diff_tokens)
        self.max_clause_freq = int(max_clause_freq)
        self.timeout_s = float(timeout_s)
        self.retries = max(0, int(retries))
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.concurrency = max(1, int(concurrency))
        self._policy = RetryPolicy(
            retries=self.retries,
            backoff_s=self.backoff_s,
            max_backoff_s=self.max_backoff_s,
            retry_on=(httpx.HTTPError,),
            retry_after=False,
        )
        self._total_tokens = total_tokens if total_tokens is not None else HOSTED_INDEX_TOKENS.get(index)
        self._total_lock = threading.Lock()
        self._total_failed_at = 0.0
        self.client = httpx.Client(
            timeout=httpx.Timeout(self.timeout_s),
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
            limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency),
            # Without TCP_NODELAY the request body waits for the server's delayed ACK: 40 ms per round trip.
            transport=transport
            or httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]),
        )
        self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="quco-stats-api")
        self.limiter = limiter_for(url, resolve_rate(rate_limit, url))
        self._counts_lock = threading.Lock()
        self.requests_sent = 0
        self.retries_done = 0
        self.throttled = 0  # 429 answers, each followed by a pause and the same request again

    @classmethod
    def from_config(cls, config: CorpusStatsConfig) -> InfiniGramAPI:
        # The hosted API only knows window co-occurrence; "document" is a `quco serve stats` extension and is
        # used only when the configuration asks for it explicitly.
        explicit = "cooccurrence" in config.model_fields_set
        return cls(
            url=config.api_url,
            index=config.api_index,
            cooccurrence=config.cooccurrence if explicit else "window",
            max_diff_tokens=config.max_diff_tokens,
            max_clause_freq=config.max_clause_freq,
            timeout_s=config.timeout_s,
            retries=config.retries,
            concurrency=config.concurrency,
            api_key=_key_from_env(config.api_key_env),
            rate_limit="auto" if config.rate_limit is None else config.rate_limit,
        )

    # ------------------------------------------------------------------ transport

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One request with retries; returns the decoded answer or raises _Rejected / _Transient."""
        throttled = [0]
        last = send_with_retries(
            lambda: self._send(payload, throttled),
            self._policy,
            self._judge,
            f"{BACKEND} at {self.url}",
        )
        with self._counts_lock:
            self.requests_sent += last.attempts + throttled[0]
            self.retries_done += last.attempts - 1
            self.throttled += throttled[0]
        if last.problem is not None or last.response is None:
            raise _Transient(f"failed after {last.attempts} attempts: {last.problem}")
        return _answer(last.response)

    def _send(self, payload: dict[str, Any], throttled: list[int]) -> httpx.Response:
        """One attempt within the rate limit. A 429 pauses the limiter for its Retry-After and the request goes
        again, up to ``MAX_THROTTLED`` times; these waits do not use up ``retries``."""
        while True:
            self.limiter.acquire()
            response = self.client.post(self.url, json=payload)
            if response.status_code != 429:
                if response.status_code < 400:
                    self.limiter.answered()
                return response
            if throttled[0] >= MAX_THROTTLED:
                return response  # a transient failure for the retry policy
            throttled[0] += 1
            self.limiter.throttled_by_server(retry_after_seconds(response.headers))

    def _judge(self, response: httpx.Response | None, error: Exception | None) -> str | None:
        if isinstance(error, httpx.TimeoutException):
            return f"timed out after {self.timeout_s:g}s ({type(error).__name__})"
        if error is not None:
            return f"{type(error).__name__}: {error}"
        assert response is not None
        try:
            _answer(response)
        except _Transient as exc:
            return str(exc)
        except _Rejected:
            pass
        return None

    def _ask(self, clauses: list[list[str]], cnf: bool) -> tuple[int, bool]:
        payload: dict[str, Any] = {"index": self.index, "query_type": "count"}
        query = compose(clauses)
        if query is None:
            # Entity text contains " AND "/" OR ": send the clauses unparsed (quco serve stats understands this;
            # the hosted API rejects it, and the lookup is then reported unknown rather than miscounted).
            payload[QUERY_TERMS_FIELD] = clauses
        else:
            payload["query"] = query
        if cnf:
            payload["max_clause_freq"] = self.max_clause_freq
            payload["max_diff_tokens"] = self.max_diff_tokens
            if self.cooccurrence == "document":
                payload[COOCCURRENCE_FIELD] = "document"
        data = self._post(payload)
        return int(data["count"]), bool(data.get("approx", False))

    def _result(self, query: str, started: float, count=None, approx=False, error=None) -> CountResult:
        return answer(self, query, started, count, exact=not approx, error=error)

    @property
    def total_tokens(self) -> int | None:
        """Index size: from the documented table, else asked once (the empty query counts every token)."""
        if self._total_tokens is None and time.monotonic() - self._total_failed_at > 60:
            with self._total_lock:
                if self._total_tokens is None:
                    try:
                        data = self._post({"index": self.index, "query_type": "count", "query": ""})
                        self._total_tokens = int(data["count"])
                    except (_Rejected, _Transient) as exc:
                        log.warning("could not learn the size of index %s: %s", self.index, exc)
                        self._total_failed_at = time.monotonic()
        return self._total_tokens

    # ------------------------------------------------------------------ CorpusStats

    def count(self, phrase: Phrase) -> CountResult:
        started = time.perf_counter()
        query = describe(phrase)
        items = aliases(phrase)
        if not items:
            return self._result(query, started, error="empty phrase")
        try:
            total, approx = 0, False
            for i in range(0, len(items), MAX_TERMS_PER_CLAUSE):
                n, a = self._ask([items[i : i + MAX_TERMS_PER_CLAUSE]], cnf=False)
                total, approx = total + n, approx or a
            return self._result(query, started, total, approx)
        except (_Rejected, _Transient) as exc:
            log.warning("count(%s) failed: %s", query, exc)
            return self._result(query, started, error=str(exc))

    def cooccur(self, a: Phrase, b: Phrase) -> CountResult:
        started = time.perf_counter()
        query = describe_pair(a, b)
        sa, sb = aliases(a), aliases(b)
        if not sa or not sb:
            return self._result(query, started, error="empty phrase")
        if len(sa) > MAX_TERMS_PER_CLAUSE or len(sb) > MAX_TERMS_PER_CLAUSE:
            return self._result(query, started, error=f"more than {MAX_TERMS_PER_CLAUSE} aliases on one side")
        try:
            n, approx = self._ask([sa, sb], cnf=True)
            return self._result(query, started, n, approx)
        except (_Rejected, _Transient) as exc:
            log.warning("cooccur(%s) failed: %s", query, exc)
            return self._result(query, started, error=str(exc))

    def count_many(self, phrases: Sequence[Phrase]) -> list[CountResult]:
        """Concurrent, at most ``concurrency`` requests in flight; answers in input order."""
        if len(phrases) <= 1:
            return [self.count(p) for p in phrases]
        return list(self._pool.map(self.count, phrases))

    def cooccur_many(self, pairs: Sequence[tuple[Phrase, Phrase]]) -> list[CountResult]:
        if len(pairs) <= 1:
            return [self.cooccur(a, b) for a, b in pairs]
        return list(self._pool.map(lambda p: self.cooccur(p[0], p[1]), pairs))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()

    def __enter__(self) -> InfiniGramAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
