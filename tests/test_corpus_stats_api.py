"""`quco serve stats` and the API client: a real server on a loopback port, started and stopped here.

Failure modes (server errors, timeouts, malformed JSON, refused connections) come from small real HTTP servers
in this file that misbehave on purpose, optionally forwarding to the real stats server.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import islice
from pathlib import Path

import httpx
import pytest

from quco.config import CorpusStatsConfig
from quco.corpus_stats.api import InfiniGramAPI
from quco.corpus_stats.build import build_local_index
from quco.corpus_stats.cache import CachedCorpusStats
from quco.corpus_stats.factory import build_corpus_stats
from quco.corpus_stats.local import LocalInfiniGram
from quco.corpus_stats.ratelimit import (
    PUBLIC_API_RATE,
    RateLimiter,
    limiter_for,
    resolve_rate,
    retry_after_seconds,
)
from quco.paths import data_dir


def _docs() -> list[tuple[str, str]]:
    path = data_dir() / "hotpotqa" / "corpus" / "hotpot_dev_first500_pooled_paragraphs.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in islice(f, 900)]
    return [(f"hotpot:{i}", f"{r['title']}\n{r['text']}") for i, r in enumerate(rows)]


def _pairs(n: int = 40) -> list[tuple[str, str]]:
    out = []
    with open(data_dir() / "hotpotqa" / "hotpot_dev_0_300_unified.jsonl", encoding="utf-8") as f:
        for line in islice(f, n):
            titles = list(dict.fromkeys(t for t, _ in json.loads(line)["supporting_facts"]))
            if len(titles) >= 2:
                out.append((titles[0], titles[1]))
    return out


@pytest.fixture(scope="module")
def docs() -> list[tuple[str, str]]:
    return _docs()


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, docs) -> Path:
    return build_local_index(docs, tmp_path_factory.mktemp("api") / "hotpot", progress=False)


def _start_server(index_dir: Path, *extra: str, cli: bool = False) -> tuple[subprocess.Popen, str]:
    if cli:  # `quco serve stats`
        cmd = [sys.executable, "-c", "from quco.cli import main; main()", "serve", "stats", "--index"]
    else:
        cmd = [sys.executable, "-m", "quco.corpus_stats.server"]
    cmd += [str(index_dir), "--port", "0", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()  # the server prints its URL once it is bound
    m = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
    if not m:
        proc.kill()
        raise AssertionError(f"server did not start: {line!r} {proc.stdout.read()[:2000]}")
    url = m.group(1)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("server never answered")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def server(index_dir):
    proc, url = _start_server(index_dir)
    yield url
    _stop(proc)


@pytest.fixture(scope="module")
def local(index_dir) -> LocalInfiniGram:
    return LocalInfiniGram(index_dir)


def _client(url: str, **kw) -> InfiniGramAPI:
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("timeout_s", 5.0)
    return InfiniGramAPI(url, "hotpot", **kw)


class Misbehaving:
    """A real HTTP server whose behaviour per request is scripted: 'ok' forwards to the stats server."""

    def __init__(self, script, upstream: str | None = None, delay_s: float = 0.0, gather: int = 0) -> None:
        self.script = list(script)
        self.upstream = upstream
        self.delay_s = delay_s
        self.payloads: list[dict] = []
        # In flight = read by a handler and not yet answered. A request is counted in after its body was read
        # and out before its answer is written, so the count never exceeds what the client has in flight,
        # however the threads are scheduled. With ``gather``, the first requests wait (up to 30 s) until that
        # many are in flight at once, so a client that does overlap its requests is seen to overlap them.
        self.inflight = 0
        self.max_inflight = 0
        self.gather = gather
        self.lock = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with outer.lock:
                    outer.payloads.append(json.loads(body))
                    step = outer.script.pop(0) if len(outer.script) > 1 else outer.script[0]
                    outer.inflight += 1
                    outer.max_inflight = max(outer.max_inflight, outer.inflight)
                    outer.lock.notify_all()
                    if outer.max_inflight < outer.gather:
                        outer.lock.wait_for(lambda: outer.max_inflight >= outer.gather, timeout=30)
                status, payload = 500, b""
                try:
                    if outer.delay_s:
                        time.sleep(outer.delay_s)
                    if step == "ok":
                        r = httpx.post(
                            outer.upstream, content=body, headers={"content-type": "application/json"}
                        )
                        status, payload = r.status_code, r.content
                    elif step == "500":
                        status, payload = 500, b'{"error": "[Flask] Internal server error: boom"}'
                    elif step == "503-html":
                        status, payload = 503, b"<html>Service Unavailable</html>"
                    elif step == "garbage":
                        status, payload = 200, b'{"count": 12, "approx": fal'
                    elif step == "no-count":
                        status, payload = 200, b'{"approx": false, "latency": 0.1}'
                    elif step == "sleep":  # far longer than any client timeout in these tests
                        outer.closed.wait(30)
                        status, payload = 200, b'{"count": 1, "approx": false}'
                finally:
                    # Counted out before the answer is written: once the client has it, it may send the next.
                    with outer.lock:
                        outer.inflight -= 1
                self._reply(status, payload)

            def _reply(self, status, payload: bytes):
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

        self.closed = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()


# ---------------------------------------------------------------------------------------------- protocol


def test_server_speaks_the_hosted_protocol(server, local):
    c = httpx.Client(timeout=5)
    r = c.post(server, json={"index": "hotpot", "query_type": "count", "query": "Ed Wood"}).json()
    assert r["count"] == local.count("Ed Wood").count > 0 and r["approx"] is False
    assert isinstance(r["latency"], float) and r["token_ids"] == list(local.tokenizer.encode("Ed Wood"))
    cnf = {
        "index": "hotpot",
        "query_type": "count",
        "query": "Ed Wood AND Tim Burton",
        "max_diff_tokens": 1000,
    }
    r = c.post(server, json={**cnf, "max_clause_freq": 500000}).json()
    win = LocalInfiniGram(local.dirs[0], cooccurrence="window").cooccur("Ed Wood", "Tim Burton")
    assert r["count"] == win.count and r["cooccurrence"] == "window"
    r = c.post(server, json={**cnf, "cooccurrence": "document"}).json()
    assert r["count"] == local.cooccur("Ed Wood", "Tim Burton").count >= 1
    ids = list(local.tokenizer.encode("Tim Burton"))
    assert (
        c.post(server, json={"index": "hotpot", "query_type": "count", "query_ids": ids}).json()["count"] > 0
    )
    nested = {
        "index": "hotpot",
        "query_type": "count",
        "query_ids": [[ids], [list(local.tokenizer.encode("film"))]],
    }
    assert c.post(server, json=nested).json()["count"] > 0
    empty = c.post(server, json={"index": "hotpot", "query_type": "count", "query": ""}).json()
    assert empty["count"] == local.total_tokens
    info = c.get(server).json()
    assert info["indexes"]["hotpot"]["documents"] == local.doc_count


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        ({"index": "nope", "query_type": "count", "query": "x"}, 400, "Invalid index"),
        ({"index": "hotpot", "query_type": "ntd", "query": "x"}, 400, "Invalid query_type"),
        ({"index": "hotpot", "query_type": "count"}, 400, "Exactly one"),
        ({"index": "hotpot", "query_type": "count", "query": "x", "query_ids": [1]}, 400, "Exactly one"),
        ({"index": "hotpot", "query_type": "count", "query": "x", "bogus": 1}, 400, "Unknown field"),
        (
            {"index": "hotpot", "query_type": "count", "query": "a AND b", "max_diff_tokens": 0},
            400,
            "positive",
        ),
        ({"index": "hotpot", "query_type": "count", "query_ids": [[1, 2]]}, 400, "query_ids must be"),
        ({"index": "hotpot", "query_type": "count", "query_ids": [70000]}, 400, "query_ids must be"),
        ({"index": "hotpot", "query_type": "count", "query": 5}, 400, "must be a string"),
    ],
)
def test_server_rejects_bad_requests(server, payload, status, message):
    r = httpx.post(server, json=payload, timeout=5)
    assert r.status_code == status and message in r.json()["error"]


def test_server_rejects_malformed_json(server):
    r = httpx.post(server, content=b'{"index": "hotpot", ', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]


# ---------------------------------------------------------------------------------------------- client


def test_client_through_server_matches_local_index(server, local):
    win_local = LocalInfiniGram(local.dirs[0], cooccurrence="window")
    with _client(server) as api, _client(server, cooccurrence="document") as api_doc:
        pairs = _pairs()
        assert len(pairs) >= 30
        counts = api.count_many([a for a, _ in pairs] + [["Ed Wood", "Edward Davis Wood Jr."]])
        expected = local.count_many([a for a, _ in pairs] + [["Ed Wood", "Edward Davis Wood Jr."]])
        assert [r.count for r in counts] == [r.count for r in expected]
        assert all(
            r.status == "ok" and r.backend == "infini-gram-api" and r.index == "hotpot" for r in counts
        )
        assert counts[0].total_tokens == local.total_tokens and counts[0].per_billion > 0
        window = api.cooccur_many(pairs)
        assert [r.count for r in window] == [r.count for r in win_local.cooccur_many(pairs)]
        document = api_doc.cooccur_many(pairs)
        assert [r.count for r in document] == [r.count for r in local.cooccur_many(pairs)]
        assert sum(r.count > 0 for r in document) >= 20


def _and_phrase(docs) -> tuple[str, str, str]:
    """A real 'X and Y' phrase of the corpus, e.g. to be asked for as 'X AND Y' (WordPiece is uncased)."""
    grams = Counter()
    for _, text in docs:
        words = re.findall(r"[A-Za-z]+", text)
        grams.update(
            (a, b) for a, m, b in zip(words, words[1:], words[2:], strict=False) if m == "and" and len(a) > 3
        )
    (a, b), _ = grams.most_common(1)[0]
    return a, b, f"{a} AND {b}"


def test_query_syntax_in_entities_keeps_its_meaning(server, local, docs):
    a, b, phrase = _and_phrase(docs)
    proxy = Misbehaving(["ok"], upstream=server)
    try:
        with _client(proxy.url) as api:
            r = api.count(phrase)
            assert r.status == "ok" and r.count == local.count(phrase).count > 0
            # sent as unparsed terms, not as the string the server would split into "a" AND "b"
            assert any(p.get("query_terms") == [[phrase]] for p in proxy.payloads)
            assert not any(phrase in p.get("query", "") for p in proxy.payloads)
            r = api.cooccur(["Tom OR Jerry", phrase], "film")
            win = LocalInfiniGram(local.dirs[0], cooccurrence="window")
            assert r.status == "ok" and r.count == win.cooccur(["Tom OR Jerry", phrase], "film").count > 0
            for text in ('"Ed Wood" (film)', "Ed Wood (film)", "(Ed) OR", "AND Ed"):
                assert api.count(text).count == local.count(text).count, text
            plain = api.count("Ed Wood")
            assert (
                proxy.payloads[-1].get("query") == "Ed Wood" and plain.count == local.count("Ed Wood").count
            )
    finally:
        proxy.close()


def test_server_errors_are_retried_then_succeed(server, local):
    proxy = Misbehaving(["500", "503-html", "ok"], upstream=server)
    try:
        with _client(proxy.url, retries=3, total_tokens=local.total_tokens) as api:
            r = api.count("Scott Derrickson")
            assert r.status == "ok" and r.count == local.count("Scott Derrickson").count
            assert api.requests_sent == 3 and api.retries_done == 2
    finally:
        proxy.close()


@pytest.mark.parametrize(
    ("step", "message"),
    [("500", "HTTP 500"), ("garbage", "not a JSON object"), ("no-count", "no integer 'count'")],
)
def test_persistent_failures_become_unknown(step, message):
    bad = Misbehaving([step])
    try:
        with _client(bad.url, retries=2, total_tokens=1000) as api:
            r = api.count("Scott Derrickson")
            assert (
                r.status == "unknown" and r.count is None and message in r.error and "3 attempts" in r.error
            )
            assert len(bad.payloads) == 3
            many = api.cooccur_many([("a", "b"), ("c", "d")])
            assert [x.status for x in many] == ["unknown", "unknown"]
    finally:
        bad.close()


def test_timeouts_become_unknown_quickly():
    slow = Misbehaving(["sleep"])  # answers after 30 s
    try:
        with _client(slow.url, retries=1, timeout_s=0.3, total_tokens=1000) as api:
            t = time.perf_counter()
            r = api.count("Scott Derrickson")
            elapsed = time.perf_counter() - t
            assert r.status == "unknown" and "timed out after 0.3s" in r.error
            assert elapsed < 20  # it did not wait for the server (a loose bound: the machine may be busy)
    finally:
        slow.close()


def test_rejected_requests_are_not_retried(server):
    with InfiniGramAPI(server, "no-such-index", backoff_s=0.01, total_tokens=1) as api:
        r = api.count("Ed Wood")
        assert r.status == "unknown" and "HTTP 400" in r.error and "Invalid index" in r.error
        assert api.requests_sent == 1


def test_concurrency_limit_is_respected(server):
    """Three requests overlap (the proxy holds the first ones until three are in flight) and never more."""
    proxy = Misbehaving(["ok"], upstream=server, delay_s=0.02, gather=3)
    try:
        with _client(proxy.url, concurrency=3, total_tokens=1, timeout_s=60) as api:
            results = api.count_many([f"film {i}" for i in range(12)])
        assert all(r.status == "ok" for r in results)
        assert len(proxy.payloads) == 12
        assert proxy.max_inflight == 3
    finally:
        proxy.close()


def test_server_stopped_mid_run(index_dir, local):
    proc, url = _start_server(index_dir)
    with _client(url, retries=2) as api:
        first = api.count_many(["Ed Wood", "Tim Burton"])
        assert [r.status for r in first] == ["ok", "ok"]
        _stop(proc)
        t = time.perf_counter()
        after = api.count_many(["Scott Derrickson", "Ed Wood"])
        assert [r.status for r in after] == ["unknown", "unknown"]
        assert all("failed after 3 attempts" in r.error and "Connect" in r.error for r in after)
        # A refused connection fails at once: far below the 3 x 5 s that waiting for timeouts would take.
        assert time.perf_counter() - t < 12


def test_build_corpus_stats_api_backend_is_cached(server, local, tmp_path):
    cfg = CorpusStatsConfig(backend="api", api_url=server, api_index="hotpot", timeout_s=5)
    stats = build_corpus_stats(cfg, lambda: iter([]), "unused", cache_path=tmp_path / "c.sqlite")
    assert isinstance(stats, CachedCorpusStats) and stats.cooccurrence == "window"
    pairs = _pairs(10)
    first = stats.cooccur_many(pairs)
    second = stats.cooccur_many(pairs)
    assert not any(r.cached for r in first) and all(r.cached for r in second)
    assert [r.count for r in first] == [r.count for r in second]
    assert stats.hits == len(pairs) and stats.misses == len(pairs)
    doc_cfg = cfg.model_copy(update={"cooccurrence": "document"})
    doc_cfg.model_fields_set.add("cooccurrence")
    doc_stats = build_corpus_stats(doc_cfg, lambda: iter([]), "unused", cache_path=tmp_path / "c.sqlite")
    assert doc_stats.cooccurrence == "document"
    assert [r.count for r in doc_stats.cooccur_many(pairs)] == [r.count for r in local.cooccur_many(pairs)]
    assert doc_stats.misses == len(pairs)  # another semantics, another cache namespace


def test_rate_limit_setting_tells_the_public_api_from_a_server_of_ones_own():
    assert resolve_rate("auto", "https://api.infini-gram.io/") == PUBLIC_API_RATE == 5.0
    assert resolve_rate("auto", "http://127.0.0.1:8765/") is None  # `quco serve stats`: unlimited
    assert resolve_rate("auto", "https://stats.example.org/") is None
    assert resolve_rate(2.5, "https://api.infini-gram.io/") == 2.5
    assert resolve_rate("off", "https://api.infini-gram.io/") is None
    assert CorpusStatsConfig().rate_limit is None  # "auto", left out of a run's recorded config
    assert (
        InfiniGramAPI.from_config(CorpusStatsConfig(api_url="https://api.infini-gram.io/")).limiter
        is not None
    )
    assert CorpusStatsConfig(rate_limit=3).rate_limit == 3
    with pytest.raises(ValueError):
        CorpusStatsConfig(rate_limit=0)
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({}) is None and retry_after_seconds({"retry-after": "soon"}) is None


def test_one_limiter_spaces_the_requests_of_every_thread():
    limiter = RateLimiter(20.0)
    t = time.perf_counter()
    threads = [threading.Thread(target=lambda: [limiter.acquire() for _ in range(10)]) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # 40 slots 1/20 s apart: the last one 39/20 s after the first
    assert time.perf_counter() - t >= 39 / 20 - 0.01
    assert limiter_for("http://127.0.0.1:1/", 20.0) is limiter_for("http://127.0.0.1:1/x", None)


def test_server_request_limit_and_client_at_twice_the_rate_lose_nothing(index_dir, local):
    """`quco serve stats --rate-limit 10`; four threads, each with its own client at 20 requests/s: the clients
    share one limiter, the 429s they get are waited out (Retry-After) and slow them down, no lookup is lost."""
    limit, n_threads, per_thread = 10.0, 4, 20
    proc, url = _start_server(index_dir, "--rate-limit", str(limit), cli=True)
    words = [w for _, text in _docs()[:40] for w in text.split()[:4]]
    phrases = list(dict.fromkeys(w for w in words if w.isalpha()))[: n_threads * per_thread]
    results: dict[str, object] = {}
    clients = [_client(url, rate_limit=2 * limit, total_tokens=local.total_tokens) for _ in range(n_threads)]

    def work(api: InfiniGramAPI, mine: list[str]) -> None:
        for p in mine:
            results[p] = api.count(p)

    try:
        t = time.perf_counter()
        threads = [
            threading.Thread(target=work, args=(api, phrases[i::n_threads])) for i, api in enumerate(clients)
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        elapsed = time.perf_counter() - t
        served = httpx.get(url, timeout=5).json()
    finally:
        for api in clients:
            api.close()
        _stop(proc)
    assert served["rate_limit"] == {"per_client_per_s": limit, "burst": limit}
    assert served["requests"] == {"200": len(phrases), "rate_limited": sum(api.throttled for api in clients)}
    lost = [p for p in phrases if results[p].status != "ok" or results[p].count != local.count(p).count]
    throttled = sum(api.throttled for api in clients)
    sent = sum(api.requests_sent for api in clients)
    achieved = len(phrases) / elapsed
    print(
        f"\nserver limit {limit:g}/s, 4 threads at {2 * limit:g}/s: {len(phrases)} lookups in {elapsed:.2f} s = "
        f"{achieved:.2f} answered/s; {sent} requests sent, {throttled} answered 429 and sent again; "
        f"{len(lost)} lost; limiter now at {clients[0].limiter.rate:.2f}/s"
    )
    assert len(phrases) == n_threads * per_thread and not lost
    assert throttled > 0  # the clients did go faster than the server allows, and recovered
    assert sent == len(phrases) + throttled
    assert achieved <= limit * 1.1 + limit / elapsed  # the server's rate plus its one-second burst
    assert achieved >= limit * 0.4  # slowed down, not stalled
