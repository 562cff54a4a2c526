"""Tokenizers for local Infini-gram indexes: the same object tokenizes the corpus and every query.

The engine only sees token ids, so the index directory keeps its tokenizer (``tokenizer.json``) and queries are
always encoded with that stored copy; normalisation (lower-casing, accent stripping for WordPiece, NFC for
bytes) therefore matches by construction.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.resources
import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quco.errors import ConfigError

# The uncased BERT WordPiece tokenizer (bert-base-uncased vocabulary, 30,522 tokens; Apache-2.0), shipped as
# package data: the exact ``tokenizer.json`` of sentence-transformers/all-MiniLM-L6-v2, gzip-compressed. Its
# SHA-256 is the tokenizer identity that index manifests record, so it must never change (see data/NOTICE.md).
TOKENIZER_FILE = "tokenizer.json"  # the copy kept in every index directory
WORDPIECE_DATA = "wordpiece-uncased.json.gz"
WORDPIECE_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


@functools.cache
def wordpiece_json() -> str:
    """The text of the bundled WordPiece ``tokenizer.json`` (checked against its recorded SHA-256)."""
    resource = importlib.resources.files("quco.corpus_stats") / "data" / WORDPIECE_DATA
    try:
        with resource.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, EOFError) as exc:
        raise ConfigError(
            f"the bundled WordPiece tokenizer ({WORDPIECE_DATA}) cannot be read: {exc}"
        ) from exc
    if hashlib.sha256(text.encode("utf-8")).hexdigest() != WORDPIECE_SHA256:
        raise ConfigError(
            f"the bundled WordPiece tokenizer ({WORDPIECE_DATA}) is damaged; reinstall quco "
            "(or set corpus_stats.tokenizer to 'bytes')"
        )
    return text


@dataclass
class IndexTokenizer:
    """Text -> token ids for one index; ``json_text`` is None for the byte-level tokenizer."""

    name: str  # "wordpiece" | "bytes" | "file:<name>"
    json_text: str | None
    token_dtype: str  # "u8" | "u16" | "u32"
    vocab_size: int

    def __post_init__(self) -> None:
        self._tok = None
        if self.json_text is not None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_str(self.json_text)
            tok.no_padding()  # the shipped file pads to 128: every query would then count 0
            tok.no_truncation()
            self._tok = tok

    @property
    def sha256(self) -> str:
        """Identity of the tokenizer: two indexes are comparable only when these agree."""
        payload = self.json_text if self.json_text is not None else "bytes:utf-8:nfc"
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    @property
    def np_dtype(self) -> type[np.unsignedinteger]:
        return {"u8": np.uint8, "u16": np.uint16, "u32": np.uint32}[self.token_dtype]

    @property
    def doc_sep_id(self) -> int:
        """The engine's document separator: all bits set, an id no token of the vocabulary can take."""
        return int(np.iinfo(self.np_dtype).max)

    def encode(self, text: str) -> list[int]:
        if self._tok is None:
            return list(unicodedata.normalize("NFC", text).encode("utf-8"))
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if self._tok is None:
            return [self.encode(t) for t in texts]
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def tokens(self, text: str) -> list[str]:
        """Readable tokens (for messages and tests)."""
        if self._tok is None:
            return [chr(b) if b < 128 else f"<{b:02x}>" for b in self.encode(text)]
        return self._tok.encode(text, add_special_tokens=False).tokens


def _dtype_for_vocab(vocab_size: int) -> str:
    # The all-ones id is the document separator, so the vocabulary must stay strictly below it.
    if vocab_size <= 255:
        return "u8"
    if vocab_size <= 65535:
        return "u16"
    return "u32"


def _from_json_text(name: str, json_text: str) -> IndexTokenizer:
    from tokenizers import Tokenizer

    vocab_size = Tokenizer.from_str(json_text).get_vocab_size(with_added_tokens=True)
    return IndexTokenizer(name, json_text, _dtype_for_vocab(vocab_size), vocab_size)


def load_tokenizer(spec: str) -> IndexTokenizer:
    """``"wordpiece"`` (default, uncased, bundled), ``"bytes"`` (UTF-8 bytes, case-sensitive) or a tokenizers JSON path."""
    if spec == "bytes":
        return IndexTokenizer("bytes", None, "u8", 255)
    if spec == "wordpiece":
        return _from_json_text("wordpiece", wordpiece_json())
    path = Path(spec).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"tokenizer '{spec}' is not 'wordpiece', 'bytes' or an existing tokenizers JSON file"
        )
    text = path.read_text(encoding="utf-8")
    try:
        json.loads(text)
        return _from_json_text(f"file:{path.name}", text)
    except Exception as exc:
        raise ConfigError(f"tokenizer file {path} is not a valid tokenizers JSON file: {exc}") from exc


def tokenizer_label(spec: str) -> str:
    """A short, path-safe label for cache directory names (``wordpiece``, ``bytes``, ``tok-<sha12>``)."""
    if spec in ("wordpiece", "bytes"):
        return spec
    return "tok-" + load_tokenizer(spec).sha256[:12]
