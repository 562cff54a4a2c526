"""Prompts of the shapes real runs send, for tests of the backends' prefix reuse."""

from __future__ import annotations

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
