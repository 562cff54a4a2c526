"""A control's ``match_run`` turned into numbers before the control is built.

A cost-matched control (``random``, ``quco-random``) takes its firing rates from another recorded run. The
method never reads that run: here the run's traces are read (``quco.eval.runs.store.load_traces``), the method says
which parameter values they give (``Method.matched``), and the control is built from a config holding those
values and no ``match_run``. The values also enter the evaluation run's identity (``matched_rates``).
"""

from __future__ import annotations

import logging

from quco.config import PipelineConfig
from quco.eval.runs.store import load_traces
from quco.methods import method_class

log = logging.getLogger(__name__)


def matched_config(cfg: PipelineConfig) -> tuple[PipelineConfig, dict[str, float] | None]:
    """``cfg`` with its method's ``match_run`` replaced by the values read from that run, and those values.

    A config without ``match_run`` is returned as it is, with None."""
    method = method_class(cfg.method)(cfg.params)
    source = method.match_run
    if not source:
        return cfg, None
    matched = method.matched(load_traces(source))
    log.info(
        "%s: %s from %s (%s)",
        cfg.method,
        ", ".join(f"{k} = {v:.4f}" for k, v in matched.params.items()),
        source,
        matched.detail,
    )
    params = {k: v for k, v in cfg.params.items() if k != "match_run"} | matched.params
    return cfg.model_copy(update={"params": params}), dict(matched.params)
