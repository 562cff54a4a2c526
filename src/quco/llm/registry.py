"""Build the configured generator backend; heavy imports happen only for the backend that is used."""

from __future__ import annotations

from quco.config import GeneratorConfig
from quco.errors import ConfigError
from quco.llm.base import Generator, GeneratorBase

BACKENDS = ("hf", "openai", "llamacpp")


def generator_class(backend: str) -> type[GeneratorBase]:
    """The generator class of a backend, without loading a model (what it declares, e.g. its parallelism)."""
    if backend == "hf":
        from quco.llm.hf import HFGenerator

        return HFGenerator
    if backend == "openai":
        from quco.llm.openai_compat import OpenAICompatGenerator

        return OpenAICompatGenerator
    if backend == "llamacpp":
        from quco.llm.llamacpp import LlamaCppGenerator

        return LlamaCppGenerator
    raise ConfigError(f"unknown generator backend '{backend}'; use one of {', '.join(BACKENDS)}")


def build_generator(config: GeneratorConfig) -> Generator:
    """Load the generator that ``config`` names (for 'hf': converting the default model once if needed)."""
    return generator_class(config.backend).from_config(config)  # type: ignore[attr-defined]
