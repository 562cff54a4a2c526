"""Signals: the pure computations every trigger decides on (each decision is emitted as a
``quco.trigger_record.TriggerRecord``, with the one threshold rule, live and in replay).

- Model-confidence signals: ``probability`` (token uncertainty, FLARE), ``attention`` (RIND, DRAGIN),
  ``trend`` (entropy trends, ETC), ``eigen`` (EigenScore, SeaKR), ``dtr`` (answer NLL and AIS, DTR).
- ``corpus``: the corpus-count rules of QuCo-RAG's two stages.
- ``sampled``: uncertainty of a set of sampled texts (the black-box estimators and their similarities).
- ``chance``: the random trigger's draws and the firing rates a control is matched to.
- ``replay``: threshold sweeps over recorded traces.
- ``spans`` and ``words``: where tokens, words and sentences sit in generated text; content words.

Nothing here generates, retrieves or reads run files: every signal can be checked by hand on small inputs.
"""

from quco.signals.attention import (
    forward_attention,
    max_attention_received,
    rind_values,
    top_k_in_order,
)
from quco.signals.eigen import eigen_score
from quco.signals.probability import aggregate, masked_text, token_uncertainty
from quco.signals.trend import (
    entropy_differences,
    max_attention_to_new,
    sentence_values,
    smooth_second_order,
)

__all__ = [
    "aggregate",
    "eigen_score",
    "entropy_differences",
    "forward_attention",
    "masked_text",
    "max_attention_received",
    "max_attention_to_new",
    "rind_values",
    "sentence_values",
    "smooth_second_order",
    "token_uncertainty",
    "top_k_in_order",
]
