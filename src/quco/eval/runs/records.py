"""The typed contents of a run directory: ``config.yaml`` as a ``RunConfig``, each line of ``results.jsonl`` as a
``Record``.

Both read and write the same YAML and JSON as before they were typed: ``from_dict(d).to_dict()`` gives back
``d`` (a field an older version did not write reads as None). The hashed part of a config, its identity, stays
the mapping it was hashed from, so a recorded run keeps its hash; the typed fields are views of it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

EVAL_FORMAT = "quco-eval/1"

# Per-question quantities the statistics and report know about, in display order. ``main_*`` count the main
# generations only (drafts and regenerations), as the papers' #Call and #Tok do; ``llm_calls`` and ``tokens``
# count every role (extractor, sampler, judge, probe, answer re-prompt, ...).
COST_FIELDS = (
    "retrievals",
    "main_llm_calls",
    "llm_calls",
    "main_tokens",
    "tokens",
    "prompt_tokens",
    "corpus_queries",
    "extractor_calls",
    "seconds",
)

# Keys of config.yaml that describe one invocation and are not part of the hashed identity.
SELECTION_KEYS = ("config_hash", "label", "created", "updated", "selection")


def _total(value: Any) -> float:
    if isinstance(value, dict):
        return float(sum(value.values()))
    return float(value or 0)


@dataclass
class Record:
    """One answered question as ``results.jsonl`` holds it: the question, the answer and its scores, the
    machine's figures, and the trace (its JSON form; None when the question raised)."""

    id: str
    index: int = 0
    question: str = ""
    gold: list[str] = field(default_factory=list)
    kind: str = "span"
    prediction: str = ""
    answer: str = ""
    missing: bool = False
    reprompted: bool = False
    em: float = 0.0
    f1: float = 0.0
    error: str | None = None
    error_traceback: str | None = None  # written only with an error
    seconds: float = 0.0
    cpu_seconds: float | None = None  # None: other questions shared the process, or not recorded then
    load: float | None = None
    cpu: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    trace: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as they are

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        values = {k: v for k, v in data.items() if k in known}
        values["id"] = str(data.get("id"))
        for key in ("em", "f1", "seconds"):
            values[key] = float(data.get(key) or 0.0)
        values["index"] = int(data.get("index") or 0)
        values["gold"] = list(data.get("gold") or [])
        values["meta"] = dict(data.get("meta") or {})
        return cls(**values, extra={k: v for k, v in data.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this record, with the keys in the order ``quco eval`` writes them."""
        out: dict[str, Any] = {
            "id": self.id,
            "index": self.index,
            "question": self.question,
            "gold": list(self.gold),
            "kind": self.kind,
            "prediction": self.prediction,
            "answer": self.answer,
            "missing": self.missing,
            "reprompted": self.reprompted,
            "em": self.em,
            "f1": self.f1,
            "error": self.error,
        }
        if self.error is not None:
            out["error_traceback"] = self.error_traceback
        out |= {
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
            "load": self.load,
            "cpu": self.cpu,
            "meta": self.meta,
            "trace": self.trace,
        }
        return out | self.extra

    def costs(self) -> dict[str, float]:
        """Costs of the question from its trace (``COST_FIELDS``); NaN for all when it raised (no trace)."""
        trace = self.trace
        if not trace:
            return {k: math.nan for k in COST_FIELDS}
        counters = trace.get("counters", {})
        calls = counters.get("llm_calls", {}) or {}
        generated = counters.get("generated_tokens", {}) or {}
        return {
            "retrievals": float(counters.get("retrievals", 0)),
            "main_llm_calls": float(calls.get("main", 0)),
            "llm_calls": _total(calls),
            "main_tokens": float(generated.get("main", 0)),
            "tokens": _total(generated),
            "prompt_tokens": _total(counters.get("prompt_tokens", {})),
            "corpus_queries": float(counters.get("corpus_queries", 0)),
            "extractor_calls": float(calls.get("extractor", 0)),
            # The pipeline's own wall time (re-prompt included), consistent with its per-component seconds.
            "seconds": float(trace.get("seconds") or self.seconds or 0.0),
        }

    def component_seconds(self) -> dict[str, float]:
        counters = (self.trace or {}).get("counters", {})
        return {k: float(v) for k, v in (counters.get("seconds", {}) or {}).items()}


@dataclass(frozen=True)
class DatasetId:
    """Which questions a run answered: the dataset's name, the file's sha256, and the seed of a sample."""

    name: str | None = None
    sha256: str | None = None
    sample_seed: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> DatasetId:
        data = data or {}
        return cls(data.get("name"), data.get("sha256"), data.get("sample_seed"))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256, "sample_seed": self.sample_seed}

    def same_file(self, other: DatasetId) -> bool:
        """The same dataset, and the same file where both runs recorded its hash."""
        if self.name != other.name:
            return False
        return not (self.sha256 and other.sha256 and self.sha256 != other.sha256)


@dataclass(frozen=True)
class Selection:
    """Which of the dataset's questions this invocation selected (not part of the identity)."""

    dataset_path: str | None = None
    limit: int | None = None
    offset: int = 0
    sample: int | None = None
    seed: int = 0
    traces_from: str | None = None  # written only when given

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Selection:
        data = data or {}
        return cls(
            data.get("dataset_path"),
            data.get("limit"),
            int(data.get("offset") or 0),
            data.get("sample"),
            int(data.get("seed") or 0),
            data.get("traces_from"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "dataset_path": self.dataset_path,
            "limit": self.limit,
            "offset": self.offset,
            "sample": self.sample,
            "seed": self.seed,
        }
        return out | ({"traces_from": self.traces_from} if self.traces_from is not None else {})


def config_hash(identity: dict[str, Any]) -> str:
    """The hash of a run's identity: what ``config_hash`` in ``config.yaml`` holds."""
    blob = json.dumps(identity, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


@dataclass
class RunConfig:
    """``config.yaml``: the run's identity (hashed: the format, the resolved pipeline config or the answer
    function, its prompt, the dataset, the answer protocol, rates taken from a matched run, ...) and what
    describes this invocation (hash, label, times, the question selection)."""

    identity: dict[str, Any]
    config_hash: str | None = None
    label: str | None = None
    created: str | None = None
    updated: str | None = None
    selection: Selection | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        raw = data.get("selection")
        return cls(
            identity={k: v for k, v in data.items() if k not in SELECTION_KEYS},
            config_hash=data.get("config_hash"),
            label=data.get("label"),
            created=data.get("created"),
            updated=data.get("updated"),
            selection=Selection.from_dict(raw) if isinstance(raw, dict) else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The mapping ``config.yaml`` holds, in the order ``quco eval`` writes it."""
        out: dict[str, Any] = {
            "config_hash": self.config_hash,
            "label": self.label,
            "created": self.created,
            "updated": self.updated,
        }
        out |= self.identity
        if self.selection is not None:
            out["selection"] = self.selection.to_dict()
        return out

    # -- views of the identity ------------------------------------------------------------------------------

    @property
    def pipeline(self) -> dict[str, Any] | None:
        """The resolved pipeline config (its JSON form), or None for a run of an answer function."""
        section = self.identity.get("pipeline")
        return section if isinstance(section, dict) else None

    @property
    def method(self) -> str:
        pipeline = self.pipeline or {}
        return str(
            pipeline.get("method") or self.identity.get("method") or self.identity.get("answerer") or "?"
        )

    @property
    def params(self) -> dict[str, Any]:
        return dict((self.pipeline or {}).get("params") or {})

    @property
    def dataset(self) -> DatasetId:
        return DatasetId.from_dict(self.identity.get("dataset"))

    @property
    def answer_protocol(self) -> str | None:
        """The answer protocol's name; None for a run made before the protocol was part of the identity."""
        section = self.identity.get("answer_protocol")
        return str(section.get("name")) if isinstance(section, dict) else None

    @property
    def matched_rates(self) -> dict[str, float] | None:
        return self.identity.get("matched_rates")

    def hash(self) -> str:
        """The hash of the identity as it is now (a recorded run may predate settings added since)."""
        return config_hash(self.identity)


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two mappings, with both values, for an error a person can act on."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            out += differences(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [f"{prefix[:-1]} ({old!r} -> {new!r})"]
