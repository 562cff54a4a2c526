"""The OpenAI-compatible backend against a real llama.cpp server (llama-cpp-python[server]) on loopback.

Faults (503, 429, slow answers, a dead port) come from a small real HTTP proxy in front of that server, so
retries, timeouts and the concurrency limit are exercised over real sockets.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from quco.config import GeneratorConfig
from quco.errors import CapabilityError, ConfigError, InputError
from quco.llm import Capability, build_generator, require
from quco.llm.models import default_gguf_path
from quco.llm.openai_compat import LLMServerError, OpenAICompatGenerator, approx_entropy
from support.llama_server import LlamaServer, ServedModel, _free_port

pytestmark = pytest.mark.model

PROMPT = "The Eiffel Tower is located in"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One llama.cpp server with the default GGUF twice: fast (no logprobs) and with logprobs (logits_all)."""
    path = str(default_gguf_path())
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    srv = LlamaServer(
        [
            ServedModel("gemma3-270m", path, n_ctx=2048),
            ServedModel("gemma3-270m-logprobs", path, n_ctx=512, logits_all=True),
        ],
        log_path=log,
    )
    with srv:
        yield srv


@pytest.fixture(scope="module")
def gen(server: LlamaServer) -> Iterator[OpenAICompatGenerator]:
    with OpenAICompatGenerator(server.base_url, "gemma3-270m", max_context_tokens=2048) as g:
        yield g


@pytest.fixture(scope="module")
def gen_lp(server: LlamaServer) -> Iterator[OpenAICompatGenerator]:
    with OpenAICompatGenerator(server.base_url, "gemma3-270m-logprobs", max_context_tokens=512) as g:
        yield g


# ------------------------------------------------------------------------------------------------------------
# A fault-injecting proxy in front of the real server.


class FaultProxy:
    """Forwards to ``upstream``; the first ``fail`` generation requests get ``status`` instead; each request is
    delayed by ``delay_s``; counts requests and the most that were in flight at once."""

    def __init__(
        self,
        upstream_root: str,
        *,
        fail: int = 0,
        status: int = 503,
        delay_s: float = 0.0,
        delay_all: bool = False,
        gather: int = 0,
    ) -> None:
        self.upstream = upstream_root
        self.fail, self.status, self.delay_s, self.delay_all = fail, status, delay_s, delay_all
        self.generation_requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        # With ``gather``, the first generation requests wait (up to 30 s) until that many requests are in flight
        # at once: a client that overlaps its requests is then seen to, however slowly the threads are scheduled.
        # Other requests (a model-info lookup before the first generation) pass at once.
        self.gather = gather
        self.lock = threading.Condition()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                generation = self.path.endswith("completions")
                with proxy.lock:
                    proxy.in_flight += 1
                    proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
                    if generation:
                        proxy.generation_requests += 1
                    failing = generation and proxy.generation_requests <= proxy.fail
                    proxy.lock.notify_all()
                    if generation and proxy.max_in_flight < proxy.gather:
                        proxy.lock.wait_for(lambda: proxy.max_in_flight >= proxy.gather, timeout=30)
                try:
                    if proxy.delay_s and (generation or proxy.delay_all):
                        time.sleep(proxy.delay_s)
                    headers = {"Content-Type": "application/json"}
                    if failing:
                        status, payload = proxy.status, b'{"error": {"message": "injected fault"}}'
                        if proxy.status == 429:
                            headers["Retry-After"] = "0"
                    else:
                        upstream = httpx.post(
                            proxy.upstream + self.path, content=body, headers=headers, timeout=300
                        )
                        status, payload = upstream.status_code, upstream.content
                finally:
                    # Counted out before the answer is sent: once the client has it, it may send the next one.
                    with proxy.lock:
                        proxy.in_flight -= 1
                try:
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FaultProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _root(server: LlamaServer) -> str:
    return server.base_url.removesuffix("/v1")


# ------------------------------------------------------------------------------------------------------------
# Generation against the real server.


