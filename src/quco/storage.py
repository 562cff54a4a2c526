"""One lifecycle for every artefact quco builds on disk (BM25 and dense indexes, Infini-gram indexes, haystacks,
converted models).

1. Take the build lock of the target (:func:`locked`; one builder at a time, the others wait and then reuse).
2. Remove what killed builds left beside the target (:func:`clean_stale_builds`).
3. Build into a temporary sibling directory (:func:`staged`), verify it, and write its manifest last.
4. Swap it into place (:func:`swap_into_place`): an old artefact is moved aside first, then removed, so a
   directory with a manifest is always complete. On any error the temporary directory is removed.
5. Later runs reuse it when its manifest matches (:meth:`ArtefactFormat.reusable_manifest`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import Timeout

from quco.locks import build_lock

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
_BUILDING = "building"
_OLD = "old"


def build_target(named: str | os.PathLike[str] | None, default: Callable[[], Path]) -> tuple[Path, bool]:
    """(where to build, whether the user named it): ``named`` if given, else ``default()``; its parent exists."""
    target = Path(named).expanduser() if named is not None else default()
    target.parent.mkdir(parents=True, exist_ok=True)
    return target, named is not None


def staging_dir(target: Path) -> Path:
    """A fresh name for the temporary sibling directory a build of ``target`` writes into."""
    return target.parent / f".{target.name}.{_BUILDING}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def swap_into_place(tmp: Path, target: Path) -> None:
    """Rename the finished build over ``target``; an old one is moved aside first, then removed."""
    old: Path | None = None
    if target.exists():
        old = target.parent / f".{target.name}.{_OLD}-{uuid.uuid4().hex[:8]}"
        os.replace(target, old)
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def staged(target: Path, *, replace: bool = True) -> Iterator[Path]:
    """Build ``target`` in a temporary sibling directory, yielded; it is moved into place when the block ends
    and removed if the block raises (anything, including KeyboardInterrupt).

    ``replace=False`` refuses to replace a ``target`` that appeared meanwhile (an atomic rename).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = staging_dir(target)
    tmp.mkdir()
    try:
        yield tmp
        if replace:
            swap_into_place(tmp, target)
        else:
            os.rename(tmp, target)  # fails if target exists (a non-empty directory) on one filesystem
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def clean_stale_builds(target: Path, *patterns: str) -> None:
    """Remove temporary directories left beside ``target`` by killed builds (call it holding the build lock).

    ``patterns`` add other sibling globs (``{name}`` stands for the target's name) an older layout left.
    """
    globs = [f".{target.name}.{_BUILDING}-*", f".{target.name}.{_OLD}-*"]
    globs += [p.format(name=target.name) for p in patterns]
    for pattern in globs:
        for stale in target.parent.glob(pattern):
            shutil.rmtree(stale, ignore_errors=True)


@contextmanager
def locked(
    target: Path,
    *,
    timeout: float = -1,
    error: Callable[[str], Exception] | None = None,
) -> Iterator[None]:
    """Hold the build lock of ``target``; a waiting process says so in the log.

    After ``timeout`` seconds (never, if negative) ``error(message)`` is raised, or filelock's ``Timeout``.
    """
    lock = build_lock(target)
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            log.info("another process is building %s; waiting for it (lock %s)", target, lock.lock_file)
            lock.acquire(timeout=timeout)
    except Timeout as exc:
        if error is None:
            raise
        raise error(
            f"timed out waiting for the build lock {lock.lock_file} of {target}; if no other quco process is "
            "building it, delete that file"
        ) from exc
    try:
        yield
    finally:
        lock.release()


def file_sha256(path: Path, block: int = 1 << 20) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(block), b""):
            h.update(chunk)
    return h.hexdigest()


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and move it into place: a crash leaves the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, data: Any, *, indent: int = 1) -> None:
    """Write a manifest (the last file of a build)."""
    path.write_text(json.dumps(data, indent=indent), encoding="utf-8")


@dataclass(frozen=True)
class ArtefactFormat:
    """One kind of index directory with a JSON manifest carrying ``format`` and ``version``.

    ``label`` names it in messages ("index", "dense index"), ``kind`` in "not a quco <kind> manifest",
    ``build_hint`` says how to build it; errors are raised as ``error``.
    """

    format: str
    version: int
    label: str
    kind: str
    build_hint: str
    error: type[Exception]
    manifest_name: str = MANIFEST_NAME

    def read_manifest(self, directory: Path) -> dict[str, Any] | None:
        """The manifest, or None if there is none; an unreadable or foreign one is an error."""
        path = directory / self.manifest_name
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise self.error(
                f"{self.label} {directory}: unreadable {self.manifest_name} ({exc}); delete it and rebuild"
            ) from exc
        if not isinstance(data, dict) or data.get("format") != self.format:
            raise self.error(
                f"{self.label} {directory}: {self.manifest_name} is not a quco {self.kind} manifest"
            )
        return data

    def open_manifest(self, directory: Path) -> dict[str, Any]:
        """The manifest of a complete index of this version; anything else is an error saying what to do."""
        if not directory.is_dir():
            raise self.error(f"no {self.label} at {directory}; build it with {self.build_hint}")
        manifest = self.read_manifest(directory)
        if manifest is None:
            raise self.error(
                f"{self.label} {directory} has no {self.manifest_name}, so it may be partial; delete it and rebuild"
            )
        if manifest.get("version") != self.version:
            raise self.error(
                f"{self.label} {directory} has format version {manifest.get('version')}, this quco reads "
                f"{self.version}; delete it and rebuild"
            )
        return manifest

    def reusable_manifest(
        self,
        directory: Path,
        *,
        explicit: bool,
        same_source: Callable[[dict[str, Any]], bool],
        other_source: Callable[[dict[str, Any]], str],
    ) -> dict[str, Any] | None:
        """The manifest of an index at ``directory`` built from the same source, else None (build it).

        A directory we cannot vouch for is rebuilt when it is our cache, and refused when the user named it
        (``explicit``): ``other_source(manifest)`` is then the message.
        """
        if not directory.exists():
            return None
        try:
            manifest = self.read_manifest(directory)
        except self.error:
            if explicit:
                raise
            return None
        if manifest is None:
            if explicit and any(directory.iterdir()):
                raise self.error(
                    f"{directory} is not empty and holds no quco {self.label} manifest; choose another directory"
                )
            return None
        if not same_source(manifest):
            if explicit:
                raise self.error(other_source(manifest))
            return None
        return manifest
