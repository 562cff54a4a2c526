"""Exact efficiency frontiers of retrieval gates, read from a closed-book run and a retrieval run.

For a score (a feature read in a direction, or a fitted gate's output) every threshold gives a set of
questions the gate fires on; its EM, F1 and costs are exact sums over the two runs. The frontier is that curve
over all thresholds. Two bounds frame it: the oracle (fire exactly where retrieval turns a wrong answer right)
and the random gate (fire on k questions drawn uniformly; its mean and its spread over draws).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from quco.eval.gate.data import COSTS, GateData

# The keys of a family's recorded cost, and the cost each adds to.
_FAMILY_KEYS = {
    "llm_calls": "llm_calls",
    "tokens": "generated_tokens",
    "prompt_tokens": "prompt_tokens",
    "corpus_queries": "corpus_queries",
}


@dataclass
class Point:
    """A gate at one threshold: how often it fired and what its answers scored and cost, per question."""

    fired: int
    n: int
    em: float
    f1: float
    costs: dict[str, float]
    threshold: float = math.nan

    @property
    def rate(self) -> float:
        """Retrievals per question of the gate's decision (each firing retrieves once)."""
        return self.fired / self.n if self.n else math.nan


def outcome(data: GateData, fire: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-question EM and F1 of a gate that fires on ``fire``."""
    return np.where(fire, data.open_em, data.closed_em), np.where(fire, data.open_f1, data.closed_f1)


def gate_costs(data: GateData, fire: np.ndarray, families: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Per-question costs of a gate that fires on ``fire`` after computing the features of ``families``:
    the closed-book answer when it keeps it; the draft plus the retrieval answer when it fires."""
    out: dict[str, np.ndarray] = {}
    for k in COSTS:
        value = np.where(fire, data.draft_cost[k] + data.open_cost[k], data.closed_cost[k])
        key = _FAMILY_KEYS.get(k)
        for fam in families:
            spent = data.family_cost.get(fam, {}).get(key) if key is not None else None
            if spent is not None:
                value = value + spent
        out[k] = value
    return out


def point(
    data: GateData, fire: np.ndarray, families: Sequence[str] = (), threshold: float = math.nan
) -> Point:
    em, f1 = outcome(data, fire)
    costs = {k: float(v.mean()) for k, v in gate_costs(data, fire, families).items()}
    return Point(int(fire.sum()), len(data), float(em.mean()), float(f1.mean()), costs, threshold)


def fire_at(scores: np.ndarray, threshold: float) -> np.ndarray:
    """Where a gate with these scores fires at ``threshold`` (a missing score never fires)."""
    s = np.asarray(scores, dtype=float)
    return np.isfinite(s) & (s >= threshold) | (np.isinf(s) & (s > 0))


def frontier(data: GateData, scores: np.ndarray, families: Sequence[str] = ()) -> list[Point]:
    """The gate at every threshold that changes its decisions, from never firing to always firing."""
    finite = np.unique(scores[np.isfinite(scores)])[::-1]
    points = [point(data, np.zeros(len(data), dtype=bool), families, math.inf)]
    points += [point(data, fire_at(scores, t), families, float(t)) for t in finite]
    return points


def at_budget(points: Sequence[Point], budget: float) -> Point:
    """The frontier point that fires most often without exceeding ``budget`` retrievals per question."""
    within = [p for p in points if p.rate <= budget + 1e-12]
    return max(within, key=lambda p: (p.fired, p.em))


def threshold_for(scores: np.ndarray, budget: float) -> float:
    """The highest threshold whose firing rate on ``scores`` does not exceed ``budget`` (inf: never fire)."""
    n = len(scores)
    s = np.sort(np.asarray(scores, dtype=float)[~np.isnan(scores)])[::-1]
    k = min(int(math.floor(budget * n + 1e-9)), len(s))
    if k <= 0:
        return math.inf
    if k >= len(s):
        return float(s[-1])
    # Fire on the top k; ties with the (k+1)-th score would push the rate over the budget.
    t = float(s[k - 1])
    if s[k] == t:
        above = s[s > t]
        return float(above.min()) if above.size else math.inf
    return t


@dataclass
class RandomGate:
    """Firing on ``fired`` of ``n`` questions drawn uniformly: EM over ``draws`` seeds."""

    fired: int
    n: int
    em_mean: float
    em_low: float
    em_high: float
    f1_mean: float
    draws: np.ndarray  # EM of each draw

    def p_at_least(self, em: float) -> float:
        """The share of random gates at this budget that score at least ``em`` (a one-sided test)."""
        return float((np.sum(self.draws >= em - 1e-12) + 1) / (len(self.draws) + 1))


def random_gate(data: GateData, fired: int, draws: int = 10_000, seed: int = 0) -> RandomGate:
    n = len(data)
    rng = np.random.default_rng(seed)
    gain = data.open_em - data.closed_em
    gain_f1 = data.open_f1 - data.closed_f1
    base, base_f1 = data.closed_em.mean(), data.closed_f1.mean()
    if fired <= 0 or fired >= n:
        em = base + (gain.sum() / n if fired >= n else 0.0)
        values = np.full(draws, em)
    else:
        picks = np.argsort(rng.random((draws, n)), axis=1)[:, :fired]
        values = base + gain[picks].sum(axis=1) / n
    low, high = np.quantile(values, [0.025, 0.975])
    f1 = base_f1 + (gain_f1.sum() / n) * (fired / n)
    return RandomGate(
        fired, n, float(base + gain.sum() / n * fired / n), float(low), float(high), float(f1), values
    )


def oracle(data: GateData) -> list[Point]:
    """The best any gate can do at each number of firings: first where retrieval turns a wrong answer right,
    then where it changes nothing, last where it turns a right answer wrong."""
    order = np.concatenate(
        [np.flatnonzero(data.helps), np.flatnonzero(~data.helps & ~data.hurts), np.flatnonzero(data.hurts)]
    )
    points = []
    for k in range(len(order) + 1):
        fire = np.zeros(len(data), dtype=bool)
        fire[order[:k]] = True
        points.append(point(data, fire))
    return points
