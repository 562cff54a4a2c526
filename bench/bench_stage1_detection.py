"""QuCo-RAG's stage-1 premise, measured: does a question's entity rarity mark what the model does not know?

Usage: python bench/bench_stage1_detection.py --run QUCO_RUN --closed-book WO_RAG_RUN [--open-book SR_RAG_RUN]

Stage 1 retrieves before generating when the question's entities are rare in the statistics corpus (their mean
count below a threshold), on the premise that the model has seen too little about them to answer alone. This
reads the stage-1 score every question got in a recorded QuCo-RAG run (the mean entity count, as the trigger
recorded it, whether or not it fired) and pairs it with two other runs of the same questions: one without
retrieval (is the model's own answer wrong?) and, optionally, one with single retrieval (does retrieving help
that question: its score with retrieval minus without). It prints

- the AUROC of rarity (a lower mean count ranked as more suspect) for a wrong closed-book answer, and for a
  question where retrieval turns a wrong answer right, with bootstrap 95% intervals;
- the closed-book wrong rate and the mean gain from retrieval in each quartile of the score, rarest first
  (quartiles whose bounds tie merge);
- the same two at the run's own threshold (fired against kept), with a 95% interval (Newcombe's score interval
  for the share of wrong answers, a bootstrap for the gain) and a permutation p.

Questions whose question has no entity (no stage-1 score) are left out. No model runs; it reads the runs'
records only. Prints its figures; it is not a timed test.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from quco.eval.runs.store import Run, load_run
from quco.eval.score.detection import MIN_GROUP
from quco.eval.score.stats import auroc, group_difference, proportion_difference
from quco.trace import as_trace


def stage1_scores(run: Run) -> dict[str, tuple[float, float, bool]]:
    """Question id -> (stage-1 score, threshold, whether it fired) for every question whose pre-generation
    trigger scored it."""
    out = {}
    for rec in run.records:
        for step in as_trace(rec.trace or {}).steps:
            if step.stage != "before":
                continue
            for trig in step.triggers:
                if trig.param == "entity_threshold" and trig.scores and trig.scores[0] is not None:
                    out[rec.id] = (float(trig.scores[0]), float(trig.threshold), trig.fired)
            break
    return out


def em_of(run: Run) -> dict[str, float]:
    return {r.id: r.em for r in run.records}


def split(name: str, values: np.ndarray, fired: np.ndarray, boot: int, pct: bool) -> str:
    k = int(fired.sum())
    if min(k, len(fired) - k) < MIN_GROUP:
        return f"{name}: fired on {k}/{len(fired)} (a group under {MIN_GROUP} questions)"
    if pct:  # yes/no outcomes: Newcombe's score interval; otherwise a bootstrap of the mean difference
        diff, p = proportion_difference(values, fired, n_perm=boot)
    else:
        diff, p = group_difference(values, fired, n_boot=boot)
    unit = "%" if pct else " pts"
    return (
        f"{name}: fired {values[fired].mean() * 100:.1f}{unit} ({k} q), kept "
        f"{values[~fired].mean() * 100:.1f}{unit} ({len(fired) - k} q); difference "
        f"{diff.mean * 100:+.1f} [{diff.low * 100:+.1f}, {diff.high * 100:+.1f}], p={p:.3f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", required=True, type=Path, help="a QuCo-RAG run (its stage-1 scores)")
    ap.add_argument("--closed-book", required=True, type=Path, help="a run without retrieval (Wo-RAG)")
    ap.add_argument("--open-book", type=Path, help="a run with single retrieval (SR-RAG)")
    ap.add_argument("--boot", type=int, default=10_000, help="bootstrap resamples and permutations")
    args = ap.parse_args()

    scores = stage1_scores(load_run(args.run))
    closed = em_of(load_run(args.closed_book))
    opened = em_of(load_run(args.open_book)) if args.open_book else None
    ids = [i for i in scores if i in closed and (opened is None or i in opened)]
    if len(ids) < 2 * MIN_GROUP:
        raise SystemExit(f"only {len(ids)} questions are in every run with a stage-1 score")
    score = np.array([scores[i][0] for i in ids])
    threshold = scores[ids[0]][1]
    rarity = -np.log10(score + 1.0)  # a lower mean count: more suspect
    wrong = np.array([closed[i] < 1.0 for i in ids])
    print(
        f"{args.run}: {len(ids)} questions with a stage-1 score (of {len(scores)} scored); closed-book "
        f"({args.closed_book.name}) wrong on {wrong.mean():.1%}; threshold {threshold:g} per billion"
    )
    a = auroc(rarity.tolist(), wrong.tolist(), n_boot=args.boot)
    print(f"AUROC of rarity for a wrong closed-book answer: {a.mean:.2f} [{a.low:.2f}, {a.high:.2f}]")
    gain = None
    if opened is not None:
        gain = np.array([opened[i] - closed[i] for i in ids])
        helped = gain > 0
        print(
            f"retrieval ({args.open_book.name}) gains {gain.mean() * 100:+.1f} points: helps on {int(helped.sum())}, "
            f"hurts on {int((gain < 0).sum())} questions"
        )
        if min(int(helped.sum()), int((~helped).sum())) >= MIN_GROUP:
            h = auroc(rarity.tolist(), helped.tolist(), n_boot=args.boot)
            print(f"AUROC of rarity for a question retrieval helps: {h.mean:.2f} [{h.low:.2f}, {h.high:.2f}]")

    print(
        "\nquartiles of the stage-1 score (mean entity count per billion tokens), rarest first; tied quartiles merge"
    )
    edges = np.unique(np.quantile(score, [0.25, 0.5, 0.75]))
    group = np.searchsorted(edges, score, side="left")  # group g: edges[g-1] < score <= edges[g]
    for g in range(len(edges) + 1):
        m = group == g
        if not m.any():
            continue
        lo = f"({edges[g - 1]:.1f}" if g else f"[{score.min():.1f}"
        hi = f"{edges[g]:.1f}]" if g < len(edges) else f"{score.max():.1f}]"
        line = f"  {lo + ', ' + hi:>24s} {int(m.sum()):4d} q  closed-book wrong {wrong[m].mean():6.1%}"
        if gain is not None:
            line += f"  gain from retrieval {gain[m].mean() * 100:+6.1f}"
        print(line)

    fired = np.array([scores[i][2] for i in ids])  # the run's own decisions
    print(f"\nat the run's threshold ({threshold:g}):")
    print("  " + split("closed-book wrong", wrong.astype(float), fired, args.boot, pct=True))
    if gain is not None:
        print("  " + split("gain from retrieval", gain, fired, args.boot, pct=False))


if __name__ == "__main__":
    main()
