"""Prompts of the shapes real runs send, for tests of the backends' prefix reuse."""

from __future__ import annotations

from typing import Any

from quco.llm.base import Generation, Prompt
from quco.prompts import build_prompt, load_exemplars, load_template
from quco.retrieval.base import Passage


def run_prompts(hotpot_dev: list[dict]) -> list[Prompt]:
    """Real prompt shapes of runs: 8 exemplars (past Gemma's 512-token sliding window), then passages or none, a
    question, and text written so far; two questions, two templates."""
    exemplars = load_exemplars("builtin:hotpotqa")[:8]
    baseline, quco = load_template("baseline"), load_template("quco")
    q0, q1 = hotpot_dev[0], hotpot_dev[1]

    def docs(row: dict) -> list[Passage]:
        return [Passage(str(i), p["title"], p["text"]) for i, p in enumerate(row["context_paragraphs"][:2])]

    return [
        build_prompt(q0["question"], exemplars, baseline),
        build_prompt(q0["question"], exemplars, baseline, docs(q0)),
        build_prompt(
            q0["question"], exemplars, baseline, docs(q0), prefix="First, the facts.", regenerate=True
        ),
        build_prompt(q1["question"], exemplars, baseline, docs(q1)),
        build_prompt(q1["question"], exemplars, quco, docs(q1)),
        build_prompt(q1["question"], exemplars, quco),
    ]


def signature(g: Generation) -> tuple:
    return (g.token_ids, g.logprobs, g.entropies, g.top_logprobs, g.finish_reason)


def check_reuse(gen: Any, prompts: list[Prompt], **kw: Any) -> list[Generation]:
    """Every prompt from scratch (reuse off; the exemplars' states are still kept), then again in another order
    after an unrelated prompt each time, with reuse: the same tokens and scores, the exemplars not evaluated."""
    gen.prefix_states = 8  # room for every prefix variant here (the exemplars' last token can merge)
    gen.reuse = False
    try:
        fresh = [gen.generate(p, **kw)[0] for p in prompts]
    finally:
        gen.reuse = True
    assert all(g.prompt_tokens_evaluated == g.prompt_tokens for g in fresh)
    for i in [3, 0, 5, 1, 4, 2]:
        gen.generate("An unrelated prompt that shares nothing.", max_new_tokens=2)  # no live reuse
        got = gen.generate(prompts[i], **kw)[0]
        assert signature(got) == signature(fresh[i]), f"prompt {i} differs with reuse"
        assert got.prompt_tokens == fresh[i].prompt_tokens
        # the exemplars (about 530 tokens here) come from their saved state, kept while reuse was off
        assert got.prompt_tokens_evaluated < got.prompt_tokens - 450, i
    return fresh
