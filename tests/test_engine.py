"""The one loop's control flow, with a scripted generator over real parts.

The generator here returns fixed texts so that each branch of the loop (stage-1 retrieval, a flagged claim,
regeneration with the first-sentence keep rule, re-checking the remainder without a new call, negation stop,
budgets) is exercised deterministically. Retrieval, corpus statistics and text processing are the real ones,
over real HotpotQA paragraphs. ``test_integration.py`` runs the same paths with the real default model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from quco.config import load_config
from quco.corpus_stats import build_corpus_stats
from quco.engine.context import Parts
from quco.llm.base import Capability, Generation
from quco.methods import method_class
from quco.pipeline import Pipeline
from quco.prompts import load_exemplars, load_template
from quco.retrieval import build_retriever, corpus_docs
from quco.text import build_text
from quco.trace import Trace


@dataclass
class ScriptedGenerator:
    """Returns the queued texts in order; records every prompt it was given."""

    responses: list[str]
    name: str = "scripted"
    capabilities: frozenset = frozenset({Capability.TEXT})
    max_context_tokens: int = 4096
    prompts: list[str] = field(default_factory=list)

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def generate(
        self, prompt: str, *, max_new_tokens: int, stop=(), n: int = 1, stop_when=None, **_: object
    ) -> list[Generation]:
        self.prompts.append(prompt)
        text = self.responses.pop(0)
        words = text.split(" ")
        tokens = [w if i == 0 else " " + w for i, w in enumerate(words)]
        if stop_when is not None:  # as the token-by-token backends: checked after each token
            for i in range(len(tokens)):
                if stop_when("".join(tokens[: i + 1])):
                    tokens = tokens[: i + 1]
                    text = "".join(tokens)
                    break
        return [
            Generation(
                text=text,
                tokens=tokens,
                token_ids=list(range(len(tokens))),
                finish_reason="stop",
                prompt_tokens=self.count_tokens(prompt),
            )
        ]

    def analyze(self, text: str, **_: object):  # pragma: no cover - not used by these methods
        raise NotImplementedError


def build_real_parts(tmp: Path, small_hotpot_corpus: Path):  # noqa: ANN201 - (config, retriever, stats, text)
    """Real BM25, corpus statistics and text tools over a small real corpus (built once per module)."""
    cfg = load_config(
        overrides={
            "retriever.corpus": str(small_hotpot_corpus),
            "retriever.index_dir": str(tmp / "bm25"),
            "corpus_stats.index_dir": str(tmp / "stats"),
        }
    )
    retriever = build_retriever(cfg.retriever, progress=False)
    docs = corpus_docs(cfg.retriever.corpus)
    stats = build_corpus_stats(cfg.corpus_stats, docs, docs.fingerprint, progress=False)
    return cfg, retriever, stats, build_text(cfg.text)


@pytest.fixture(scope="module")
def real_parts(tmp_path_factory: pytest.TempPathFactory, small_hotpot_corpus: Path):  # noqa: ANN201
    return build_real_parts(tmp_path_factory.mktemp("idx"), small_hotpot_corpus)


def make_pipeline(
    real_parts, method: str, responses: list[str], **params: object
) -> tuple[Pipeline, ScriptedGenerator]:
    cfg, retriever, stats, text = real_parts
    cfg = cfg.model_copy(update={"method": method, "params": dict(params)})
    m = method_class(method)(cfg.params)
    gen = ScriptedGenerator(list(responses))
    parts = Parts(
        config=cfg,
        generator=gen,
        text=text,
        exemplars=load_exemplars("builtin:hotpotqa")[:2],
        template=load_template(m.template),
        retriever=retriever,
        corpus_stats=stats,
    )
    return Pipeline(cfg, m, parts), gen


QUESTION = "Were Scott Derrickson and Ed Wood of the same nationality?"


def test_stage1_fires_on_rare_entities_and_retrieves_with_the_question(real_parts) -> None:
    pipe, gen = make_pipeline(
        real_parts,
        "quco",
        ["Scott Derrickson is American. So the answer is yes."],
        entity_threshold=100000,
    )
    trace = pipe.answer(QUESTION)
    before = trace.steps[0]
    assert before.stage == "before"
    counts = {r["entity"]: r["count"] for r in before.signals["entity_counts"]}
    assert "Scott Derrickson" in counts and counts["Scott Derrickson"] > 0
    stage1 = before.triggers[0]
    assert (stage1.signal, stage1.rule, stage1.param) == ("mean_entity_count", "below", "entity_threshold")
    assert stage1.scores[0] < 100000 and stage1.fired
    assert before.decision == "retrieve" and before.queries == [QUESTION]
    assert {r.title for r in before.retrieved} & {"Scott Derrickson", "Ed Wood"}
    assert len(before.retrieved) == 3
    # The retrieved passages are in the first prompt, and only there is a passage header.
    assert "Background passages" in gen.prompts[0]
    assert before.retrieved[0].title in gen.prompts[0]
    assert trace.answer == "yes"
    assert trace.counters.llm_calls == {"main": 1}
    assert trace.counters.retrievals == 1


def test_stage1_skips_when_entities_are_frequent_enough(real_parts) -> None:
    pipe, gen = make_pipeline(real_parts, "quco", ["So the answer is yes."], entity_threshold=1)
    trace = pipe.answer(QUESTION)
    before = trace.steps[0]
    assert before.triggers[0].scores[0] >= 1 and not before.triggers[0].fired
    assert before.decision == "skip" and not before.retrieved
    assert "Background passages" not in gen.prompts[0]
    assert trace.counters.retrievals == 0


def test_stage2_flags_a_claim_with_zero_cooccurrence_then_keeps_first_regenerated_sentence(
    real_parts,
) -> None:
    draft = "Scott Derrickson was born in Stockholm. Ed Wood was born in Poughkeepsie. So the answer is no."
    regenerated = (
        "Scott Derrickson was born in Denver. Ed Wood was an American filmmaker. So the answer is yes."
    )
    pipe, gen = make_pipeline(real_parts, "quco", [draft, regenerated], stage1=False)
    trace = pipe.answer(QUESTION)
    step = trace.steps[0]
    claims = step.signals["sentences"][0]["claims"]
    flagged = [c for c in claims if c["flagged"]]
    assert flagged, claims
    # Every decision follows from its recorded count and threshold.
    for c in claims:
        assert c["flagged"] == (c["count"] < c["threshold"])
    assert flagged[0]["triplet"][0] == "Scott Derrickson" and flagged[0]["count"] == 0
    # the typed records: the first judged sentence fires on its lowest co-occurrence (0 < 1)
    cooc, head = step.triggers
    assert (cooc.param, cooc.scores[0], cooc.fired_at) == ("cooccurrence_threshold", 0.0, 0)
    assert head.param == "head_threshold"
    assert step.decision == "retrieve"
    assert step.queries[0].startswith("Scott Derrickson")
    assert step.kept == "Scott Derrickson was born in Denver."
    # The regeneration prompt carries the retrieved passages; the remainder is re-checked without a call.
    assert len(gen.prompts) == 2 and "Background passages" in gen.prompts[1]
    assert trace.steps[1].draft.startswith("Ed Wood was an American filmmaker")
    assert trace.counters.llm_calls == {"main": 2}
    assert trace.prediction.startswith("Scott Derrickson was born in Denver.")
    assert trace.answer == "yes"
    assert trace.stop_reason == "answer"


def test_negation_sentence_is_dropped_with_the_rest_of_the_draft(real_parts) -> None:
    draft = "The context does not mention Ed Wood. Ed Wood was born in Poughkeepsie."
    pipe, _ = make_pipeline(real_parts, "quco", [draft], stage1=False)
    trace = pipe.answer(QUESTION)
    assert trace.prediction == ""
    assert trace.stop_reason == "no_growth"  # nothing was kept; with negation_stops the check ends generation
    assert trace.steps[0].signals["sentences"][0]["negation"] is True


def test_token_budget_stops_the_loop(real_parts) -> None:
    cfg = real_parts[0]
    long_claim = "Scott Derrickson is an American director. " * 5
    pipe, _ = make_pipeline(real_parts, "quco", [long_claim.strip()], stage1=False)
    pipe.parts.config = cfg.model_copy(
        update={"generation": cfg.generation.model_copy(update={"max_new_tokens": 10})}
    )
    trace = pipe.answer(QUESTION)
    assert trace.stop_reason == "token_budget"


def test_sr_rag_retrieves_once_and_generates_once(real_parts) -> None:
    pipe, gen = make_pipeline(real_parts, "sr-rag", ["Both are American. So the answer is yes."])
    trace = pipe.answer(QUESTION)
    assert [s.decision for s in trace.steps] == ["retrieve", "keep"]
    assert trace.counters.llm_calls == {"main": 1} and trace.counters.retrievals == 1
    assert "Context:" in gen.prompts[0]
    # DRAGIN's SingleRAG layout: passages, then the format request, then the question
    assert re.search(
        r"\nContext:\n\[1\] .*\nAnswer in the same format as before\.\nQuestion: ", gen.prompts[0], re.S
    )
    assert trace.stop_reason == "answer"


def test_wo_rag_never_retrieves(real_parts) -> None:
    pipe, gen = make_pipeline(real_parts, "wo-rag", ["They are both American. So the answer is yes."])
    trace = pipe.answer(QUESTION)
    assert trace.counters.retrievals == 0 and trace.counters.llm_calls == {"main": 1}
    assert "Context:" not in gen.prompts[0] and "same format as before" not in gen.prompts[0]
    assert trace.answer == "yes"


def test_trace_round_trips_through_json(real_parts) -> None:
    pipe, _ = make_pipeline(
        real_parts,
        "quco",
        [
            "Scott Derrickson was born in Stockholm. So the answer is no.",
            "Scott Derrickson was born in Denver.",
            "So the answer is yes.",
        ],
    )
    trace = pipe.answer(QUESTION)
    data = json.loads(trace.to_json())
    again = Trace.from_dict(data)
    assert again.to_dict() == trace.to_dict()
    assert set(data["counters"]) >= {
        "llm_calls",
        "prompt_tokens",
        "generated_tokens",
        "retrievals",
        "corpus_queries",
        "seconds",
    }
    assert data["counters"]["corpus_queries"] == trace.counters.corpus_queries > 0


def test_render_shows_each_decision_from_its_trigger_records(real_parts) -> None:
    from io import StringIO

    from rich.console import Console

    from quco.render import render_trace

    draft = "Scott Derrickson was born in Stockholm. So the answer is no."
    pipe, _ = make_pipeline(
        real_parts, "quco", [draft, "Scott Derrickson was born in Denver.", "So the answer is yes."]
    )
    trace = pipe.answer(QUESTION)
    console = Console(file=StringIO(), width=220)
    render_trace(trace, console)
    out = console.file.getvalue()
    stage1 = trace.steps[0].triggers[0]
    assert f"mean_entity_count per question: [{stage1.scores[0]:g}] < entity_threshold 100000" in out
    assert "min_cooccurrence per sentence: [0] < cooccurrence_threshold 1 → fires at sentence 0" in out
    assert "✗ ['Scott Derrickson'" in out  # the flagged claim


@pytest.mark.parametrize(
    "responses",
    [
        [  # a flagged claim, then a regeneration: both go on past the answer
            "Scott Derrickson was born in Stockholm. Ed Wood was born in Poughkeepsie. So the answer is no. "
            "So the answer is no. Question: Who was born first?",
            "Scott Derrickson was born in Denver. Ed Wood was an American filmmaker. So the answer is yes. "
            "Ed Wood was born in 1924. So the answer is yes.",
        ],
        # a chatty answer sentence is dropped and does not end the scan; the next one does
        [
            "Sure, the answer is yes. Ed Wood was an American filmmaker. So the answer is yes. So the answer is"
        ],
        # a disclaimer before the answer: the scan ends there, so the draft is never cut
        [
            "The context does not mention Ed Wood. So the answer is no. So the answer is no.",
            "So the answer is no.",
        ],
    ],
)
def test_stop_after_answer_saves_unread_tokens_and_changes_nothing_else(real_parts, responses) -> None:
    traces = []
    for stop_after_answer in (False, True):
        pipe, gen = make_pipeline(
            real_parts, "quco", list(responses), stage1=False, stop_after_answer=stop_after_answer
        )
        traces.append(pipe.answer(QUESTION))
    full, short = traces

    def outcome(t: Trace) -> tuple:
        steps = [(s.decision, s.kept, tuple(s.queries), s.reason) for s in t.steps]
        return t.prediction, t.answer, t.stop_reason, steps, t.counters.llm_calls

    assert outcome(short) == outcome(full)
    saved = sum(full.counters.generated_tokens.values()) - sum(short.counters.generated_tokens.values())
    cut = not responses[0].startswith("The context does not")
    assert (saved > 0) is cut
    if cut:  # the first draft ends one whole word into the sentence after its answer
        assert short.steps[0].draft.endswith("So the answer is no. So the") or short.steps[0].draft.endswith(
            "So the answer is yes. So the"
        )
    else:
        assert [s.draft for s in short.steps] == [s.draft for s in full.steps]
