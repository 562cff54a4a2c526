"""QuCo-RAG's stage-2 rule and count-aware variants, measured as detectors of wrong first drafts.

Usage: python bench/bench_stage2_detection.py --run RUN_DIR [--run RUN_DIR ...] [--config CONFIG.yaml]
           [--fractions 0.0625,0.125,0.25,0.5,1]

Reads each recorded QuCo-RAG run (``quco eval`` output) and takes every question's first draft judged during
generation, scored as the final answer is (``quco.eval.score.detection``). It splits the draft into sentences up to
the one that states the answer, extracts each sentence's claims with the config's extractor, and counts in the
config's statistics index each claim's head, tail and head/tail co-occurrence. Then it re-judges the draft
under each rule (a draft fires when any of its claims does) and prints, per rule, the drafts it fires on, how
often they are wrong against the drafts it keeps, and the difference with its 95% interval (Newcombe's score
interval for two proportions) and permutation p-value:

- ``published``: the pair never co-occurs (the paper's rule; it reproduces the run's own decisions);
- ``both known >= m``: it never co-occurs although head and tail each occur at least m times, so that the
  missing co-occurrence is evidence rather than the rarity of either;
- ``an entity unknown``: the head or the tail never occurs.

A detector fires on wrong drafts more often than on right ones.

``--fractions``: does the rule detect better with more statistics? For each share of the statistics corpus's
documents (a fixed pseudo-random sample by document id, nested: a smaller share is part of every larger one)
it builds a statistics index in a temporary folder, counts the same claims in it, and prints the published
rule's split and the AUROC of the draft's smallest pair co-occurrence (fewer co-occurrences: more suspect).

Only rules-extractor runs are re-judged
exactly: an LLM extractor is not run again (its claims would have to be generated). Runs of the realistic
world need its statistics index (``quco index world --dataset NAME``). Prints its figures; it is not a timed
test.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from quco.config import PipelineConfig, load_config
from quco.corpus_stats import build_corpus_stats
from quco.corpus_stats.base import CorpusStats
from quco.corpus_stats.build import build_local_index
from quco.corpus_stats.local import LocalInfiniGram
from quco.eval.runs.store import load_run
from quco.eval.score.detection import MIN_GROUP, first_draft_checks
from quco.eval.score.stats import auroc, proportion_difference
from quco.text import build_text
from quco.trace import as_trace
from quco.world.corpora import resolve_corpus

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


# A claim as extracted: head, tail (None for a head-only claim).
Claim = tuple[str, str | None]


def extracted_drafts(
    run_dir: Path, config: Path | None
) -> tuple[PipelineConfig, list[tuple[bool, list[Claim]]]]:
    """The config used, and (wrong, claims) of each first judged draft that states an answer."""
    run = load_run(run_dir)
    cfg = load_config(config) if config else PipelineConfig.model_validate(run.config.pipeline)
    if cfg.text.triplet_extractor != "rules":
        raise SystemExit(f"{run_dir}: only runs of the rules extractor are re-judged here")
    text = build_text(cfg.text)
    wrong_of = {c.id: c.wrong for c in first_draft_checks(run)}
    out = []
    for rec in run.records:
        wrong = wrong_of.get(rec.id)
        if wrong is None:
            continue
        step = next(s for s in as_trace(rec.trace or {}).steps if s.stage == "generate" and s.triggers)
        claims: list[Claim] = []
        for sentence in text.splitter.split(step.draft):
            if "answer is" in sentence.lower():
                break
            claims.extend((t.head, t.tail) for t in text.triplets.triplets(sentence, None))
        out.append((wrong, claims))
    return cfg, out


def count_claims(
    drafts: list[tuple[bool, list[Claim]]], stats: CorpusStats
) -> list[tuple[bool, list[Counted]]]:
    """Each claim's head count, tail count and co-occurrence in ``stats``."""
    out = []
    for wrong, claims in drafts:
        counted: list[Counted] = []
        for head, tail in claims:
            h = stats.count(head).count
            if tail is None:
                counted.append((h, None, None))
            else:
                counted.append((h, stats.count(tail).count, stats.cooccur(head, tail).count))
        out.append((wrong, counted))
    return out


