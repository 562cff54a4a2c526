"""GGUF -> transformers in seconds: read the file ourselves, build the fast tokenizer with ``tokenizers``, and
dequantise tensor by tensor with ``gguf``'s numpy kernels into a state dict.

transformers can load a GGUF itself, but its reader turns each of the 262,144 vocabulary entries of Gemma-3
into separate numpy objects (about half a minute, twice: once for the tokenizer, once for the model) and its
tokenizer conversion derives the BPE merges from the vocabulary through its generic slow-tokenizer machinery.
This module produces the same artefacts (the same ``tokenizer.json``, bit-identical weights; the tests check
both) in a few seconds:

- the header is parsed straight from a memory map; fixed-size arrays become numpy views, strings are sliced;
- the merges are derived as transformers derives them for Gemma (every split of a token into two tokens, the
  token's position in the vocabulary as the rank), in one pass;
- each tensor is dequantised with ``gguf.quants.dequantize`` (the function transformers calls too) and given
  the name transformers gives it.

Only architectures checked against transformers' own conversion are handled (``SUPPORTED``); anything else
goes through transformers.
"""

from __future__ import annotations

import json
import logging
import mmap
import struct
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

SUPPORTED = ("gemma3",)

# GGUF value types (gguf.GGUFValueType)
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY = range(10)
_UINT64, _INT64, _FLOAT64 = 10, 11, 12
_SCALARS: dict[int, str] = {
    _UINT8: "<B",
    _INT8: "<b",
    _UINT16: "<H",
    _INT16: "<h",
    _UINT32: "<I",
    _INT32: "<i",
    _FLOAT32: "<f",
    _BOOL: "<?",
    _UINT64: "<Q",
    _INT64: "<q",
    _FLOAT64: "<d",
}
_NUMPY: dict[int, str] = {
    _UINT8: "<u1",
    _INT8: "<i1",
    _UINT16: "<u2",
    _INT16: "<i2",
    _UINT32: "<u4",
    _INT32: "<i4",
    _FLOAT32: "<f4",
    _BOOL: "?",
    _UINT64: "<u8",
    _INT64: "<i8",
    _FLOAT64: "<f8",
}


class GGUFFormatError(ValueError):
    """The file is not a GGUF this reader understands."""


@dataclass
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # as stored: fastest-varying first
    ggml_type: int
    offset: int  # from the start of the tensor data


