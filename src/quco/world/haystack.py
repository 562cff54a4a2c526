"""The retrieval haystack: Wikipedia articles in 100-word passages (DPR ``psgs_w100`` form) plus a paragraph pool.

DPR split each article into consecutive, non-overlapping passages of 100 whitespace-separated words, titled
with the article's title. We do the same for the 30,539 articles (about 666k passages) and append the dataset's
paragraph pool unsplit, so the gold paragraphs are present as needles. Ids are deterministic: ``<article
id>:<k>`` for the k-th passage of an article and ``<dataset>-pool:<n>`` for the n-th pool record, so the same
sources always give a byte-identical file (its sha256 is in the manifest).

A haystack directory holds ``psgs_w100.tsv`` (header ``id text title``, csv-quoted like DPR's) and
``manifest.json`` (sources with sha256, counts, parameters), written last; indexes built from it go inside the
same directory. The sources are read where they are and never copied.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from quco.errors import CorpusFormatError
from quco.paths import data_dir
from quco.retrieval.corpus import CorpusReport, CorpusSource
from quco.storage import ensure_built, file_sha256, write_json
from quco.world.sources import article_paths, pool_for, world_dir

log = logging.getLogger(__name__)

HAYSTACK_FORMAT = "quco-haystack"
HAYSTACK_VERSION = 1
MANIFEST = "manifest.json"
DEFAULT_WORDS = 100


def passages_file(words: int) -> str:
    return f"psgs_w{words}.tsv"


@dataclass
class HaystackSource:
    role: str  # "articles" or "pool"
    path: str
    bytes: int
    sha256: str
    records: int = 0
    passages: int = 0
    dataset: str | None = None  # for a pool


@dataclass
class HaystackManifest:
    """What a haystack holds and how it was made; a haystack is reused only when all of this matches."""

    name: str
    words_per_passage: int
    sources: list[HaystackSource]
    passages: int = 0
    article_passages: int = 0
    pool_passages: int = 0
    words: int = 0
    file: str = ""
    file_bytes: int = 0
    file_sha256: str = ""
    build_seconds: float = 0.0
    created: str = ""
    rule: str = (
        "articles: consecutive non-overlapping passages of N whitespace-separated words, titled with the "
        "article title, id '<article id>:<k>'; pool: one passage per record, unsplit, id '<dataset>-pool:<n>'"
    )
    format: str = HAYSTACK_FORMAT
    version: int = HAYSTACK_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def identity(self) -> dict[str, Any]:
        """The parts that decide the contents (paths and timings do not)."""
        return {
            "words": self.words_per_passage,
            "version": self.version,
            "sources": [(s.role, s.sha256, s.dataset) for s in self.sources],
        }

    @classmethod
    def read(cls, directory: Path) -> HaystackManifest:
        path = directory / MANIFEST
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") != HAYSTACK_FORMAT:
                raise ValueError(f"format is {data.get('format')!r}, not {HAYSTACK_FORMAT!r}")
            data["sources"] = [HaystackSource(**s) for s in data["sources"]]
            return cls(**data)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise CorpusFormatError(
                f"{directory} is not a usable haystack ({exc}); build it with `quco index haystack`"
            ) from exc


def _source(role: str, path: Path, dataset: str | None = None) -> HaystackSource:
    if not path.is_file():
        raise CorpusFormatError(f"haystack source not found: {path} (set QUCO_DATA_DIR to the data folder)")
    return HaystackSource(
        role, str(path), path.stat().st_size, file_sha256(path, remember=True), dataset=dataset
    )


def plan(
    dataset: str | None,
    *,
    articles: Sequence[str | os.PathLike[str]] | None = None,
    pool: str | os.PathLike[str] | None = None,
    words: int = DEFAULT_WORDS,
) -> HaystackManifest:
    """The manifest a build would write (sources hashed, nothing read yet)."""
    if words < 1:
        raise CorpusFormatError(f"words per passage must be at least 1, not {words}")
    art = [Path(a).expanduser() for a in articles] if articles else article_paths()
    sources = [_source("articles", p) for p in art]
    name = "wiki-articles"
    if pool is not None or dataset is not None:
        ds = pool_for(dataset).dataset if dataset is not None else Path(str(pool)).name.split(".")[0]
        pool_path = Path(pool).expanduser() if pool is not None else data_dir() / pool_for(ds).file
        sources.append(_source("pool", pool_path, ds))
        name = f"wiki-articles+{ds}-pool"
    return HaystackManifest(name=name, words_per_passage=words, sources=sources)


def _write_haystack(manifest: HaystackManifest, tmp: Path, progress: bool = True) -> None:
    """Write the haystack described by ``manifest`` into the empty directory ``tmp``, its manifest last."""
    started = time.perf_counter()
    words_n = manifest.words_per_passage
    target = tmp / passages_file(words_n)
    total = sum(s.bytes for s in manifest.sources)
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="haystack", disable=not progress)
    done = 0
    with bar, target.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "text", "title"])
        for src in manifest.sources:
            report = CorpusReport()
            source = CorpusSource.resolve(src.path)
            base = done

            def advance(pos: int, base: int = base) -> None:
                bar.update(base + pos - bar.n)

            for rec, passage in enumerate(source.iter_passages(report=report, progress=advance), 1):
                if src.role == "articles":
                    words = passage.text.split()
                    title = " ".join(passage.title.split())
                    rows = [
                        (f"{passage.id}:{k}", " ".join(words[i : i + words_n]), title)
                        for k, i in enumerate(range(0, len(words), words_n))
                    ]
                    manifest.words += len(words)
                else:
                    title = " ".join(passage.title.split())
                    rows = [(f"{src.dataset}-pool:{rec}", " ".join(passage.text.split()), title)]
                    manifest.words += len(passage.text.split())
                writer.writerows(rows)
                src.passages += len(rows)
            src.records = report.passages
            done += src.bytes
    manifest.article_passages = sum(s.passages for s in manifest.sources if s.role == "articles")
    manifest.pool_passages = sum(s.passages for s in manifest.sources if s.role == "pool")
    manifest.passages = manifest.article_passages + manifest.pool_passages
    manifest.file = target.name
    manifest.file_bytes = target.stat().st_size
    manifest.file_sha256 = file_sha256(target)
    manifest.build_seconds = round(time.perf_counter() - started, 3)
    manifest.created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_json(tmp / MANIFEST, asdict(manifest))
    log.info(
        "haystack %s: %d passages (%d from articles, %d from the pool) in %.1f s",
        manifest.name,
        manifest.passages,
        manifest.article_passages,
        manifest.pool_passages,
        manifest.build_seconds,
    )


def default_haystack_dir(manifest: HaystackManifest) -> Path:
    pools = [s.dataset for s in manifest.sources if s.role == "pool"]
    return world_dir() / (pools[0] if pools else "articles") / f"haystack-w{manifest.words_per_passage}"


def ensure_haystack(
    wanted: HaystackManifest, out_dir: Path | None = None, progress: bool = True, force: bool = False
) -> tuple[Path, HaystackManifest, bool]:
    """(directory, manifest, reused): reuse a complete haystack of the same sources, else build it.

    A directory the user named that holds a haystack of other sources is refused rather than replaced.
    """
    explicit = out_dir is not None
    target = Path(out_dir).expanduser().resolve() if out_dir is not None else default_haystack_dir(wanted)

    def reusable(directory: Path) -> bool:
        if not directory.exists():
            return False
        if (directory / MANIFEST).is_file():
            have = HaystackManifest.read(directory)
            if have.identity() == wanted.identity() and (directory / have.file).is_file():
                return True
            if explicit:
                raise CorpusFormatError(
                    f"{directory} holds a haystack of other sources or parameters; choose another --out "
                    "or pass --force to replace it"
                )
        elif explicit and any(directory.iterdir()):
            raise CorpusFormatError(f"{directory} exists and is not a haystack; choose another --out")
        return False

    manifest, reused = ensure_built(
        target,
        lambda tmp: _write_haystack(wanted, tmp, progress=progress),
        reusable=reusable,
        load=HaystackManifest.read,
        force=force,
    )
    return target, manifest, reused


def resolve_haystack(spec: str) -> tuple[Path, Path]:
    """``DATASET`` (built on first use under the world directory) or a haystack directory ->
    (passages file, directory)."""
    spec = spec.strip()
    path = Path(spec).expanduser()
    if path.is_dir():
        manifest = HaystackManifest.read(path)
        file = path / manifest.file
        if not file.is_file():
            raise CorpusFormatError(f"haystack {path} lacks its passages file {manifest.file}; rebuild it")
        return file.resolve(), path.resolve()
    target, manifest, reused = ensure_haystack(plan(spec))
    if not reused:
        log.info("built haystack %s (%d passages)", target, manifest.passages)
    return target / manifest.file, target
