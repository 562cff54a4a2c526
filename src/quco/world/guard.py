"""The leak guard: which world a run measured in, recorded beside its results and shown by summary and report.

A dataset's paragraph pool is built from questions' own context paragraphs. Retrieving from it makes the
question a near-oracle query, and counting entities in it makes every entity rare, so results measured there
say little about a realistic setting. The rule (docs/world.md):

- a corpus is a **pool** when every one of its files is a known paragraph pool (recognised by sha256);
- it is **realistic** when it holds the whole Wikipedia article collection (all four shards, by sha256),
  with or without a pool mixed in (the haystack: a pool's paragraphs become needles, under 1% of passages);
- anything else is **other** (the bundled summaries, a file of your own), and a hosted index is **hosted**;
- a run's world is **pool** when any corpus its method uses is a pool, **realistic** when every corpus it
  uses is realistic or hosted, **none** when it uses no corpus, else **other**.

This module describes a world; a run directory's ``world.json`` (the record, written and read with the run's
other files) is ``quco.eval.runs.world_file``'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quco.errors import QucoError
from quco.world.sources import ARTICLE_COUNT, ARTICLE_SHA256, POOLS

if TYPE_CHECKING:
    from quco.engine.method import Shape

WORLD_FORMAT = "quco-world/1"
_ARTICLE_SHAS = frozenset(ARTICLE_SHA256.values())
_POOL_BY_SHA = {p.sha256: p for p in POOLS.values()}


def _file_sources(path: Path) -> list[dict[str, Any]]:
    """What one corpus file is made of: a haystack lists its sources; other files are identified by sha256."""
    from quco.storage import file_sha256

    manifest = path.parent / "manifest.json"
    if manifest.is_file():
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        if data.get("format") == "quco-haystack" and data.get("file") == path.name:
            return [
                {
                    "role": s["role"],
                    "sha256": s["sha256"],
                    "dataset": s.get("dataset"),
                    "passages": s.get("passages"),
                }
                for s in data["sources"]
            ]
    sha = file_sha256(path, remember=True)
    if sha in _ARTICLE_SHAS:
        return [{"role": "articles", "sha256": sha, "dataset": None}]
    if sha in _POOL_BY_SHA:
        pool = _POOL_BY_SHA[sha]
        return [{"role": "pool", "sha256": sha, "dataset": pool.dataset, "passages": pool.records}]
    return [{"role": "other", "sha256": sha, "dataset": None, "file": path.name}]


def classify(sources: list[dict[str, Any]]) -> str:
    roles = {s["role"] for s in sources}
    if roles == {"pool"}:
        return "pool"
    shas = {s["sha256"] for s in sources if s["role"] == "articles"}
    if shas >= _ARTICLE_SHAS and roles <= {"articles", "pool"}:
        return "realistic"
    return "other"


def describe_corpus(spec: Any, build: bool = True) -> dict[str, Any]:
    """Kind, fingerprint and make-up of a corpus spec. ``build=False`` never builds a missing haystack."""
    from quco.retrieval.corpus import CorpusSet
    from quco.world.corpora import HAYSTACK, resolve_corpus

    rec: dict[str, Any] = {"corpus": spec}
    if not build and isinstance(spec, str) and spec.startswith(HAYSTACK):
        from quco.world.haystack import default_haystack_dir, plan

        name = spec[len(HAYSTACK) :]
        directory = Path(name).expanduser() if Path(name).expanduser().is_dir() else None
        if directory is None:
            try:
                directory = default_haystack_dir(plan(name))
            except QucoError as exc:
                return rec | {"kind": "other", "error": str(exc)}
        if not (directory / "manifest.json").is_file():
            return rec | {"kind": "realistic", "note": "haystack not built yet"}
    try:
        corpus = resolve_corpus(spec)
    except QucoError as exc:
        return rec | {"kind": "other", "error": str(exc)}
    parts = corpus.parts if isinstance(corpus, CorpusSet) else (corpus,)
    sources = [s for p in parts for s in _file_sources(p.path)]
    kind = classify(sources)
    rec |= {"kind": kind, "fingerprint": corpus.fingerprint(), "sources": sources}
    pools = sorted({s["dataset"] for s in sources if s["role"] == "pool"})
    if pools:
        rec["pools"] = [
            {"dataset": d, "holds_evaluated_gold": POOLS[d].holds_evaluated_gold} for d in pools if d in POOLS
        ]
    counted = [s.get("passages") for s in sources]
    pool_n = sum(s.get("passages") or 0 for s in sources if s["role"] == "pool")
    if all(c is not None for c in counted):
        rec["passages"] = sum(counted)  # type: ignore[arg-type]
    elif kind == "realistic" and all(s.get("passages") is not None for s in sources if s["role"] == "pool"):
        rec["documents"] = ARTICLE_COUNT + pool_n  # full articles, each one document
    total = rec.get("passages") or rec.get("documents")
    if pools and total:
        rec["pool_share"] = round(pool_n / total, 5)
    return rec


def describe_world(config: Any, shape: Shape, build: bool = True) -> dict[str, Any]:
    """The world record of a pipeline config run by a method of this ``shape``: both corpora (whether the
    method uses them) and the verdict."""
    uses_retriever = shape.retriever or shape.own_index
    uses_stats = shape.corpus_stats
    retrieval = {"used": uses_retriever, **describe_corpus(config.retriever.corpus, build and uses_retriever)}
    cs = config.corpus_stats
    if cs.backend == "api":
        stats: dict[str, Any] = {
            "used": uses_stats,
            "corpus": f"api:{cs.api_index}",
            "kind": "hosted",
            "fingerprint": f"{cs.api_url}#{cs.api_index}",
        }
    else:
        spec = cs.corpus if cs.corpus else config.retriever.corpus
        stats = {"used": uses_stats, **describe_corpus(spec, build and uses_stats)}
        stats["cooccurrence"] = cs.cooccurrence
    kinds = [c["kind"] for c in (retrieval, stats) if c["used"]]
    if not kinds:
        world = "none"
    elif "pool" in kinds:
        world = "pool"
    elif all(k in ("realistic", "hosted") for k in kinds):
        world = "realistic"
    else:
        world = "other"
    return {"format": WORLD_FORMAT, "world": world, "retrieval": retrieval, "corpus_stats": stats}


def stage_rates(records: list[Any]) -> dict[str, int]:
    """Questions whose trace retrieved before generating (stage 1) and during generation (stage 2)."""
    n = before = during = 0
    for rec in records:
        trace = rec.trace
        if not trace:
            continue
        n += 1
        steps = trace.get("steps") or []
        before += any(s.get("stage") == "before" and s.get("decision") == "retrieve" for s in steps)
        during += any(s.get("stage") == "generate" and s.get("decision") == "retrieve" for s in steps)
    return {"questions": n, "before": before, "during": during}


def corpus_text(rec: dict[str, Any]) -> str:
    if not rec.get("used"):
        return f"{rec.get('corpus')} (not used)"
    bits = [str(rec.get("kind", "?")).upper()]
    size = rec.get("passages") or rec.get("documents")
    if size:
        bits.append(f"{size:,} {'passages' if rec.get('passages') else 'documents'}")
    for pool in rec.get("pools") or []:
        share = rec.get("pool_share")
        gold = "holds the gold" if pool["holds_evaluated_gold"] else "not the evaluated questions' gold"
        bits.append(
            f"{pool['dataset']} pool{f' {share:.1%}' if share is not None and rec['kind'] != 'pool' else ''} "
            f"({gold})"
        )
    if rec.get("fingerprint"):
        bits.append(str(rec["fingerprint"])[:12])
    if rec.get("note") or rec.get("error"):
        bits.append(str(rec.get("note") or rec.get("error")))
    return f"{rec.get('corpus')} [{'; '.join(bits)}]"