@dataclass
class GGUFFile:
    """The metadata and tensor directory of a GGUF file, over a read-only memory map."""

    path: Path
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    data_start: int
    _map: mmap.mmap = field(repr=False)

    @classmethod
    def open(cls, path: str | Path) -> GGUFFile:
        path = Path(path)
        with path.open("rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            return _parse(path, mm)
        except (struct.error, IndexError, UnicodeDecodeError) as exc:
            mm.close()
            raise GGUFFormatError(f"{path} is not a readable GGUF file: {exc}") from exc

    def close(self) -> None:
        self._map.close()

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def raw(self, tensor: TensorInfo) -> np.ndarray:
        """The tensor's bytes as transformers' reader shapes them (rows x bytes per row for quantised types)."""
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        qtype = GGMLQuantizationType(tensor.ggml_type)
        block, type_size = GGML_QUANT_SIZES[qtype]
        shape = tuple(reversed(tensor.dims))
        n_bytes = int(np.prod(shape)) * type_size // block
        start = self.data_start + tensor.offset
        data = np.frombuffer(self._map, dtype=np.uint8, count=n_bytes, offset=start)
        return data.reshape(*shape[:-1], shape[-1] // block * type_size)

    def dequantized(self, tensor: TensorInfo) -> np.ndarray:
        """float32, in the layout transformers expects (the GGUF dims reversed)."""
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        return dequantize(self.raw(tensor), GGMLQuantizationType(tensor.ggml_type))


def _parse(path: Path, mm: mmap.mmap) -> GGUFFile:
    if mm[:4] != b"GGUF":
        raise GGUFFormatError(f"{path} is not a GGUF file (no GGUF magic)")
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", mm, 4)
    if version not in (2, 3):
        raise GGUFFormatError(f"{path}: GGUF version {version} is not supported (2 or 3)")
    pos = 24

    def string() -> str:
        nonlocal pos
        (n,) = struct.unpack_from("<Q", mm, pos)
        pos += 8
        text = mm[pos : pos + n].decode("utf-8")
        pos += n
        return text

    def value(vtype: int) -> Any:
        nonlocal pos
        if vtype == _STRING:
            return string()
        if vtype == _ARRAY:
            item_type, count = struct.unpack_from("<IQ", mm, pos)
            pos += 12
            if item_type == _STRING:
                return _string_array(count)
            if item_type == _ARRAY:
                return [value(_ARRAY) for _ in range(count)]
            dtype = np.dtype(_NUMPY[item_type])
            arr = np.frombuffer(mm, dtype=dtype, count=count, offset=pos).copy()
            pos += dtype.itemsize * count
            return arr
        fmt = _SCALARS[vtype]
        (v,) = struct.unpack_from(fmt, mm, pos)
        pos += struct.calcsize(fmt)
        return v

    def _string_array(count: int) -> list[str]:
        nonlocal pos
        out: list[str] = []
        unpack = struct.Struct("<Q").unpack_from
        p = pos
        for _ in range(count):
            (n,) = unpack(mm, p)
            p += 8
            out.append(mm[p : p + n].decode("utf-8"))
            p += n
        pos = p
        return out

    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = string()
        (vtype,) = struct.unpack_from("<I", mm, pos)
        pos += 4
        metadata[key] = value(vtype)
    tensors = []
    for _ in range(n_tensors):
        name = string()
        (n_dims,) = struct.unpack_from("<I", mm, pos)
        pos += 4
        dims = struct.unpack_from(f"<{n_dims}Q", mm, pos)
        pos += 8 * n_dims
        ggml_type, offset = struct.unpack_from("<IQ", mm, pos)
        pos += 12
        tensors.append(TensorInfo(name, tuple(int(d) for d in dims), int(ggml_type), int(offset)))
    alignment = int(metadata.get("general.alignment", 32))
    data_start = (pos + alignment - 1) // alignment * alignment
    return GGUFFile(path, metadata, tensors, data_start, mm)


# --------------------------------------------------------------------------------------------------------------
# Tokenizer (Gemma: SentencePiece BPE with byte fallback)

_CONTROL, _USER_DEFINED = 3, 4


def gemma_merges(tokens: list[str]) -> list[tuple[str, str]]:
    """Every way to cut a token into two tokens of the vocabulary, ranked by the token's position.

    This is the order transformers derives for Gemma files (which carry no merges): best-first by the position
    of the merged token in the vocabulary, and within one token the longer left part first. Where a token is
    listed twice, its last position counts, as in a dict built from the list.
    """
    index = {t: i for i, t in enumerate(tokens)}
    ranked: list[tuple[int, str]] = sorted((i, t) for t, i in index.items())
    merges: list[tuple[str, str]] = []
    for _, token in ranked:
        for cut in range(len(token) - 1, 0, -1):
            left = token[:cut]
            if left in index:
                right = token[cut:]
                if right in index:
                    merges.append((left, right))
    return merges


def gemma_tokenizer(meta: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The fast tokenizer of a Gemma GGUF and its ``tokenizer_config.json`` settings."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    raw = list(meta["tokenizer.ggml.tokens"])
    # Tokens of two or more spaces are stored as real spaces; the model's vocabulary spells them with "▁".
    tokens = ["\u2581" * len(t) if " " in t and not t.strip() else t for t in raw]
    types = list(meta.get("tokenizer.ggml.token_type", []))

    def special(key: str, default: str) -> str:
        token_id = meta.get(f"tokenizer.ggml.{key}")
        return tokens[int(token_id)] if token_id is not None else default

    bos, eos = special("bos_token_id", "<bos>"), special("eos_token_id", "<eos>")
    unk, pad = special("unknown_token_id", "<unk>"), special("padding_token_id", "<pad>")
    mask = "<mask>"
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(
        BPE(
            vocab=vocab,
            merges=gemma_merges(tokens),
            fuse_unk=True,
            unk_token=unk,
            dropout=None,
            byte_fallback=True,
        )
    )
    tok.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    # the named special tokens first, then every token the file marks as control, then its user-defined ones
    named = [t for t in (pad, eos, bos, unk, mask) if t in vocab]
    control = [t for t, kind in zip(raw, types, strict=False) if kind == _CONTROL]
    tok.add_special_tokens(
        [AddedToken(t, normalized=False, special=True) for t in dict.fromkeys(named + control)]
    )
    user = [t for t, kind in zip(raw, types, strict=False) if kind == _USER_DEFINED and t in vocab]
    if user:
        tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in user])
    if bool(meta.get("tokenizer.ggml.add_bos_token", True)):
        bos_id = vocab[bos]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1", special_tokens=[(bos, bos_id)]
        )
    settings = {
        "backend": "tokenizers",
        "bos_token": bos,
        "eos_token": eos,
        "mask_token": mask,
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": pad,
        "tokenizer_class": "GemmaTokenizer",
        "unk_token": unk,
    }
    return tok, settings


# --------------------------------------------------------------------------------------------------------------
# Config and weights (Gemma-3 text)


