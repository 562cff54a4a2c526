"""The questions a gate is judged on: a closed-book run with its features beside a retrieval run.

A gate keeps the closed-book answer when it does not fire and takes the retrieval run's answer when it does,
so for any set of firing decisions its EM, F1 and costs are exact sums over the two runs: no generation is
needed to trace a frontier. The closed-book run is a ``gate`` run with ``fire: never`` (its traces hold each
question's features and what computing each family of them cost); the retrieval run is SR-RAG's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from quco.engine.loop import REPROMPT_ROLE
from quco.eval.runs.store import Record, Run, RunError, load_run

# The costs a gate's answer adds up: LLM calls and tokens of every role, retrievals, corpus queries.
COSTS = ("llm_calls", "main_llm_calls", "tokens", "prompt_tokens", "retrievals", "corpus_queries")


@dataclass
class GateData:
    """One row per question, the two runs aligned by question id."""

    ids: list[str]
    index: np.ndarray  # the dataset position of each question
    closed_em: np.ndarray
    closed_f1: np.ndarray
    open_em: np.ndarray
    open_f1: np.ndarray
    # What the closed-book answer and the retrieval answer cost, each on its own (costs x questions);
    # ``draft_cost``: the closed-book draft without the answer re-prompt, which a firing gate does not make.
    closed_cost: dict[str, np.ndarray]
    open_cost: dict[str, np.ndarray]
    draft_cost: dict[str, np.ndarray]
    # Per family: what computing its features cost, per question.
    family_cost: dict[str, dict[str, np.ndarray]]
    features: list[dict[str, float | None]] = field(default_factory=list)
    closed_name: str = ""
    open_name: str = ""

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def helps(self) -> np.ndarray:
        """Retrieval turns a wrong closed-book answer into a right one."""
        return (self.open_em > self.closed_em).astype(bool)

    @property
    def hurts(self) -> np.ndarray:
        return (self.open_em < self.closed_em).astype(bool)

    @property
    def wrong(self) -> np.ndarray:
        """The closed-book answer is wrong."""
        return self.closed_em < 1

    def feature(self, name: str) -> np.ndarray:
        """One feature over the questions (NaN where it is missing)."""
        return np.array(
            [math.nan if f.get(name) is None else float(f[name]) for f in self.features], dtype=float
        )

    def feature_names(self) -> list[str]:
        names: dict[str, None] = {}
        for f in self.features:
            names.update(dict.fromkeys(f))
        return list(names)

    def subset(self, keep: Sequence[int] | np.ndarray) -> GateData:
        idx = np.asarray(keep, dtype=int)
        return GateData(
            [self.ids[i] for i in idx],
            self.index[idx],
            self.closed_em[idx],
            self.closed_f1[idx],
            self.open_em[idx],
            self.open_f1[idx],
            {k: v[idx] for k, v in self.closed_cost.items()},
            {k: v[idx] for k, v in self.open_cost.items()},
            {k: v[idx] for k, v in self.draft_cost.items()},
            {fam: {k: v[idx] for k, v in c.items()} for fam, c in self.family_cost.items()},
            [self.features[i] for i in idx],
            self.closed_name,
            self.open_name,
        )

    def between(self, start: int, stop: int) -> GateData:
        """The questions at dataset positions ``start`` <= index < ``stop``."""
        return self.subset(np.flatnonzero((self.index >= start) & (self.index < stop)))


def _gate_step(trace: dict[str, Any]) -> dict[str, Any]:
    for step in trace.get("steps", []):
        signals = step.get("signals") or {}
        if "features" in signals:
            return signals
    return {}


def _closed_cost(rec: Record, families: dict[str, Any], *, reprompt: bool = True) -> dict[str, float]:
    """The closed-book answer's own cost: the run's costs without those of computing the features (and without
    the answer re-prompt when ``reprompt`` is False)."""
    cost = rec.costs()
    out = {k: cost[k] for k in COSTS}
    if not reprompt:
        counters = (rec.trace or {}).get("counters", {})
        out["llm_calls"] -= counters.get("llm_calls", {}).get(REPROMPT_ROLE, 0)
        out["tokens"] -= counters.get("generated_tokens", {}).get(REPROMPT_ROLE, 0)
        out["prompt_tokens"] -= counters.get("prompt_tokens", {}).get(REPROMPT_ROLE, 0)
    for fam in families.values():
        c = fam.get("cost", {})
        out["llm_calls"] -= c.get("llm_calls", 0)
        out["tokens"] -= c.get("generated_tokens", 0)
        out["prompt_tokens"] -= c.get("prompt_tokens", 0)
        out["corpus_queries"] -= c.get("corpus_queries", 0)
    return out


def _check_same_questions(closed: Run, opened: Run) -> None:
    a, b = closed.dataset, opened.dataset
    if not a.same_file(b):
        raise RunError(f"{closed.dir} and {opened.dir} answer different datasets ({a.name} vs {b.name})")


def _merged(dirs: Sequence[str | Path]) -> Run:
    """Several runs of one configuration over different questions, read as one (the first answer of an id wins)."""
    if not dirs:
        raise RunError("no run directory given")
    runs = [load_run(d) for d in dirs]
    first = runs[0]
    seen: set[str] = set()
    records = []
    for run in runs:
        if run.method != first.method:
            raise RunError(f"{run.dir} is a '{run.method}' run, {first.dir} a '{first.method}' run")
        _check_same_questions(first, run)
        for rec in run.records:
            if rec.id not in seen:
                seen.add(rec.id)
                records.append(rec)
    return Run(first.dir, first.config, records)


def load_gate_data(closed_dirs: Sequence[str | Path], open_dirs: Sequence[str | Path]) -> GateData:
    """Align closed-book ``gate`` runs (``fire: never``) and retrieval runs on the questions both answered."""
    closed, opened = _merged(closed_dirs), _merged(open_dirs)
    _check_same_questions(closed, opened)
    if closed.method != "gate":
        raise RunError(
            f"{closed.dir} is a '{closed.method}' run; the closed-book side is a 'gate' run with fire: never "
            "(configs/world/DATASET/gate.yaml), whose traces hold the features"
        )
    fire = closed.config.params.get("fire", "never")
    if fire != "never":
        raise RunError(f"{closed.dir} ran the gate with fire: {fire}; the closed-book side needs fire: never")
    other = opened.by_id()
    ids, index, rows = [], [], []
    for rec in closed.records:
        o = other.get(rec.id)
        if o is None or not rec.trace or not o.trace:
            continue
        ids.append(rec.id)
        index.append(rec.index)
        rows.append((rec, o))
    if not rows:
        raise RunError(f"{closed.dir} and {opened.dir} have no answered question in common")
    families: list[dict[str, Any]] = [_gate_step(r.trace or {}).get("families", {}) for r, _ in rows]
    names = sorted({name for fams in families for name in fams if isinstance(fams.get(name), dict)})
    family_cost = {
        name: {
            k: np.array([float((f.get(name) or {}).get("cost", {}).get(k, 0)) for f in families])
            for k in ("llm_calls", "prompt_tokens", "generated_tokens", "corpus_queries", "seconds")
        }
        for name in names
    }
    closed_costs = [_closed_cost(r, f) for (r, _), f in zip(rows, families, strict=True)]
    draft_costs = [_closed_cost(r, f, reprompt=False) for (r, _), f in zip(rows, families, strict=True)]
    open_costs = [o.costs() for _, o in rows]
    return GateData(
        ids=ids,
        index=np.array(index, dtype=int),
        closed_em=np.array([r.em for r, _ in rows]),
        closed_f1=np.array([r.f1 for r, _ in rows]),
        open_em=np.array([o.em for _, o in rows]),
        open_f1=np.array([o.f1 for _, o in rows]),
        closed_cost={k: np.array([c[k] for c in closed_costs]) for k in COSTS},
        open_cost={k: np.array([c[k] for c in open_costs]) for k in COSTS},
        draft_cost={k: np.array([c[k] for c in draft_costs]) for k in COSTS},
        family_cost=family_cost,
        features=[dict(_gate_step(r.trace or {}).get("features", {})) for r, _ in rows],
        closed_name=closed.name,
        open_name=opened.name,
    )
