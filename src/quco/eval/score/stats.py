"""Confidence intervals and paired tests, so that a difference between two methods can be told from noise.

Intervals are percentile bootstraps of the per-question mean. Two runs are compared on the questions both
answered: a paired bootstrap gives the interval of the mean difference, and a paired sign-flip permutation
test gives its two-sided p-value (exact enough at 10,000 permutations; add-one smoothing keeps p > 0).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np

from quco.eval.runs.store import COST_FIELDS, Run, RunError, load_run

log = logging.getLogger(__name__)

SCORE_FIELDS = ("em", "f1")
SUMMARY_FIELDS = SCORE_FIELDS + COST_FIELDS
_CHUNK = 1000  # bootstrap resamples per batch: bounds memory at CHUNK x n indices


@dataclass(frozen=True)
class Interval:
    """A mean with its bootstrap confidence interval over ``n`` questions."""

    mean: float
    low: float
    high: float
    n: int

    def format(self, digits: int = 3, scale: float = 1.0) -> str:
        if self.n == 0 or math.isnan(self.mean):
            return "n/a"
        return (
            f"{self.mean * scale:.{digits}f} [{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}]"
        )


def _finite(values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    return arr[np.isfinite(arr)]


def bootstrap_ci(
    values: Sequence[float], n_boot: int = 10_000, level: float = 0.95, seed: int = 0
) -> Interval:
    """Percentile-bootstrap interval of the mean; NaN values (e.g. costs of failed questions) are left out."""
    arr = _finite(values)
    n = len(arr)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(arr.mean())
    if n == 1 or np.all(arr == arr[0]):
        return Interval(mean, mean, mean, n)
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for start in range(0, n_boot, _CHUNK):
        size = min(_CHUNK, n_boot - start)
        means[start : start + size] = arr[rng.integers(0, n, size=(size, n))].mean(axis=1)
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return Interval(mean, float(low), float(high), n)


def permutation_p_value(diffs: Sequence[float], n_perm: int = 10_000, seed: int = 0) -> float:
    """Two-sided p-value of a mean paired difference under random sign flips (H0: no difference)."""
    d = _finite(diffs)
    n = len(d)
    if n == 0:
        return math.nan
    observed = abs(d.mean())
    if observed == 0:
        return 1.0
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, n_perm, _CHUNK):
        size = min(_CHUNK, n_perm - start)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(size, n))
        hits += int(np.sum(np.abs((signs * d).mean(axis=1)) >= observed - 1e-12))
    return (hits + 1) / (n_perm + 1)


@dataclass(frozen=True)
class PairedResult:
    """B minus A on the same questions: the difference, its interval, and the permutation p-value."""

    metric: str
    n: int
    mean_a: float
    mean_b: float
    diff: Interval
    p_value: float


def paired_test(
    a: Sequence[float], b: Sequence[float], metric: str = "em", n_boot: int = 10_000, seed: int = 0
) -> PairedResult:
    """Paired bootstrap interval and sign-flip permutation p-value of mean(b - a)."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.shape != xb.shape:
        raise ValueError(f"paired samples differ in length: {len(xa)} vs {len(xb)}")
    keep = np.isfinite(xa) & np.isfinite(xb)
    xa, xb = xa[keep], xb[keep]
    diffs = xb - xa
    return PairedResult(
        metric=metric,
        n=len(diffs),
        mean_a=float(xa.mean()) if len(xa) else math.nan,
        mean_b=float(xb.mean()) if len(xb) else math.nan,
        diff=bootstrap_ci(diffs, n_boot=n_boot, seed=seed),
        p_value=permutation_p_value(diffs, n_perm=n_boot, seed=seed + 1),
    )


def group_difference(
    values: Sequence[float], group: Sequence[bool], n_boot: int = 10_000, seed: int = 0
) -> tuple[Interval, float]:
    """Mean of ``values`` in the group minus outside it (two independent samples of one run's questions).

    The interval is a percentile bootstrap that resamples the questions (resamples that leave a group empty are
    dropped); the p-value is a two-sided permutation test that shuffles the group labels (add-one smoothed).
    With an empty group the difference is NaN and p is 1. For yes/no outcomes, ``proportion_difference`` gives
    a better interval: a bootstrap of a small group whose outcomes are all alike never varies.
    """
    x = np.asarray(values, dtype=float)
    g = np.asarray(group, dtype=bool)
    if x.shape != g.shape:
        raise ValueError(f"values and group labels differ in length: {len(x)} vs {len(g)}")
    n, k = len(x), int(g.sum())
    if k == 0 or k == n:
        return Interval(math.nan, math.nan, math.nan, n), 1.0
    observed = float(x[g].mean() - x[~g].mean())
    rng = np.random.default_rng(seed)
    diffs: list[np.ndarray] = []
    hits = 0
    for start in range(0, n_boot, _CHUNK):
        size = min(_CHUNK, n_boot - start)
        idx = rng.integers(0, n, size=(size, n))
        gs, xs = g[idx], x[idx]
        inside, outside = gs.sum(axis=1), (~gs).sum(axis=1)
        ok = (inside > 0) & (outside > 0)
        mean_in = np.where(gs, xs, 0.0).sum(axis=1)[ok] / inside[ok]
        mean_out = np.where(gs, 0.0, xs).sum(axis=1)[ok] / outside[ok]
        diffs.append(mean_in - mean_out)
        perm = np.argsort(rng.random((size, n)), axis=1) < k  # k labels placed at random
        d_perm = np.where(perm, x, 0.0).sum(axis=1) / k - np.where(perm, 0.0, x).sum(axis=1) / (n - k)
        hits += int(np.sum(np.abs(d_perm) >= abs(observed) - 1e-12))
    boot = np.concatenate(diffs)
    low, high = np.quantile(boot, [0.025, 0.975])
    return Interval(observed, float(low), float(high), n), (hits + 1) / (n_boot + 1)