def gemma3_config(meta: dict[str, Any]) -> Any:
    """The ``Gemma3TextConfig`` transformers builds from this file's metadata."""
    from transformers import Gemma3TextConfig

    a = "gemma3"

    def get(key: str) -> Any:
        return meta[f"{a}.{key}"]

    kwargs: dict[str, Any] = {
        "max_position_embeddings": int(get("context_length")),
        "num_hidden_layers": int(get("block_count")),
        "intermediate_size": int(get("feed_forward_length")),
        "hidden_size": int(get("embedding_length")),
        "head_dim": int(get("attention.key_length")),
        "num_attention_heads": int(get("attention.head_count")),
        "num_key_value_heads": int(get("attention.head_count_kv")),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon")),
        "sliding_window": int(get("attention.sliding_window")),
        "vocab_size": int(meta.get(f"{a}.vocab_size", len(meta["tokenizer.ggml.tokens"]))),
        "bos_token_id": int(meta["tokenizer.ggml.bos_token_id"]),
        "eos_token_id": int(meta["tokenizer.ggml.eos_token_id"]),
        "pad_token_id": int(meta["tokenizer.ggml.padding_token_id"]),
        "unk_token_id": int(meta["tokenizer.ggml.unknown_token_id"]),
        "tie_word_embeddings": True,
        "dtype": "float32",
    }
    if "general.name" in meta:  # transformers keeps the file's model name under this key
        kwargs["_model_name_or_path"] = str(meta["general.name"])
    config = Gemma3TextConfig(**kwargs)
    full = config.rope_parameters.get("full_attention") if isinstance(config.rope_parameters, dict) else None
    if isinstance(full, dict):
        full["rope_theta"] = float(get("rope.freq_base"))
    return config


def gemma3_tensor_names(n_layers: int) -> dict[str, str]:
    """GGUF tensor name -> transformers parameter name (Gemma3ForCausalLM)."""
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
    per_layer = {
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "attn_q_norm": "self_attn.q_norm",
        "attn_k_norm": "self_attn.k_norm",
        "attn_norm": "input_layernorm",
        "post_attention_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    for i in range(n_layers):
        for g, h in per_layer.items():
            names[f"blk.{i}.{g}.weight"] = f"model.layers.{i}.{h}.weight"
    return names


def gemma3_state(gguf: GGUFFile, progress: Callable[[int, int], None] | None = None) -> Iterator[tuple]:
    """(name, float32 array) for every weight; Gemma's norm weights are stored +1 in GGUF, so 1 is taken off."""
    names = gemma3_tensor_names(int(gguf.metadata["gemma3.block_count"]))
    unknown = [t.name for t in gguf.tensors if t.name not in names]
    if unknown:
        raise GGUFFormatError(f"{gguf.path}: tensors this converter does not know: {', '.join(unknown[:5])}")
    for i, tensor in enumerate(gguf.tensors):
        weights = gguf.dequantized(tensor)
        if "norm.weight" in tensor.name:
            weights = weights - 1
        yield names[tensor.name], weights
        if progress is not None:
            progress(i + 1, len(gguf.tensors))


# --------------------------------------------------------------------------------------------------------------


@dataclass
class ConversionTimes:
    read_s: float = 0.0
    tokenizer_s: float = 0.0
    weights_s: float = 0.0
    write_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 2) for k, v in self.__dict__.items()}


def convert(gguf_path: Path, out_dir: Path, progress: bool = True) -> ConversionTimes:
    """Write ``config.json``, ``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json`` and
    ``model.safetensors`` for a supported GGUF into the (existing, empty) ``out_dir``."""
    times = ConversionTimes()
    t0 = time.perf_counter()
    with GGUFFile.open(gguf_path) as gguf:
        if gguf.architecture not in SUPPORTED:
            raise GGUFFormatError(f"{gguf_path}: architecture {gguf.architecture!r} is not in {SUPPORTED}")
        times.read_s = time.perf_counter() - t0

        def write_tokenizer() -> float:
            start = time.perf_counter()
            tokenizer, settings = gemma_tokenizer(gguf.metadata)
            tokenizer.save(str(out_dir / "tokenizer.json"))
            text = json.dumps(settings, indent=2) + "\n"
            (out_dir / "tokenizer_config.json").write_text(text, encoding="utf-8")
            return time.perf_counter() - start

        # The tokenizer (mostly Python) is built on a second thread while numpy dequantises the weights.
        with ThreadPoolExecutor(1, thread_name_prefix="quco-tokenizer") as pool:
            tokenizer_job = pool.submit(write_tokenizer)
            times.weights_s, times.write_s = _write_weights(gguf, out_dir, progress)
            times.tokenizer_s = tokenizer_job.result()
    logger.info(
        "GGUF converted: tokenizer %.1f s (in parallel), weights %.1f s + %.1f s writing",
        times.tokenizer_s,
        times.weights_s,
        times.write_s,
    )
    return times


def _write_weights(gguf: GGUFFile, out_dir: Path, progress: bool) -> tuple[float, float]:
    """Dequantise every tensor and write the safetensors file and the configs: (seconds, seconds writing)."""
    import torch
    from safetensors.torch import save_file
    from transformers import GenerationConfig

    t0 = time.perf_counter()
    config = gemma3_config(gguf.metadata)
    bar = _bar(len(gguf.tensors), "dequantising", progress)
    state = {
        name: torch.from_numpy(np.ascontiguousarray(w))
        for name, w in gemma3_state(gguf, lambda done, total: bar.update(1))
    }
    bar.close()
    weights_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    del state
    config.save_pretrained(str(out_dir))
    GenerationConfig.from_model_config(config).save_pretrained(str(out_dir))
    return weights_s, time.perf_counter() - t0


def _bar(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="tensor", disable=not enabled, leave=False)


__all__ = ["SUPPORTED", "ConversionTimes", "GGUFFile", "GGUFFormatError", "convert", "gemma_merges"]
