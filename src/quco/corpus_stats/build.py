"""Build a local Infini-gram index from (doc_id, text) pairs.

The package's own indexing script only knows Hugging Face hub tokenizers, which cannot be downloaded here. So we
tokenize ourselves, write the engine's ``tokenized.N`` / ``offset.N`` files, and let
``python -m infini_gram.indexing`` build the suffix arrays (it skips tokenizing when those files exist). The
index is written to a temporary sibling directory and renamed into place only when complete, so a crash never
leaves a half-built index where a reader would open it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from quco.corpus_stats.encoding import CorpusEncoder
from quco.corpus_stats.tokenizer import TOKENIZER_FILE, IndexTokenizer, load_tokenizer
from quco.errors import QucoError
from quco.storage import ensure_built, staging_dir

log = logging.getLogger(__name__)

MANIFEST_FILE = "manifest.json"
DOC_IDS_FILE = "doc_ids.txt"
BUILD_LOG_FILE = "build.log"
MANIFEST_VERSION = 1
# The engine assigns files to roles by substring match on the *full path*; a directory path containing one of
# these words makes it mis-classify every file (stack.md §1).
FORBIDDEN_PATH_WORDS = ("tokenized", "table", "offset", "metadata", "metaoff")
DEFAULT_MAX_SHARD_TOKENS = 1 << 31  # well below the engine's 2^39 limit; also bounds build memory per shard


class StatsIndexError(QucoError):
    """A local corpus-statistics index is missing, unusable, or does not match the corpus or tokenizer."""


@dataclass
class Manifest:
    """What an index directory holds and how it was built; opening checks it against the request."""

    corpus_sha256: str  # over "doc_id\\ttext\\n" of every document, in order
    corpus_fingerprint: str | None  # the caller's own identity of the corpus (e.g. file path + mtime + size)
    doc_count: int
    token_count: int  # tokens of text, document separators excluded
    tokenizer: str
    tokenizer_sha256: str
    token_dtype: str
    vocab_size: int
    shards: list[dict[str, int]]  # per shard: docs, tokens
    engine: str = "infini-gram"
    engine_version: str = ""
    build_seconds: float = 0.0
    build_params: dict[str, int | str] = field(default_factory=dict)
    created: str = ""
    version: int = MANIFEST_VERSION
    tokenize_seconds: float | None = None  # reading + tokenizing + writing token files
    suffix_array_seconds: float | None = None  # the engine's own suffix-array build

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def read(cls, index_dir: Path) -> Manifest:
        path = index_dir / MANIFEST_FILE
        if not path.is_file():
            raise StatsIndexError(
                f"{index_dir} is not a quco Infini-gram index (no {MANIFEST_FILE}); build it with build_local_index"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(**data)
        except (ValueError, TypeError) as exc:
            raise StatsIndexError(f"unreadable index manifest {path}: {exc}; rebuild the index") from exc


def check_index_path(path: Path) -> None:
    """Refuse directory paths the engine would mis-read (its shard discovery is a substring match)."""
    text = str(Path(path).expanduser().resolve())
    bad = [w for w in FORBIDDEN_PATH_WORDS if w in text]
    if bad:
        raise StatsIndexError(
            f"index path {text} contains '{bad[0]}', which the Infini-gram engine mistakes for a file role; "
            f"choose a directory path without any of {', '.join(FORBIDDEN_PATH_WORDS)}"
        )


def _engine_version() -> str:
    try:
        return importlib.metadata.version("infini-gram")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _nofile_limit() -> int:
    """The open-files limit to pass as ``--ulimit``: the script raises soft *and* hard to it, so never above hard."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        return 1048576
    return int(hard)


def _mem_gib() -> int:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 << 30
    return max(1, int(total * 0.4) >> 30)


