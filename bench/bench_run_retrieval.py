"""What did each run's queries find? The gold passages among every passage a recorded run retrieved.

Usage: python bench/bench_run_retrieval.py --dataset hotpotqa|pubmedqa RUN_DIR [RUN_DIR ...] [--boot 10000]

Methods differ in when they retrieve and in what they ask the retriever: the question (SR-RAG, QuCo-RAG's
stage 1), a draft sentence with its uncertain tokens masked (FLARE), a claim's entities (QuCo-RAG's stage 2).
This reads the passages each recorded run's trace holds for each question, from every retrieval step, and
checks them against the question's gold:

- HotpotQA: the titles of its supporting paragraphs (``supporting_titles`` as the dataset loader reads them,
  matched to the records by question id). A retrieved
  passage counts when it carries a gold title: the pool paragraph itself, or in the realistic world's haystack
  a passage of the Wikipedia article of that title. recall = mean share of a question's gold titles found;
  all / any = questions with every / at least one gold title found.
- PubMedQA: the question's own abstract, the pool passage built from its record (the haystack's
  ``pubmedqa-pool:<n>`` for the n-th PQA-L record, read from the data as the haystack build reads it).

For each run, on the questions every run holds: how many questions retrieved at all, passages per question,
recall, all and any; EM on the questions with every gold passage found against those that retrieved without
finding them; and, against the first run, the paired difference in "all found" (bootstrap 95% interval,
permutation p). 2WikiMultihopQA's data carries no supporting paragraphs, so it is refused. No model runs; it
reads the runs' records only. Prints its figures; it is not a timed test.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quco.datasets import load_dataset
from quco.eval.runs.store import Record, Run, load_run
from quco.eval.score.stats import paired_test
from quco.paths import data_dir
from quco.retrieval.corpus import CorpusSource
from quco.trace import as_trace
from quco.world.sources import pool_for

DATASETS = ("hotpotqa", "pubmedqa")


def norm(title: str) -> str:
    return " ".join(title.split()).casefold()


def pubmed_pool_ids() -> dict[str, str]:
    """PubMedQA question id -> the haystack id of its own abstract (``pubmedqa-pool:<n>``, n from 1)."""
    pool = pool_for("pubmedqa")
    source = CorpusSource.resolve(data_dir() / pool.file)
    return {str(p.id): f"pubmedqa-pool:{n}" for n, p in enumerate(source.iter_passages(), 1)}


def hotpot_titles() -> dict[str, list[str]]:
    """HotpotQA question id -> the titles of its supporting paragraphs."""
    return {e.id: list(e.meta.get("supporting_titles") or []) for e in load_dataset("hotpotqa")}


def retrieved(record: Record) -> list[tuple[str, str]]:
    """(id, title) of every passage the question's trace retrieved, in every step."""
    return [(p.id, p.title) for step in as_trace(record.trace or {}).steps for p in step.retrieved]


def gold_found(dataset: str, record: Record, got: list[tuple[str, str]], gold_of: dict) -> tuple[int, int]:
    """(gold passages found, gold passages) for one question whose trace retrieved ``got``; ``gold_of`` maps
    question ids to the gold."""
    if dataset == "pubmedqa":
        own = gold_of.get(record.id)
        if own is None:
            raise SystemExit(f"question {record.id} is not a PQA-L record of the pool")
        return int(any(pid == own for pid, _ in got)), 1
    gold = {norm(t) for t in gold_of.get(record.id) or []}
    if not gold:
        raise SystemExit(f"question {record.id} has no supporting titles in the HotpotQA data")
    titles = {norm(t) for _, t in got}
    return len(gold & titles), len(gold)


def pct(k: int, n: int) -> str:
    return f"{100 * k / n:5.1f}% ({k}/{n})" if n else "   — (0/0)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", required=True, choices=DATASETS)
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of the same dataset's questions")
    ap.add_argument("--boot", type=int, default=10_000, help="bootstrap resamples and permutations")
    args = ap.parse_args()

    runs: list[Run] = [load_run(d) for d in args.runs]
    by_id = [{r.id: r for r in run.records if not r.error} for run in runs]
    ids = sorted(set.intersection(*(set(b) for b in by_id)), key=lambda i: by_id[0][i].index)
    if not ids:
        raise SystemExit("the runs share no recorded question")
    gold_of = pubmed_pool_ids() if args.dataset == "pubmedqa" else hotpot_titles()
    gold_kind = (
        "its own abstract"
        if args.dataset == "pubmedqa"
        else "the supporting paragraphs' titles (any passage)"
    )
    print(f"{args.dataset}: {len(ids)} questions in every run; gold = {gold_kind}")

    first_all: list[float] | None = None
    for run, records in zip(runs, by_id, strict=True):
        rows = [records[i] for i in ids]
        got = [retrieved(r) for r in rows]
        found = [gold_found(args.dataset, r, g, gold_of) for r, g in zip(rows, got, strict=True)]
        passages = [len(g) for g in got]
        asked = sum(p > 0 for p in passages)
        every = [float(k == n) for k, n in found]
        recall = sum(k / n for k, n in found) / len(found)
        em_all = [r.em for r, e in zip(rows, every, strict=True) if e]
        em_miss = [r.em for r, e, p in zip(rows, every, passages, strict=True) if not e and p > 0]
        print(
            f"\n{run.name} ({run.dir}): retrieved for {pct(asked, len(rows))} questions, "
            f"{sum(passages) / len(rows):.2f} passages per question"
        )
        print(
            f"  recall {100 * recall:5.1f}%; all gold found {pct(int(sum(every)), len(rows))}; any found "
            f"{pct(sum(k > 0 for k, _ in found), len(rows))}"
        )
        print(
            f"  EM with all gold found {pct(int(sum(em_all)), len(em_all))}; retrieved without it "
            f"{pct(int(sum(em_miss)), len(em_miss))}"
        )
        if first_all is None:
            first_all = every
            continue
        test = paired_test(first_all, every, metric="all found", n_boot=args.boot)
        d = test.diff
        print(
            f"  all gold found vs {runs[0].name}: {100 * d.mean:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}] "
            f"points, {'p<0.001' if test.p_value < 0.001 else f'p={test.p_value:.3f}'}"
        )


if __name__ == "__main__":
    main()
