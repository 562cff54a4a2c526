"""``quco serve stats``: local indexes behind the hosted Infini-gram API's JSON protocol.

An offline team builds one index of its corpus and serves it to many clients; any client of the hosted API
(including QuCo-RAG's own code) works unchanged against it. ``POST /`` takes
``{"index", "query_type": "count", "query" | "query_ids", "max_clause_freq", "max_diff_tokens"}`` and answers
``{"count", "approx", "latency", "token_ids", "tokens"}``, or ``{"error"}`` with HTTP 400/500. Two extensions:
``"query_terms"`` (CNF as lists of text terms, never parsed, for entities that contain " AND "/" OR ") and
``"cooccurrence": "document"`` (exact same-document counts). ``GET /`` describes the served indexes and counts
the requests answered so far by HTTP status (``rate_limited`` and ``busy`` for the two kinds of 429).
The empty query counts the index's text tokens (document separators excluded).

Limits keep one client from taking the machine: at most ``MAX_QUERY_CHARS`` characters, ``MAX_CLAUSES`` clauses
of ``MAX_TERMS_PER_CLAUSE`` terms (400 above), ``concurrency`` counts computed at once and ``queue`` waiting
(429 with ``Retry-After`` above). With an ``api_key`` every request needs ``Authorization: Bearer <key>`` (401
otherwise); without one the server listens on loopback only, like ``quco serve api``. ``rate_limit`` caps the
requests per second of each client address, as the hosted API does (429 with ``Retry-After`` above; off by
default).
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from quco.corpus_stats.local import LocalInfiniGram
from quco.corpus_stats.protocol import COOCCURRENCE_FIELD, QUERY_TERMS_FIELD, parse
from quco.errors import ConfigError
from quco.inputs import text_problem

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
MAX_QUERY_CHARS = 10_000
MAX_CLAUSES = 4  # AND-ed clauses in one CNF query (the client sends 2: head AND tail)
MAX_TERMS_PER_CLAUSE = 4  # OR-ed terms in one clause (aliases; the client splits longer lists)
DEFAULT_CONCURRENCY = 2  # counts computed at once (each holds a core)
DEFAULT_QUEUE = 16  # requests waiting for a slot before new ones get 429
LOOPBACK = ("127.0.0.1", "localhost", "::1")
_KNOWN_FIELDS = {"index", "corpus", "query_type", "query", "query_ids", QUERY_TERMS_FIELD, COOCCURRENCE_FIELD,
                 "max_clause_freq", "max_diff_tokens", "engine", "source", "timestamp"}  # fmt: skip

IndexSpec = Sequence[str | Path] | Mapping[str, str | Path | Sequence[str | Path]]


class StatsService:
    """The protocol, independent of any web framework: a request dict in, (HTTP status, answer dict) out."""

    def __init__(self, indexes: Mapping[str, LocalInfiniGram], default_cooccurrence: str = "window") -> None:
        if not indexes:
            raise ValueError("no index to serve")
        self.indexes = dict(indexes)
        self.default_cooccurrence = default_cooccurrence

    @classmethod
    def open(cls, spec: IndexSpec, default_cooccurrence: str = "window") -> StatsService:
        """Directories -> served indexes named after them; or ``{name: dir or [shard dirs]}``."""
        items: dict[str, Any] = dict(spec) if isinstance(spec, Mapping) else {Path(d).name: d for d in spec}
        engines = {name: LocalInfiniGram(dirs, cooccurrence="window") for name, dirs in items.items()}
        return cls(engines, default_cooccurrence)

    def info(self) -> dict[str, Any]:
        return {
            "server": "quco serve stats",
            "query_types": ["count"],
            "extensions": [QUERY_TERMS_FIELD, COOCCURRENCE_FIELD],
            "default_cooccurrence": self.default_cooccurrence,
            "indexes": {
                name: {
                    "documents": s.doc_count,
                    "tokens": s.total_tokens,
                    "tokenizer": s.tokenizer.name,
                    "directories": [str(d.name) for d in s.dirs],
                }
                for name, s in self.indexes.items()
            },
        }

    def handle(self, data: Any) -> tuple[int, dict[str, Any]]:
        if not isinstance(data, dict):
            return 400, {"error": "request body must be a JSON object"}
        index = data.get("index", data.get("corpus"))
        if index not in self.indexes:
            return 400, {"error": f"Invalid index: {index}; served: {', '.join(sorted(self.indexes))}"}
        if data.get("query_type") != "count":
            return 400, {
                "error": f"Invalid query_type: {data.get('query_type')}; this server answers 'count'"
            }
        unknown = sorted(set(data) - _KNOWN_FIELDS)
        if unknown:
            return 400, {"error": f"Unknown field(s): {', '.join(unknown)}"}
        given = [k for k in ("query", "query_ids", QUERY_TERMS_FIELD) if k in data]
        if len(given) != 1:
            return 400, {"error": "Exactly one of query, query_ids and query_terms must be present"}
        stats = self.indexes[index]
        params = {}
        for key in ("max_clause_freq", "max_diff_tokens"):
            if key in data:
                v = data[key]
                if not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
                    return 400, {"error": f"{key} must be a positive integer"}
                params[key] = v
        mode = data.get(COOCCURRENCE_FIELD, self.default_cooccurrence)
        if mode not in ("window", "document"):
            return 400, {"error": f"{COOCCURRENCE_FIELD} must be 'window' or 'document'"}
        try:
            clauses = self._clauses(stats, data, given[0])
        except ValueError as exc:
            return 400, {"error": str(exc)}
        started = time.perf_counter()
        try:
            if clauses is None:  # the empty query: size of the index
                count, approx, ids = stats.total_tokens or 0, False, []
            else:
                count, approx = stats.count_cnf_ids(
                    clauses,
                    cooccurrence=mode,
                    max_diff_tokens=params.get("max_diff_tokens"),
                    max_clause_freq=params.get("max_clause_freq"),
                )
                ids = [list(s) for s in clauses[0]] if len(clauses) == 1 and len(clauses[0]) == 1 else None
        except Exception as exc:
            log.exception("count failed")
            return 500, {"error": f"Internal server error: {exc}"}
        latency = (time.perf_counter() - started) * 1000
        answer: dict[str, Any] = {"count": count, "approx": approx, "latency": round(latency, 3)}
        if clauses is not None:
            answer["token_ids"] = ids[0] if ids is not None else [[list(s) for s in c] for c in clauses]
            if len(clauses) > 1:
                answer[COOCCURRENCE_FIELD] = mode
        return 200, answer

    @staticmethod
    def _clauses(
        stats: LocalInfiniGram, data: dict[str, Any], field: str
    ) -> list[list[tuple[int, ...]]] | None:
        tok = stats.tokenizer
        if field == "query":
            query = data["query"]
            if not isinstance(query, str):
                raise ValueError("query must be a string")
            if len(query) > MAX_QUERY_CHARS:
                raise ValueError(f"Please limit your input to <= {MAX_QUERY_CHARS} characters")
            if query == "":
                return None
            terms = parse(query)
            if len(terms) > MAX_CLAUSES or any(len(c) > MAX_TERMS_PER_CLAUSE for c in terms):
                raise ValueError(
                    f"a query may hold at most {MAX_CLAUSES} clauses (joined by AND) of at most "
                    f"{MAX_TERMS_PER_CLAUSE} terms (joined by OR)"
                )
        elif field == QUERY_TERMS_FIELD:
            terms = data[field]
            ok = (
                isinstance(terms, list)
                and terms
                and all(isinstance(c, list) and c and all(isinstance(t, str) for t in c) for c in terms)
            )
            if not ok:
                raise ValueError(
                    f"{QUERY_TERMS_FIELD} must be a non-empty list of non-empty lists of strings"
                )
            if len(terms) > MAX_CLAUSES or any(len(c) > MAX_TERMS_PER_CLAUSE for c in terms):
                raise ValueError(
                    f"{QUERY_TERMS_FIELD} may hold at most {MAX_CLAUSES} clauses of at most "
                    f"{MAX_TERMS_PER_CLAUSE} terms"
                )
            if sum(len(t) for c in terms for t in c) > MAX_QUERY_CHARS:
                raise ValueError(f"Please limit your input to <= {MAX_QUERY_CHARS} characters")
        else:
            ids = data["query_ids"]
            limit = int(np.iinfo(tok.np_dtype).max)

            def valid(seq: Any) -> bool:
                return isinstance(seq, list) and all(
                    isinstance(i, int) and not isinstance(i, bool) and 0 <= i < limit for i in seq
                )

            if valid(ids):
                return None if not ids else [[tuple(ids)]]
            if (
                isinstance(ids, list)
                and ids
                and all(isinstance(c, list) and c and all(valid(t) and t for t in c) for c in ids)
            ):
                if len(ids) > MAX_CLAUSES or any(len(c) > MAX_TERMS_PER_CLAUSE for c in ids):
                    raise ValueError(
                        f"query_ids may hold at most {MAX_CLAUSES} clauses of at most {MAX_TERMS_PER_CLAUSE} terms"
                    )
                return [[tuple(t) for t in c] for c in ids]
            raise ValueError("query_ids must be a list of integers, or a triply-nested list of integers")
        for clause in terms:
            for term in clause:
                problem = text_problem(term)
                if problem:
                    raise ValueError(f"the query is not valid text: {problem}")
        clauses = [[tuple(tok.encode(t)) for t in c] for c in terms]
        if any(not s for c in clauses for s in c):
            raise ValueError("a query term has no tokens under this index's tokenizer")
        return clauses


class _RequestLimit:
    """At most ``rate`` POST requests per second from each client address, with a burst of one second's worth
    (the hosted API's rule: 5/s per IP, burst multiplier 1). Over the limit: 429 with ``Retry-After``."""

    def __init__(self, rate: float) -> None:
        if not rate > 0:
            raise ConfigError(
                "serve stats: the request limit must be a positive number of requests per second"
            )
        self.rate = rate
        self.burst = max(1.0, rate)
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, at)
        self._lock = threading.Lock()
        self.refused = 0

    def take(self, client: str) -> float:
        """0 if the request may go, else the seconds until it could."""
        with self._lock:
            now = time.monotonic()
            tokens, at = self._buckets.get(client, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[client] = (tokens - 1.0, now)
                return 0.0
            self._buckets[client] = (tokens, now)
            self.refused += 1
            if len(self._buckets) > 10_000:  # forget clients idle long enough to be full again
                idle = self.burst / self.rate
                self._buckets = {c: v for c, v in self._buckets.items() if now - v[1] < idle}
            return (1.0 - tokens) / self.rate


class _Admission:
    """At most ``concurrency`` counts running and ``queue`` waiting; the rest are turned away at once."""

    def __init__(self, concurrency: int, queue: int) -> None:
        if concurrency < 1 or queue < 0:
            raise ConfigError("serve stats: concurrency must be >= 1 and queue >= 0")
        self.concurrency, self.queue = concurrency, queue
        self.limiter = anyio.CapacityLimiter(concurrency)
        self._admitted = 0
        self._lock = threading.Lock()

    def enter(self) -> bool:
        with self._lock:
            if self._admitted >= self.concurrency + self.queue:
                return False
            self._admitted += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self._admitted -= 1


def create_app(
    service: StatsService,
    *,
    api_key: str | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    queue: int = DEFAULT_QUEUE,
    rate_limit: float | None = None,
):
    """A plain ASGI application (no framework needed) serving ``service`` within the given limits.

    ``rate_limit``: requests per second per client address (None: no limit).
    """
    admission = _Admission(concurrency, queue)
    limit = _RequestLimit(rate_limit) if rate_limit is not None else None
    served: Counter[str] = Counter()  # POST requests by outcome, shown by GET /
    key = api_key.encode() if api_key else None

    def authorised(scope: dict[str, Any]) -> bool:
        if key is None:
            return True
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), key)

    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if len(body) > MAX_BODY_BYTES:
                return await _send(send, 413, {"error": "request body too large"})
            if not msg.get("more_body"):
                break
        if not authorised(scope):
            return await _send(
                send,
                401,
                {"error": "missing or invalid bearer token; send 'Authorization: Bearer <key>'"},
                [(b"www-authenticate", b"Bearer")],
            )
        if scope["method"] == "GET" and scope["path"] in ("/", "/info"):
            info = {**service.info(), "requests": dict(served)}
            if limit is not None:
                info["rate_limit"] = {"per_client_per_s": limit.rate, "burst": limit.burst}
            return await _send(send, 200, info)
        if scope["method"] != "POST":
            return await _send(send, 405, {"error": "use POST / with a JSON body"})
        if limit is not None:
            wait = limit.take((scope.get("client") or ("?",))[0])
            if wait > 0:
                served["rate_limited"] += 1
                return await _send(
                    send,
                    429,
                    {"error": f"rate limit: {limit.rate:g} requests/s per client; retry after {wait:.2f} s"},
                    [(b"retry-after", str(max(1, math.ceil(wait))).encode())],
                )
        try:
            data = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return await _send(send, 400, {"error": "request body is not valid JSON"})
        if not admission.enter():
            served["busy"] += 1
            return await _send(
                send,
                429,
                {
                    "error": f"server busy: {admission.concurrency} counts running and {admission.queue} "
                    "waiting; retry later"
                },
                [(b"retry-after", b"1")],
            )
        try:
            status, answer = await anyio.to_thread.run_sync(service.handle, data, limiter=admission.limiter)
        except Exception as exc:  # noqa: BLE001 - the JSON error format holds for every failure
            log.exception("request failed")
            status, answer = 500, {"error": f"Internal server error: {type(exc).__name__}"}
        finally:
            admission.leave()
        served[str(status)] += 1
        await _send(send, status, answer)

    return app


