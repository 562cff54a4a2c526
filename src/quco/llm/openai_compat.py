"""A generator on any OpenAI-compatible HTTP server: vLLM, llama.cpp's server, llama-cpp-python's server, OpenAI.

The LLM is where most of the time goes, and it scales out on those engines, not in quco: this backend only
turns the ``Generator`` protocol into HTTP requests, with timeouts, retries with backoff, a limit on requests in
flight, and honest capabilities (token logprobs yes; entropy only approximated from the top-k alternatives;
no attention or hidden states).
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from quco.config import GeneratorConfig
from quco.errors import CapabilityError, ConfigError, InputError, QucoError
from quco.llm.base import Capability, Generation, GeneratorBase, Request, cut_pieces, find_stop
from quco.retry import RetryPolicy, send_with_retries

logger = logging.getLogger(__name__)

# Statuses worth another try: rate limits, timeouts and server-side failures. Generation requests are
# stateless, so repeating one is safe.
RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_BACKOFF_BASE_S = 0.5
_BACKOFF_MAX_S = 8.0
_TOKEN_CACHE_SIZE = 8192
# Without a tokenize endpoint (OpenAI itself), token counts are estimated at this many characters per token.
_CHARS_PER_TOKEN = 4.0


class LLMServerError(QucoError):
    """The LLM server refused a request, failed, or could not be reached (after the configured retries)."""


class LLMRequestRefused(LLMServerError):
    """The server answered with a client error (4xx other than 408/425/429): retrying would not help."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Tokenizer:
    """How this server tokenizes, found by probing its endpoints once."""

    flavour: str  # "llama-cpp-python" | "llama-server" | "vllm" | "none"
    path: str = ""
    special_prefix: int = 0  # tokens the endpoint always adds (BOS) that count_tokens must not count


@dataclass
class _Choice:
    text: str
    finish: str
    tokens: list[str] | None = None
    logprobs: list[float] | None = None
    top: list[dict[str, float]] | None = None
    usage_tokens: int | None = None  # completion tokens the server reported (single-choice answers)
    prompt_tokens: int | None = None  # prompt tokens the server reported (after its chat template)


@dataclass
class _LRU:
    """A small thread-safe LRU cache for token ids (prompts repeat their exemplar prefixes constantly)."""

    size: int
    data: OrderedDict[str, list[int]] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, key: str) -> list[int] | None:
        with self.lock:
            value = self.data.get(key)
            if value is not None:
                self.data.move_to_end(key)
            return value

    def put(self, key: str, value: list[int]) -> None:
        with self.lock:
            self.data[key] = value
            self.data.move_to_end(key)
            while len(self.data) > self.size:
                self.data.popitem(last=False)


def approx_entropy(top: dict[str, float]) -> float:
    """Entropy (nats) from the top-k logprobs, the missing mass counted as one more outcome.

    This is a lower bound of the full-vocabulary entropy: the tail is lumped together instead of spread out.
    """
    probs = [math.exp(lp) for lp in top.values() if lp is not None and lp > -math.inf]
    h = -sum(p * math.log(p) for p in probs if p > 0)
    rest = 1.0 - sum(probs)
    if rest > 1e-9:
        h -= rest * math.log(rest)
    return max(0.0, h)


