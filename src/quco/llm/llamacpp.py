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
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from quco.config import GeneratorConfig
from quco.errors import ConfigError, QucoError
from quco.llm.base import (
    Analysis,
    AnalysisAsk,
    Capability,
    Generation,
    GeneratorBase,
    Request,
    Sample,
    prompt_budget,
    shared_chars,
    shared_levels,
)
from quco.llm.batching import (
    MIN_SHARED_TOKENS,
    SharedPrefixTokens,
    batch_ends,
    common_prefix,
    keep_recent,
    reusable,
)
from quco.llm.llamacpp_analysis import AnalysisReader, block_of
from quco.llm.llamacpp_backends import load_cpu_backends
from quco.llm.llamacpp_batch import SampleBatch
from quco.llm.llamacpp_state import restore_sequence, save_sequence
from quco.llm.models import default_gguf_path, named_gguf
from quco.machine import usable_cores

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "gemma3-270m"
# Prompt tokens per batch. On CPU a batch of 1024 costs a third less per token than 256 and a tenth less than
# 512 (measured on the evaluation model, docs/evaluation_model.md); most prompts fit in two batches.
BATCH_TOKENS = 1024


class LlamaCppError(QucoError):
    """llama-cpp-python is missing or unusable, or the GGUF model cannot be loaded."""


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


class _Sequence:
    """One continuation while it is decoded: its tokens, pieces and scores, and whether it has ended (at EOS, a
    stop string, which ``generate`` cuts later, ``stop_when`` or the token limit)."""

    def __init__(self, gen: LlamaCppGenerator, r: Request) -> None:
        self._gen, self._r = gen, r
        self.capture = _Capture() if r.logprobs or r.entropy else None
        self.out = Sample()
        self._text = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token: int) -> bool:
        """Take the token drawn next (EOS is not kept); True once the sequence has ended."""
        gen, r, out = self._gen, self._r, self.out
        if gen._llama_cpp.llama_vocab_is_eog(gen.llama._model.vocab, token):
            out.finish = "eos"
            return True
        piece = self._decoder.decode(gen.llama.detokenize([token]))
        out.ids.append(token)
        out.pieces.append(piece)
        self._text += piece
        capture = self.capture
        if capture is not None and capture.last_logp is not None:
            out.logprobs.append(float(capture.last_logp[token]))
            out.entropies.append(capture.last_entropy)
            if r.logprobs and gen.top_logprobs:
                out.top.append(capture.top(gen.top_logprobs, gen._piece))
        if (r.stops and any(s in self._text for s in r.stops)) or (
            r.stop_when is not None and r.stop_when(self._text)
        ):
            out.finish = "stop"
            return True
        return len(out.ids) >= r.max_new_tokens

    def draw(self, sampler: Any, context: Any, row: int, logits: np.ndarray | None) -> bool:
        """Draw the next token with ``sampler`` from ``context``'s logits of ``row`` (``logits``: the same row, for
        the scores asked for) and take it; True once the sequence has ended."""
        if self.capture is not None and logits is not None:
            self.capture(None, logits)  # type: ignore[arg-type]
        return self.add(sampler.sample(context, row))

    def done(self) -> Sample:
        tail = self._decoder.decode(b"", final=True)
        if tail and self.out.pieces:
            self.out.pieces[-1] += tail
        return self.out


