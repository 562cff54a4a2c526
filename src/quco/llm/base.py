"""The generator seam: one protocol, backends that declare what they can do.

A method lists the capabilities it needs; ``require`` checks them when a pipeline is built so that a
mismatch fails before any question is asked, naming the missing capability and a backend that has it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import numpy as np

from quco.errors import CapabilityError, ConfigError, InputError


class Capability(StrEnum):
    TEXT = "text"
    LOGPROBS = "logprobs"  # log-probability of each generated token
    ENTROPY = "entropy"  # entropy of the full next-token distribution at each step
    ENTROPY_APPROX = "entropy_approx"  # entropy estimated from top-k alternatives only
    ATTENTION = "attention"  # attention weights of a forward pass
    HIDDEN_STATES = "hidden_states"  # hidden states of a forward pass
    SAMPLING = "sampling"  # n samples at a temperature


# What only a forward pass over a text gives (``analyze``): a pipeline may take them from another backend.
ANALYSIS_CAPABILITIES = frozenset({Capability.ATTENTION, Capability.HIDDEN_STATES})

# Which backend to suggest when a capability is missing.
CAPABILITY_PROVIDERS: dict[Capability, str] = {
    Capability.TEXT: "any backend",
    Capability.LOGPROBS: "the 'hf' (transformers) backend, llama.cpp, or an OpenAI-compatible server with logprobs",
    Capability.ENTROPY: "the 'hf' (transformers) or 'llamacpp' backend",
    Capability.ENTROPY_APPROX: "an OpenAI-compatible server with top_logprobs",
    Capability.ATTENTION: "the 'hf' (transformers) or 'llamacpp' backend",
    Capability.HIDDEN_STATES: "the 'hf' (transformers) or 'llamacpp' backend",
    Capability.SAMPLING: "any backend that samples (hf, llama.cpp, OpenAI-compatible)",
}


class Prompt(str):
    """Prompt text that says how many of its leading characters many calls share (the few-shot exemplars).

    A backend may keep the evaluated state of that prefix and reuse it across calls ('llamacpp' and 'hf' do);
    to every other reader it is the plain string it is. Any string operation returns a plain ``str``, so an
    edited prompt never carries a stale claim. ``inner`` names shorter shared prefixes inside the shared one
    (a prompt's exemplars inside the whole prompt that many sampled continuations share): a backend may keep a
    state at each of them.
    """

    shared: int
    inner: tuple[int, ...]

    def __new__(cls, text: str, shared: int = 0, inner: Sequence[int] = ()) -> Prompt:
        obj = super().__new__(cls, text)
        obj.shared = max(0, min(int(shared), len(text)))
        obj.inner = tuple(sorted({int(c) for c in inner if 0 < int(c) < obj.shared}))
        return obj


def shared_chars(prompt: str) -> int:
    """Leading characters of ``prompt`` that it declares shared with other calls (0 for a plain string)."""
    return prompt.shared if isinstance(prompt, Prompt) else 0


def shared_levels(prompt: str) -> tuple[int, ...]:
    """Every shared prefix ``prompt`` declares, shortest first, in characters (empty for a plain string)."""
    if not isinstance(prompt, Prompt) or not prompt.shared:
        return ()
    return (*prompt.inner, prompt.shared)


@dataclass
class Generation:
    """One generated continuation, with the per-token signals that were asked for."""

    text: str
    token_ids: list[int] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)  # decoded pieces; "".join(tokens) == text
    logprobs: list[float] | None = None  # log p of each chosen token
    entropies: list[float] | None = None  # entropy (nats) of each step's full distribution
    top_logprobs: list[dict[str, float]] | None = None
    finish_reason: str = "length"  # "eos" | "stop" | "length"
    prompt_tokens: int = 0
    prompt_truncated: bool = False
    # Prompt tokens the backend actually ran through the model for this generation (the rest came from a
    # cache); None when the backend cannot tell (a server), which counts as all of them.
    prompt_tokens_evaluated: int | None = None


@dataclass
class Analysis:
    """A forward pass over a text: tokens, and the attention/hidden states that were asked for."""

    token_ids: list[int]
    tokens: list[str]
    attention: np.ndarray | None = None  # [seq, seq], one layer, mean over heads
    hidden: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> [seq, dim]; [1, dim]: last_only
    logprobs: list[float] | None = None  # log p(token_i | prefix) for i >= 1 (index 0 is 0.0)
    entropies: list[float] | None = None  # entropy of the distribution that predicted token i
    evaluated: int | None = None  # tokens run through the model (None: all; fewer when a cache stood in)


@dataclass(frozen=True)
class AnalysisAsk:
    """What an ``analyze`` call asks a backend for (``GeneratorBase._analyze``)."""

    attention_layer: int | None = None
    hidden_layers: tuple[int, ...] = ()
    scores: bool = False
    last_only: bool = False

    def attention_block(self, n_layers: int) -> int | None:
        """The block whose attention is asked for (negative layers count from the end), None if none is."""
        layer = self.attention_layer
        if layer is None:
            return None
        block = layer + n_layers if layer < 0 else layer
        if not 0 <= block < n_layers:
            raise ConfigError(
                f"attention_layer {layer} is out of range for a model with {n_layers} layers; "
                f"use -{n_layers}..{n_layers - 1}"
            )
        return block


# A predicate over the text generated so far, checked after each token by backends that decode token by token
# ('hf', 'llamacpp'): True ends that sequence there (finish_reason "stop", nothing cut). A server cannot run it,
# so the 'openai' backend generates to its other limits: callers use it to save tokens, never to cut text.
StopWhen = Callable[[str], bool]


@runtime_checkable
class Generator(Protocol):
    """What every LLM backend offers. Unsupported requests raise ``CapabilityError``."""

    name: str
    capabilities: frozenset[Capability]
    max_context_tokens: int

    def count_tokens(self, text: str) -> int: ...

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
    ) -> list[Generation]: ...

    def analyze(
        self,
        text: str,
        *,
        attention_layer: int | None = None,
        hidden_layers: Sequence[int] = (),
        scores: bool = False,
        last_only: bool = False,
    ) -> Analysis: ...


def require(generator: Generator, needs: Iterable[Capability], who: str) -> None:
    """Fail early, naming the missing capability and where to get it."""
    missing = [c for c in needs if c not in generator.capabilities]
    if missing:
        first = missing[0]
        raise CapabilityError(
            f"{who} needs the generator capability '{first.value}', which backend '{generator.name}' does not "
            f"provide; use {CAPABILITY_PROVIDERS[first]}"
        )


def validate_request(max_new_tokens: int, n: int, temperature: float, top_p: float, top_k: int) -> None:
    """Refuse a generation request no backend can serve (every backend calls this first)."""
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    if n < 1:
        raise InputError(f"n (number of samples) must be at least 1, got {n}")
    if temperature < 0 or not 0 < top_p <= 1 or top_k < 0:
        raise InputError(
            f"invalid sampling settings temperature={temperature}, top_p={top_p}, top_k={top_k}; "
            "use temperature >= 0, 0 < top_p <= 1, top_k >= 0"
        )


def prompt_budget(max_context_tokens: int, max_new_tokens: int) -> int:
    """How many prompt tokens fit beside ``max_new_tokens`` generated ones."""
    budget = max_context_tokens - max_new_tokens
    if budget < 2:
        raise InputError(
            f"max_new_tokens={max_new_tokens} leaves no room for a prompt in max_context_tokens="
            f"{max_context_tokens}; lower max_new_tokens or raise generator.max_context_tokens"
        )
    return budget


# --------------------------------------------------------------------------------------------------------------
# What every backend does around its decoding: one implementation, in ``GeneratorBase.generate``.


def find_stop(text: str, stops: Sequence[str]) -> int:
    """Where the earliest of ``stops`` starts in ``text``, or -1."""
    return min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)


def cut_pieces(pieces: Sequence[str], length: int, *, shorten: bool = True) -> list[str]:
    """The pieces that start within the first ``length`` characters; the one straddling ``length`` is
    shortened to end there (``shorten``) or kept whole."""
    out: list[str] = []
    pos = 0
    for piece in pieces:
        if pos >= length:
            break
        out.append(piece[: length - pos] if shorten else piece)
        pos += len(piece)
    return out


def cut_generation(gen: Generation, length: int, *, shorten: bool = True) -> Generation:
    """``gen`` restricted to its first ``length`` characters (finish reason "stop"): the tokens that start
    before the cut stay with their ids and scores; a straddling token's piece is shortened unless not
    ``shorten``. A generation no longer than ``length`` is returned as it is."""
    if length >= len(gen.text):
        return gen
    tokens = cut_pieces(gen.tokens, length, shorten=shorten)
    n = len(tokens)
    return replace(
        gen,
        text=gen.text[:length],
        tokens=tokens,
        token_ids=gen.token_ids[:n],
        logprobs=gen.logprobs[:n] if gen.logprobs is not None else None,
        entropies=gen.entropies[:n] if gen.entropies is not None else None,
        top_logprobs=gen.top_logprobs[:n] if gen.top_logprobs is not None else None,
        finish_reason="stop",
    )


def cut_at_stop(gen: Generation, stops: Sequence[str]) -> Generation:
    """``gen`` cut at the earliest stop string (which is dropped), or ``gen`` itself if it holds none."""
    cut = find_stop(gen.text, stops)
    return gen if cut < 0 else cut_generation(gen, cut)


def copy_generation(gen: Generation, **changes: object) -> Generation:
    """An independent copy of ``gen`` (no list shared), with ``changes`` applied."""
    return replace(
        gen,
        token_ids=list(gen.token_ids),
        tokens=list(gen.tokens),
        logprobs=None if gen.logprobs is None else list(gen.logprobs),
        entropies=None if gen.entropies is None else list(gen.entropies),
        top_logprobs=None if gen.top_logprobs is None else [dict(t) for t in gen.top_logprobs],
        **changes,  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class Request:
    """One validated ``generate`` call, as a backend's decoding sees it."""

    prompt: str
    max_new_tokens: int
    stops: list[str]  # the non-empty stop strings
    temperature: float
    top_p: float
    top_k: int
    n: int
    seed: int | None
    logprobs: bool
    entropy: bool
    stop_when: StopWhen | None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def samples(self) -> int:
        """Distinct continuations to decode: greedy ones are identical by definition, so one."""
        return 1 if self.greedy else self.n


@dataclass
class Sample:
    """One continuation as a backend decodes it: its tokens and what was read at each step."""

    ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)  # decoded piece of each token; they join to the text
    logprobs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    top: list[dict[str, float]] = field(default_factory=list)
    finish: str | None = None  # "eos" | "stop" | "length"; None while decoding (then "length")
    evaluated: int | None = None  # prompt tokens run through the model for it (None: not known)

    def generation(
        self, request: Request, prompt_tokens: int, truncated: bool, *, top: bool = False
    ) -> Generation:
        """The ``Generation``, with the scores the request asked for (``top``: top logprobs come with logprobs)."""
        return Generation(
            text="".join(self.pieces),
            token_ids=self.ids,
            tokens=self.pieces,
            logprobs=self.logprobs if request.logprobs else None,
            entropies=self.entropies if request.entropy else None,
            top_logprobs=self.top if request.logprobs and top else None,
            finish_reason=self.finish or "length",
            prompt_tokens=prompt_tokens,
            prompt_truncated=truncated,
            prompt_tokens_evaluated=self.evaluated,
        )


