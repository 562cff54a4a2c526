"""SeaKR's signal: EigenScore over the hidden states of sampled continuations.

Reimplemented from the papers (INSIDE, Chen et al. 2024; SeaKR, Yao et al. 2024): with Z the k x d matrix of
the samples' last-token hidden states and J_d = I - 11^T/d the centring matrix (each state centred over its
features), ``EigenScore = (1/k) * log det(Z J_d Z^T + alpha I)``. Samples that agree have nearly identical
states, a Gram matrix of rank about one and a very negative score; disagreement raises it.
"""

from __future__ import annotations

import numpy as np


def eigen_score(states: np.ndarray, alpha: float = 1e-3) -> float:
    """EigenScore of k hidden states ([k, d]); natural log, as in SeaKR."""
    z = np.asarray(states, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] == 0:
        raise ValueError(f"eigen_score needs a non-empty [k, d] matrix, got shape {z.shape}")
    k = z.shape[0]
    centred = z - z.mean(axis=1, keepdims=True)  # Z J_d: each state centred over its d features
    gram = centred @ centred.T
    sign, logdet = np.linalg.slogdet(gram + alpha * np.eye(k))
    if sign <= 0:  # cannot happen for a PSD Gram matrix plus alpha I, except through rounding
        raise ValueError("EigenScore matrix is not positive definite; raise alpha")
    return float(logdet / k)
