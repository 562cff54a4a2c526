"""The method registry: one small module per method under ``quco.methods``, all running on the one loop.

Every ``Method`` subclass with a ``name`` defined in a module of this package is registered on first use;
plug-ins outside the package call ``register``.
"""

from __future__ import annotations

import importlib
import pkgutil

from quco.engine.method import Method
from quco.errors import ConfigError

_METHODS: dict[str, type[Method]] = {}
_ALIASES = {
    "quco-rag": "quco",
    "worag": "wo-rag",
    "no-retrieval": "wo-rag",
    "non-retrieval": "wo-rag",
    "srrag": "sr-rag",
    "single-retrieval": "sr-rag",
    "fix-length-retrieval": "fl-rag",
    "fix-sentence-retrieval": "fs-rag",
    "token": "flare",
    "attn_prob": "dragin",
}
_discovered = False


def register(method: type[Method]) -> type[Method]:
    """Add a method class to the registry (usable as a decorator by plug-ins)."""
    _METHODS[method.name] = method
    return method


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    for info in pkgutil.iter_modules(__path__, prefix=f"{__name__}."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Method) and obj is not Method and obj.name:
                _METHODS.setdefault(obj.name, obj)


def available_methods() -> list[str]:
    _discover()
    return sorted(_METHODS)


def method_class(name: str) -> type[Method]:
    _discover()
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in _METHODS:
        raise ConfigError(f"unknown method '{name}'; known methods: {', '.join(available_methods())}")
    return _METHODS[key]
