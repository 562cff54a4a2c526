"""Build the configured generator backend; heavy imports happen only for the backend that is used."""

from __future__ import annotations

from quco.config import GeneratorConfig
from quco.errors import ConfigError
from quco.llm.base import Generator


def build_generator(config: GeneratorConfig) -> Generator:
    """Load the generator that ``config`` names (for 'hf': converting the default model once if needed)."""
    if config.backend == "hf":
        from quco.llm.hf import HFGenerator

        return HFGenerator.from_config(config)
    raise ConfigError(f"unknown generator backend '{config.backend}'; use 'hf'")
