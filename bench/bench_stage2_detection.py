"""QuCo-RAG's stage-2 rule and count-aware variants, measured as detectors of wrong first drafts.

Usage: python bench/bench_stage2_detection.py --run RUN_DIR [--run RUN_DIR ...] [--config CONFIG.yaml]

Reads each recorded QuCo-RAG run (``quco eval`` output) and takes every question's first draft judged during
generation, scored as the final answer is (``quco.eval.detection``). It splits the draft into sentences up to
the one that states the answer, extracts each sentence's claims with the config's extractor, and counts in the
config's statistics index each claim's head, tail and head/tail co-occurrence. Then it re-judges the draft
under each rule (a draft fires when any of its claims does) and prints, per rule, the drafts it fires on, how
often they are wrong against the drafts it keeps, and the difference with its bootstrap 95% interval and
permutation p-value:

- ``published``: the pair never co-occurs (the paper's rule; it reproduces the run's own decisions);
- ``both known >= m``: it never co-occurs although head and tail each occur at least m times, so that the
  missing co-occurrence is evidence rather than the rarity of either;
- ``an entity unknown``: the head or the tail never occurs.

A detector fires on wrong drafts more often than on right ones. Only rules-extractor runs are re-judged
exactly: an LLM extractor is not run again (its claims would have to be generated). Runs of the realistic
world need its statistics index (``quco index world --dataset NAME``). Prints its figures; it is not a timed
test.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np

from quco.config import PipelineConfig, load_config
from quco.corpus_stats import build_corpus_stats
from quco.eval.detection import MIN_GROUP, first_draft_checks
from quco.eval.runs import load_run
from quco.eval.stats import group_difference
from quco.retrieval.corpus import corpus_source
from quco.text import build_text
from quco.trace import as_trace

# A claim as counted: head count, tail count (None for a head-only claim), co-occurrence (None likewise).
Counted = tuple[int | None, int | None, int | None]


def _pair(rule: Callable[[int, int, int], bool]) -> Callable[[Counted], bool]:
    def fires(c: Counted) -> bool:
        head, tail, co = c
        return tail is not None and None not in (head, co) and rule(head or 0, tail, co or 0)

    return fires


RULES: dict[str, Callable[[Counted], bool]] = {
    "published (never co-occur)": _pair(lambda h, t, co: co == 0),
    **{
        f"both known >= {m}, never co-occur": _pair(lambda h, t, co, m=m: co == 0 and min(h, t) >= m)
        for m in (1, 10, 100)
    },
    "an entity unknown": _pair(lambda h, t, co: h == 0 or t == 0),
}


def counted_drafts(run_dir: Path, config: Path | None) -> list[tuple[bool, list[Counted]]]:
    """(wrong, claims) of each first judged draft that states an answer."""
    run = load_run(run_dir)
    cfg = load_config(config) if config else PipelineConfig.model_validate(run.config["pipeline"])
    if cfg.text.triplet_extractor != "rules":
        raise SystemExit(f"{run_dir}: only runs of the rules extractor are re-judged here")
    text = build_text(cfg.text)
    source = corpus_source(cfg.corpus_stats.corpus or cfg.retriever.corpus)
    stats = build_corpus_stats(
        cfg.corpus_stats, source.docs, source.fingerprint(), progress=False, cache=False
    )
    wrong_of = {c.id: c.wrong for c in first_draft_checks(run)}
    out = []
    for rec in run.records:
        wrong = wrong_of.get(str(rec["id"]))
        if wrong is None:
            continue
        step = next(s for s in as_trace(rec["trace"]).steps if s.stage == "generate" and s.triggers)
        claims: list[Counted] = []
        for sentence in text.splitter.split(step.draft):
            if "answer is" in sentence.lower():
                break
            for t in text.triplets.triplets(sentence, None):
                head = stats.count(t.head).count
                if t.tail is None:
                    claims.append((head, None, None))
                else:
                    claims.append((head, stats.count(t.tail).count, stats.cooccur(t.head, t.tail).count))
        out.append((wrong, claims))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", required=True, type=Path, help="a QuCo-RAG run directory")
    ap.add_argument(
        "--config", type=Path, help="config whose extractor and index to use (default: the run's)"
    )
    ap.add_argument("--boot", type=int, default=10_000, help="bootstrap resamples and permutations")
    args = ap.parse_args()
    for run_dir in args.run:
        drafts = counted_drafts(run_dir, args.config)
        wrong = np.array([w for w, _ in drafts], dtype=float)
        n_claims = sum(len(c) for _, c in drafts)
        print(
            f"\n{run_dir}: {len(drafts)} first drafts with an answer, {n_claims} claims, {wrong.mean():.0%} wrong"
        )
        print(f"{'rule':36s} {'fired':>9s} {'wrong|fired':>12s} {'wrong|kept':>11s}  difference [95% CI], p")
        for name, rule in RULES.items():
            fired = np.array([any(rule(c) for c in claims) for _, claims in drafts])
            k = int(fired.sum())
            if min(k, len(fired) - k) < MIN_GROUP:
                print(f"{name:36s} {k:4d}/{len(fired):<4d}  (a group under {MIN_GROUP} drafts)")
                continue
            diff, p = group_difference(wrong, fired, n_boot=args.boot)
            print(
                f"{name:36s} {k:4d}/{len(fired):<4d} {wrong[fired].mean():12.0%} {wrong[~fired].mean():11.0%}  "
                f"{diff.mean * 100:+.1f} [{diff.low * 100:+.1f}, {diff.high * 100:+.1f}], p={p:.3f}"
            )


if __name__ == "__main__":
    main()
