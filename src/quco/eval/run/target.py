"""What an evaluation answers with: a config file, a ``PipelineConfig``, a built ``Pipeline``, or a function
``question -> Trace``, resolved into its identity (what the run's hash covers), a way to build it, and how its
generator answers questions concurrently."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quco.config import PipelineConfig, load_config
from quco.errors import QucoError
from quco.eval.run.answering import AnswerFn
from quco.eval.run.matched import matched_config
from quco.llm.base import Parallelism


@dataclass
class Target:
    """What answers questions, as resolved from ``run_eval``'s first argument."""

    identity: dict[str, Any]  # hashed: the resolved config, or the answer function's name + fingerprint
    build: Callable[[], tuple[AnswerFn, Any]]  # -> (answer_fn, pipeline or None)
    method: str
    config: PipelineConfig | None = None  # the config it is built from (a control's rates filled in)
    parallelism: Parallelism = "threads"  # what its generator declares
    buildable: bool = False  # built from ``config``, so worker processes can build it too


def pipeline_identity(cfg: PipelineConfig) -> dict[str, Any]:
    """What a run from this config is: the resolved config, its prompt, and the rates a control takes from a
    matched run (so that a control resumed after its matched run changed is refused, not silently mixed)."""
    return _identity(cfg, matched_config(cfg)[1])


def _identity(cfg: PipelineConfig, matched_rates: dict[str, float] | None) -> dict[str, Any]:
    from quco.methods import method_class
    from quco.pipeline import prompt_identity

    identity: dict[str, Any] = {"pipeline": cfg.model_dump(mode="json"), "prompt": prompt_identity(cfg)}
    if matched_rates is not None:
        identity["matched_rates"] = matched_rates
    inputs = method_class(cfg.method)(cfg.params).inputs()
    if inputs is not None:
        identity["inputs"] = inputs
    return identity


def resolve_target(
    target: Any,
    overrides: dict[str, Any] | None = None,
    fingerprint: str | None = None,
    progress: bool = True,
) -> Target:
    """``target`` resolved: a path (or None, the default config) is loaded with ``overrides``; a config whose
    method matches another run (``match_run``) is built with the rates read from that run."""
    from quco.llm.registry import generator_class

    if isinstance(target, str | Path) or target is None:
        target = load_config(target, overrides=overrides)
    elif overrides:
        raise QucoError("overrides apply to a config file or PipelineConfig, not to a built pipeline")

    if isinstance(target, PipelineConfig):
        built, rates = matched_config(target)
        identity = _identity(target, rates)

        def build() -> tuple[AnswerFn, Any]:
            from quco.pipeline import Pipeline

            pipe = Pipeline.from_config(built, progress=progress)
            return pipe.answer, pipe

        parallelism = generator_class(built.generator.backend).parallelism
        return Target(identity, build, built.method, built, parallelism, buildable=True)
    pipe_cfg = getattr(target, "config", None)
    if hasattr(target, "answer") and isinstance(pipe_cfg, PipelineConfig):  # a built Pipeline
        parallelism = getattr(target.generator, "parallelism", "threads")
        return Target(
            pipeline_identity(pipe_cfg),
            lambda: (target.answer, target),
            pipe_cfg.method,
            pipe_cfg,
            parallelism,
        )
    if callable(target):
        name = (
            f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(target).__name__)}"
        )
        method = str(getattr(target, "method", "") or name.rsplit(".", 1)[-1])
        identity = {"answerer": name, "method": method, "fingerprint": fingerprint}
        return Target(identity, lambda: (target, None), method)
    raise QucoError(
        f"cannot evaluate a {type(target).__name__}: pass a config file, a PipelineConfig, a Pipeline, "
        "or a function question -> Trace"
    )
