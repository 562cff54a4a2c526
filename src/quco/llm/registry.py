"""Build the configured generator backend; heavy imports happen only for the backend that is used."""

from __future__ import annotations

from quco.config import GeneratorConfig
from quco.errors import ConfigError
from quco.llm.base import Generator

BACKENDS = ("hf", "openai", "llamacpp")


def build_generator(config: GeneratorConfig) -> Generator:
    """Load the generator that ``config`` names (for 'hf': converting the default model once if needed)."""
    if config.backend == "hf":
        from quco.llm.hf import HFGenerator

        return HFGenerator.from_config(config)
    if config.backend == "openai":
        from quco.llm.openai_compat import OpenAICompatGenerator

        return OpenAICompatGenerator.from_config(config)
    if config.backend == "llamacpp":
        from quco.llm.llamacpp import LlamaCppGenerator

        return LlamaCppGenerator.from_config(config)
    raise ConfigError(f"unknown generator backend '{config.backend}'; use one of {', '.join(BACKENDS)}")
