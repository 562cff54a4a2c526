"""What a method is: a declaration over the one loop in ``quco.engine.loop``.

A method chooses a pre-generation decision (``before``), a draft unit, a runtime check, a keep rule for
regenerations, and its thresholds; its ``Shape`` (computed from its parameters) tells the loop how to run it.
It never retrieves or regenerates on its own account: the loop does, and hands back what it found where a
method must choose (``select`` after a multi-path retrieval, ``choose`` among per-passage regenerations).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from quco.engine.context import RunContext
from quco.errors import ConfigError
from quco.llm.base import Capability, Generation, StopWhen
from quco.retrieval.base import Passage
from quco.trace import RetrievedRef, Trace
from quco.trigger_record import TriggerRecord

DraftUnit = Literal["tokens", "sentence", "continuation"]
# After a check fires: regenerate and keep the first sentence, regenerate and keep all of it, or keep the
# draft as it is and let the retrieved passages inform the next draft (FL-RAG / FS-RAG).
KeepRule = Literal["first_sentence", "all", "draft"]
# Passages in a draft's prompt: the latest retrieved ones, none (they only inform regenerations), or only in
# the question's first draft (QuCo-RAG's published loop clears them after it).
DraftDocs = Literal["latest", "none", "first"]
# How ``generation.max_new_tokens`` bounds a prediction (see ``quco.config.GenerationConfig.budget``).
Budget = Literal["per_call", "prediction"]


@dataclass(frozen=True)
class Shape:
    """How the loop runs a method: its draft unit, keep rule, what it needs, and which loop options it uses."""

    unit: DraftUnit = "continuation"
    keep_rule: KeepRule = "first_sentence"
    recheck_remainder: bool = False  # re-check the rest of a regeneration without a new call
    single_pass: bool = False  # generate once and stop (Wo-RAG, SR-RAG)
    draft_logprobs: bool = False  # ask the generator for per-token logprobs/entropy on drafts
    draft_docs: DraftDocs = "latest"
    # Multi-path retrieval: each query of a retrieving decision fetches its own top-k, and the method's
    # ``select`` keeps the passages the generation will read (DTR's dual path).
    multi_path: bool = False
    # Per-passage regeneration: after a check fires, the unit is written again once per new passage (up to this
    # many; -1: all), and the method's ``choose`` keeps one (SeaKR's self-aware re-ranking). 0: off.
    per_passage: int = 0
    # A check's new passages go before the current ones instead of replacing them (duplicates dropped).
    merge_passages: bool = False
    # The token budget's meaning when the config does not set one: "per_call" as the DRAGIN / QuCo-RAG code
    # (every call gets the whole budget; stop once the prediction exceeds it), or "prediction".
    budget: Budget = "per_call"
    needs: frozenset[Capability] = frozenset({Capability.TEXT})  # generator capabilities
    retriever: bool = True  # the pipeline's retriever is built for it
    # It searches the retriever's corpus through an index it builds itself (DTR's dense index), so that corpus
    # is used even when the pipeline's retriever is not.
    own_index: bool = False
    corpus_stats: bool = False  # the corpus-statistics index is built for it


class MethodParams(BaseModel):
    """Base of every method's parameters; unknown keys are errors, so typos do not pass silently."""

    model_config = ConfigDict(extra="forbid")

    top_k: int | None = Field(None, ge=1)  # passages per query; default: retriever.top_k


@dataclass
class Decision:
    """Result of the pre-generation decision.

    ``retriever``/``k``: search another named retriever of the pipeline (``Parts.retrievers``) with ``k``
    passages per query. ``answer``: set when the decision already answers the question (DTR's confident direct
    answer); the loop then ends without generating.
    """

    retrieve: bool
    queries: list[str] = field(default_factory=list)
    signals: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    triggers: list[TriggerRecord] = field(default_factory=list)
    retriever: str | None = None
    k: int | None = None
    answer: str | None = None


@dataclass
class Draft:
    """The unit under judgement: its text, its sentences, and the generation it came from (None when it is
    the unchecked remainder of an earlier regeneration)."""

    text: str
    sentences: list[str]
    generation: Generation | None
    prefix: str  # accepted text before this draft
    prompt: str = ""  # the exact prompt the draft came from ("" for a remainder): lets a check re-sample it
    # The passages in that prompt, so a check can build variants of it (SeaKR: one more passage each).
    docs: list[Passage] = field(default_factory=list)
    # Why the loop will stop once this draft is kept whole ("the answer is stated", the token budget), or "":
    # fixed-schedule methods do not retrieve after their last unit.
    last: str = ""