def proportion_difference(
    outcome: Sequence[bool], group: Sequence[bool], n_perm: int = 10_000, seed: int = 0, level: float = 0.95
) -> tuple[Interval, float]:
    """Share of true outcomes in the group minus outside it, for yes/no outcomes (e.g. "the draft is wrong").

    The interval is Newcombe's hybrid score interval for a difference of two independent proportions (his
    method 10, built from each group's Wilson interval): it stays honest when a group is small or all its
    outcomes are alike, where a bootstrap cannot vary. The p-value is ``group_difference``'s label-permutation
    test, the same number for the same seed. With an empty group the difference is NaN and p is 1.
    """
    x = np.asarray(outcome, dtype=float)
    g = np.asarray(group, dtype=bool)
    if x.shape != g.shape:
        raise ValueError(f"values and group labels differ in length: {len(x)} vs {len(g)}")
    if not np.isin(x, (0.0, 1.0)).all():
        raise ValueError("proportion_difference needs yes/no outcomes (0 or 1)")
    n, k = len(x), int(g.sum())
    if k == 0 or k == n:
        return Interval(math.nan, math.nan, math.nan, n), 1.0
    k1, n1, k2, n2 = int(x[g].sum()), k, int(x[~g].sum()), n - k
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson_interval(k1, n1, level)
    l2, u2 = wilson_interval(k2, n2, level)
    d = p1 - p2
    low = d - math.hypot(p1 - l1, u2 - p2)
    high = d + math.hypot(u1 - p1, p2 - l2)
    return Interval(d, low, high, n), group_difference(x, g, n_boot=n_perm, seed=seed)[1]


def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval of a binomial proportion (0 <= successes <= n, n > 0)."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"a proportion needs 0 <= successes <= n and n > 0, got {successes} of {n}")
    z = float(NormalDist().inv_cdf(0.5 + level / 2))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def auc_value(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mann-Whitney AUROC: the chance that a positive outscores a negative (ties count half)."""
    n_pos = int(labels.sum())
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    mid_ranks = np.cumsum(counts) - (counts - 1) / 2.0  # 1-based average rank of each distinct value
    ranks = mid_ranks[inverse]
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def auroc(scores: Sequence[float], labels: Sequence[bool], n_boot: int = 10_000, seed: int = 0) -> Interval:
    """How well ``scores`` rank the positive ``labels`` first (0.5: no better than chance), with a percentile
    bootstrap interval over the items (resamples without both classes are dropped)."""
    x = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    if x.shape != y.shape:
        raise ValueError(f"scores and labels differ in length: {len(x)} vs {len(y)}")
    observed = auc_value(x, y)
    if math.isnan(observed):
        return Interval(math.nan, math.nan, math.nan, len(x))
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(n_boot):
        idx = rng.integers(0, len(x), len(x))
        value = auc_value(x[idx], y[idx])
        if not math.isnan(value):
            boot.append(value)
    low, high = np.quantile(boot, [0.025, 0.975])
    return Interval(observed, float(low), float(high), len(x))


def summarize(run: Run, fields: Sequence[str] = SUMMARY_FIELDS, n_boot: int = 10_000) -> dict[str, Interval]:
    """Mean and 95% interval of each score and cost per question of one run."""
    return {f: bootstrap_ci(run.values(f), n_boot=n_boot) for f in fields}


@dataclass(frozen=True)
class Comparison:
    """Two runs compared on their common questions."""

    a: str
    b: str
    n_common: int
    only_a: int
    only_b: int
    results: dict[str, PairedResult]


def compare(
    a: Run, b: Run, metrics: Sequence[str] = ("em", "f1"), n_boot: int = 10_000, seed: int = 0
) -> Comparison:
    """Pair two runs on the question ids both recorded (a question that raised counts as wrong)."""
    da, db = a.dataset, b.dataset
    if da.sha256 and db.sha256 and (da.name, da.sha256) != (db.name, db.sha256):
        raise RunError(
            f"{a.dir} and {b.dir} were run on different datasets; a paired comparison needs the same one"
        )
    ra, rb = a.by_id(), b.by_id()
    common = [i for i in ra if i in rb]
    if not common:
        raise RunError(f"{a.dir} and {b.dir} have no question in common; nothing to compare")
    if len(common) < max(len(ra), len(rb)):
        log.warning(
            "comparing on the %d questions both runs answered (of %d and %d)", len(common), len(ra), len(rb)
        )
    pa, pb = a.restricted(common), b.restricted(common)
    results = {m: paired_test(pa.values(m), pb.values(m), m, n_boot=n_boot, seed=seed) for m in metrics}
    return Comparison(a.name, b.name, len(common), len(ra) - len(common), len(rb) - len(common), results)


def compare_runs(
    a_dir: str | Path, b_dir: str | Path, metrics: Sequence[str] = ("em", "f1"), n_boot: int = 10_000
) -> Comparison:
    """``quco compare``: read two run directories and test B against A on their common questions."""
    return compare(load_run(a_dir), load_run(b_dir), metrics, n_boot=n_boot)
