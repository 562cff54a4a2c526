"""The trace: every step of an answer, its signals and decisions, and counters of everything spent.

Field names are part of the public format (``TRACE_VERSION``); tools read traces written by older runs,
so rename nothing without bumping the version. Version 2 moved every decision's scores into typed trigger
records (``Step.triggers``); ``quco.eval.runs.legacy`` reads version-1 traces into that form.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from quco.trigger_record import TriggerRecord

TRACE_VERSION = 2

# Roles an LLM call can have; the counters keep one entry per role that was used.
LLM_ROLES = (
    "main",
    "extractor",
    "sampler",
    "pseudo_document",
    "judge",
    "query_writer",
    "answer_reprompt",
    "probe",
)
# Components whose wall time is reported separately.
COMPONENTS = ("llm", "retrieval", "corpus_stats", "extraction", "similarity", "other")


@dataclass
class RetrievedRef:
    """A passage as the trace records it: enough to find it again, not its whole text."""

    id: str
    title: str
    score: float
    query: str


@dataclass
class Step:
    """One pass of the loop: what was drafted, what the check saw, what was decided and kept."""

    index: int
    stage: str  # "before" (pre-generation decision), "generate", or "after" (post-generation stage)
    draft: str = ""
    signals: dict[str, Any] = field(default_factory=dict)  # method-specific detail (counts, words, samples)
    triggers: list[TriggerRecord] = field(default_factory=list)  # the typed decision records of this step
    decision: str = "keep"  # keep | retrieve | stop | skip
    reason: str = ""
    queries: list[str] = field(default_factory=list)
    retrieved: list[RetrievedRef] = field(default_factory=list)
    regenerated: str = ""
    kept: str = ""
    seconds: float = 0.0


@dataclass
class Counters:
    """Everything an answer cost. LLM calls and tokens are kept per role."""

    llm_calls: dict[str, int] = field(default_factory=dict)
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    # Prompt tokens the model actually evaluated; the rest came from the backend's cache (llamacpp, hf).
    prompt_tokens_evaluated: dict[str, int] = field(default_factory=dict)
    generated_tokens: dict[str, int] = field(default_factory=dict)
    retrievals: int = 0  # retrieval queries issued
    retrieval_calls: int = 0  # batched calls to the retriever
    passages_retrieved: int = 0
    corpus_queries: int = 0  # count / co-occurrence lookups answered (cache hits included)
    corpus_unknown: int = 0  # lookups that failed and were handled by the unknown-policy
    corpus_cache_hits: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def add_llm(
        self,
        role: str,
        prompt_tokens: int,
        generated_tokens: int,
        calls: int = 1,
        *,
        evaluated: int | None = None,
    ) -> None:
        """Count calls and tokens of a role; ``evaluated`` prompt tokens default to all of them (not known)."""
        self.llm_calls[role] = self.llm_calls.get(role, 0) + calls
        self.prompt_tokens[role] = self.prompt_tokens.get(role, 0) + prompt_tokens
        done = prompt_tokens if evaluated is None else evaluated
        self.prompt_tokens_evaluated[role] = self.prompt_tokens_evaluated.get(role, 0) + done
        self.generated_tokens[role] = self.generated_tokens.get(role, 0) + generated_tokens

    def add_seconds(self, component: str, seconds: float) -> None:
        self.seconds[component] = self.seconds.get(component, 0.0) + seconds

    @property
    def total_llm_calls(self) -> int:
        return sum(self.llm_calls.values())

    @property
    def total_generated_tokens(self) -> int:
        return sum(self.generated_tokens.values())

    def merge(self, other: Counters) -> None:
        for role, n in other.llm_calls.items():
            prompt = other.prompt_tokens.get(role, 0)
            evaluated = other.prompt_tokens_evaluated.get(role, prompt)
            self.add_llm(role, prompt, other.generated_tokens.get(role, 0), n, evaluated=evaluated)
        self.retrievals += other.retrievals
        self.retrieval_calls += other.retrieval_calls
        self.passages_retrieved += other.passages_retrieved
        self.corpus_queries += other.corpus_queries
        self.corpus_unknown += other.corpus_unknown
        self.corpus_cache_hits += other.corpus_cache_hits
        for comp, s in other.seconds.items():
            self.add_seconds(comp, s)


@dataclass
class Trace:
    """The full record of one answer."""

    question: str
    method: str
    answer: str = ""  # the short answer extracted from the prediction
    prediction: str = ""  # the full generated reasoning
    steps: list[Step] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)
    notes: list[str] = field(default_factory=list)  # warnings a reader must see (truncation, unknown counts)
    stop_reason: str = ""
    seconds: float = 0.0
    version: int = TRACE_VERSION

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["counters"]["total_llm_calls"] = self.counters.total_llm_calls
        data["counters"]["total_generated_tokens"] = self.counters.total_generated_tokens
        return data

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        counters = dict(data.get("counters", {}))
        counters.pop("total_llm_calls", None)
        counters.pop("total_generated_tokens", None)
        steps = []
        for s in data.get("steps", []):
            s = dict(s)
            s["retrieved"] = [RetrievedRef(**r) for r in s.get("retrieved", [])]
            s["triggers"] = [TriggerRecord.from_dict(r) for r in s.get("triggers", [])]
            steps.append(Step(**s))
        fields = {k: v for k, v in data.items() if k not in ("counters", "steps")}
        return cls(**fields, steps=steps, counters=Counters(**counters))


def as_trace(trace: Trace | dict[str, Any]) -> Trace:
    """A ``Trace`` from a trace or its dict (as stored in a run's results)."""
    return trace if isinstance(trace, Trace) else Trace.from_dict(trace)
