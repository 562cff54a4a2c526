"""Build locks kept in the cache, so that nothing is left beside the directories users name.

A lock file cannot be deleted safely after use: a waiting process holds the old inode while a newcomer creates
a new file and both would "hold" the lock. So the lock files stay, in ``<cache>/locks/``, named after the
resolved target path; every builder of the same target (with the same cache) takes the same lock.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from filelock import FileLock

from quco.paths import cache_dir


def build_lock(target: str | Path, timeout: float = -1) -> FileLock:
    """The inter-process lock guarding builds of ``target`` (a directory that may not exist yet)."""
    resolved = str(Path(target).expanduser().resolve())
    digest = hashlib.sha256(resolved.encode("utf-8")).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(resolved).name)[:60]
    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    return FileLock(str(locks / f"{safe}-{digest}.lock"), timeout=timeout)
