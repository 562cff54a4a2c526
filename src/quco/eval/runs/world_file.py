"""``world.json`` in a run directory: which world the run measured in (``quco.world.guard`` describes it).

It holds the corpora's fingerprints; resuming into a run whose corpora have changed since is refused, since one
results file would then mix two worlds. Runs made before the file existed have their world inferred from their
config (no fingerprints, never building a missing haystack).
"""

from __future__ import annotations

import html
import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quco.config import PipelineConfig
from quco.errors import QucoError
from quco.eval.runs.records import RunConfig
from quco.methods import method_class
from quco.storage import write_text_atomic
from quco.world.guard import corpus_text, describe_world, stage_rates

log = logging.getLogger(__name__)

WORLD_FILE = "world.json"


class WorldChangedError(QucoError):
    """A run directory was made over other corpora than the ones configured now."""


# The order runs are listed in: pool worlds first, realistic last.
_ORDER = {"pool": 0, "other": 1, "none": 2, "realistic": 3}


def describe(config: PipelineConfig, build: bool = True) -> dict[str, Any]:
    """The world record of a pipeline config, with the corpora its method uses (from the method's shape)."""
    return describe_world(config, method_class(config.method)(config.params).shape, build=build)


def record_world(run_dir: str | os.PathLike[str], config: PipelineConfig | None) -> dict[str, Any] | None:
    """Write ``world.json`` into a run directory; refuse if the run was made over other corpora."""
    if config is None:  # an answer function of unknown make: nothing to record
        return None
    run_dir = Path(run_dir)
    rec = describe(config)
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


def read_world(
    run_dir: str | os.PathLike[str], config: RunConfig | dict[str, Any] | None = None
) -> dict[str, Any]:
    """The run's world record; for runs made before it existed, inferred from their config (no fingerprints)."""
    path = Path(run_dir) / WORLD_FILE
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return {"world": "unknown", "error": f"unreadable {WORLD_FILE}: {exc}"}
    if isinstance(config, dict):
        config = RunConfig.from_dict(config)
    pipeline = config.pipeline if config is not None else None
    if pipeline is None:
        return {"world": "unknown", "note": "no pipeline config recorded"}
    try:
        rec = describe(PipelineConfig.model_validate(pipeline), build=False)
    except Exception as exc:  # an old or foreign config: say so rather than fail the summary
        return {"world": "unknown", "error": f"{type(exc).__name__}: {exc}"}
    rec["inferred"] = True
    return rec


def world_lines(runs: list[Any]) -> list[str]:
    """One line per run for ``quco summary``: the world, both corpora, and the stage-1/2 retrieval rates."""
    lines = []
    for run in runs:
        rec = run.world
        rates = stage_rates(run.records)
        verdict = str(rec.get("world", "unknown")).upper() + (" (inferred)" if rec.get("inferred") else "")
        parts = [f"{run.name}: world {verdict}"]
        if "retrieval" in rec:
            parts.append(f"retrieval {corpus_text(rec['retrieval'])}")
            parts.append(f"statistics {corpus_text(rec['corpus_stats'])}")
        if rates["questions"]:
            parts.append(
                f"retrieved before generating on {rates['before']}/{rates['questions']} questions, "
                f"during generation on {rates['during']}/{rates['questions']}"
            )
        lines.append(" · ".join(parts))
    return lines


def world_html(runs: list[Any]) -> str:
    """The report's World section: a table a reader cannot miss when a run measured in a pool. A run gives
    its name, its world record (``world``) and its records (``records``, each with its ``trace``)."""
    rows = []
    for run in sorted(runs, key=lambda r: _ORDER.get(r.world.get("world", ""), 1)):
        rec = run.world
        rates = stage_rates(run.records)
        world = str(rec.get("world", "unknown"))
        style = " class='bad'" if world in ("pool", "unknown", "other") else " class='ok'"
        n = rates["questions"]
        rows.append(
            f"<tr><td>{html.escape(run.name)}</td><td{style}>{html.escape(world.upper())}"
            f"{' (inferred)' if rec.get('inferred') else ''}</td>"
            f"<td>{html.escape(corpus_text(rec.get('retrieval', {})))}</td>"
            f"<td>{html.escape(corpus_text(rec.get('corpus_stats', {})))}</td>"
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
