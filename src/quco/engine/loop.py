"""The one generation loop. Every method runs through ``run``; none has a loop of its own.

    question -> before -> [retrieve] -> draft -> check -> keep | retrieve + regenerate -> ... -> after -> answer

The loop owns every retrieval and regeneration: a multi-path retrieval hands its passages to the method's
``select``; a per-passage regeneration writes the unit once per new passage and lets the method ``choose``.
Stop rules: a stated answer ("the answer is"), the token budget, end of generation (EOS or a stop string),
no growth, a check that ends generation, the step budget, and single-pass methods. After the loop, the
method's own post-generation stage (``after``) and the answer protocol's re-prompt (``finish``) run as steps
of the same trace, counted like every other call.
"""

from __future__ import annotations

import logging
import time

from quco.answer import (
    AnswerProtocol,
    cut_prediction,
    extract_answer,
    has_answer,
    reprompt_tail,
    wants_reprompt,
)
from quco.engine.context import RunContext
from quco.engine.method import Check, Decision, Draft, Method, Reading, Selection
from quco.errors import QucoError
from quco.llm.base import Prompt, cut_generation
from quco.prompts import build_prompt
from quco.retrieval.base import Passage
from quco.trace import RetrievedRef, Step, Trace

log = logging.getLogger(__name__)

REPROMPT_ROLE = "answer_reprompt"


def join_text(prefix: str, addition: str) -> str:
    addition = addition.strip()
    if not addition:
        return prefix
    return f"{prefix} {addition}".strip() if prefix else addition


def _first_sentence_chars(raw: str, sentences: list[str]) -> int:
    """Character length in ``raw`` that covers its first sentence (including leading whitespace)."""
    if not sentences:
        return len(raw)
    first = sentences[0]
    idx = raw.find(first)
    return len(raw) if idx < 0 else idx + len(first)


def _truncate_after_answer(text: str, sentences: list[str]) -> str:
    """Keep text up to and including the first sentence that states the answer."""
    kept: list[str] = []
    for s in sentences:
        kept.append(s)
        if has_answer(s):
            return " ".join(kept)
    return text


def _split_regeneration(sentences: list[str]) -> tuple[str, str]:
    """QuCo's keep rule: the first sentence (with the second if that one states the answer) and the rest."""
    if not sentences:
        return "", ""
    n = 2 if len(sentences) > 1 and has_answer(sentences[1]) and not has_answer(sentences[0]) else 1
    return " ".join(sentences[:n]), " ".join(sentences[n:])


