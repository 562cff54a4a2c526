"""The one generation loop. Every method runs through ``run``; none has a loop of its own.

    question -> before -> [retrieve] -> draft -> check -> keep | retrieve + regenerate -> ... -> answer

Stop rules: a stated answer ("the answer is"), the token budget, end of generation (EOS or a stop string),
no growth, a check that ends generation, the step budget, and single-pass methods.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from quco.answer import extract_answer, has_answer
from quco.engine.context import RunContext
from quco.engine.method import Draft, Method
from quco.llm.base import Generation
from quco.prompts import build_prompt
from quco.retrieval.base import Passage
from quco.trace import Step

log = logging.getLogger(__name__)


def join_text(prefix: str, addition: str) -> str:
    addition = addition.strip()
    if not addition:
        return prefix
    return f"{prefix} {addition}".strip() if prefix else addition


def cut_generation(gen: Generation, keep_chars: int) -> Generation:
    """The generation restricted to its first ``keep_chars`` characters (tokens that start later dropped)."""
    if keep_chars >= len(gen.text):
        return gen
    n, pos = 0, 0
    for tok in gen.tokens:
        if pos >= keep_chars:
            break
        pos += len(tok)
        n += 1
    return replace(
        gen,
        text=gen.text[:keep_chars],
        tokens=gen.tokens[:n],
        token_ids=gen.token_ids[:n],
        logprobs=gen.logprobs[:n] if gen.logprobs is not None else None,
        entropies=gen.entropies[:n] if gen.entropies is not None else None,
        top_logprobs=gen.top_logprobs[:n] if gen.top_logprobs is not None else None,
        finish_reason="stop",
    )


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


def run(method: Method, question: str, ctx: RunContext) -> None:
    """Answer ``question`` with ``method``, filling ``ctx.trace``."""
    parts = ctx.parts
    cfg = parts.config
    trace = ctx.trace
    split = parts.text.splitter.split
    top_k = method.params.top_k or cfg.retriever.top_k
    budget = cfg.generation.max_new_tokens
    want_scores = method.draft_logprobs

    docs: list[Passage] = []
    text = ""
    pending = ""  # unchecked remainder of a regeneration (re-checked without a new LLM call)
    steps = trace.steps

    start = time.perf_counter()
    decision = method.before(question, ctx)
    if decision is not None:
        step = Step(index=0, stage="before", signals=decision.signals, reason=decision.reason)
        if decision.retrieve:
            if decision.passages is not None:
                docs, refs = list(decision.passages), list(decision.refs or [])
            else:
                docs, refs = ctx.retrieve(decision.queries, top_k)
            step.decision, step.queries, step.retrieved = "retrieve", list(decision.queries), refs
        else:
            step.decision = "skip"
        step.seconds = round(time.perf_counter() - start, 4)
        steps.append(step)
        if decision.answer is not None and not decision.retrieve:
            step.kept = decision.answer
            trace.prediction = decision.answer
            trace.answer = extract_answer(decision.answer) or decision.answer.strip()
            trace.stop_reason = "answered_before"
            return

    stop_reason = "step_budget"
    for _ in range(cfg.generation.max_steps):
        t0 = time.perf_counter()
        step = Step(index=len(steps), stage="generate")
        ended = False
        if pending:
            draft_text, pending = pending, ""
            draft = Draft(text=draft_text, sentences=split(draft_text), generation=None, prefix=text)
        else:
            remaining = max(1, budget - ctx.count_tokens(text))
            n_tokens = min(method.unit_tokens(ctx), remaining)
            # DRAGIN-family methods draft without passages; passages only inform their regeneration.
            draft_docs = docs if method.draft_docs else []
            prompt = build_prompt(question, parts.exemplars, parts.template, draft_docs, prefix=text)
            gen = ctx.generate(prompt, max_new_tokens=n_tokens, logprobs=want_scores, entropy=want_scores)[0]
            raw = gen.text
            sentences = split(raw)
            if method.unit == "sentence" and len(sentences) > 1:
                gen = cut_generation(gen, _first_sentence_chars(raw, sentences))
                sentences = sentences[:1]
            ended = gen.finish_reason in ("eos", "stop") and len(gen.text) == len(raw)
            # The prompt travels with the draft so that a check can sample the same unit again (black-box).
            draft = Draft(
                text=gen.text.strip(),
                sentences=sentences,
                generation=gen,
                prefix=text,
                prompt=prompt,
                docs=list(draft_docs),
            )
        step.draft = draft.text
        if not draft.text:
            step.decision, step.reason = "stop", "the model generated nothing"
            step.seconds = round(time.perf_counter() - t0, 4)
            steps.append(step)
            stop_reason = "no_growth"
            break

        check = method.check(draft, question, ctx)
        step.signals, step.reason, step.kept = check.signals, check.reason, check.keep
        before_len = len(text)
        text = join_text(text, check.keep)
        if check.fire:
            if check.passages is not None:
                new_docs, refs = list(check.passages), list(check.refs or [])
            else:
                new_docs, refs = ctx.retrieve(check.queries, top_k)
            step.decision, step.queries, step.retrieved = "retrieve", list(check.queries), refs
            if new_docs:
                docs = new_docs
            if method.keep_rule != "draft":
                remaining = max(1, budget - ctx.count_tokens(text))
                prompt = build_prompt(
                    question, parts.exemplars, parts.template, docs, prefix=text, regenerate=True
                )
                regen = ctx.generate(prompt, max_new_tokens=min(method.unit_tokens(ctx), remaining))[0]
                step.regenerated = regen.text.strip()
                if method.keep_rule == "first_sentence":
                    kept, rest = _split_regeneration(split(regen.text))
                else:
                    kept, rest = regen.text.strip(), ""
                text = join_text(text, kept)
                step.kept = join_text(step.kept, kept)
                if method.recheck_remainder:
                    pending = rest
                ended = ended or (regen.finish_reason in ("eos", "stop") and not rest)
        else:
            step.decision = "keep"
        step.seconds = round(time.perf_counter() - t0, 4)
        steps.append(step)

        if has_answer(text):
            text = _truncate_after_answer(text, split(text))
            stop_reason = "answer"
            break
        if check.stop:
            stop_reason = "check_stop"
            break
        if method.single_pass:
            stop_reason = "single_pass"
            break
        if ctx.count_tokens(text) >= budget:
            stop_reason = "token_budget"
            break
        # A retrieval that only informs the next draft (keep rule "draft") may grow nothing yet; a regeneration
        # that added nothing would otherwise repeat the same draft and the same retrieval until max_steps.
        if len(text) == before_len and not pending and not (check.fire and method.keep_rule == "draft"):
            stop_reason = "no_growth"
            break
        if ended and not pending and not check.fire:
            stop_reason = "eos"
            break

    trace.prediction = text
    trace.answer = extract_answer(text)
    trace.stop_reason = stop_reason
