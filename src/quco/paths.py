"""Where quco keeps its caches and where it finds the evaluation data.

Two settings, both environment variables so that tests, CI and users agree:
``QUCO_CACHE_DIR`` (default: the user cache directory) and ``QUCO_DATA_DIR`` (default: ``../shared/data``
relative to the current directory, which is where a checkout sits next to the shared evaluation data).
"""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_dir


def cache_dir() -> Path:
    """Root of all built artefacts (converted model weights, BM25 and Infini-gram indexes)."""
    root = os.environ.get("QUCO_CACHE_DIR") or user_cache_dir("quco")
    path = Path(root).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir() -> Path:
    """Root of the evaluation data (HotpotQA, 2WikiMultihopQA, ...); never copied into the project."""
    root = os.environ.get("QUCO_DATA_DIR")
    if root:
        return Path(root).expanduser()
    return (Path.cwd() / ".." / "shared" / "data").resolve()