class _Loop:
    """The state of one question's generation: accepted text, current passages, the unchecked remainder."""

    def __init__(self, method: Method, question: str, ctx: RunContext) -> None:
        self.method = method
        self.shape = method.shape
        self.question = question
        self.ctx = ctx
        self.parts = ctx.parts
        self.cfg = ctx.parts.config
        self.split = ctx.parts.text.splitter.split
        self.top_k = method.params.top_k or self.cfg.retriever.top_k
        self.budget = self.cfg.generation.max_new_tokens
        self.per_call = (self.cfg.generation.budget or self.shape.budget) == "per_call"
        self.docs: list[Passage] = []
        self.text = ""
        self.pending = ""  # unchecked remainder of a regeneration (re-checked without a new LLM call)
        self.drafted = False  # a draft has been generated (QuCo-RAG's passages go into the first one only)

    # -- shared pieces -------------------------------------------------------------------------------
    def prompt(self, docs: list[Passage], prefix: str, regenerate: bool = False) -> str:
        p = self.parts
        return build_prompt(
            self.question, p.exemplars, p.template, docs, prefix=prefix, regenerate=regenerate
        )

    def call_tokens(self) -> int:
        """New tokens for the next call: the unit's, within what is left of the budget unless it is per call."""
        unit = self.method.unit_tokens(self.ctx)
        if self.per_call:
            return unit
        return min(unit, max(1, self.budget - self.ctx.count_tokens(self.text)))

    def budget_spent(self, text: str) -> bool:
        """Per call (the published loops): once the prediction is longer than the budget; else once it is full."""
        n = self.ctx.count_tokens(text)
        return n > self.budget if self.per_call else n >= self.budget

    def last_reason(self, text: str) -> str:
        """Why the loop would stop with ``text`` accepted (before any further check), or ""."""
        if has_answer(text):
            return "the answer is stated"
        if self.budget_spent(text):
            return f"the token budget ({self.budget}) is spent"
        return ""

    def retrieve(
        self, queries: list[str], k: int, retriever: str | None = None
    ) -> tuple[list[Passage], list[RetrievedRef]]:
        named = None
        if retriever is not None:
            named = self.parts.retrievers.get(retriever)
            if named is None:
                raise QucoError(
                    f"method '{self.method.name}' asked for retriever '{retriever}', which is not built"
                )
        return self.ctx.retrieve(queries, k, retriever=named)

    # -- stages --------------------------------------------------------------------------------------
    def before(self, trace: Trace) -> bool:
        """The pre-generation decision; True when it already answered the question."""
        start = time.perf_counter()
        decision = self.method.before(self.question, self.ctx)
        if decision is None:
            return False
        step = Step(
            index=0,
            stage="before",
            signals=decision.signals,
            reason=decision.reason,
            triggers=list(decision.triggers),
        )
        if decision.retrieve:
            self.docs, step.retrieved = self.retrieve_for(decision, step)
            step.decision, step.queries = "retrieve", list(decision.queries)
        else:
            step.decision = "skip"
        step.seconds = round(time.perf_counter() - start, 4)
        trace.steps.append(step)
        if decision.answer is not None and not decision.retrieve:
            step.kept = decision.answer
            trace.prediction = decision.answer
            trace.answer = extract_answer(decision.answer) or decision.answer.strip()
            trace.stop_reason = "answered_before"
            return True
        return False

    def retrieve_for(self, decision: Decision, step: Step) -> tuple[list[Passage], list[RetrievedRef]]:
        docs, refs = self.retrieve(decision.queries, decision.k or self.top_k, decision.retriever)
        if not self.shape.multi_path:
            return docs, refs
        selection = self.method.select(self.question, decision, Selection(docs, refs), self.ctx)
        step.signals.update(selection.signals)
        if selection.note:
            step.reason = f"{step.reason}; {selection.note}" if step.reason else selection.note
        return selection.passages, selection.refs

    def draft(self) -> tuple[Draft, bool]:
        """The next unit to check: the pending remainder, or a new generation. Also: whether generation ended."""
        if self.pending:
            text, self.pending = self.pending, ""
            sentences = self.method.clean(self.split(text))
            return Draft(text=text, sentences=sentences, generation=None, prefix=self.text), False
        shape = self.shape
        n_tokens = self.call_tokens()
        use_docs = shape.draft_docs == "latest" or (shape.draft_docs == "first" and not self.drafted)
        draft_docs = self.docs if use_docs else []
        prompt = self.prompt(draft_docs, self.text)
        want = shape.draft_logprobs
        stop_when = self.method.draft_stop(self.ctx)
        gen = self.ctx.generate(
            prompt, max_new_tokens=n_tokens, logprobs=want, entropy=want, stop_when=stop_when
        )[0]
        self.drafted = True
        raw = gen.text
        sentences = self.split(raw)
        if shape.unit == "sentence" and len(sentences) > 1:
            gen = cut_generation(gen, _first_sentence_chars(raw, sentences), shorten=False)
            sentences = sentences[:1]
        sentences = self.method.clean(sentences)
        ended = gen.finish_reason in ("eos", "stop") and len(gen.text) == len(raw)
        # The prompt travels with the draft so that a check can sample the same unit again (black-box).
        draft = Draft(
            text=gen.text.strip(),
            sentences=sentences,
            generation=gen,
            prefix=self.text,
            prompt=prompt,
            docs=list(draft_docs),
        )
        return draft, ended

    def regenerate(self, step: Step) -> bool:
        """Write the unit again with the current passages and keep by the keep rule; True if that ended it."""
        prompt = self.prompt(self.docs, self.text, regenerate=True)
        stop_when = self.method.draft_stop(self.ctx)
        regen = self.ctx.generate(prompt, max_new_tokens=self.call_tokens(), stop_when=stop_when)[0]
        step.regenerated = regen.text.strip()
        if self.shape.keep_rule == "first_sentence":
            kept, rest = _split_regeneration(self.method.clean(self.split(regen.text)))
        else:
            kept, rest = regen.text.strip(), ""
        self.text = join_text(self.text, kept)
        step.kept = join_text(step.kept, kept)
        if self.shape.recheck_remainder:
            self.pending = rest
        return regen.finish_reason in ("eos", "stop") and not rest

    def merged(self, new_docs: list[Passage]) -> list[Passage]:
        """The new passages first, then the current ones they do not repeat."""
        have = {d.id for d in new_docs}
        return new_docs + [d for d in self.docs if d.id not in have]

    def per_passage(self, draft: Draft, check: Check, new_docs: list[Passage], step: Step) -> bool:
        """Write the unit once per new passage and keep the method's choice; True if the method stops."""
        have = {d.id for d in self.docs}
        fresh = [d for d in new_docs if d.id not in have]
        limit = self.shape.per_passage
        readings = []
        for doc in fresh if limit < 0 else fresh[:limit]:
            prompt = self.prompt(self.docs + [doc], draft.prefix)
            stop = self.method.regeneration_stop(self.ctx)
            gen = self.ctx.generate(prompt, max_new_tokens=self.method.unit_tokens(self.ctx), stop=stop)[0]
            readings.append(Reading(doc, prompt, gen))
        choice = self.method.choose(draft, check, self.question, readings, self.ctx)
        if choice.index is not None:
            self.docs = self.docs + [readings[choice.index].passage]
        self.text = join_text(self.text, choice.keep)
        step.kept = join_text(step.kept, choice.keep)
        step.signals.update(choice.signals)
        if choice.reason:
            step.reason = choice.reason
        return choice.stop

    def generate(self, trace: Trace) -> str:
        """Draft, check, retrieve and regenerate until a stop rule holds; returns the stop reason."""
        shape = self.shape
        steps = trace.steps
        for _ in range(self.cfg.generation.max_steps):
            t0 = time.perf_counter()
            step = Step(index=len(steps), stage="generate")
            draft, ended = self.draft()
            step.draft = draft.text
            if not draft.text:
                step.decision, step.reason = "stop", "the model generated nothing"
                step.seconds = round(time.perf_counter() - t0, 4)
                steps.append(step)
                return "no_growth"
            draft.last = self.last_reason(join_text(self.text, draft.text))

            check = self.method.check(draft, self.question, self.ctx)
            step.signals, step.reason, step.kept = check.signals, check.reason, check.keep
            step.triggers = list(check.triggers)
            before_len = len(self.text)
            self.text = join_text(self.text, check.keep)
            stop = check.stop
            if check.fire:
                new_docs, refs = self.retrieve(check.queries, self.top_k)
                step.decision, step.queries, step.retrieved = "retrieve", list(check.queries), refs
                if shape.per_passage:
                    stop = self.per_passage(draft, check, new_docs, step) or stop
                else:
                    if new_docs:
                        self.docs = self.merged(new_docs) if shape.merge_passages else new_docs
                    if shape.keep_rule != "draft":
                        ended = self.regenerate(step) or ended
            else:
                step.decision = "keep"
            step.seconds = round(time.perf_counter() - t0, 4)
            steps.append(step)

            if has_answer(self.text):
                self.text = _truncate_after_answer(self.text, self.split(self.text))
                return "answer"
            if stop:
                return "check_stop"
            if shape.single_pass:
                return "single_pass"
            if self.budget_spent(self.text):
                return "token_budget"
            # A retrieval that only informs the next draft (keep rule "draft") may grow nothing yet; a regeneration
            # that added nothing would otherwise repeat the same draft and the same retrieval until max_steps.
            if (
                len(self.text) == before_len
                and not self.pending
                and not (check.fire and shape.keep_rule == "draft")
            ):
                return "no_growth"
            if ended and not self.pending and not check.fire:
                return "eos"
        return "step_budget"

    def after(self, trace: Trace) -> None:
        """The method's post-generation stage, if it has one."""
        start = time.perf_counter()
        final = self.method.after(self.question, self.text, list(self.docs), self.ctx)
        if final is None:
            return
        step = Step(
            index=len(trace.steps),
            stage="after",
            draft=self.text,
            signals=final.signals,
            reason=final.reason,
            triggers=list(final.triggers),
            decision="keep" if final.prediction == self.text else "replace",
            kept=final.prediction,
        )
        step.seconds = round(time.perf_counter() - start, 4)
        trace.steps.append(step)
        self.text = final.prediction


