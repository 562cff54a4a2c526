"""``quco serve`` on loopback: the openai client against it, auth, limits, overload, timeouts, a dying LLM.

The service runs the real pipeline (QuCo-RAG, SR-RAG, Wo-RAG) with the OpenAI backend against a real llama.cpp
server serving the default GGUF, over BM25 and Infini-gram indexes of the first 30 HotpotQA dev questions'
paragraphs. uvicorn runs in a thread of the test process; every call goes through real sockets.
"""

from __future__ import annotations

import html
import json
import logging
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn

from quco.config import PipelineConfig, load_config
from quco.llm.models import default_gguf_path
from quco.serve.app import create_app
from quco.serve.service import AnswerService, ServeSettings
from quco.serve.viewer import viewer_html
from support.llama_server import LlamaServer, ServedModel, _free_port

pytestmark = pytest.mark.model

KEY = "test-secret-key-123"
QUESTION = "Were Scott Derrickson and Ed Wood of the same nationality?"


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    log = tmp_path_factory.mktemp("llm") / "server.log"
    srv = LlamaServer([ServedModel("gemma3-270m", str(default_gguf_path()), n_ctx=2048)], log_path=log)
    with srv:
        yield srv


@pytest.fixture(scope="module")
def pipeline_config(
    tmp_path_factory: pytest.TempPathFactory, small_hotpot_corpus: Path, llm_server: LlamaServer
) -> PipelineConfig:
    tmp = tmp_path_factory.mktemp("serve-idx")
    return load_config(
        overrides={
            "generator.backend": "openai",
            "generator.base_url": llm_server.base_url,
            "generator.model": "gemma3-270m",
            "generator.max_context_tokens": 2048,
            "generator.max_retries": 1,
            "retriever.corpus": str(small_hotpot_corpus),
            "retriever.index_dir": str(tmp / "bm25"),
            "corpus_stats.index_dir": str(tmp / "stats"),
            "prompt.fewshot": 1,
            "generation.max_new_tokens": 32,
            "generation.max_steps": 3,
        },
        method="quco",
    )


@dataclass
class Running:
    url: str
    service: AnswerService
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def serve(settings: ServeSettings, service: AnswerService | None = None) -> Running:
    """Start the app with uvicorn on a free loopback port in a thread; return once it accepts connections."""
    service = service or AnswerService(settings)
    app = create_app(settings, service)
    port = _free_port("127.0.0.1")
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("quco serve did not start")
        time.sleep(0.05)
    return Running(f"http://127.0.0.1:{port}", service, server, thread)


@pytest.fixture(scope="module")
def service(pipeline_config: PipelineConfig) -> AnswerService:
    """Shared by the servers below, so the pipelines are built once for the module."""
    settings = ServeSettings(
        config=pipeline_config,
        methods=("quco", "sr-rag", "wo-rag"),
        api_key=KEY,
        concurrency=2,
        queue=2,
        timeout_s=120,
        max_body_bytes=4096,
        max_question_chars=300,
    )
    return AnswerService(settings)


@pytest.fixture(scope="module")
def api(service: AnswerService) -> Iterator[Running]:
    running = serve(service.settings, service)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(api: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{api.url}/v1", api_key=KEY, max_retries=0, timeout=300)


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}"}


# ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quco_answer(api: Running) -> dict:
    """One QuCo-RAG answer through the API (shared by the answer and viewer tests: the LLM is the cost)."""
    r = httpx.post(f"{api.url}/v1/answer", json={"question": QUESTION}, headers=auth(), timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def test_answer_endpoint_returns_answer_trace_and_counters(api: Running, quco_answer: dict) -> None:
    body = quco_answer
    assert body["method"] == "quco"
    assert body["prediction"].strip()
    trace = body["trace"]
    assert trace["question"] == QUESTION and trace["steps"]
    assert trace["steps"][0]["stage"] == "before"  # QuCo stage 1 ran
    assert body["counters"]["llm_calls"]["main"] >= 1
    assert body["counters"]["corpus_queries"] >= 1
    assert body["counters"]["generated_tokens"]["main"] >= 1
    # The trace is kept for the viewer.
    t = httpx.get(f"{api.url}/v1/traces/{body['id']}", headers=auth())
    assert t.status_code == 200 and t.json() == trace
    assert body["viewer"] == f"/viewer?id={body['id']}"
    # Without the trace, on request.
    r2 = httpx.post(
        f"{api.url}/v1/answer",
        json={"question": QUESTION, "method": "wo-rag", "options": {"include_trace": False}},
        headers=auth(),
        timeout=300,
    )
    assert r2.status_code == 200 and r2.json()["trace"] is None and r2.json()["method"] == "wo-rag"
    assert len(r2.headers["x-request-id"]) == 12


def test_openai_client_chat_completion(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model="sr-rag",
        messages=[{"role": "system", "content": "ignored"}, {"role": "user", "content": QUESTION}],
    )
    assert resp.model == "sr-rag"
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content.strip()
    assert resp.usage.completion_tokens >= 1 and resp.usage.prompt_tokens > resp.usage.completion_tokens
    extra = resp.model_extra["quco"]
    assert extra["retrievals"] == 1  # SR-RAG retrieves once, with the question
    assert extra["viewer"].startswith("/viewer?id=")
    print(f"\nopenai client -> quco serve: model=sr-rag, answer={resp.choices[0].message.content!r}")


def test_openai_client_streaming_and_models(client: openai.OpenAI) -> None:
    models = [m.id for m in client.models.list()]
    assert models == ["quco", "sr-rag", "wo-rag"]
    chunks = list(
        client.chat.completions.create(
            model="wo-rag", messages=[{"role": "user", "content": QUESTION}], stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_auth_failures(api: Running, client: openai.OpenAI) -> None:
    bad = openai.OpenAI(base_url=f"{api.url}/v1", api_key="wrong-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="invalid bearer token"):
        bad.chat.completions.create(model="quco", messages=[{"role": "user", "content": QUESTION}])
    r = httpx.post(f"{api.url}/v1/answer", json={"question": QUESTION})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "missing bearer token" in r.json()["error"]["message"]
    r = httpx.post(
        f"{api.url}/v1/answer", json={"question": QUESTION}, headers={"Authorization": f"Basic {KEY}"}
    )
    assert r.status_code == 401
    assert httpx.get(f"{api.url}/v1/traces").status_code == 401
    # Health, docs and the viewer page need no key.
    assert httpx.get(f"{api.url}/healthz").json()["status"] == "ok"
    assert "/v1/chat/completions" in httpx.get(f"{api.url}/openapi.json").json()["paths"]
    assert httpx.get(f"{api.url}/docs").status_code == 200
    assert httpx.get(f"{api.url}/viewer").status_code == 200


def test_size_and_length_limits(api: Running, client: openai.OpenAI) -> None:
    big = {"question": "x" * 5000}
    r = httpx.post(f"{api.url}/v1/answer", json=big, headers=auth())
    assert r.status_code == 413 and "over the limit of 4096 bytes" in r.json()["error"]["message"]

    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit is enforced while reading
        yield b'{"question": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}'

    r = httpx.post(
        f"{api.url}/v1/answer", content=chunked(), headers=auth() | {"content-type": "application/json"}
    )
    assert r.status_code == 413
    r = httpx.post(f"{api.url}/v1/answer", json={"question": "Why? " * 100}, headers=auth())
    assert r.status_code == 400 and "the limit is 300" in r.json()["error"]["message"]
    r = httpx.post(f"{api.url}/v1/answer", json={"question": "  "}, headers=auth())
    assert r.status_code == 400
    r = httpx.post(f"{api.url}/v1/answer", json={"question": QUESTION, "method": "nope"}, headers=auth())
    assert r.status_code == 400 and "use one of: quco, sr-rag, wo-rag" in r.json()["error"]["message"]
    r = httpx.post(
        f"{api.url}/v1/answer", json={"question": QUESTION, "options": {"bogus": 1}}, headers=auth()
    )
    assert r.status_code == 422 and "options.bogus" in r.json()["error"]["message"]
    r = httpx.post(f"{api.url}/v1/answer", content=b"{not json", headers=auth())
    assert r.status_code == 422
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": QUESTION}])
    with pytest.raises(openai.BadRequestError, match="no user message"):
        client.chat.completions.create(model="quco", messages=[{"role": "system", "content": "hi"}])


class _HeldPool:
    """The service's pool, but each answer first waits for ``release``: a question is then certainly still
    running when the next request arrives, however busy the machine (the real pipeline answers afterwards)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def get(self, method: str) -> Any:
        pipeline, release = self._pool.get(method), self.release

        class Held:
            def answer(self, question: str) -> Any:
                release.wait(120)
                return pipeline.answer(question)

        return Held()


def test_overload_gets_429_and_timeouts_get_504(service: AnswerService) -> None:
    """One slot, no queue: a second question while the first runs is refused at once; a short timeout 504s."""
    settings = replace(service.settings, concurrency=1, queue=0, timeout_s=60)
    # A service on the already-built pipelines, with its own limits.
    held = _HeldPool(service.pool)
    busy = AnswerService(settings, pool=held)
    running = serve(settings, busy)
    try:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(
                httpx.post,
                f"{running.url}/v1/answer",
                json={"question": QUESTION},
                headers=auth(),
                timeout=300,
            )
            deadline = time.monotonic() + 60
            while busy.load["running"] < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert busy.load["running"] == 1
            second = httpx.post(f"{running.url}/v1/answer", json={"question": QUESTION}, headers=auth())
            assert second.status_code == 429, second.text
            assert second.headers["retry-after"] == "1"
            held.release.set()
            assert first.result().status_code == 200
        held.release.clear()  # the next question is held past its 0.05 s timeout
        r = httpx.post(
            f"{running.url}/v1/answer",
            json={"question": "Who directed Ed Wood?", "options": {"timeout_s": 0.05}},
            headers=auth(),
            timeout=60,
        )
        assert r.status_code == 504 and "no answer within 0.05 s" in r.json()["error"]["message"]
        health = httpx.get(f"{running.url}/healthz").json()
        assert health["status"] == "ok" and health["failed"] >= 1
    finally:
        held.release.set()
        running.stop()


def test_access_log_is_structured_and_has_no_secrets(api: Running, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="quco.serve.access"):
        httpx.get(f"{api.url}/v1/traces?token=should-not-appear", headers=auth())
        httpx.get(f"{api.url}/v1/traces", headers={"Authorization": "Bearer wrong-secret"})
        # The server thread writes its access line after the response went out: wait for it.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            records = [json.loads(r.getMessage()) for r in caplog.records if r.name == "quco.serve.access"]
            if records and records[-1].get("status") == 401:
                break
            time.sleep(0.05)
    assert [(r["path"], r["status"], r["auth"]) for r in records[-2:]] == [
        ("/v1/traces", 200, "ok"),
        ("/v1/traces", 401, "bad"),
    ]
    assert {"request_id", "method", "ms", "client"} <= set(records[-1])
    text = caplog.text
    assert KEY not in text and "wrong-secret" not in text and "should-not-appear" not in text


def test_llm_server_killed_mid_request(api: Running, llm_server: LlamaServer) -> None:
    """The LLM dies while a question is being answered: a clear 502, the service stays up, and it recovers."""
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            httpx.post,
            f"{api.url}/v1/answer",
            json={"question": "Which country is the director of the film Ed Wood from?"},
            headers=auth(),
            timeout=300,
        )
        deadline = time.monotonic() + 30
        while api.service.load["running"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # inside the pipeline, talking to the LLM
        llm_server.kill()
        r = pending.result()
    assert r.status_code == 502, r.text
    message = r.json()["error"]["message"]
    assert message.startswith("the LLM server failed: LLM server at http://127.0.0.1:")
    assert "cannot connect" in message or "failed after" in message
    assert httpx.get(f"{api.url}/healthz").json()["status"] == "ok"
    # Bring the LLM back on the same port: the service answers again without a restart.
    llm_server.start()
    with socket.create_connection(("127.0.0.1", llm_server.port), timeout=5):
        pass
    r = httpx.post(
        f"{api.url}/v1/answer", json={"question": QUESTION, "method": "wo-rag"}, headers=auth(), timeout=300
    )
    assert r.status_code == 200, r.text


# ------------------------------------------------------------------------------------------------------------
# The trace viewer, rendered by headless Chromium.

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--hide-scrollbars",
    "--virtual-time-budget=15000",
]


def chromium(url: str, profile: Path, *extra: str) -> str:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "headless Chromium is needed for the viewer test: apt-get install -y chromium"
    done = subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, url],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_trace_viewer_in_headless_chromium(api: Running, quco_answer: dict, tmp_path: Path) -> None:
    body = quco_answer
    trace = body["trace"]
    url = f"{api.url}{body['viewer']}#token={KEY}"  # the key stays in the fragment: never sent to the server

    dom = chromium(url, tmp_path / "profile", "--dump-dom")
    assert 'data-rendered="yes"' in dom, dom[-1500:]
    assert html.escape(QUESTION, quote=False) in dom
    steps = trace["steps"]
    assert dom.count('class="card step"') == len(steps)
    for step in steps:
        for q in step["queries"]:
            assert f'<li class="query">{html.escape(q, quote=False)}</li>' in dom
        for p in step["retrieved"]:
            assert html.escape(p["title"], quote=False) in dom
        for rec in step["signals"].get("sentences", []):
            text = rec["sentence"] if isinstance(rec["sentence"], str) else rec["text"]
            assert html.escape(text, quote=False) in dom
        for key in set(step["signals"]) - {"sentences", "flagged_sentence"}:  # every signal value is shown
            assert f'<tr class="signal"><td>{key}</td>' in dom
    fired = [s for s in steps if s["decision"] == "retrieve"]
    assert dom.count('class="badge fired"') == len(fired)
    flagged_claims = sum(
        bool(c.get("flagged"))
        for s in steps
        for rec in s["signals"].get("sentences", [])
        for c in rec.get("claims", [])
    )
    assert dom.count('<tr class="flagged signal-row">') == flagged_claims

    shot = tmp_path / "viewer.png"
    chromium(url, tmp_path / "profile2", f"--screenshot={shot}", "--window-size=1280,1800")
    assert shot.stat().st_size > 20_000
    print(
        f"\nviewer screenshot: {shot}\n  shows {len(steps)} steps ({len(fired)} with a fired trigger), "
        f"decisions {[s['decision'] for s in steps]}, answer {body['answer']!r}"
    )

    # The same page with the trace embedded (what a report writes next to itself), opened from a file.
    page = tmp_path / "trace.html"
    page.write_text(viewer_html(trace), encoding="utf-8")
    dom2 = chromium(page.as_uri(), tmp_path / "profile3", "--dump-dom")
    assert 'data-rendered="yes"' in dom2 and dom2.count('class="card step"') == len(steps)


def test_cli_refuses_a_public_interface_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from quco.serve.cli import serve_app

    monkeypatch.delenv("QUCO_API_KEY", raising=False)
    result = CliRunner().invoke(serve_app, ["api", "--host", "0.0.0.0", "--method", "wo-rag"])
    assert result.exit_code == 2
    assert "refusing to listen on 0.0.0.0 without a key; export QUCO_API_KEY" in result.output
