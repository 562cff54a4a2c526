"""Gates fitted on a calibration split: a signal's direction, and a logistic regression over many signals.

Everything here reads only the calibration questions: a single signal's direction (the side on which it
ranks "retrieval helps" first), the logistic gate's coefficients (scikit-learn, regularisation strength chosen
by cross-validation on the same split) and every threshold (the one that fires on the target share of the
calibration questions). The evaluated questions are never looked at.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from quco.errors import QucoError
from quco.eval.gate.data import GateData
from quco.eval.gate.frontier import threshold_for
from quco.eval.score.stats import auc_value
from quco.signals.gate_model import GateModel

Target = Literal["helps", "wrong"]
# Inverse regularisation strengths tried by cross-validation.
C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)


def labels(data: GateData, target: Target) -> np.ndarray:
    if target == "helps":
        return data.helps
    if target == "wrong":
        return data.wrong
    raise QucoError(f"unknown gate target '{target}'; use helps or wrong")


def medians(data: GateData, features: Sequence[str]) -> list[float]:
    out = []
    for name in features:
        x = data.feature(name)
        x = x[np.isfinite(x)]
        out.append(float(np.median(x)) if x.size else 0.0)
    return out


def signal_gate(data: GateData, feature: str, target: Target = "helps", budget: float = 0.5) -> GateModel:
    """One feature, in the direction that ranks the target first on ``data``, thresholded for ``budget``."""
    y = labels(data, target)
    med = medians(data, [feature])
    x = data.feature(feature)
    filled = np.where(np.isfinite(x), x, med[0])
    auc = auc_value(filled, y)
    direction = -1.0 if (not math.isnan(auc) and auc < 0.5) else 1.0
    model = GateModel("signal", [feature], direction=direction, medians=med, target=target)
    model.threshold = threshold_for(model.scores(data.features), budget)
    model.budget = budget
    return model


def logistic_gate(
    data: GateData,
    features: Sequence[str],
    target: Target = "helps",
    budget: float = 0.5,
    folds: int = 5,
    seed: int = 0,
) -> GateModel:
    """A logistic regression over ``features``, fitted on ``data`` (the calibration split)."""
    try:
        from sklearn.linear_model import LogisticRegression
        from sklearn.model_selection import StratifiedKFold, cross_val_score
    except ImportError as exc:  # pragma: no cover - the gate extra is missing
        raise QucoError("fitting a gate needs scikit-learn: pip install 'quco[gate]'") from exc
    y = labels(data, target).astype(int)
    positives = int(y.sum())
    if positives < folds or len(y) - positives < folds:
        raise QucoError(
            f"the calibration split has {positives} questions where the target '{target}' holds and "
            f"{len(y) - positives} where it does not; a {folds}-fold fit needs at least {folds} of each"
        )
    med = medians(data, features)
    model = GateModel(
        "logistic",
        list(features),
        medians=med,
        means=[0.0] * len(features),
        scales=[1.0] * len(features),
        coef=[0.0] * len(features),
        target=target,
    )
    x = model.matrix(data.features)
    means = x.mean(axis=0)
    scales = x.std(axis=0)
    scales[scales == 0] = 1.0
    z = (x - means) / scales
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    losses = {
        c: float(
            cross_val_score(
                LogisticRegression(C=c, max_iter=5000), z, y, cv=cv, scoring="neg_log_loss"
            ).mean()
        )
        for c in C_GRID
    }
    best = max(C_GRID, key=lambda c: (losses[c], -c))  # the strongest regularisation among equals
    clf = LogisticRegression(C=best, max_iter=5000).fit(z, y)
    model.means, model.scales = means.tolist(), scales.tolist()
    model.coef = [float(c) for c in clf.coef_[0]]
    model.intercept = float(clf.intercept_[0])
    model.threshold = threshold_for(model.scores(data.features), budget)
    model.budget = budget
    model.note = f"logistic regression, C={best:g} chosen by {folds}-fold CV (log loss)"
    return model
