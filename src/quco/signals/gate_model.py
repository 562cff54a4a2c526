"""A retrieval gate as data: which features of a closed-book draft it reads and how it turns them into a score.

Two kinds, both plain JSON so that the method applying a gate needs nothing beyond numpy:
- ``signal``: one feature, read in a direction (``+1``: higher means retrieve; ``-1``: lower means retrieve);
- ``logistic``: a logistic regression over several features, standardised with the fitting split's means and
  scales, missing values replaced by the fitting split's medians.

The gate fires when its score is at least ``threshold`` (chosen on a calibration split for a retrieval
budget). ``quco gate fit`` writes these files; the ``gate`` method reads them.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from quco.errors import ConfigError

GateKind = Literal["signal", "logistic"]
FORMAT = "quco-gate/1"


@dataclass
class GateModel:
    kind: GateKind
    features: list[str]
    threshold: float = math.inf  # fires when score >= threshold (inf: never)
    direction: float = 1.0  # signal: +1 or -1
    medians: list[float] = field(default_factory=list)  # fill-in for a missing feature value
    means: list[float] = field(default_factory=list)  # logistic: standardisation
    scales: list[float] = field(default_factory=list)
    coef: list[float] = field(default_factory=list)
    intercept: float = 0.0
    target: str = ""  # what the gate was fitted to predict ("helps", "wrong")
    budget: float | None = None  # the retrieval rate its threshold was chosen for
    note: str = ""  # how it was made (split, options), for the reader of the file

    def __post_init__(self) -> None:
        if self.kind not in ("signal", "logistic"):
            raise ConfigError(f"unknown gate kind '{self.kind}'; use signal or logistic")
        if not self.features:
            raise ConfigError("a gate reads at least one feature")
        if self.kind == "signal" and len(self.features) != 1:
            raise ConfigError("a signal gate reads exactly one feature")
        if self.kind == "logistic":
            n = len(self.features)
            lengths = {len(self.means), len(self.scales), len(self.coef), len(self.medians)}
            if lengths != {n}:
                raise ConfigError(
                    f"a logistic gate needs means, scales, coef and medians for its {n} features"
                )
        if self.medians and len(self.medians) != len(self.features):
            raise ConfigError("medians must have one value per feature")

    def matrix(self, rows: list[dict[str, float | None]]) -> np.ndarray:
        """The features of each row as a matrix, missing values filled in with the medians (or 0)."""
        fill = self.medians or [0.0] * len(self.features)
        out = np.empty((len(rows), len(self.features)), dtype=float)
        for i, row in enumerate(rows):
            for j, name in enumerate(self.features):
                v = row.get(name)
                out[i, j] = fill[j] if v is None or not math.isfinite(float(v)) else float(v)
        return out

    def scores(self, rows: list[dict[str, float | None]]) -> np.ndarray:
        """The gate's score of each row: higher means retrieve."""
        x = self.matrix(rows)
        if self.kind == "signal":
            return self.direction * x[:, 0]
        z = (x - np.asarray(self.means)) / np.asarray(self.scales)
        return 1.0 / (1.0 + np.exp(-(z @ np.asarray(self.coef) + self.intercept)))

    def score(self, row: dict[str, float | None]) -> float:
        return float(self.scores([row])[0])

    def fires(self, value: float) -> bool:
        return value >= self.threshold

    # -- files ---------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["threshold"] = _finite_or_str(self.threshold)
        return {"format": FORMAT, **data}

    def save(self, path: str | Path) -> None:
        from quco.storage import write_text_atomic

        write_text_atomic(Path(path), json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GateModel:
        data = dict(data)
        fmt = data.pop("format", None)
        if fmt != FORMAT:
            raise ConfigError(f"not a gate file (format {fmt!r}, expected {FORMAT!r})")
        threshold = data.get("threshold", math.inf)
        data["threshold"] = float(threshold)
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"invalid gate file: {exc}") from exc

    @classmethod
    def load(cls, path: str | Path) -> GateModel:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"gate file not found: {p}")
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"gate file {p} is not JSON: {exc}") from exc
        return cls.from_json(data)


def _finite_or_str(x: float) -> float | str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x
