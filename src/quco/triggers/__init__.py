"""Trigger signals: pure functions from model outputs (numpy arrays, lists of numbers) to numbers.

Methods in ``quco.methods`` call these; nothing here touches a model, a retriever or the trace, so every
signal can be checked by hand on small fixed inputs.
"""

from quco.triggers.attention import (
    forward_attention,
    max_attention_received,
    rind_values,
    top_k_in_order,
)
from quco.triggers.chance import RetrievalRate, rate_from_run, read_traces, retrieval_rate, uniform_draw
from quco.triggers.decide import crosses, first_crossing, trigger_record
from quco.triggers.eigen import eigen_score
from quco.triggers.probability import aggregate, masked_text, token_uncertainty
from quco.triggers.sweep import SweepPoint, TraceReplay, decide, replay, sweep
from quco.triggers.trend import (
    entropy_differences,
    max_attention_to_new,
    sentence_values,
    smooth_second_order,
)

__all__ = [
    "RetrievalRate",
    "SweepPoint",
    "TraceReplay",
    "aggregate",
    "crosses",
    "decide",
    "eigen_score",
    "entropy_differences",
    "first_crossing",
    "forward_attention",
    "masked_text",
    "max_attention_received",
    "max_attention_to_new",
    "rate_from_run",
    "read_traces",
    "replay",
    "retrieval_rate",
    "rind_values",
    "sentence_values",
    "smooth_second_order",
    "sweep",
    "token_uncertainty",
    "top_k_in_order",
    "trigger_record",
    "uniform_draw",
]
