"""LLM generators behind one protocol; ``build_generator`` picks the configured backend."""

from quco.llm.base import (
    CAPABILITY_PROVIDERS,
    Analysis,
    Capability,
    Generation,
    Generator,
    require,
)
from quco.llm.registry import build_generator

__all__ = [
    "CAPABILITY_PROVIDERS",
    "Analysis",
    "Capability",
    "Generation",
    "Generator",
    "build_generator",
    "require",
]