def run(method: Method, question: str, ctx: RunContext) -> None:
    """Answer ``question`` with ``method``, filling ``ctx.trace``."""
    loop = _Loop(method, question, ctx)
    trace = ctx.trace
    if loop.before(trace):
        return
    stop_reason = loop.generate(trace)
    loop.after(trace)
    trace.prediction = loop.text
    trace.answer = extract_answer(loop.text) or ""
    trace.stop_reason = stop_reason


def finish(ctx: RunContext, protocol: AnswerProtocol) -> None:
    """The answer protocol's post-generation step: cut the prediction where the protocol does and, when no answer
    is stated, re-prompt for it (a counted call). Recorded as a step of stage ``after`` when it changed anything."""
    trace = ctx.trace
    original = trace.prediction
    cut = cut_prediction(original, protocol.cut_at)
    if not wants_reprompt(original, protocol):
        if cut != original:
            why = "the prediction is cut where the answer protocol cuts it"
            trace.steps.append(
                Step(len(trace.steps), "after", original, decision="cut", reason=why, kept=cut)
            )
            trace.prediction = cut
            trace.answer = extract_answer(cut) or ""
        return
    start = time.perf_counter()
    tail = reprompt_tail(original, protocol)
    # The exemplars and question line as the template lays them out (the published re-prompt: its shots, each
    # followed by one newline, and its question line with HotpotQA's prefix), without header or passages.
    layout = ctx.parts.template
    demos = "".join(ex.render(layout.shot_separator) for ex in ctx.parts.exemplars)
    prompt = Prompt(
        f"{demos}{layout.question_prefix}Question: {trace.question}\nAnswer: {tail}", len(demos)
    )  # demos: a shared prefix
    gen = ctx.generate(
        prompt, role=REPROMPT_ROLE, max_new_tokens=protocol.max_new_tokens, stop=list(protocol.stop)
    )[0]
    prediction = cut_prediction(f"{tail} {gen.text.strip()}", protocol.cut_at, at_start=True)
    trace.steps.append(
        Step(
            index=len(trace.steps),
            stage="after",
            draft=original,
            decision="reprompt",
            reason="no answer in the prediction: re-prompted with 'So the answer is'",
            regenerated=gen.text.strip(),
            kept=prediction,
            seconds=round(time.perf_counter() - start, 4),
        )
    )
    trace.notes.append(
        "no answer in the prediction: re-prompted with 'So the answer is' (counted as an LLM call)"
    )
    trace.prediction = prediction
    trace.answer = extract_answer(prediction) or ""