async def _send(
    send, status: int, payload: dict[str, Any], extra_headers: list[tuple[bytes, bytes]] = ()
) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers.extend(extra_headers)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def check_exposure(host: str, api_key: str | None, api_key_env: str = "QUCO_API_KEY") -> None:
    """The rule ``quco serve api`` follows: without a key, listen on loopback only."""
    if api_key is None and host not in LOOPBACK:
        raise ConfigError(
            f"refusing to listen on {host} without a key; export {api_key_env}=<secret> or use --host 127.0.0.1"
        )


def serve_stats(
    index_dirs: IndexSpec,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    cooccurrence: str = "window",
    log_level: str = "warning",
    ready_message: bool = True,
    api_key: str | None = None,
    api_key_env: str = "QUCO_API_KEY",
    concurrency: int = DEFAULT_CONCURRENCY,
    queue: int = DEFAULT_QUEUE,
    rate_limit: float | None = None,
) -> None:
    """Serve local indexes until interrupted. ``port=0`` picks a free port; the bound URL is printed first.

    Without ``api_key`` only a loopback ``host`` is allowed (ConfigError otherwise).
    """
    check_exposure(host, api_key, api_key_env)
    try:
        import uvicorn
    except ImportError as exc:
        raise ConfigError(
            f"quco serve stats needs uvicorn ({exc.name} is missing); install quco[serve]"
        ) from exc

    service = StatsService.open(index_dirs, default_cooccurrence=cooccurrence)
    app = create_app(service, api_key=api_key, concurrency=concurrency, queue=queue, rate_limit=rate_limit)
    # proto=IPPROTO_TCP: asyncio only sets TCP_NODELAY on accepted sockets whose proto says TCP (else +40 ms)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    if ready_message:  # a line scripts and tests can wait for; the CLI may print its own
        print(f"quco serve stats: http://{host}:{bound}/ indexes={','.join(service.indexes)}", flush=True)
    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m quco.corpus_stats.server DIR [DIR ...] [--host H] [--port P] [--cooccurrence document]``."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m quco.corpus_stats.server", description=main.__doc__)
    ap.add_argument(
        "index_dirs", nargs="+", help="index directories; NAME=DIR[,DIR...] groups shard directories"
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--cooccurrence", choices=["window", "document"], default="window")
    ap.add_argument("--api-key-env", default="QUCO_API_KEY", help="variable holding the bearer key")
    ap.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    ap.add_argument("--queue", type=int, default=DEFAULT_QUEUE)
    ap.add_argument("--rate-limit", type=float, default=None, help="requests per second per client address")
    args = ap.parse_args(argv)
    spec: dict[str, list[str]] = {}
    for item in args.index_dirs:
        name, _, dirs = item.rpartition("=") if "=" in item else (Path(item).name, "", item)
        spec[name] = dirs.split(",")
    try:
        serve_stats(
            spec,
            args.host,
            args.port,
            cooccurrence=args.cooccurrence,
            api_key=os.environ.get(args.api_key_env) or None,
            api_key_env=args.api_key_env,
            concurrency=args.concurrency,
            queue=args.queue,
            rate_limit=args.rate_limit,
        )
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
