"""The fast GGUF conversion of the default model: the same artefacts as transformers' own conversion.

transformers 5.24 converted the bundled Gemma-3-270m GGUF into a ``tokenizer.json`` and a ``model.safetensors``
with the SHA-256s pinned below; quco's converter must write the very same bytes (so existing caches stay valid
and the model gives the same tokens and logprobs), and its tokenizer must agree with llama.cpp's own.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from quco.llm import gguf_convert
from quco.llm.gguf_convert import GGUFFile, GGUFFormatError, gemma_merges

# Written by transformers 5.24's GGUF loading (AutoTokenizer / AutoModelForCausalLM with gguf_file=...).
TRANSFORMERS_TOKENIZER_SHA256 = "3c01ed742c180439796d05b781d1cc02ce30801903444b53a73c57fe9d798a84"
TRANSFORMERS_WEIGHTS_SHA256 = "cf4e538230192cf987f7ff033d906fd151bbfef797688e662d8214ea3115bf04"

# Varied text: spaces, control characters, accents, CJK, emoji, mathematical letters, special-token spellings.
TEXTS = [
    "Who was born first, Albert Einstein or Niels Bohr?",
    "  leading spaces and  double  spaces   ",
    "tabs\tand\nnewlines\n\n\nend",
    "Ünïcödé café naïve résumé — “quotes” ‘single’ …",
    "日本語のテキストと中文混合",
    "emoji 😀👍🏽 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "Zürich, São Paulo, Kraków, Москва, Αθήνα",
    "x = f(y) + 3.14159 * 2**10; print('ok')",
    "<start_of_turn>user\nhi<end_of_turn>",
    "\u200b zero width \u00a0nbsp",
    "A" * 50,
    " ",
]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    from quco.llm.models import default_gguf_path

    return default_gguf_path()


def test_merges_are_derived_as_transformers_derives_them() -> None:
    """Position of the merged token first, then the longer left part; a duplicate's last position counts."""
    from transformers.tokenization_utils_base import generate_merges

    tokens = ["a", "b", "c", "ab", "bc", "abc", "▁", "▁a", "▁ab", "ca", "b", "cab", "abca", "bca"]
    positions = {t: -i for i, t in enumerate(tokens)}
    expected = generate_merges({t: i for i, t in enumerate(tokens)}, positions)
    assert gemma_merges(tokens) == expected
    assert ("ab", "c") in expected and expected.index(("ab", "c")) < expected.index(("a", "bc"))


def test_reader_parses_the_default_gguf(gguf_path: Path) -> None:
    with GGUFFile.open(gguf_path) as gguf:
        meta = gguf.metadata
        assert gguf.architecture == "gemma3" and meta["gemma3.block_count"] == 18
        assert len(meta["tokenizer.ggml.tokens"]) == len(meta["tokenizer.ggml.token_type"]) == 262144
        assert meta["tokenizer.ggml.tokens"][2] == "<bos>" and meta["tokenizer.ggml.add_bos_token"] is True
        assert len(gguf.tensors) == 236
        embd = next(t for t in gguf.tensors if t.name == "token_embd.weight")
        assert embd.dims == (640, 262144)
        norm = next(t for t in gguf.tensors if t.name == "output_norm.weight")
        assert gguf.dequantized(norm).shape == (640,)
        assert set(gguf_convert.gemma3_tensor_names(18)) == {t.name for t in gguf.tensors}


def test_reader_refuses_what_is_not_gguf(tmp_path: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGML" + bytes(100))
    with pytest.raises(GGUFFormatError, match="no GGUF magic"):
        GGUFFile.open(bad)
    bad.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (1).to_bytes(8, "little"))
    with pytest.raises(GGUFFormatError, match="not a readable GGUF file"):
        GGUFFile.open(bad)


@pytest.fixture(scope="module")
def tokenizer(gguf_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    with GGUFFile.open(gguf_path) as gguf:
        tok, settings = gguf_convert.gemma_tokenizer(gguf.metadata)
    out = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(out))
    assert settings["bos_token"] == "<bos>" and settings["tokenizer_class"] == "GemmaTokenizer"
    return out


def test_tokenizer_is_the_file_transformers_writes(tokenizer: Path) -> None:
    assert _sha256(tokenizer) == TRANSFORMERS_TOKENIZER_SHA256


def test_tokenizer_ids_match_llama_cpp(tokenizer: Path, gguf_path: Path) -> None:
    """llama.cpp reads the same GGUF with its own tokenizer code: an independent check of the ids."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from tokenizers import Tokenizer

    ours = Tokenizer.from_file(str(tokenizer))
    ref = llama_cpp.Llama(model_path=str(gguf_path), vocab_only=True, verbose=False)
    for text in TEXTS:
        assert ours.encode(text).ids == ref.tokenize(text.encode("utf-8"), add_bos=True, special=True), text


@pytest.mark.model
def test_conversion_writes_the_same_bytes_as_transformers(gguf_path: Path, tmp_path: Path) -> None:
    """Same tokenizer.json and model.safetensors as transformers' conversion, hence the same greedy tokens and
    logprobs; config.json differs only in transformers' note that the weights came from a GGUF."""
    times = gguf_convert.convert(gguf_path, tmp_path, progress=False)
    assert times.read_s < times.weights_s
    assert _sha256(tmp_path / "tokenizer.json") == TRANSFORMERS_TOKENIZER_SHA256
    assert _sha256(tmp_path / "model.safetensors") == TRANSFORMERS_WEIGHTS_SHA256
    config = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "gemma3_text" and config["_model_name_or_path"] == "Gemma 3 270m"
    assert config["rope_parameters"]["full_attention"]["rope_theta"] == 1000000.0
    assert config["rope_parameters"]["sliding_attention"]["rope_theta"] == 10000.0
    assert config["num_hidden_layers"] == 18 and config["tie_word_embeddings"] is True
    assert "quantization_config" not in config
    settings = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert settings["eos_token"] == "<eos>" and settings["pad_token"] == "<pad>"
