"""The method registry: one small class per method, all running on ``quco.engine.loop``."""

from __future__ import annotations

from quco.engine.method import Method
from quco.errors import ConfigError
from quco.methods.quco import QuCoRAG
from quco.methods.reference import SRRAG, WoRAG

_METHODS: dict[str, type[Method]] = {m.name: m for m in (QuCoRAG, SRRAG, WoRAG)}
_ALIASES = {
    "quco-rag": "quco",
    "worag": "wo-rag",
    "no-retrieval": "wo-rag",
    "srrag": "sr-rag",
    "single-retrieval": "sr-rag",
}


def register(method: type[Method]) -> type[Method]:
    """Add a method class to the registry (usable as a decorator by plug-ins)."""
    _METHODS[method.name] = method
    return method


def available_methods() -> list[str]:
    return sorted(_METHODS)


def method_class(name: str) -> type[Method]:
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in _METHODS:
        raise ConfigError(f"unknown method '{name}'; known methods: {', '.join(available_methods())}")
    return _METHODS[key]