def test_greedy_completion_tokens_and_counts(gen: OpenAICompatGenerator) -> None:
    assert gen.server_flavour == "llama-cpp-python"
    out = gen.generate(PROMPT, max_new_tokens=8)
    assert len(out) == 1
    g = out[0]
    assert g.text.startswith(" Paris"), g.text
    assert g.finish_reason == "length"
    # Token ids come from the server's tokenizer: 8 tokens were generated, re-tokenizing the text gives 8.
    assert len(g.token_ids) == 8 and all(i >= 0 for i in g.token_ids)
    assert g.prompt_tokens == gen.count_tokens(PROMPT) + 1  # + BOS
    assert 5 <= gen.count_tokens(PROMPT) <= 10
    assert g.logprobs is None and g.entropies is None


def test_stop_strings_cut_the_text(gen: OpenAICompatGenerator) -> None:
    g = gen.generate(PROMPT, max_new_tokens=24, stop=[","])[0]
    assert g.text == " Paris"
    assert g.finish_reason == "stop"
    # More stop strings than OpenAI's four are still honoured (cut on our side).
    g2 = gen.generate(PROMPT, max_new_tokens=24, stop=["zz1", "zz2", "zz3", "zz4", " France"])[0]
    assert "France" not in g2.text and g2.finish_reason == "stop"


def test_n_samples_are_seeded_and_distinct(gen: OpenAICompatGenerator) -> None:
    """llama-cpp-python's server ignores n; the backend asks once per missing sample, each with its own seed."""
    kw = {"max_new_tokens": 4, "temperature": 1.0, "n": 3, "seed": 7}
    first = gen.generate(PROMPT, **kw)
    again = gen.generate(PROMPT, **kw)
    assert len(first) == 3
    assert [g.text for g in first] == [g.text for g in again]
    assert len({g.text for g in first}) > 1
    # Greedy with n > 1: one request, identical copies.
    greedy = gen.generate(PROMPT, max_new_tokens=4, n=2)
    assert len(greedy) == 2 and greedy[0].text == greedy[1].text


def test_prompt_left_truncated_to_the_context(server: LlamaServer) -> None:
    with OpenAICompatGenerator(server.base_url, "gemma3-270m", max_context_tokens=48) as g:
        long_prompt = "word " * 200 + PROMPT
        out = g.generate(long_prompt, max_new_tokens=8)[0]
        assert out.prompt_truncated
        assert out.prompt_tokens <= 48 - 8
        assert out.text.strip()
        with pytest.raises(InputError, match="max_new_tokens=60 leaves no room"):
            g.generate(PROMPT, max_new_tokens=60)


def test_capabilities_are_honest(gen: OpenAICompatGenerator) -> None:
    assert {
        Capability.TEXT,
        Capability.LOGPROBS,
        Capability.ENTROPY_APPROX,
        Capability.SAMPLING,
    } <= gen.capabilities
    assert not {Capability.ENTROPY, Capability.ATTENTION, Capability.HIDDEN_STATES} & gen.capabilities
    with pytest.raises(CapabilityError, match="'attention'.*'hf'"):
        require(gen, [Capability.ATTENTION], "method 'dragin'")
    # attention and hidden states: an in-process backend of either kind
    with pytest.raises(CapabilityError, match="attention.*use the 'hf' or 'llamacpp' backend$"):
        gen.analyze(PROMPT, attention_layer=-1)
    with pytest.raises(CapabilityError, match="'hidden_states'.*'hf' \\(transformers\\) or 'llamacpp'"):
        require(gen, [Capability.HIDDEN_STATES], "method 'seakr'")
    with pytest.raises(CapabilityError, match="hidden states.*'hf' or 'llamacpp' backend$"):
        gen.analyze(PROMPT, hidden_layers=[1])
    no_top = OpenAICompatGenerator(gen.base_url, "gemma3-270m", top_logprobs=0)
    assert Capability.ENTROPY_APPROX not in no_top.capabilities
    with pytest.raises(CapabilityError, match="top_logprobs"):
        no_top.generate(PROMPT, max_new_tokens=2, entropy=True)


