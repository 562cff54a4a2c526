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
    config: Path | None,
    dataset: str | None,
    questions: Questions,
    options: EvalOptions,
    sets: Sequence[str] = (),
    method: str | None = None,
) -> RunSummary:
    """Resolve the config (file + ``--method`` + ``--set``), pick the dataset (inferred from the config when
    None), and run (or resume) the evaluation."""
    if options.protocol == "strict" and options.reprompt:
        raise QucoError("--strict and --reprompt contradict each other; pass one of them")
    overrides = dict(parse_override(s) for s in sets)
    cfg = load_config(config, overrides=overrides, method=method)
    return run_eval(cfg, dataset or infer_dataset(cfg, config), questions, options)