def _pieces_from_bytes(chunks: Sequence[bytes]) -> list[str]:
    """Decoded pieces that concatenate to the decoded text, when a character spans several tokens."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return (
        [decoder.decode(b) for b in chunks[:-1]] + [decoder.decode(chunks[-1], final=True)] if chunks else []
    )


def _first_line(text: str, limit: int = 200) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class OpenAICompatGenerator(GeneratorBase):
    """``Generator`` over an OpenAI-compatible ``/v1/completions`` (default) or ``/v1/chat/completions`` API.

    Thread-safe: many pipelines may share one instance; ``concurrency`` bounds the requests in flight.
    """

    name = "openai"
    parallelism = "threads"  # the server takes concurrent requests
    analyses: frozenset[str] = frozenset()  # an HTTP API exposes no attention or hidden states, nor scoring

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        chat: bool = False,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        concurrency: int = 4,
        top_logprobs: int = 5,
        max_context_tokens: int = 4096,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"generator.base_url '{base_url}' is not an http(s) URL; use e.g. http://127.0.0.1:8080/v1"
            )
        if concurrency < 1 or max_retries < 0 or timeout_s <= 0 or top_logprobs < 0:
            raise ConfigError(
                "generator.concurrency must be >= 1, generator.max_retries >= 0, generator.timeout_s > 0 and "
                "generator.top_logprobs >= 0"
            )
        self.base_url = base_url.rstrip("/")
        self.root_url = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        self.model = model
        self.chat = chat
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.concurrency = concurrency
        self.top_logprobs = top_logprobs
        self.max_context_tokens = max_context_tokens
        caps = {Capability.TEXT, Capability.LOGPROBS, Capability.SAMPLING}
        if top_logprobs > 0:
            caps.add(Capability.ENTROPY_APPROX)
        self.capabilities = frozenset(caps)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
            headers=headers,
            limits=httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency + 2),
            transport=transport,
        )
        self._slots = threading.BoundedSemaphore(concurrency)
        self._tokenizer: _Tokenizer | None = None
        self._tokenizer_lock = threading.Lock()
        self._token_cache = _LRU(_TOKEN_CACHE_SIZE)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._warned_estimate = False

    @classmethod
    def from_config(cls, config: GeneratorConfig) -> OpenAICompatGenerator:
        import os

        if not config.base_url:
            raise ConfigError(
                "the 'openai' generator backend needs generator.base_url, e.g. http://127.0.0.1:8080/v1"
            )
        api_key = None
        if config.api_key_env:
            api_key = os.environ.get(config.api_key_env)
            if not api_key:
                raise ConfigError(
                    f"generator.api_key_env names the environment variable {config.api_key_env}, which is not "
                    "set; export it or remove api_key_env for a server without a key"
                )
        return cls(
            config.base_url,
            config.model,
            api_key=api_key,
            chat=config.chat,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
            concurrency=config.concurrency,
            top_logprobs=config.top_logprobs,
            max_context_tokens=config.max_context_tokens,
        )

    # ----------------------------------------------------------------------------------------------------------
    # HTTP with retries.

    def _post(self, url: str, body: dict[str, Any], *, retries: int | None = None) -> dict[str, Any]:
        """POST JSON, retrying connection errors, timeouts, 429 and 5xx with exponential backoff."""
        policy = RetryPolicy(
            retries=self.max_retries if retries is None else retries,
            backoff_s=_BACKOFF_BASE_S,
            max_backoff_s=_BACKOFF_MAX_S,
        )

        def send() -> httpx.Response:
            with self._slots:
                return self._client.post(url, json=body)

        def judge(response: httpx.Response | None, error: Exception | None) -> str | None:
            if isinstance(error, httpx.TimeoutException):
                return f"no answer within {self.timeout_s:g} s"
            if error is not None:
                return f"cannot connect ({type(error).__name__}: {_first_line(str(error), 120)})"
            assert response is not None
            if response.status_code in RETRY_STATUS:
                return f"HTTP {response.status_code}: {_first_line(_error_message(response))}"
            return None

        last = send_with_retries(send, policy, judge, f"LLM server at {url}")
        response = last.response
        if last.problem is not None or response is None:
            raise LLMServerError(
                f"LLM server at {url} failed after {last.attempts} attempt(s): {last.problem}; check that it is "
                "running, or raise generator.timeout_s / generator.max_retries"
            )
        if response.status_code >= 400:
            raise LLMRequestRefused(
                f"LLM server at {url} refused the request (HTTP {response.status_code}: "
                f"{_first_line(_error_message(response))})",
                response.status_code,
            )
        try:
            return response.json()
        except ValueError as exc:
            raise LLMServerError(f"LLM server at {url} answered with invalid JSON: {exc}") from exc

    def close(self) -> None:
        self.closed = True
        self._client.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> OpenAICompatGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------------------------------
    # Tokenization through the server (exact), or an estimate when the server has no tokenize endpoint.

    def _probe_tokenizer(self) -> _Tokenizer:
        """Find the server's tokenize endpoint: llama-cpp-python, llama.cpp's llama-server, vLLM, or none."""
        with self._tokenizer_lock:
            if self._tokenizer is not None:
                return self._tokenizer
            found = _Tokenizer("none")
            try:
                data = self._post(
                    f"{self.root_url}/extras/tokenize", {"input": "", "model": self.model}, retries=1
                )
                found = _Tokenizer("llama-cpp-python", "/extras/tokenize", len(data.get("tokens", [])))
            except LLMRequestRefused:
                try:
                    data = self._post(
                        f"{self.root_url}/tokenize",
                        {"content": "a", "prompt": "a", "model": self.model, **_NO_SPECIALS},
                        retries=1,
                    )
                    flavour = "vllm" if "count" in data or "max_model_len" in data else "llama-server"
                    found = _Tokenizer(flavour, "/tokenize")
                except LLMRequestRefused:
                    logger.warning(
                        "LLM server at %s has no tokenize endpoint; token counts are estimated (%g chars/token)",
                        self.root_url,
                        _CHARS_PER_TOKEN,
                    )
            logger.info("LLM server at %s: tokenizer %s", self.root_url, found.flavour)
            self._tokenizer = found
            return found

    @property
    def server_flavour(self) -> str:
        return self._probe_tokenizer().flavour

    def tokenize(self, text: str) -> list[int] | None:
        """Token ids of ``text`` without special tokens, from the server; None when it cannot tokenize."""
        tok = self._probe_tokenizer()
        if tok.flavour == "none":
            return None
        cached = self._token_cache.get(text)
        if cached is not None:
            return cached
        url = f"{self.root_url}{tok.path}"
        if tok.flavour == "llama-cpp-python":
            data = self._post(url, {"input": text, "model": self.model})
        else:
            data = self._post(url, {"content": text, "prompt": text, "model": self.model, **_NO_SPECIALS})
        raw = data.get("tokens", [])
        ids = [int(t["id"]) if isinstance(t, dict) else int(t) for t in raw][tok.special_prefix :]
        self._token_cache.put(text, ids)
        return ids

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` contributes to a prompt (no BOS); estimated when the server cannot tokenize."""
        if not text:
            return 0
        ids = self.tokenize(text)
        if ids is not None:
            return len(ids)
        return max(1, math.ceil(len(text) / _CHARS_PER_TOKEN))

    def _special_tokens(self) -> int:
        return max(1, self._probe_tokenizer().special_prefix)

    def _fit_prompt(self, prompt: str, max_new_tokens: int) -> tuple[str, int, bool]:
        """Left-truncate the prompt to the context left after ``max_new_tokens``: (prompt, its tokens, cut)."""
        budget = self.max_context_tokens - max_new_tokens - self._special_tokens()
        if budget < 1:
            raise InputError(
                f"max_new_tokens={max_new_tokens} leaves no room for a prompt in max_context_tokens="
                f"{self.max_context_tokens}; lower max_new_tokens or raise generator.max_context_tokens"
            )
        n = self.count_tokens(prompt)
        if n <= budget:
            return prompt, n, False
        keep = prompt
        while n > budget and keep:
            keep = keep[max(1, int(len(keep) * (1 - budget / n)) + 1) :]
            n = self.count_tokens(keep)
        logger.warning("Prompt left-truncated to its last %d tokens", n)
        return keep, n, True

    # ----------------------------------------------------------------------------------------------------------
    # Generation.

    def _sampling_body(
        self, temperature: float, top_p: float, top_k: int, seed: int | None, flavour: str
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"temperature": temperature, "top_p": top_p}
        if seed is not None:
            body["seed"] = seed
        if top_k > 0:
            body["top_k"] = top_k
        if flavour in ("llama-cpp-python", "llama-server"):
            # llama.cpp servers default to top_k=40, min_p=0.05 and (llama-cpp-python) repeat_penalty=1.1;
            # OpenAI semantics have none of these, and greedy decoding must equal the in-process argmax.
            body.setdefault("top_k", 0)
            body.update({"min_p": 0.0, "repeat_penalty": 1.0})
        return body

    def _request(
        self,
        prompt: str,
        *,
        max_new_tokens: int,
        stop: list[str],
        n: int,
        sampling: dict[str, Any],
        logprobs: bool,
    ) -> list[_Choice]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_new_tokens, "n": n, **sampling}
        if stop:
            body["stop"] = stop[:4]  # OpenAI accepts at most four; the rest are cut here
        if self.chat:
            body["messages"] = [{"role": "user", "content": prompt}]
            if logprobs:
                body["logprobs"] = True
                body["top_logprobs"] = self.top_logprobs
            data = self._post(f"{self.base_url}/chat/completions", body)
        else:
            body["prompt"] = prompt
            if logprobs:
                body["logprobs"] = self.top_logprobs
            data = self._post(f"{self.base_url}/completions", body)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise LLMServerError(
                f"LLM server at {self.base_url} returned no choices: {_first_line(str(data))}"
            )
        usage = data.get("usage") or {}
        out = []
        for choice in sorted(choices, key=lambda c: c.get("index", 0)):
            parsed = _parse_chat_choice(choice) if self.chat else _parse_completion_choice(choice)
            if len(choices) == 1 and isinstance(usage.get("completion_tokens"), int):
                parsed.usage_tokens = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                parsed.prompt_tokens = usage["prompt_tokens"]
            out.append(parsed)
        if logprobs and any(c.logprobs is None for c in out):
            raise CapabilityError(
                f"the LLM server at {self.base_url} returned no logprobs; start it with logprobs enabled "
                "(llama-cpp-python: --logits_all true)"
            )
        return out

    def _decode(self, request: Request) -> list[Generation]:
        """Greedy or sampled continuations of a raw text prompt (sent as one user message in chat mode).

        ``entropy=True`` returns entropies approximated from the top-k logprobs (``ENTROPY_APPROX``). A
        ``stop_when`` predicate cannot run on the server: generation ends at the other limits.
        """
        r = request
        if r.entropy and self.top_logprobs == 0:
            raise CapabilityError(
                "entropy needs top-k logprobs, but generator.top_logprobs is 0; set it to 5 or more"
            )
        flavour = self.server_flavour
        fitted, prompt_tokens, truncated = self._fit_prompt(r.prompt, r.max_new_tokens)
        prompt_tokens += self._special_tokens()
        want = r.samples
        sampling = self._sampling_body(r.temperature, r.top_p, r.top_k, r.seed, flavour)
        want_scores = r.logprobs or r.entropy
        choices = self._request(
            fitted,
            max_new_tokens=r.max_new_tokens,
            stop=r.stops,
            n=want,
            sampling=sampling,
            logprobs=want_scores,
        )[:want]
        if len(choices) < want:  # servers that ignore n (llama-cpp-python): one request per missing sample
            extra = want - len(choices)

            def one(k: int) -> _Choice:
                body = dict(sampling)
                if r.seed is not None:
                    body["seed"] = r.seed + len(choices) + k
                return self._request(
                    fitted,
                    max_new_tokens=r.max_new_tokens,
                    stop=r.stops,
                    n=1,
                    sampling=body,
                    logprobs=want_scores,
                )[0]

            choices += list(self._executor().map(one, range(extra)))
        return [
            self._to_generation(c, r.stops, prompt_tokens, truncated, r.logprobs, r.entropy) for c in choices
        ]

    async def agenerate(self, prompt: str, **options: Any) -> list[Generation]:
        """``generate`` for asyncio callers; runs in a worker thread so that many questions overlap."""
        return await asyncio.to_thread(self.generate, prompt, **options)

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="quco-openai")
            return self._pool

    def _to_generation(
        self, c: _Choice, stops: list[str], prompt_tokens: int, truncated: bool, logprobs: bool, entropy: bool
    ) -> Generation:
        text, finish = c.text, _FINISH.get(c.finish, "stop")
        cut = find_stop(text, stops)
        if cut >= 0:  # a stop string the server was not told about (it takes four at most)
            text, finish = text[:cut], "stop"
        tokens = c.tokens
        if tokens is not None and len("".join(tokens)) >= len(text):
            tokens = cut_pieces(tokens, len(text))
            n_kept = len(tokens)
        else:
            n_kept = len(tokens) if tokens is not None else 0
        ids = self.tokenize(text) if text else []
        if ids is None:  # no tokenizer: the count is still right, the ids are unknown (-1)
            count = n_kept if tokens is not None else (c.usage_tokens or self.count_tokens(text))
            ids = [-1] * count
        lps = (c.logprobs or [])[:n_kept] if logprobs else None
        top = (c.top or [])[:n_kept] if logprobs or entropy else None
        ents = [approx_entropy(t) for t in (c.top or [])[:n_kept]] if entropy else None
        return Generation(
            text=text,
            token_ids=ids,
            tokens=tokens if tokens is not None else [],
            logprobs=lps,
            entropies=ents,
            top_logprobs=top,
            finish_reason=finish,
            prompt_tokens=c.prompt_tokens if c.prompt_tokens is not None else prompt_tokens,
            prompt_truncated=truncated,
        )


