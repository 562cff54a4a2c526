"""Black-box uncertainty estimators over sampled texts (Lin et al., 2023), computed as LM-Polygraph does.

Each takes plain numpy matrices (or the texts, for lexical similarity) and returns a float where higher means
more uncertain, so that each can be checked by hand on a small fixed matrix. Conventions, for n samples:

- ``entail[i, j]``: how much sample i supports sample j (premise i, hypothesis j); ``contra[i, j]``
  likewise for contradiction. Symmetric similarities (Jaccard, embedding cosine) have no contradiction matrix.
- ``W``: the symmetric affinity the spectral estimators use (``affinity``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from quco.signals.sampled.rouge import rouge_l

Affinity = Literal["entail", "contra"]
EstimatorName = Literal["num_sem_sets", "eig_val_laplacian", "deg_mat", "eccentricity", "lexical_similarity"]
ESTIMATORS: tuple[str, ...] = (
    "num_sem_sets",
    "eig_val_laplacian",
    "deg_mat",
    "eccentricity",
    "lexical_similarity",
)
# Smallest degree used in D^(-1/2): a row of W that sums to zero (a sample similar to nothing, not even
# itself) would make the published formula divide by zero; clipping keeps the score finite.
_MIN_DEGREE = 1e-12


def _square(matrix: np.ndarray, what: str) -> np.ndarray:
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] == 0:
        raise ValueError(f"{what} must be a non-empty square matrix, got shape {m.shape}")
    return m


def affinity(entail: np.ndarray, contra: np.ndarray | None = None, kind: Affinity = "entail") -> np.ndarray:
    """W from directed scores: (E + Eᵀ)/2 for "entail", ((1 − C) + (1 − C)ᵀ)/2 for "contra".

    Without a contradiction matrix (a symmetric similarity) ``entail`` is W itself, symmetrised for safety.
    """
    e = _square(entail, "entail")
    if kind == "contra":
        if contra is None:
            raise ValueError("affinity 'contra' needs a contradiction matrix (NLI or judge similarity)")
        w = 1.0 - _square(contra, "contra")
    else:
        w = e
    return (w + w.T) / 2.0


def normalized_laplacian(w: np.ndarray) -> np.ndarray:
    """L = I − D^(-1/2) W D^(-1/2) with D = diag(W·1)."""
    w = _square(w, "W")
    inv_sqrt = 1.0 / np.sqrt(np.maximum(w.sum(axis=1), _MIN_DEGREE))
    return np.eye(w.shape[0]) - inv_sqrt[:, None] * w * inv_sqrt[None, :]


def _spectrum(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lap = normalized_laplacian(w)
    # L is symmetric for a symmetric W: eigh gives real eigenvalues and an orthonormal eigenbasis.
    return np.linalg.eigh((lap + lap.T) / 2.0)


def num_sem_sets(entail: np.ndarray, contra: np.ndarray) -> int:
    """Number of semantic sets: connected components of the graph linking i and j when entailment beats
    contradiction in both directions (E_ij > C_ij and E_ji > C_ji)."""
    e = _square(entail, "entail")
    c = _square(contra, "contra")
    if e.shape != c.shape:
        raise ValueError(f"entail {e.shape} and contra {c.shape} must have the same shape")
    linked = e > c
    linked = linked & linked.T
    n = e.shape[0]
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in zip(*np.nonzero(np.triu(linked, k=1)), strict=True):
        parent[root(int(i))] = root(int(j))
    return len({root(i) for i in range(n)})


def eig_val_laplacian(w: np.ndarray) -> float:
    """Sum over the eigenvalues λ_k of the normalised Laplacian of max(0, 1 − λ_k): a continuous set count."""
    values, _ = _spectrum(w)
    return float(np.clip(1.0 - values, 0.0, None).sum())


def deg_mat(w: np.ndarray) -> float:
    """trace(n·I − D)/n², i.e. one minus the mean pairwise similarity (diagonal included)."""
    w = _square(w, "W")
    n = w.shape[0]
    return float((n * n - w.sum()) / (n * n))


def eccentricity(w: np.ndarray, threshold: float = 0.9) -> float:
    """Frobenius norm of the Laplacian eigenvectors with eigenvalue < ``threshold``, each centred on its mean.

    Equals the published √Σ_j ‖v_j − v̄‖² (per-eigenvector centring); with an orthonormal basis it does not
    depend on which basis of a repeated eigenvalue the solver returns.
    """
    values, vectors = _spectrum(w)
    kept = vectors[:, values < threshold]
    if kept.shape[1] == 0:
        return 0.0
    return float(np.linalg.norm(kept - kept.mean(axis=0, keepdims=True)))


def lexical_similarity(samples: Sequence[str]) -> float:
    """Minus the mean ROUGE-L F1 over all unordered pairs of samples (LM-Polygraph's default metric).

    One sample has no pair; it counts as full agreement (−1), as n identical samples do.
    """
    texts = list(samples)
    if not texts:
        raise ValueError("lexical similarity needs at least one sample")
    scores = [rouge_l(texts[i], texts[j]) for i in range(len(texts)) for j in range(i + 1, len(texts))]
    return -float(np.mean(scores)) if scores else -1.0


def estimate(
    name: str,
    samples: Sequence[str],
    entail: np.ndarray | None = None,
    contra: np.ndarray | None = None,
    *,
    affinity_kind: Affinity = "entail",
    set_threshold: float = 0.5,
    eccentricity_threshold: float = 0.9,
) -> float:
    """Score ``samples`` with estimator ``name`` from their pairwise scores (unused by lexical similarity).

    NumSemSets on a symmetric similarity (no contradiction matrix) links two samples when W > set_threshold.
    """
    if name == "lexical_similarity":
        return lexical_similarity(samples)
    if entail is None:
        raise ValueError(f"estimator '{name}' needs a similarity matrix")
    if name == "num_sem_sets":
        e = _square(entail, "entail")
        c = contra if contra is not None else np.full_like(e, set_threshold)
        return float(num_sem_sets(e, c))
    w = affinity(entail, contra, affinity_kind)
    if name == "eig_val_laplacian":
        return eig_val_laplacian(w)
    if name == "deg_mat":
        return deg_mat(w)
    if name == "eccentricity":
        return eccentricity(w, eccentricity_threshold)
    raise ValueError(f"unknown estimator '{name}'; known: {', '.join(ESTIMATORS)}")