class _ShardWriter:
    """Appends documents to ``tokenized.N`` / ``offset.N`` in the engine's layout (sep + ids, u64 offsets).

    Writes go through large buffers: one ``write`` per few MB instead of three per document.
    """

    BUFFER_BYTES = 16 << 20

    def __init__(self, directory: Path, tokenizer: IndexTokenizer, max_shard_tokens: int) -> None:
        self.dir = directory
        self.dtype = tokenizer.np_dtype
        self.width = np.dtype(self.dtype).itemsize
        self.sep = np.array([tokenizer.doc_sep_id], dtype=self.dtype).tobytes()
        self.max_tokens = max_shard_tokens
        self.shards: list[dict[str, int]] = []
        self._ds = None
        self._od = None
        self._buf: list[bytes] = []
        self._buffered = 0
        self._offsets: list[int] = []
        self._open_next()

    def _open_next(self) -> None:
        self.close()
        n = len(self.shards)
        self._ds = open(self.dir / f"tokenized.{n}", "wb")  # noqa: SIM115 - kept open across many writes
        self._od = open(self.dir / f"offset.{n}", "wb")  # noqa: SIM115
        self._pos = 0
        self.shards.append({"docs": 0, "tokens": 0})

    def write(self, ids: np.ndarray) -> None:
        cur = self.shards[-1]
        if cur["docs"] and cur["tokens"] + len(ids) > self.max_tokens:
            self._open_next()
            cur = self.shards[-1]
        body = np.ascontiguousarray(ids, dtype=self.dtype).tobytes()
        self._offsets.append(self._pos)
        self._buf.append(self.sep)
        self._buf.append(body)
        self._buffered += len(self.sep) + len(body)
        self._pos += len(self.sep) + len(body)
        cur["docs"] += 1
        cur["tokens"] += len(ids)
        if self._buffered >= self.BUFFER_BYTES:
            self._flush()

    def _flush(self) -> None:
        assert self._ds is not None and self._od is not None
        self._ds.write(b"".join(self._buf))
        self._od.write(np.asarray(self._offsets, dtype="<u8").tobytes())
        self._buf, self._offsets, self._buffered = [], [], 0

    def close(self) -> None:
        if self._ds is not None:
            self._flush()
        for f in (self._ds, self._od):
            if f is not None:
                f.close()
        self._ds = self._od = None


def _build_suffix_arrays(tmp: Path, token_dtype: str, n_shards: int, ds_bytes: int) -> dict[str, int | str]:
    # Two parallel jobs crashed in the Rust concat step on tiny corpora (anchors.md §6): one job below 64 MB.
    cpus = 1 if ds_bytes < (64 << 20) else max(1, min(os.cpu_count() or 1, 8))
    params: dict[str, int | str] = {
        "token_dtype": token_dtype,
        "cpus": cpus,
        "mem_gib": _mem_gib(),
        "shards": n_shards,
        "ulimit": _nofile_limit(),
    }
    cmd = [
        sys.executable, "-m", "infini_gram.indexing",
        "--data_dir", str(tmp), "--save_dir", str(tmp), "--temp_dir", str(tmp),
        "--token_dtype", token_dtype, "--cpus", str(cpus), "--mem", str(params["mem_gib"]),
        "--shards", str(n_shards), "--ulimit", str(params["ulimit"]),
    ]  # fmt: skip
    with open(tmp / BUILD_LOG_FILE, "wb") as logf:
        proc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, check=False)
    text = (tmp / BUILD_LOG_FILE).read_text(encoding="utf-8", errors="replace")
    if proc.returncode != 0 or "Something went wrong" in text:
        tail = " | ".join(line.strip() for line in text.strip().splitlines()[-3:])
        raise StatsIndexError(f"suffix-array build failed (exit {proc.returncode}): {tail}")
    return params


def _verify_tables(tmp: Path, n_shards: int, width: int) -> None:
    for i in range(n_shards):
        ds = (tmp / f"tokenized.{i}").stat().st_size
        sa_path = tmp / f"table.{i}"
        if not sa_path.is_file():
            raise StatsIndexError(f"suffix-array build left no table.{i}; see {BUILD_LOG_FILE} in {tmp}")
        tok_cnt = ds // width
        if tok_cnt == 0 or sa_path.stat().st_size % tok_cnt:
            raise StatsIndexError(f"suffix array table.{i} has a size inconsistent with its shard; rebuild")


def build_local_index(
    docs: Iterable[tuple[str, str]],
    out_dir: Path,
    tokenizer: str = "wordpiece",
    progress: bool = True,
    *,
    corpus_fingerprint: str | None = None,
    max_shard_tokens: int = DEFAULT_MAX_SHARD_TOKENS,
    batch_size: int = 500,
    total_docs: int | None = None,
) -> Path:
    """Tokenize ``docs`` and build an Infini-gram index at ``out_dir`` (which must not exist yet); returns it.

    Documents stream through in batches of ``batch_size``: memory stays bounded by one batch plus the
    tokenizer's chunk table, whatever the corpus size. ``total_docs`` only sizes the progress bar.
    """
    out_dir = Path(out_dir).expanduser().resolve()
    check_index_path(out_dir)
    if out_dir.exists():
        raise StatsIndexError(f"index directory {out_dir} already exists; remove it or choose another --out")
    tok = load_tokenizer(tokenizer)
    check_index_path(staging_dir(out_dir))
    built, _ = ensure_built(
        out_dir,
        lambda tmp: write_local_index(
            docs,
            tmp,
            tok,
            progress,
            corpus_fingerprint=corpus_fingerprint,
            max_shard_tokens=max_shard_tokens,
            batch_size=batch_size,
            total_docs=total_docs,
            target=out_dir,
        ),
        reusable=lambda _: False,
        load=lambda target: target,
        replace=False,  # the rename fails if out_dir appeared meanwhile
    )
    return built


