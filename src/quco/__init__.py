"""quco: dynamic retrieval-augmented generation on one engine.

from quco import Pipeline
trace = Pipeline.from_config("configs/quco.yaml").answer("Who was born first, Albert Einstein or Niels Bohr?")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = ["Pipeline", "PipelineConfig", "Trace", "load_config", "__version__"]

if TYPE_CHECKING:
    from quco.config import PipelineConfig, load_config
    from quco.pipeline import Pipeline
    from quco.trace import Trace


def __getattr__(name: str):  # noqa: ANN202 - lazy imports keep `import quco` light
    if name == "Pipeline":
        from quco.pipeline import Pipeline

        return Pipeline
    if name in ("PipelineConfig", "load_config"):
        from quco import config

        return getattr(config, name)
    if name == "Trace":
        from quco.trace import Trace

        return Trace
    raise AttributeError(name)
