"""QuCo-RAG's stage 1 in both worlds, without generating: how often the question's entities are rare enough.

Usage: python bench/bench_world_stage1.py [--questions 100] [--datasets hotpotqa 2wikimultihopqa pubmedqa]

Stage 1 needs only the question: its entities (the configured extractor, rules by default) and their counts.
For each dataset this takes the pool-world config (``configs/<dataset>/quco.yaml``; PubMedQA, which has none:
``configs/eval/pubmedqa/quco.yaml``) and its realistic twin
(``configs/world/<dataset>/quco.yaml``), opens (or builds) their statistics indexes as a run would, and applies
the rule of ``methods/quco.py``: retrieve when the mean count (or rate per billion tokens) of the entities is
below ``entity_threshold``; no entity, no retrieval; an unknown count retrieves. It prints the firing rate and,
for the realistic world, one question where stage 1 fires and one where it does not, with the counts. Stage 2
needs the model's own sentences and is measured by evaluation runs (``quco summary`` prints both rates).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from quco.config import load_config
from quco.corpus_stats import build_corpus_stats
from quco.datasets import load_dataset
from quco.text import build_text
from quco.world.corpora import resolve_corpus

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def stage1(cfg, questions: list[str]) -> list[dict]:  # noqa: ANN001
    source = resolve_corpus(cfg.corpus_stats.corpus or cfg.retriever.corpus)
    stats = build_corpus_stats(cfg.corpus_stats, source.docs, source.fingerprint(), progress=True)
    text = build_text(cfg.text)
    p = cfg.params
    unit, threshold = p.get("threshold_unit", "count"), float(p["entity_threshold"])
    out = []
    for q in questions:
        entities = list(dict.fromkeys(e for e in text.entities.question_entities(q) if e.strip()))
        results = stats.count_many(entities) if entities else []
        values = [
            (r.per_billion if unit == "per_billion" else r.count) if r.status == "ok" else None
            for r in results
        ]
        known = [v for v in values if v is not None]
        if not entities:
            fire, mean = False, None
        elif len(known) < len(values):
            fire, mean = True, None
        else:
            mean = sum(known) / len(known)
            fire = mean < threshold
        counts = {e: r.count for e, r in zip(entities, results, strict=True)}
        out.append(
            {
                "question": q,
                "fire": fire,
                "mean": mean,
                "counts": counts,
                "unit": unit,
                "threshold": threshold,
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--datasets", nargs="+", default=["hotpotqa", "2wikimultihopqa"])
    args = ap.parse_args()
    print(f"machine load: {os.getloadavg()}")
    for dataset in args.datasets:
        questions = [ex.question for ex in load_dataset(dataset, limit=args.questions)]
        pool_config = CONFIGS / dataset / "quco.yaml"
        if not pool_config.is_file():  # PubMedQA has only the evaluation-model configs in the pool world
            pool_config = CONFIGS / "eval" / dataset / "quco.yaml"
        for world, path in (
            ("pool", pool_config),
            ("realistic", CONFIGS / "world" / dataset / "quco.yaml"),
        ):
            cfg = load_config(path)
            t = time.perf_counter()
            rows = stage1(cfg, questions)
            fired = sum(r["fire"] for r in rows)
            no_entity = sum(not r["counts"] for r in rows)
            print(
                f"{dataset} 0-{len(rows) - 1}, {world} world ({path.relative_to(CONFIGS.parent)}): stage 1 fires on "
                f"{fired}/{len(rows)} questions ({no_entity} without an entity); threshold {rows[0]['threshold']:g} "
                f"({rows[0]['unit']}); {time.perf_counter() - t:.1f} s"
            )
            if world == "realistic":
                for want in (True, False):
                    ex = next((r for r in rows if r["fire"] == want and r["counts"]), None)
                    if ex is not None:
                        mean = "unknown" if ex["mean"] is None else f"{ex['mean']:.4g}"
                        print(
                            f"  {'fires' if want else 'does not fire'}: {ex['question']!r}: counts {ex['counts']}, mean {mean} {ex['unit']}"
                        )


if __name__ == "__main__":
    main()
