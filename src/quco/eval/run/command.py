"""Running an evaluation from a config file: the config resolved (file, ``--method``, ``--set``), the dataset
inferred where not given, and the run started or resumed. ``quco eval`` and the results campaign both call it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from quco.config import PipelineConfig, load_config, parse_override
from quco.datasets import DATASETS
from quco.errors import QucoError
from quco.eval.run.runner import EvalOptions, Questions, RunSummary, run_eval


class DatasetNotGiven(QucoError):
    """The dataset could not be inferred from the config."""


def infer_dataset(cfg: PipelineConfig, config_path: Path | None) -> str:
    """The dataset a config is written for: its folder (configs/hotpotqa/...), else its built-in exemplars."""
    if config_path is not None and config_path.parent.name in DATASETS:
        return config_path.parent.name
    spec = cfg.prompt.exemplars
    if spec.startswith("builtin:") and spec.split(":", 1)[1] in DATASETS:
        return spec.split(":", 1)[1]
    raise DatasetNotGiven("cannot tell which dataset this config is for; pass --dataset (e.g. hotpotqa)")


def eval_command(
    config: Path | None = None,
    dataset: str | None = None,
    limit: int | None = None,
    offset: int = 0,
    out_dir: Path | None = None,
    workers: int | None = None,
    resume: bool = True,
    reprompt: bool = False,
    sets: Sequence[str] = (),
    method: str | None = None,
    sample: int | None = None,
    seed: int = 0,
    retry_errors: bool = False,
    label: str | None = None,
    progress: bool = True,
    traces_from: Path | None = None,
    strict: bool = False,
) -> RunSummary:
    """Resolve the config (file + --method + --set), pick the dataset, and run (or resume) the evaluation."""
    if strict and reprompt:
        raise QucoError("--strict and --reprompt contradict each other; pass one of them")
    overrides = dict(parse_override(s) for s in sets)
    cfg = load_config(config, overrides=overrides, method=method)
    name = dataset or infer_dataset(cfg, config)
    return run_eval(
        cfg,
        name,
        Questions(limit=limit, offset=offset, sample=sample, seed=seed),
        EvalOptions(
            out_dir=out_dir,
            workers=workers,
            resume=resume,
            reprompt=reprompt,
            progress=progress,
            retry_errors=retry_errors,
            label=label,
            traces_from=traces_from,
            protocol="strict" if strict else None,
        ),
    )