@dataclass
class Check:
    """What the runtime check concluded about a draft."""

    fire: bool
    keep: str  # the part of the draft accepted before the flagged point (all of it when not firing)
    queries: list[str] = field(default_factory=list)
    signals: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    stop: bool = False  # end generation after keeping ``keep``
    triggers: list[TriggerRecord] = field(default_factory=list)

    @classmethod
    def accept(
        cls, text: str, reason: str = "", signals: dict[str, Any] | None = None, *records: TriggerRecord
    ) -> Check:
        """Keep ``text`` and go on without retrieving."""
        return cls(False, text, signals=signals or {}, reason=reason, triggers=list(records))

    @classmethod
    def retrieve(
        cls, keep: str, queries: list[str], reason: str, signals: dict[str, Any], *records: TriggerRecord
    ) -> Check:
        """Keep ``keep`` (the text before the flagged point), retrieve with ``queries`` and regenerate."""
        return cls(True, keep, list(queries), signals, reason, triggers=list(records))


@dataclass
class Selection:
    """Passages of a multi-path retrieval: what every query found, or what a method kept (``Method.select``)."""

    passages: list[Passage]
    refs: list[RetrievedRef]
    signals: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # appended to the decision's reason


@dataclass
class Reading:
    """The unit written again with one more passage (per-passage regeneration)."""

    passage: Passage
    prompt: str
    generation: Generation


@dataclass
class Choice:
    """Which reading a method kept (``Method.choose``); ``index`` None keeps the draft and no new passage."""

    index: int | None
    keep: str
    signals: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    stop: bool = False


@dataclass(frozen=True)
class Matched:
    """What a control takes from the run it matches: parameter values by name, and how they were counted."""

    params: dict[str, float]
    detail: str = ""


@dataclass
class Final:
    """A post-generation stage's result (``Method.after``): the prediction that replaces the loop's."""

    prediction: str
    signals: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    triggers: list[TriggerRecord] = field(default_factory=list)


class Method:
    """Base class: subclasses set ``SHAPE`` (or compute ``shape``) and override ``before`` and/or ``check``."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Params: ClassVar[type[MethodParams]] = MethodParams
    template: ClassVar[str] = "baseline"  # default prompt layout, unless the config names one
    SHAPE: ClassVar[Shape] = Shape()

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        try:
            self.params = self.Params.model_validate(params or {})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise ConfigError(
                f"invalid parameter for method '{self.name}': params.{where}: {err['msg']}"
            ) from exc

    @property
    def shape(self) -> Shape:
        """How the loop runs this method; override to derive it from ``self.params``."""
        return self.SHAPE

    def unit_tokens(self, ctx: RunContext) -> int:
        """Tokens generated for one draft."""
        return ctx.parts.config.generation.max_new_tokens

    def setup(self, parts: Any) -> None:
        """Called once when the pipeline is built, to add method-specific parts (``parts.retrievers``, extras)."""

    @property
    def match_run(self) -> str | None:
        """A recorded run whose rates this method takes (a control's ``params.match_run``), or None.

        The method never reads it: the evaluation reads that run, turns it into parameter values with
        ``matched`` and builds the method with them (``quco.eval.run.matched``); the values enter the run's identity,
        so a run does not resume with other rates after the matched run has changed."""
        return None

    def matched(self, traces: Sequence[Trace | dict[str, Any]]) -> Matched:
        """The parameter values this method takes from the traces of the run it matches (``match_run``)."""
        raise ConfigError(f"method '{self.name}' takes nothing from a recorded run")

    def inputs(self) -> dict[str, str] | None:
        """Files this method reads that decide what it does (a fitted gate), by content hash, or None.

        An evaluation run records them in its identity, so a run does not resume after such a file changed."""
        return None

    def before(self, question: str, ctx: RunContext) -> Decision | None:
        """Pre-generation decision; None means the method has none."""
        return None

    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        """Runtime check of a draft; the default keeps everything."""
        return Check(fire=False, keep=draft.text)

    def clean(self, sentences: list[str]) -> list[str]:
        """Sentences of a draft or a regeneration worth keeping (QuCo-RAG drops chatty ones); default: all."""
        return sentences

    def select(self, question: str, decision: Decision, found: Selection, ctx: RunContext) -> Selection:
        """Multi-path retrieval: keep some of the passages every query found (default: all of them)."""
        return found

    def draft_stop(self, ctx: RunContext) -> StopWhen | None:
        """A predicate that ends a draft or regeneration once the rest could not be read (None: never)."""
        return None

    def regeneration_stop(self, ctx: RunContext) -> list[str] | None:
        """Stop strings of per-passage regenerations (None: the configured ones)."""
        return None

    def choose(
        self, draft: Draft, check: Check, question: str, readings: list[Reading], ctx: RunContext
    ) -> Choice:
        """Per-passage regeneration: keep one reading (default: the first), or none when there is none."""
        if not readings:
            return Choice(None, draft.text, reason="no new passage", stop=True)
        return Choice(0, readings[0].generation.text.strip())

    def after(self, question: str, prediction: str, docs: list[Passage], ctx: RunContext) -> Final | None:
        """A post-generation stage (SeaKR's final reasoning); None means the method has none."""
        return None