def in_fraction(doc_id: str, fraction: float) -> bool:
    """A fixed pseudo-random share of the documents, nested: a document kept at one fraction is kept at every
    larger one."""
    digest = hashlib.sha256(doc_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") < fraction * 2**64


def fraction_stats(cfg: PipelineConfig, fraction: float, workdir: Path) -> CorpusStats:
    """The config's statistics index, or one built over ``fraction`` of its documents."""
    source = resolve_corpus(cfg.corpus_stats.corpus or cfg.retriever.corpus)
    if fraction >= 1.0:
        return build_corpus_stats(
            cfg.corpus_stats, source.docs, source.fingerprint(), progress=False, cache=False
        )
    safe = "".join(c if c.isalnum() else "_" for c in source.fingerprint())[:16]
    index_dir = workdir / f"{safe}-share-{fraction:g}"
    if not index_dir.exists():
        docs = ((i, t) for i, t in source.docs() if in_fraction(i, fraction))
        build_local_index(docs, index_dir, tokenizer=cfg.corpus_stats.tokenizer, progress=False)
    c = cfg.corpus_stats
    return LocalInfiniGram(
        index_dir,
        cooccurrence=c.cooccurrence,
        max_diff_tokens=c.max_diff_tokens,
        max_clause_freq=c.max_clause_freq,
    )


def pair_cooccurrences(claims: list[Counted]) -> list[int]:
    return [co for _, tail, co in claims if tail is not None and co is not None]


def suspicion(claims: list[Counted]) -> float:
    """Higher for a draft whose least co-occurring pair co-occurs less (no pair claim: lowest)."""
    pairs = pair_cooccurrences(claims)
    return -math.log10(1 + min(pairs)) if pairs else -99.0


def rule_split(
    drafts: list[tuple[bool, list[Counted]]], rule: Callable[[Counted], bool], boot: int
) -> tuple[int, str]:
    """Drafts the rule fires on, and "wrong|fired wrong|kept difference [CI], p" (or why there is none)."""
    wrong = np.array([w for w, _ in drafts], dtype=float)
    fired = np.array([any(rule(c) for c in claims) for _, claims in drafts])
    k = int(fired.sum())
    if min(k, len(fired) - k) < MIN_GROUP:
        return k, f"(a group under {MIN_GROUP} drafts)"
    diff, p = proportion_difference(wrong, fired, n_perm=boot)
    return k, (
        f"{wrong[fired].mean():12.0%} {wrong[~fired].mean():11.0%}  "
        f"{diff.mean * 100:+.1f} [{diff.low * 100:+.1f}, {diff.high * 100:+.1f}], p={p:.3f}"
    )


def print_rules(drafts: list[tuple[bool, list[Counted]]], boot: int) -> None:
    print(f"{'rule':36s} {'fired':>9s} {'wrong|fired':>12s} {'wrong|kept':>11s}  difference [95% CI], p")
    for name, rule in RULES.items():
        k, split = rule_split(drafts, rule, boot)
        print(f"{name:36s} {k:4d}/{len(drafts):<4d} {split}")


def print_scale(drafts: list[tuple[bool, list[Counted]]], tokens: int, fraction: float, boot: int) -> None:
    """One line: the published rule and the co-occurrence ranking on an index of ``tokens`` tokens."""
    pairs = [co for _, claims in drafts for co in pair_cooccurrences(claims)]
    k, split = rule_split(drafts, RULES["published (never co-occur)"], boot)
    rank = auroc([suspicion(c) for _, c in drafts], [w for w, _ in drafts], n_boot=boot)
    print(
        f"{fraction:8g} {tokens / 1e6:8.1f}M {sum(co == 0 for co in pairs) / max(len(pairs), 1):8.0%} "
        f"{k:4d}/{len(drafts):<4d} {split}  AUROC {rank.mean:.2f} [{rank.low:.2f}, {rank.high:.2f}]"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", required=True, type=Path, help="a QuCo-RAG run directory")
    ap.add_argument(
        "--config", type=Path, help="config whose extractor and index to use (default: the run's)"
    )
    ap.add_argument("--boot", type=int, default=10_000, help="bootstrap resamples and permutations")
    ap.add_argument(
        "--fractions",
        type=lambda v: [float(x) for x in v.split(",")],
        help="also re-judge with statistics over these shares of the statistics corpus (e.g. 0.0625,0.25,1)",
    )
    args = ap.parse_args()
    if args.fractions and not all(0 < f <= 1 for f in args.fractions):
        ap.error("--fractions: every share must be in (0, 1]")
    with tempfile.TemporaryDirectory(prefix="quco-scale-") as tmp:
        for run_dir in args.run:
            cfg, extracted = extracted_drafts(run_dir, args.config)
            stats = fraction_stats(cfg, 1.0, Path(tmp))
            drafts = count_claims(extracted, stats)
            wrong = np.array([w for w, _ in drafts], dtype=float)
            n_claims = sum(len(c) for _, c in drafts)
            print(
                f"\n{run_dir}: {len(drafts)} first drafts with an answer, {n_claims} claims, {wrong.mean():.0%} wrong"
            )
            print_rules(drafts, args.boot)
            if not args.fractions:
                continue
            print(
                "\nthe published rule on a share of the statistics corpus: fired drafts, wrong when fired / kept, "
                "difference; AUROC of -log10(1 + the draft's smallest pair co-occurrence)"
            )
            print(f"{'share':>8s} {'tokens':>9s} {'pairs co=0':>9s} {'fired':>9s}")
            for fraction in sorted(args.fractions):
                stats = fraction_stats(cfg, fraction, Path(tmp))
                print_scale(count_claims(extracted, stats), stats.total_tokens or 0, fraction, args.boot)


if __name__ == "__main__":
    main()