# How an evaluation answers questions concurrently with a generator of a kind: "threads" share one generator
# (its calls overlap, as a server's do), "processes" give each worker its own (an in-process library that decodes
# one request at a time; the model file is memory-mapped, so its weights are in memory once), "serial" answers
# one question at a time (a backend that serialises its calls and is too large to copy into processes).
Parallelism = Literal["threads", "processes", "serial"]


class GeneratorBase:
    """The part of ``Generator.generate`` every backend shares; a backend implements ``_decode`` only.

    ``generate`` validates the request, asks ``_decode`` for ``request.samples`` continuations (each a
    complete ``Generation``: text, tokens and the scores asked for), cuts each at its earliest stop string, and
    for greedy decoding with ``n > 1`` adds independent copies of the one continuation (``_copy_changes``
    says what a copy changes), so callers can index samples alike.
    """

    _copy_changes: dict[str, object] = {}
    # What ``analyze`` offers: "tokens" (a plain analysis), "attention", "hidden states", "scores".
    analyses: frozenset[str] = frozenset({"tokens", "attention", "hidden states", "scores"})
    parallelism: ClassVar[Parallelism] = "threads"
    name: str
    closed: bool = False  # set by a backend's ``close``: a closed generator is never handed out again

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
        validate_request(max_new_tokens, n, temperature, top_p, top_k)
        request = Request(
            prompt=prompt,
            max_new_tokens=max_new_tokens,
            stops=[s for s in stop if s],
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            n=n,
            seed=seed,
            logprobs=logprobs,
            entropy=entropy,
            stop_when=stop_when,
        )
        gens = [cut_at_stop(g, request.stops) for g in self._decode(request)]
        if request.greedy and n > 1:
            gens += [copy_generation(gens[0], **self._copy_changes) for _ in range(n - 1)]
        return gens

    def _decode(self, request: Request) -> list[Generation]:
        """``request.samples`` continuations of ``request.prompt``."""
        raise NotImplementedError

    def analyze(
        self,
        text: str,
        *,
        attention_layer: int | None = None,
        hidden_layers: Sequence[int] = (),
        scores: bool = False,
        last_only: bool = False,
    ) -> Analysis:
        """A forward pass over ``text``; what the backend cannot provide is a ``CapabilityError``.

        ``last_only``: the hidden states of the last position only (rows ``[1, dim]``), which a backend may read
        without the rows of a prefix whose evaluated state it already holds."""
        asked = [
            what
            for what, wanted in (
                ("attention", attention_layer is not None),
                ("hidden states", bool(hidden_layers)),
                ("scores", scores),
            )
            if wanted
        ] or ["tokens"]
        missing = [what for what in asked if what not in self.analyses]
        if missing:
            where = "the 'hf' backend" if missing[0] == "scores" else "the 'hf' or 'llamacpp' backend"
            raise CapabilityError(
                f"the '{self.name}' generator backend cannot provide {missing[0]} of a forward pass; use {where}"
            )
        analysis = self._analyze(text, AnalysisAsk(attention_layer, tuple(hidden_layers), scores, last_only))
        if last_only:
            analysis.hidden = {layer: rows[-1:] for layer, rows in analysis.hidden.items()}
        return analysis

    def analyze_many(self, texts: Sequence[str], **options: Any) -> list[Analysis]:
        """``analyze`` of each text, with the same options; a backend may read them together (``llamacpp`` does
        for the last position's hidden states of continuations of one prompt)."""
        return [self.analyze(text, **options) for text in texts]

    def _analyze(self, text: str, ask: AnalysisAsk) -> Analysis:
        raise NotImplementedError