def test_logprobs_refused_by_a_server_without_them(server: LlamaServer) -> None:
    """The fast alias runs without logits_all; asking it for logprobs must fail with a clear message."""
    with (
        OpenAICompatGenerator(server.base_url, "gemma3-270m", max_retries=0) as g,
        pytest.raises(LLMServerError, match="HTTP 500: logprobs is not supported"),
    ):
        g.generate(PROMPT, max_new_tokens=2, logprobs=True)


def test_build_generator_from_config(server: LlamaServer, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = GeneratorConfig(
        backend="openai", base_url=server.base_url, model="gemma3-270m", max_context_tokens=2048
    )
    g = build_generator(cfg)
    assert isinstance(g, OpenAICompatGenerator)
    assert g.generate(PROMPT, max_new_tokens=2)[0].text.startswith(" Paris")
    with pytest.raises(ConfigError, match="needs generator.base_url"):
        build_generator(GeneratorConfig(backend="openai"))
    monkeypatch.delenv("QUCO_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match="QUCO_TEST_KEY, which is not set"):
        build_generator(cfg.model_copy(update={"api_key_env": "QUCO_TEST_KEY"}))
    with pytest.raises(ConfigError, match="not an http"):
        OpenAICompatGenerator("127.0.0.1:8080", "m")


# ------------------------------------------------------------------------------------------------------------
# Faults: retries with backoff, give-up messages, timeouts, dead servers, the concurrency limit.


@pytest.mark.parametrize("status", [503, 429])
def test_retries_transient_failures_then_succeeds(server: LlamaServer, status: int) -> None:
    with FaultProxy(_root(server), fail=2, status=status) as proxy:
        with OpenAICompatGenerator(proxy.base_url, "gemma3-270m", max_retries=3) as g:
            out = g.generate(PROMPT, max_new_tokens=3)[0]
        assert out.text.startswith(" Paris")
        assert proxy.generation_requests == 3


def test_gives_up_after_max_retries_with_a_clear_error(server: LlamaServer) -> None:
    with FaultProxy(_root(server), fail=100, status=502) as proxy:
        with OpenAICompatGenerator(proxy.base_url, "gemma3-270m", max_retries=1) as g:
            start = time.perf_counter()
            with pytest.raises(
                LLMServerError, match=r"failed after 2 attempt\(s\): HTTP 502: injected fault"
            ):
                g.generate(PROMPT, max_new_tokens=3)
            # no waiting for timeouts: far below one 120 s request timeout (a loose bound for a busy machine)
            assert time.perf_counter() - start < 60
        assert proxy.generation_requests == 2


def test_timeout_is_reported(server: LlamaServer) -> None:
    with (
        FaultProxy(_root(server), delay_s=3.0, delay_all=True) as proxy,
        OpenAICompatGenerator(proxy.base_url, "gemma3-270m", timeout_s=1.0, max_retries=0) as g,
        pytest.raises(LLMServerError, match=r"no answer within 1 s"),
    ):
        g.generate(PROMPT, max_new_tokens=3)


def test_dead_server_is_a_clear_error() -> None:
    url = f"http://127.0.0.1:{_free_port('127.0.0.1')}/v1"
    with (
        OpenAICompatGenerator(url, "gemma3-270m", max_retries=1) as g,
        pytest.raises(LLMServerError, match="cannot connect"),
    ):
        g.generate(PROMPT, max_new_tokens=3)


def test_concurrency_limit_bounds_requests_in_flight(server: LlamaServer) -> None:
    with (
        FaultProxy(_root(server), delay_s=0.05, gather=2) as proxy,
        OpenAICompatGenerator(proxy.base_url, "gemma3-270m", concurrency=2) as g,
    ):

        async def many() -> list:
            return await asyncio.gather(*(g.agenerate(PROMPT, max_new_tokens=2) for _ in range(6)))

        outs = asyncio.run(many())
    assert all(o[0].text.startswith(" Paris") for o in outs)
    assert proxy.generation_requests == 6
    assert proxy.max_in_flight == 2  # overlapping (not serial), and never more than the limit


def test_approx_entropy_is_a_lower_bound() -> None:
    full = [0.5, 0.2, 0.1] + [0.2 / 20] * 20
    exact = -sum(p * math.log(p) for p in full)
    top = {str(i): math.log(p) for i, p in enumerate(full[:3])}
    assert approx_entropy(top) <= exact
    assert approx_entropy({"a": 0.0}) == 0.0


# Logprob tests last: the server then swaps to the logits_all model once.


def test_logprobs_with_top_k_and_approximate_entropy(gen_lp: OpenAICompatGenerator) -> None:
    g = gen_lp.generate(PROMPT, max_new_tokens=6, logprobs=True, entropy=True)[0]
    assert g.tokens[0] == " Paris"
    assert "".join(g.tokens) == g.text
    assert len(g.logprobs) == len(g.tokens) == len(g.entropies) == len(g.top_logprobs) == len(g.token_ids)
    # The published figure for this model and prompt (stack.md §8): ' Paris' -0.738, ' the' -0.960.
    assert g.logprobs[0] == pytest.approx(-0.738, abs=0.02)
    top0 = g.top_logprobs[0]
    assert len(top0) <= 5 and top0[" Paris"] == pytest.approx(g.logprobs[0])
    assert top0[" the"] == pytest.approx(-0.960, abs=0.02)
    assert g.entropies[0] == pytest.approx(approx_entropy(top0))
    assert all(e >= 0 for e in g.entropies)
    assert all(lp <= 0 for lp in g.logprobs)


def test_chat_endpoint_with_logprobs(server: LlamaServer) -> None:
    with OpenAICompatGenerator(
        server.base_url, "gemma3-270m-logprobs", chat=True, max_context_tokens=512
    ) as g:
        out = g.generate(PROMPT, max_new_tokens=6, logprobs=True)[0]
    assert out.text.startswith("Paris")  # the base model under llama-cpp-python's fallback chat format
    assert out.prompt_tokens > g.count_tokens(PROMPT) + 1  # the server's count, chat template included
    assert "".join(out.tokens) == out.text
    assert len(out.logprobs) == len(out.tokens) and all(lp <= 0 for lp in out.logprobs)


def test_completion_logprobs_in_llama_server_layout() -> None:
    """llama.cpp's llama-server answers /v1/completions with the per-token list layout of chat logprobs
    (captured from llama-server 0.5.0 serving the default GGUF, trimmed to two tokens)."""
    from quco.llm.openai_compat import _parse_completion_choice

    choice = {
        "text": " the capital",
        "index": 0,
        "finish_reason": "length",
        "logprobs": {
            "content": [
                {
                    "id": 506, "token": " the", "bytes": [32, 116, 104, 101], "logprob": -1.5936477184295654,
                    "top_logprobs": [
                        {"id": 506, "token": " the", "bytes": [32, 116, 104, 101], "logprob": -1.5936477184295654},
                        {"id": 496, "token": " a", "bytes": [32, 97], "logprob": -2.2898948192596436},
                    ],
                },
                {
                    "id": 5279, "token": " capital", "bytes": [32, 99, 97, 112, 105, 116, 97, 108],
                    "logprob": -0.6523138880729675,
                    "top_logprobs": [
                        {"id": 5279, "token": " capital", "bytes": [32, 99, 97, 112, 105, 116, 97, 108],
                         "logprob": -0.6523138880729675},
                    ],
                },
            ]
        },
    }  # fmt: skip
    out = _parse_completion_choice(choice)
    assert out.tokens == [" the", " capital"] and "".join(out.tokens) == choice["text"]
    assert out.logprobs == [-1.5936477184295654, -0.6523138880729675]
    assert out.top == [
        {" the": -1.5936477184295654, " a": -2.2898948192596436},
        {" capital": -0.6523138880729675},
    ]
    legacy = {
        "text": " x",
        "logprobs": {"tokens": [" x"], "token_logprobs": [-0.5], "top_logprobs": [{" x": -0.5}]},
    }
    assert _parse_completion_choice(legacy).logprobs == [-0.5]
