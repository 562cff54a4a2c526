"""Does a trigger catch wrong drafts? Read from recorded traces only (no model is run again).

A dynamic-RAG trigger is a hallucination detector: it judges a draft and retrieves when it doubts it. Each
question's *first* draft judged during generation (the first "generate" step whose trigger read it) is the one
judgement made before any retrieval the trigger caused, so it is the clean test: score that draft's stated
answer against the gold answers exactly as the final prediction is scored, and ask whether the drafts the
trigger fired on are wrong more often than those it kept. A trigger that detects nothing gives equal rates, as
a random trigger does.

Drafts that state no answer (cut off before "So the answer is") are counted apart and left out of the rates.
Methods that decide only before generation (SR-RAG, Wo-RAG, DTR's gate) record no such draft, and neither do
those that retrieve on a fixed schedule (FS-RAG), whose "always" rule reads nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from quco.eval.runs.store import Run
from quco.eval.score.metrics import score_prediction
from quco.eval.score.stats import Interval, auroc, proportion_difference
from quco.trace import as_trace
from quco.trigger_record import TriggerRecord, judges

MIN_GROUP = 5  # differences and AUROCs need at least this many drafts on each side


@dataclass(frozen=True)
class DraftCheck:
    """One question's first judged draft: whether the trigger fired on it and whether its answer is wrong."""

    id: str
    fired: bool
    wrong: bool | None  # None: the draft states no answer
    suspicion: float | None = None  # the first scored candidate's score, oriented so that higher fires


@dataclass(frozen=True)
class Detection:
    """How a run's trigger sorted its first drafts. Rates are shares of drafts that state an answer."""

    run: str
    drafts: int  # questions with a judged first draft
    no_answer: int  # of which state no answer
    fired_wrong: int
    fired_right: int
    kept_wrong: int
    kept_right: int
    difference: Interval  # P(wrong | fired) − P(wrong | kept), Newcombe's score interval
    p_value: float  # label-permutation test of no difference
    # How well the first score ranks wrong drafts above right ones (None: fewer than MIN_GROUP of either).
    auroc: Interval | None = None

    @property
    def fired(self) -> int:
        return self.fired_wrong + self.fired_right

    @property
    def kept(self) -> int:
        return self.kept_wrong + self.kept_right

    @property
    def wrong_when_fired(self) -> float:
        return self.fired_wrong / self.fired if self.fired else math.nan

    @property
    def wrong_when_kept(self) -> float:
        return self.kept_wrong / self.kept if self.kept else math.nan

    @property
    def recall(self) -> float:
        """Share of the wrong drafts the trigger fired on."""
        wrong = self.fired_wrong + self.kept_wrong
        return self.fired_wrong / wrong if wrong else math.nan

    @property
    def false_alarms(self) -> float:
        """Share of the right drafts the trigger fired on."""
        right = self.fired_right + self.kept_right
        return self.fired_right / right if right else math.nan


def first_draft_checks(run: Run) -> list[DraftCheck]:
    """Every question's first draft judged during generation, scored as the run scores its predictions."""
    dataset = str(run.dataset.name or "hotpotqa")
    checks = []
    for rec in run.records:
        if rec.error or not rec.trace:
            continue
        judged = (s for s in as_trace(rec.trace).steps if s.stage == "generate" and judges(s.triggers))
        step = next(judged, None)
        if step is None or not step.draft.strip():
            continue
        score = score_prediction(step.draft, rec.gold, rec.kind or "span", dataset)
        wrong = None if score.missing else score.em < 1.0
        checks.append(DraftCheck(rec.id, step.decision == "retrieve", wrong, _suspicion(step.triggers[0])))
    return checks


def _suspicion(record: TriggerRecord) -> float | None:
    """The first scored candidate's score, negated for rules that fire below their threshold.

    A scan scores its candidates in order up to the one that fires, so the first scored candidate is scored in
    every draft at any threshold: its score is comparable across drafts, where later ones are not.
    """
    if record.rule not in ("above", "below"):
        return None
    first = next((s for s in record.scores if s is not None and math.isfinite(s)), None)
    if first is None:
        return None
    return -first if record.rule == "below" else first


def detection(run: Run, n_boot: int = 10_000, seed: int = 0) -> Detection | None:
    """The run's trigger as a detector of wrong first drafts; None when the run judged no draft."""
    checks = first_draft_checks(run)
    if not checks:
        return None
    answered = [c for c in checks if c.wrong is not None]
    fired = np.array([c.fired for c in answered], dtype=bool)
    wrong = np.array([bool(c.wrong) for c in answered], dtype=float)
    diff, p = proportion_difference(wrong, fired, n_perm=n_boot, seed=seed)
    scored = [c for c in answered if c.suspicion is not None]
    ranked = None
    if min(sum(bool(c.wrong) for c in scored), sum(not c.wrong for c in scored)) >= MIN_GROUP:
        ranked = auroc([c.suspicion or 0.0 for c in scored], [bool(c.wrong) for c in scored], n_boot, seed)
    return Detection(
        run=run.name,
        drafts=len(checks),
        no_answer=len(checks) - len(answered),
        fired_wrong=int(np.sum(fired & (wrong == 1))),
        fired_right=int(np.sum(fired & (wrong == 0))),
        kept_wrong=int(np.sum(~fired & (wrong == 1))),
        kept_right=int(np.sum(~fired & (wrong == 0))),
        difference=diff,
        p_value=p,
        auroc=ranked,
    )


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}% ({part}/{whole})" if whole else "—"


def detection_cells(d: Detection) -> list[str]:
    """One detection row's cells: drafts, fired, wrong when fired / kept, difference, caught, false alarms, AUROC."""
    diff = d.difference
    if min(d.fired, d.kept) < MIN_GROUP:
        delta = f"— (a group under {MIN_GROUP})"
    else:
        delta = f"{diff.mean * 100:+.1f} [{diff.low * 100:+.1f}, {diff.high * 100:+.1f}] p={d.p_value:.3f}"
    return [
        f"{d.drafts}" + (f" ({d.no_answer} without answer)" if d.no_answer else ""),
        _share(d.fired, d.fired + d.kept),
        _share(d.fired_wrong, d.fired),
        _share(d.kept_wrong, d.kept),
        delta,
        _share(d.fired_wrong, d.fired_wrong + d.kept_wrong),
        _share(d.fired_right, d.fired_right + d.kept_right),
        "—" if d.auroc is None or math.isnan(d.auroc.mean) else f"{d.auroc.format(2)} (n={d.auroc.n})",
    ]


DETECTION_HEAD: Sequence[str] = (
    "first drafts judged",
    "fired",
    "wrong when fired",
    "wrong when kept",
    "Δ wrong (fired − kept)",
    "wrong drafts caught",
    "right drafts flagged",
    "AUROC of the first score",
)