class LlamaCppGenerator(GeneratorBase):
    """A GGUF model in this process through llama-cpp-python: text, logprobs, exact entropy, sampling, and the
    attention and hidden states of a forward pass."""

    name = "llamacpp"
    parallelism = "processes"  # llama.cpp decodes one request at a time per model
    capabilities = frozenset(
        {
            Capability.TEXT,
            Capability.LOGPROBS,
            Capability.ENTROPY,
            Capability.SAMPLING,
            Capability.HIDDEN_STATES,
            Capability.ATTENTION,
        }
    )
    _copy_changes = {"prompt_tokens_evaluated": 0}  # a greedy copy costs no prompt evaluation
    analyses = frozenset({"tokens", "hidden states", "attention"})

    def __init__(
        self,
        llama: Any,
        *,
        max_context_tokens: int,
        model_path: str = "",
        top_logprobs: int = 5,
        reproducible: bool = True,
        sample_batch: bool = True,
    ) -> None:
        self._llama = llama
        self.max_context_tokens = max_context_tokens
        self.model_path = model_path
        self.top_logprobs = top_logprobs
        # llama.cpp's results depend in their last bits on how a prompt was split into batches, so reusing an
        # arbitrary cached prefix can change a greedy continuation (a repeated prompt re-evaluates only its
        # last token). Reproducible mode splits every prompt by one rule (quco.llm.batching) and reuses
        # evaluated state only where a fresh evaluation would have made the same batches: the output never
        # depends on the prompts asked before. False: llama-cpp-python's own reuse, as its server does.
        self.reproducible = reproducible
        # The n samples of one prompt decoded together in one batch per step (quco.llm.llamacpp_batch), in
        # reproducible mode; False: one after another, each re-running the prompt's last token.
        self.sample_batch = sample_batch
        self._sampling: SampleBatch | None = None  # their context, made on first use
        # Savings of reproducible mode; switching them off changes the speed, never the output.
        self.reuse = True  # reuse the state left by the previous prompt and the saved shared-prefix states
        self.shared_prefix = True  # split at a prompt's declared shared prefix and keep that prefix's state
        self.prefix_states = 4  # shared-prefix states kept (least recently used dropped first)
        self.chunk = int(getattr(llama, "n_batch", 512))  # tokens per batch (at most llama's n_batch)
        self._ends: list[int] = []  # batch ends of the evaluated prompt whose state the context holds
        self._key: tuple[int, ...] | None = None  # and the shared prefix it was evaluated with
        self._states: OrderedDict[tuple[int, ...], bytes] = OrderedDict()  # shared prefix -> sequence state
        self._prefix_ids = SharedPrefixTokens(
            lambda text: self.llama.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        )  # shared prefix text -> its tokens
        self._lock = threading.Lock()  # one decode at a time: the context and its KV cache are not re-entrant
        self._llama_cpp = _import_llama_cpp()
        self._reader_ctx: AnalysisReader | None = None  # the analyses' context, made on first use

    @classmethod
    def from_config(cls, config: GeneratorConfig) -> LlamaCppGenerator:
        llama_cpp = _import_llama_cpp()
        path = resolve_gguf(config)
        load_cpu_backends(llama_cpp)  # a build whose CPU kernels are loadable modules (GGML_BACKEND_DL)
        info = llama_cpp.llama_print_system_info().decode(errors="replace")
        kwargs: dict[str, Any] = {}
        if "AMX_INT8 = 1" in info:
            # The native build's AMX kernels segfault on the first decode on these CPUs; turning the extra
            # buffer types off avoids them (a portable build never has them).
            logger.warning("llama.cpp was built with AMX; disabling extra buffer types to avoid its crash")
            kwargs["use_extra_bufts"] = False
        # Every core by default (llama-cpp-python would decode with half of them), and as many threads for prompt
        # evaluation as for decoding: llama-cpp-python's own default there is every core, which oversubscribes
        # the cores when worker processes each take a share of them (`quco eval --workers`).
        threads = config.threads or usable_cores()
        start = time.perf_counter()
        try:
            llama = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=config.max_context_tokens,
                n_threads=threads,
                n_threads_batch=threads,
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
            sample_batch=config.sample_batch is not False,
        )

    def clear_cache(self) -> None:
        """Forget every evaluated state (saved prefixes and the last prompt): the next prompt runs in full."""
        with self._lock:
            self._states.clear()
            self._ends, self._key = [], None
            self.llama.n_tokens = 0
            self.llama._ctx.kv_cache_clear()
            if self._reader_ctx is not None:
                self._reader_ctx.forget()
            if self._sampling is not None:
                self._sampling.forget()

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

    def _decode(self, request: Request) -> list[Generation]:
        """Greedy (temperature 0) or sampled continuations of a raw text prompt.

        Logprobs and entropies come from the raw next-token distribution (before any sampling filter), as in
        the 'hf' backend, so that both measure the model's confidence and not the sampler's.
        """
        r = request
        ids, truncated = self._encode(r.prompt, prompt_budget(self.max_context_tokens, r.max_new_tokens))
        if truncated:
            logger.warning("Prompt left-truncated to its last %d tokens", len(ids))
        samples: list[Sample] = []
        with self._lock:
            shared = 0 if truncated else self._shared_tokens(r.prompt, ids)
            together = r.samples <= self._llama_cpp.llama_max_parallel_sequences()
            if r.samples > 1 and self.sample_batch and self.reproducible and together:
                samples = self._batch_samples(ids, r, shared)
            else:
                for k in range(r.samples):
                    if not r.greedy:
                        self.llama.set_seed(self._sample_seed(r, k))
                    # Samples after the first reuse the prompt's cache and re-run only its last token.
                    samples.append(self._one(ids, r, same_prompt=k > 0, shared=shared))
        return [s.generation(r, len(ids), truncated, top=True) for s in samples]

    def _one(self, ids: list[int], r: Request, same_prompt: bool = False, shared: int = 0) -> Sample:
        """One continuation; it ends at EOS, a stop string (cut later, by ``generate``), ``stop_when`` or the
        token limit."""
        llama_cpp = self._llama_cpp
        seq = _Sequence(self, r)
        processors = llama_cpp.LogitsProcessorList([seq.capture]) if seq.capture is not None else None
        out = seq.out
        if not self.reproducible:  # llama-cpp-python's own prefix reuse (what it evaluates is not reported)
            feed, reset = ids, True
            out.evaluated = None
            self._ends, self._key = [], None  # nothing cached is known to follow the batching rule
        elif same_prompt and self._rerun_last(ids):
            feed, reset = [ids[-1]], False
            out.evaluated = 1
        else:
            out.evaluated = self._evaluate_prompt(ids, shared)
            self._offer(ids, None)
            feed, reset = [], False  # the prompt is evaluated: sample from its last batch's scores
        for token in self.llama.generate(
            feed,
            reset=reset,
            temp=r.temperature,
            top_p=r.top_p,
            top_k=r.top_k,
            min_p=0.0,
            typical_p=1.0,
            repeat_penalty=1.0,
            logits_processor=processors,
        ):
            if seq.add(token):
                break
        return seq.done()

    def _batch_samples(self, ids: list[int], r: Request, shared: int) -> list[Sample]:
        """``r.n`` sampled continuations decoded together (``quco.llm.llamacpp_batch``): the prompt is evaluated
        once, here, and every sequence's first token is drawn from its scores; the rest are decoded in one
        batch per step, one row per sequence still running. Sequence k draws with seed ``seed + k``."""
        llama = self.llama
        evaluated = self._evaluate_prompt(ids, shared)
        state = self._save()
        self._offer(ids, state)
        seqs = [_Sequence(self, r) for _ in range(r.n)]
        seqs[0].out.evaluated = evaluated
        for s in seqs[1:]:
            s.out.evaluated = 0  # the prompt was evaluated once, for the first
        samplers = []
        for k in range(r.n):
            llama.set_seed(self._sample_seed(r, k))
            samplers.append(
                llama._init_sampler(
                    top_k=r.top_k,
                    top_p=r.top_p,
                    min_p=0.0,
                    typical_p=1.0,
                    temp=r.temperature,
                    repeat_penalty=1.0,
                )
            )
        try:
            first = None
            if seqs[0].capture is not None:
                first = np.ctypeslib.as_array(llama._ctx.get_logits_ith(-1), shape=(llama.n_vocab(),)).copy()
            active = []
            for k, (s, sampler) in enumerate(zip(seqs, samplers, strict=True)):
                if not s.draw(sampler, llama._ctx, -1, first):
                    active.append(k)
            if self._sampling is None:
                self._sampling = SampleBatch(llama, self._llama_cpp)
            batch = self._sampling
            if active:
                batch.start(state, len(ids), r.n, r.max_new_tokens)
            pos = len(ids)
            while active:
                batch.step([seqs[k].out.ids[-1] for k in active], active, pos)
                pos += 1
                running = []
                for row, k in enumerate(active):
                    logits = batch.logits(row) if seqs[k].capture is not None else None
                    if not seqs[k].draw(samplers[k], batch.context, row, logits):
                        running.append(k)
                active = running
        finally:
            for sampler in samplers:
                sampler.close()
        return [s.done() for s in seqs]

    @staticmethod
    def _sample_seed(r: Request, k: int) -> int:
        return (r.seed + k) if r.seed is not None else int.from_bytes(os.urandom(4), "little")

    def _evaluate_prompt(self, ids: list[int], shared: int) -> int:
        """``_prefill``; a half-evaluated prompt is never reused."""
        try:
            return self._prefill(ids, shared)
        except BaseException:
            self._ends, self._key = [], None
            raise

    def _offer(self, ids: list[int], state: bytes | None) -> None:
        """Hand the state of the prompt just evaluated to the analyses' context: hidden states of continuations
        of this prompt (SeaKR's samples) can start from it."""
        if self._reader_ctx is not None and self._reader_ctx.wants_offers and self.reuse:
            if state is None:
                state = save_sequence(self._llama_cpp, self.llama._ctx)
            if state is not None:
                self._reader_ctx.offer(len(self._key or ()), ids, state)

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
        return self._prefix_ids.count(prompt, shared_chars(prompt), ids) if self.shared_prefix else 0

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
                    keep_recent(self._states, key, state, self.prefix_states)
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
        state = save_sequence(self._llama_cpp, self.llama._ctx)
        if state is None:
            raise LlamaCppError("llama.cpp could not save a prompt state")
        return state

    def _restore(self, state: bytes, key: tuple[int, ...]) -> None:
        llama = self.llama
        if not restore_sequence(self._llama_cpp, llama._ctx, state):
            raise LlamaCppError("llama.cpp could not restore a saved prompt state")
        llama.input_ids[: len(key)] = key
        llama.n_tokens = len(key)

    def _piece(self, token: int) -> str:
        return self.llama.detokenize([token]).decode("utf-8", errors="replace")

    # ----------------------------------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        """Transformer blocks of the model."""
        return int(self._llama_cpp.llama_model_n_layer(self.llama._model.model))

    def _analyze(self, text: str, ask: AnalysisAsk) -> Analysis:
        """Tokens of ``text`` and, if asked, the hidden states of middle layers and one layer's attention
        (``quco.llm.llamacpp_analysis``); scoring is not offered."""
        hidden_layers = ask.hidden_layers
        if not hidden_layers and ask.attention_layer is None:
            ids = self.llama.tokenize(text.encode("utf-8"), add_bos=True, special=True)
            return Analysis(token_ids=ids, tokens=self._pieces(ids))
        n_layers = self.num_layers
        blocks = {layer: block_of(layer, n_layers) for layer in hidden_layers}
        att_block = ask.attention_block(n_layers)
        ids, truncated = self._encode(text, self.max_context_tokens)
        if truncated:
            logger.warning("Text to analyze left-truncated to its last %d tokens", len(ids))
        hidden: dict[int, np.ndarray] = {}
        attention = None
        evaluated = 0
        with self._lock:
            reader = self._reader()
            if att_block is not None:
                attention = reader.attention(ids, att_block)
                evaluated += len(ids)
            if blocks:
                cuts = [] if truncated else self._cuts(text, ids)
                rows, n = reader.read(ids, cuts, list(blocks.values()), last_only=ask.last_only)
                hidden = {layer: rows[block] for layer, block in blocks.items()}
                evaluated += n
        return Analysis(
            token_ids=ids, tokens=self._pieces(ids), attention=attention, hidden=hidden, evaluated=evaluated
        )

    def _cuts(self, text: str, ids: list[int]) -> list[int]:
        """Token ends of the shared levels ``text`` declares (``Prompt``), where they are worth a level."""
        if not self.shared_prefix:
            return []
        counted = {self._prefix_ids.count(text, chars, ids) for chars in shared_levels(text)}
        return [c for c in counted if MIN_SHARED_TOKENS <= c < len(ids)]

    def analyze_many(self, texts: Sequence[str], **options: Any) -> list[Analysis]:
        """``analyze`` of each text; with ``sample_batch``, the last position's hidden states of continuations of
        the prompt just sampled from (SeaKR's reads) are read together (``AnalysisReader.read_together``): the
        same rows as read one by one, up to llama.cpp's rounding of other batches."""
        asked = {k: v for k, v in options.items() if v not in (None, False, (), [])}
        layers = tuple(asked.get("hidden_layers", ()))
        if not (
            self.sample_batch and len(texts) > 1 and layers and set(asked) == {"hidden_layers", "last_only"}
        ):
            return super().analyze_many(texts, **options)
        n_layers = self.num_layers
        blocks = {layer: block_of(layer, n_layers) for layer in layers}
        items: list[tuple[list[int], list[int]]] = []
        for text in texts:
            ids, truncated = self._encode(text, self.max_context_tokens)
            if truncated:
                return super().analyze_many(texts, **options)
            items.append((ids, self._cuts(text, ids)))
        # each distinct text is read once and its duplicates share its rows: read one by one, identical texts
        # give bit-identical states, and so they must here, where other rows of a batch would round them apart
        # (an EigenScore over near-identical states magnifies those last bits)
        slot: dict[tuple[int, ...], int] = {}  # a text's tokens -> its row among the distinct texts
        distinct: list[tuple[list[int], list[int]]] = []
        for ids, cuts in items:
            if tuple(ids) not in slot:
                slot[tuple(ids)] = len(distinct)
                distinct.append((ids, cuts))
        with self._lock:
            got = self._reader().read_together(distinct, list(blocks.values()))
        if got is None:
            return super().analyze_many(texts, **options)
        rows, evaluated = got
        pieces = [self._pieces(ids) for ids, _ in distinct]  # decoded once per distinct text
        analyses, seen = [], set()
        for ids, _ in items:
            k = slot[tuple(ids)]
            analyses.append(
                Analysis(
                    token_ids=ids,
                    tokens=list(pieces[k]),
                    hidden={layer: rows[k][block] for layer, block in blocks.items()},
                    evaluated=0 if k in seen else evaluated[k],  # a duplicate evaluates nothing
                )
            )
            seen.add(k)
        return analyses

    def _reader(self) -> AnalysisReader:
        """The second context that analyses read from (made on first use; the caller holds the lock)."""
        if self._reader_ctx is None:
            self._reader_ctx = AnalysisReader(self.llama, self._llama_cpp)
        reader = self._reader_ctx
        reader.reuse, reader.keep, reader.chunk = (
            self.reuse,
            self.prefix_states,
            min(self.chunk, self.llama.n_batch),
        )
        return reader

    def _pieces(self, ids: list[int]) -> list[str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return [decoder.decode(self.llama.detokenize([t])) for t in ids]

    @property
    def llama(self) -> Any:
        """The ``llama_cpp.Llama``; an error once ``close`` has freed it (a call into it would crash)."""
        if self.closed:
            raise LlamaCppError(f"the llama.cpp model {self.model_path} was closed; load it again")
        return self._llama

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if self._reader_ctx is not None:
                self._reader_ctx.close()
                self._reader_ctx = None
            if self._sampling is not None:
                self._sampling.close()
                self._sampling = None
            self._llama.close()


__all__ = [
    "DEFAULT_MODEL",
    "LlamaCppError",
    "LlamaCppGenerator",
    "default_gguf_path",
    "resolve_gguf",
]