_NO_SPECIALS = {"add_special": False, "add_special_tokens": False, "with_pieces": False}
_FINISH = {"stop": "stop", "length": "length", "eos": "eos", "eos_token": "eos", "stop_sequence": "stop"}


def _error_message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text or response.reason_phrase
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data))
        if isinstance(err, dict):
            return str(err.get("message", err))
        return str(err)
    return str(data)


def _parse_completion_choice(choice: dict[str, Any]) -> _Choice:
    out = _Choice(text=choice.get("text") or "", finish=choice.get("finish_reason") or "length")
    lp = choice.get("logprobs")
    if isinstance(lp, dict) and lp.get("tokens") is not None:  # the legacy layout (OpenAI, vLLM)
        out.tokens = [str(t) for t in lp["tokens"]]
        out.logprobs = [float(x) if x is not None else 0.0 for x in lp.get("token_logprobs") or []]
        out.top = [
            {str(k): float(v) for k, v in (t or {}).items()} for t in (lp.get("top_logprobs") or [])
        ] or [{} for _ in out.tokens]
    elif isinstance(lp, dict) and isinstance(lp.get("content"), list):  # llama.cpp's llama-server
        _read_content_logprobs(out, lp["content"])
    return out


def _parse_chat_choice(choice: dict[str, Any]) -> _Choice:
    message = choice.get("message") or {}
    out = _Choice(text=message.get("content") or "", finish=choice.get("finish_reason") or "length")
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if isinstance(content, list):
        _read_content_logprobs(out, content)
    return out


def _read_content_logprobs(out: _Choice, content: list[dict[str, Any]]) -> None:
    """The per-token list layout of chat logprobs (``token``, ``bytes``, ``logprob``, ``top_logprobs``)."""
    if all(isinstance(e.get("bytes"), list) for e in content) and content:
        out.tokens = _pieces_from_bytes([bytes(e["bytes"]) for e in content])
    else:
        out.tokens = [str(e.get("token", "")) for e in content]
    out.logprobs = [float(e.get("logprob", 0.0)) for e in content]
    out.top = [{str(t["token"]): float(t["logprob"]) for t in e.get("top_logprobs") or []} for e in content]


__all__ = ["RETRY_STATUS", "LLMRequestRefused", "LLMServerError", "OpenAICompatGenerator", "approx_entropy"]
