"""One lifecycle for every artefact quco builds on disk (BM25 and dense indexes, Infini-gram indexes, haystacks,
converted models).

1. Take the build lock of the target (:func:`locked`; one builder at a time, the others wait and then reuse).
2. Remove what killed builds left beside the target (:func:`clean_stale_builds`).
3. Reuse what is there when its manifest matches (e.g. :meth:`ArtefactFormat.reusable_manifest`).
4. Build into a temporary sibling (:func:`staged`), verify it, and write its manifest last.
5. Swap it into place (:func:`swap_into_place`): an old artefact is moved aside first, then removed, so a
   directory with a manifest is always complete. On any error the temporary sibling is removed.

:func:`ensure_built` runs these steps; every artefact is built through it. The small helpers every writer
shares live here too: :func:`file_sha256` (optionally remembered per path, size and mtime) and
:func:`write_text_atomic`.
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
from typing import Any, TypeVar

from filelock import Timeout

from quco.locks import build_lock
from quco.paths import cache_dir

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
_BUILDING = "building"
_OLD = "old"
T = TypeVar("T")


def build_target(named: str | os.PathLike[str] | None, default: Callable[[], Path]) -> tuple[Path, bool]:
    """(where to build, whether the user named it): ``named`` if given, else ``default()``; its parent exists."""
    target = Path(named).expanduser() if named is not None else default()
    target.parent.mkdir(parents=True, exist_ok=True)
    return target, named is not None


def staging_dir(target: Path) -> Path:
    """A fresh name for the temporary sibling directory a build of ``target`` writes into."""
    return target.parent / f".{target.name}.{_BUILDING}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _remove(path: Path) -> None:
    """Remove a file or a directory tree, whatever is there; missing is fine."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def swap_into_place(tmp: Path, target: Path) -> None:
    """Rename the finished build over ``target``; an old one is moved aside first, then removed."""
    if not tmp.is_dir():  # a file replaces its target in one atomic rename
        os.replace(tmp, target)
        return
    old: Path | None = None
    if target.exists():
        old = target.parent / f".{target.name}.{_OLD}-{uuid.uuid4().hex[:8]}"
        os.replace(target, old)
    os.replace(tmp, target)
    if old is not None:
        _remove(old)


@contextmanager
def staged(target: Path, *, replace: bool = True, file: bool = False) -> Iterator[Path]:
    """Build ``target`` in a temporary sibling directory, yielded; it is moved into place when the block ends
    and removed if the block raises (anything, including KeyboardInterrupt).

    ``file=True`` yields a temporary sibling file name instead (not created) for an artefact that is one file.
    ``replace=False`` refuses to replace a ``target`` that appeared meanwhile (an atomic rename).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = staging_dir(target)
    if not file:
        tmp.mkdir()
    try:
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(f"the build of {target} wrote nothing to {tmp}")
        if replace:
            swap_into_place(tmp, target)
        else:
            os.rename(tmp, target)  # fails if target exists (a non-empty directory) on one filesystem
    except BaseException:
        _remove(tmp)
        raise


def clean_stale_builds(target: Path, *patterns: str) -> None:
    """Remove temporary directories left beside ``target`` by killed builds (call it holding the build lock).

    ``patterns`` add other sibling globs (``{name}`` stands for the target's name) an older layout left.
    """
    globs = [f".{target.name}.{_BUILDING}-*", f".{target.name}.{_OLD}-*"]
    globs += [p.format(name=target.name) for p in patterns]
    for pattern in globs:
        for stale in target.parent.glob(pattern):
            _remove(stale)


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


def ensure_built(
    target: Path,
    write: Callable[[Path], object],
    *,
    reusable: Callable[[Path], bool],
    load: Callable[[Path], T],
    force: bool = False,
    file: bool = False,
    replace: bool = True,
    stale: tuple[str, ...] = (),
    timeout: float = -1,
    error: Callable[[str], Exception] | None = None,
) -> tuple[T, bool]:
    """(``load(target)``, reused): the one build path of every artefact quco keeps on disk.

    Holding the build lock of ``target``, what killed builds left beside it is removed
    (:func:`clean_stale_builds`, plus the ``stale`` globs). If ``reusable(target)`` (and not ``force``), it
    is loaded as it is; else ``write(tmp)`` builds into a temporary sibling (a directory, or with
    ``file=True`` a file name), which is swapped into place only when ``write`` returns (:func:`staged`;
    ``replace=False`` refuses to replace a target that appeared meanwhile), and the result is loaded. A
    ``write`` that raises leaves the target as it was. ``reusable`` may raise to refuse a target it must not
    replace (one the user named). ``timeout`` and ``error`` are those of :func:`locked`.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target, timeout=timeout, error=error):
        clean_stale_builds(target, *stale)
        if not force and reusable(target):
            return load(target), True
        with staged(target, replace=replace, file=file) as tmp:
            write(tmp)
        return load(target), False


def _digest(path: Path, prefix: bytes = b"", block: int = 1 << 20) -> str:
    h = hashlib.sha256(prefix)
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(block), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: str | os.PathLike[str], block: int = 1 << 20, *, remember: bool = False) -> str:
    """The sha256 of a file's bytes, read in blocks.

    ``remember=True`` keeps it per (path, size, mtime) in memory and in the cache (:func:`remembered_digest`),
    for large files hashed on every run; a download being verified is hashed afresh.
    """
    if remember:
        return remembered_digest(Path(path).resolve(), "sha256")
    return _digest(Path(path), block=block)


# Digests of large files take seconds; remember them per (path, size, mtime, kind) across runs.
_DIGESTS: dict[tuple[str, int, int, str], str] = {}


def _digest_cache_file() -> Path:
    return cache_dir() / "fingerprints.json"


def _read_digest_cache() -> dict[str, str]:
    try:
        data = json.loads(_digest_cache_file().read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _remember_digest(key: str, value: str) -> None:
    data = _read_digest_cache()
    data[key] = value
    try:
        write_text_atomic(_digest_cache_file(), json.dumps(data, indent=0, sort_keys=True))
    except OSError as exc:  # a read-only cache only costs a re-hash next time
        log.debug("could not write the digest cache %s: %s", _digest_cache_file(), exc)


def remembered_digest(path: Path, kind: str, prefix: bytes = b"") -> str:
    """sha256 of ``prefix`` + the file's bytes, remembered per (path, size, mtime, ``kind``) in memory and in
    ``<cache>/fingerprints.json``; ``kind`` names what ``prefix`` makes of it (``"sha256"``: nothing)."""
    st = path.stat()
    memo_key = (str(path), st.st_size, st.st_mtime_ns, kind)
    if memo_key in _DIGESTS:
        return _DIGESTS[memo_key]
    disk_key = "|".join(str(x) for x in memo_key)
    cached = _read_digest_cache().get(disk_key)
    if cached is None:
        cached = _digest(path, prefix)
        _remember_digest(disk_key, cached)
    _DIGESTS[memo_key] = cached
    return cached


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) as :func:`write_bytes_atomic` does."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk and move it into place: a crash
    leaves the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
