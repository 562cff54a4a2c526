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

``world.json`` in the run directory holds the corpora's fingerprints; resuming into a run whose corpora have
changed since is refused, since one results file would then mix two worlds.
"""

from __future__ import annotations

import html
import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quco.errors import QucoError
from quco.storage import write_text_atomic
from quco.world.sources import ARTICLE_COUNT, ARTICLE_SHA256, POOLS

log = logging.getLogger(__name__)

WORLD_FILE = "world.json"
WORLD_FORMAT = "quco-world/1"
_ARTICLE_SHAS = frozenset(ARTICLE_SHA256.values())
_POOL_BY_SHA = {p.sha256: p for p in POOLS.values()}
_ORDER = {"pool": 0, "other": 1, "none": 2, "realistic": 3}


class WorldChangedError(QucoError):
    """A run directory was made over other corpora than the ones configured now."""


def _file_sources(path: Path) -> list[dict[str, Any]]:
    """What one corpus file is made of: a haystack lists its sources; other files are identified by sha256."""
    from quco.retrieval.corpus import file_sha256

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
    sha = file_sha256(path)
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
    from quco.retrieval.corpus import HAYSTACK, CorpusSet, resolve_corpus

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


def describe_world(config: Any, build: bool = True) -> dict[str, Any]:
    """The world record of a pipeline config: both corpora (whether the method uses them) and the verdict."""
    from quco.methods import method_class

    shape = method_class(config.method)(config.params).shape
    # DTR builds its own (dense or BM25) retrieval over the retriever's corpus, so that corpus is used too.
    uses_retriever = shape.retriever or config.method == "dtr"
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


def record_world(run_dir: str | os.PathLike[str], config: Any) -> dict[str, Any] | None:
    """Write ``world.json`` into a run directory; refuse if the run was made over other corpora."""
    if config is None:  # an answer function of unknown make: nothing to record
        return None
    run_dir = Path(run_dir)
    rec = describe_world(config)
    path = run_dir / WORLD_FILE
    now = datetime.now(UTC).isoformat(timespec="seconds")
    rec["recorded"] = now
    if path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        for part in ("retrieval", "corpus_stats"):
            before = (old.get(part) or {}).get("fingerprint")
            after = rec[part].get("fingerprint")
            if rec[part]["used"] and before and after and before != after:
                raise WorldChangedError(
                    f"{run_dir} was made over another {part.replace('_', ' ')} corpus "
                    f"({before[:12]}, now {after[:12]}): the corpus changed since; use another --out"
                )
        rec["recorded"] = old.get("recorded", now)
    write_text_atomic(path, json.dumps(rec, indent=1, ensure_ascii=False))
    if rec["world"] == "pool":
        log.warning(
            "this run measures in a POOL world (a corpus built from the evaluated questions' own paragraphs); "
            "use configs/world/... for realistic results"
        )
    return rec


def read_world(run_dir: str | os.PathLike[str], config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's world record; for runs made before it existed, inferred from their config (no fingerprints)."""
    path = Path(run_dir) / WORLD_FILE
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return {"world": "unknown", "error": f"unreadable {WORLD_FILE}: {exc}"}
    pipeline = (config or {}).get("pipeline")
    if not isinstance(pipeline, dict):
        return {"world": "unknown", "note": "no pipeline config recorded"}
    try:
        from quco.config import PipelineConfig

        rec = describe_world(PipelineConfig.model_validate(pipeline), build=False)
    except Exception as exc:  # an old or foreign config: say so rather than fail the summary
        return {"world": "unknown", "error": f"{type(exc).__name__}: {exc}"}
    rec["inferred"] = True
    return rec


def stage_rates(records: list[dict[str, Any]]) -> dict[str, int]:
    """Questions whose trace retrieved before generating (stage 1) and during generation (stage 2)."""
    n = before = during = 0
    for rec in records:
        trace = rec.get("trace")
        if not trace:
            continue
        n += 1
        steps = trace.get("steps") or []
        before += any(s.get("stage") == "before" and s.get("decision") == "retrieve" for s in steps)
        during += any(s.get("stage") == "generate" and s.get("decision") == "retrieve" for s in steps)
    return {"questions": n, "before": before, "during": during}


def _corpus_text(rec: dict[str, Any]) -> str:
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


def world_lines(runs: list[Any]) -> list[str]:
    """One line per run for ``quco summary``: the world, both corpora, and the stage-1/2 retrieval rates."""
    lines = []
    for run in runs:
        rec = read_world(run.dir, run.config)
        rates = stage_rates(run.records)
        verdict = str(rec.get("world", "unknown")).upper() + (" (inferred)" if rec.get("inferred") else "")
        parts = [f"{run.name}: world {verdict}"]
        if "retrieval" in rec:
            parts.append(f"retrieval {_corpus_text(rec['retrieval'])}")
            parts.append(f"statistics {_corpus_text(rec['corpus_stats'])}")
        if rates["questions"]:
            parts.append(
                f"retrieved before generating on {rates['before']}/{rates['questions']} questions, "
                f"during generation on {rates['during']}/{rates['questions']}"
            )
        lines.append(" · ".join(parts))
    return lines


def world_html(runs: list[Any]) -> str:
    """The report's World section: a table a reader cannot miss when a run measured in a pool."""
    rows = []
    for run in sorted(runs, key=lambda r: _ORDER.get(read_world(r.dir, r.config).get("world", ""), 1)):
        rec = read_world(run.dir, run.config)
        rates = stage_rates(run.records)
        world = str(rec.get("world", "unknown"))
        style = " class='bad'" if world in ("pool", "unknown", "other") else " class='ok'"
        n = rates["questions"]
        rows.append(
            f"<tr><td>{html.escape(run.name)}</td><td{style}>{html.escape(world.upper())}"
            f"{' (inferred)' if rec.get('inferred') else ''}</td>"
            f"<td>{html.escape(_corpus_text(rec.get('retrieval', {})))}</td>"
            f"<td>{html.escape(_corpus_text(rec.get('corpus_stats', {})))}</td>"
            f"<td class='num'>{rates['before']}/{n}</td><td class='num'>{rates['during']}/{n}</td></tr>"
        )
    return (
        "<h2>World</h2><p class='muted'>Which corpora each run retrieved from and counted in. POOL: a corpus "
        "built from dataset questions' own paragraphs (the question is a near-oracle query, every entity is "
        "rare); REALISTIC: the Wikipedia articles (haystack or statistics), a pool at most mixed in as "
        "needles. See docs/world.md.</p><table><thead><tr><th>run</th><th>world</th><th>retrieval corpus</th>"
        "<th>statistics corpus</th><th>retrieved before generating</th><th>retrieved during generation</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
