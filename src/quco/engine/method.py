"""What a method is: a declaration over the one loop in ``quco.engine.loop``.

A method chooses a pre-generation decision (``before``), a draft unit, a runtime check, a keep rule for
regenerations, and its thresholds. It never generates or retrieves on its own account: the loop does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from quco.engine.context import RunContext
from quco.errors import ConfigError
from quco.llm.base import Capability, Generation
from quco.retrieval.base import Passage
from quco.trace import RetrievedRef

DraftUnit = Literal["tokens", "sentence", "continuation"]
# After a check fires: regenerate and keep the first sentence, regenerate and keep all of it, or keep the
# draft as it is and let the retrieved passages inform the next draft (FL-RAG / FS-RAG).
KeepRule = Literal["first_sentence", "all", "draft"]


class MethodParams(BaseModel):
    """Base of every method's parameters; unknown keys are errors, so typos do not pass silently."""

    model_config = ConfigDict(extra="forbid")

    top_k: int | None = Field(None, ge=1)  # passages per query; default: retriever.top_k


@dataclass
class Decision:
    """Result of the pre-generation decision.

    ``passages``/``refs``: set when the method retrieved on its own (through the context, so it is counted),
    e.g. DTR's dual-path retrieval; the loop then uses them instead of searching ``queries``.
    ``answer``: set when the decision already answers the question (DTR's confident direct answer); the loop
    then ends without generating.
    """

    retrieve: bool
    queries: list[str] = field(default_factory=list)
    signals: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    passages: list[Passage] | None = None
    refs: list[RetrievedRef] | None = None
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


@dataclass
class Check:
    """What the runtime check concluded about a draft."""

    fire: bool
    keep: str  # the part of the draft accepted before the flagged point (all of it when not firing)
    queries: list[str] = field(default_factory=list)
    signals: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    stop: bool = False  # end generation after keeping ``keep``
    passages: list[Passage] | None = None  # set when the check retrieved on its own (see Decision)
    refs: list[RetrievedRef] | None = None


class Method:
    """Base class: subclasses set the class attributes and override ``before`` and/or ``check``."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Params: ClassVar[type[MethodParams]] = MethodParams
    needs: ClassVar[frozenset[Capability]] = frozenset({Capability.TEXT})
    uses_retriever: ClassVar[bool] = True
    uses_corpus_stats: ClassVar[bool] = False
    template: ClassVar[str] = "baseline"  # default prompt layout, unless the config names one
    unit: ClassVar[DraftUnit] = "continuation"
    keep_rule: ClassVar[KeepRule] = "first_sentence"
    recheck_remainder: ClassVar[bool] = False  # re-check the rest of a regeneration without a new call
    single_pass: ClassVar[bool] = False  # generate once and stop (Wo-RAG, SR-RAG)
    draft_logprobs: ClassVar[bool] = False  # ask the generator for per-token logprobs/entropy on drafts
    # Put the latest retrieved passages into draft prompts. DRAGIN, FLARE (as in the DRAGIN/QuCo code) and
    # ETC draft from exemplars + question + text only and use passages just for the regeneration.
    draft_docs: ClassVar[bool] = True

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        try:
            self.params = self.Params.model_validate(params or {})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise ConfigError(
                f"invalid parameter for method '{self.name}': params.{where}: {err['msg']}"
            ) from exc

    def unit_tokens(self, ctx: RunContext) -> int:
        """Tokens generated for one draft."""
        return ctx.parts.config.generation.max_new_tokens

    def setup(self, parts: Any) -> None:
        """Called once when the pipeline is built, to add method-specific parts to ``parts.extras``."""

    def before(self, question: str, ctx: RunContext) -> Decision | None:
        """Pre-generation decision; None means the method has none."""
        return None

    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        """Runtime check of a draft; the default keeps everything."""
        return Check(fire=False, keep=draft.text)