def write_local_index(
    docs: Iterable[tuple[str, str]],
    tmp: Path,
    tok: IndexTokenizer,
    progress: bool = True,
    *,
    corpus_fingerprint: str | None = None,
    max_shard_tokens: int = DEFAULT_MAX_SHARD_TOKENS,
    batch_size: int = 500,
    total_docs: int | None = None,
    target: Path | None = None,
) -> None:
    """Tokenize ``docs`` into the empty directory ``tmp`` and build the suffix arrays there, the manifest last;
    ``target`` (where ``tmp`` will go) names the index in messages."""
    target = target or tmp
    encoder = CorpusEncoder(tok)
    started = time.perf_counter()
    sha = hashlib.sha256()
    writer = _ShardWriter(tmp, tok, max_shard_tokens)
    bar = tqdm(
        desc=f"tokenizing ({tok.name})",
        unit=" docs",
        total=total_docs,
        disable=not progress,
        mininterval=0.5,
    )
    with open(tmp / DOC_IDS_FILE, "w", encoding="utf-8") as idf:

        def flush(batch: list[tuple[str, str]]) -> None:
            for ids in encoder.encode_batch([t for _, t in batch]):
                writer.write(ids)
            idf.write("".join(doc_id.replace("\n", " ") + "\n" for doc_id, _ in batch))
            bar.update(len(batch))

        batch: list[tuple[str, str]] = []
        for doc_id, text in docs:
            doc_id, text = str(doc_id), str(text)
            sha.update(f"{doc_id}\t{text}\n".encode())
            batch.append((doc_id, text))
            if len(batch) >= batch_size:
                flush(batch)
                batch = []
        if batch:
            flush(batch)
    writer.close()
    bar.close()
    tokenize_s = time.perf_counter() - started
    shards = writer.shards
    n_docs = sum(s["docs"] for s in shards)
    n_tokens = sum(s["tokens"] for s in shards)
    if n_docs == 0:
        raise StatsIndexError(f"no documents to index for {target}; check the corpus file")
    if n_tokens == 0:
        raise StatsIndexError(f"the corpus for {target} has no text to index (all {n_docs} documents empty)")
    width = np.dtype(tok.np_dtype).itemsize
    ds_bytes = sum((tmp / f"tokenized.{i}").stat().st_size for i in range(len(shards)))
    log.info(
        "tokenized %d docs, %d tokens in %.1f s (%d distinct whitespace chunks sent to the tokenizer); "
        "building suffix arrays for %d shard(s)",
        n_docs,
        n_tokens,
        tokenize_s,
        encoder.chunks_tokenized,
        len(shards),
    )
    sa_started = time.perf_counter()
    with tqdm(
        total=len(shards), desc=f"suffix array ({n_tokens:,} tokens)", unit=" shard", disable=not progress
    ) as sa_bar:
        params = _build_suffix_arrays(tmp, tok.token_dtype, len(shards), ds_bytes)
        sa_bar.update(len(shards))
    suffix_array_s = time.perf_counter() - sa_started
    _verify_tables(tmp, len(shards), width)
    if tok.json_text is not None:
        (tmp / TOKENIZER_FILE).write_text(tok.json_text, encoding="utf-8")
    manifest = Manifest(
        corpus_sha256=sha.hexdigest(),
        corpus_fingerprint=corpus_fingerprint,
        doc_count=n_docs,
        token_count=n_tokens,
        tokenizer=tok.name,
        tokenizer_sha256=tok.sha256,
        token_dtype=tok.token_dtype,
        vocab_size=tok.vocab_size,
        shards=shards,
        engine_version=_engine_version(),
        build_seconds=round(time.perf_counter() - started, 3),
        build_params={**params, "max_shard_tokens": max_shard_tokens},
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        tokenize_seconds=round(tokenize_s, 3),
        suffix_array_seconds=round(suffix_array_s, 3),
    )
    (tmp / MANIFEST_FILE).write_text(manifest.to_json(), encoding="utf-8")


def index_size_bytes(index_dir: Path) -> int:
    """Bytes on disk of the engine's files (tokens, suffix array, offsets)."""
    return sum(
        p.stat().st_size
        for p in Path(index_dir).iterdir()
        if p.name.split(".")[0] in ("tokenized", "table", "offset")
    )
