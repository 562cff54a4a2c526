"""The in-process llama.cpp backend, and the same decisions through a llama.cpp server (OpenAI backend).

Both run the default Gemma GGUF with the same llama.cpp build, so greedy runs must agree token for token:
the methods' decisions (QuCo-RAG, FLARE, DTR-UGT) are compared step by step on real HotpotQA questions.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quco.config import GeneratorConfig, PipelineConfig, load_config
from quco.errors import CapabilityError, ConfigError
from quco.llm import Capability, build_generator
from quco.llm.base import Prompt, shared_levels
from quco.llm.llamacpp import LlamaCppError, LlamaCppGenerator
from quco.llm.models import default_gguf_path
from quco.llm.openai_compat import OpenAICompatGenerator, approx_entropy
from quco.methods import method_class
from quco.pipeline import Pipeline, shared_generator
from support.llama_server import LlamaServer, ServedModel
from support.prompts import check_reuse, run_prompts, signature

pytestmark = pytest.mark.model

PROMPT = "The Eiffel Tower is located in"


@pytest.fixture(scope="module")
def local() -> Iterator[LlamaCppGenerator]:
    gen = build_generator(GeneratorConfig(backend="llamacpp", max_context_tokens=2048))
    assert isinstance(gen, LlamaCppGenerator)
    yield gen
    gen.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One model with logprobs on (logits_all), so that the server never swaps models between requests."""
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with LlamaServer(
        [ServedModel("gemma3-270m", str(default_gguf_path()), n_ctx=2048, logits_all=True)], log_path=log
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def mirror(server: LlamaServer) -> Iterator[LlamaCppGenerator]:
    """In-process twin of the server: llama-cpp-python's own prefix reuse, fed exactly the server's requests."""
    gen = build_generator(GeneratorConfig(backend="llamacpp", max_context_tokens=2048))
    gen.reproducible = False
    yield gen
    gen.close()


@pytest.fixture(scope="module")
def remote(server: LlamaServer) -> Iterator[OpenAICompatGenerator]:
    with OpenAICompatGenerator(server.base_url, "gemma3-270m", max_context_tokens=2048) as gen:
        yield gen


def test_greedy_generation_with_logprobs_and_exact_entropy(local: LlamaCppGenerator) -> None:
    g = local.generate(PROMPT, max_new_tokens=8, logprobs=True, entropy=True)[0]
    assert g.text.startswith(" Paris, France")
    assert "".join(g.tokens) == g.text and len(g.token_ids) == len(g.tokens) == 8
    assert g.finish_reason == "length"
    assert g.prompt_tokens == local.count_tokens(PROMPT) + 1
    # stack.md §3b: step 0 top logprobs ' Paris' -0.738, ' the' -0.96, ' a' -3.875.
    assert g.logprobs[0] == pytest.approx(-0.738, abs=0.02)
    top = g.top_logprobs[0]
    assert list(top)[:3] == [" Paris", " the", " a"]
    assert top[" a"] == pytest.approx(-3.875, abs=0.05)
    # The entropy is over the whole 262k vocabulary: never below the top-5 lower bound, and finite.
    for ent, t in zip(g.entropies, g.top_logprobs, strict=True):
        assert approx_entropy(t) - 1e-6 <= ent < math.log(262144)
    plain = local.generate(PROMPT, max_new_tokens=8)[0]
    assert plain.text == g.text and plain.logprobs is None and plain.entropies is None


def test_threads_set_decoding_and_prompt_evaluation_alike(local: LlamaCppGenerator) -> None:
    """``generator.threads`` is the number of threads for decoding and for prompt evaluation alike (unset: every
    usable core), so worker processes that each take a share of the cores do not oversubscribe them."""
    from quco.machine import usable_cores

    params = local.llama.context_params
    assert (params.n_threads, params.n_threads_batch) == (usable_cores(), usable_cores())
    one = LlamaCppGenerator.from_config(
        GeneratorConfig(backend="llamacpp", threads=1, max_context_tokens=512)
    )
    try:
        assert (one.llama.context_params.n_threads, one.llama.context_params.n_threads_batch) == (1, 1)
    finally:
        one.close()


def test_stop_strings_sampling_and_capabilities(local: LlamaCppGenerator) -> None:
    g = local.generate(PROMPT, max_new_tokens=16, stop=[","])[0]
    assert g.text == " Paris" and g.finish_reason == "stop" and g.tokens == [" Paris"]
    kw = {"max_new_tokens": 8, "temperature": 1.0, "n": 3, "seed": 11}
    a, b = local.generate(PROMPT, **kw), local.generate(PROMPT, **kw)
    assert [x.text for x in a] == [x.text for x in b] and len({x.text for x in a}) > 1
    assert {Capability.LOGPROBS, Capability.ENTROPY, Capability.SAMPLING} <= local.capabilities
    assert {Capability.HIDDEN_STATES, Capability.ATTENTION} <= local.capabilities
    att = local.analyze(PROMPT, attention_layer=0).attention
    n = local.count_tokens(PROMPT) + 1
    assert att.shape == (n, n) and np.allclose(att.sum(1), 1, atol=1e-5) and not np.triu(att, 1).any()
    with pytest.raises(ConfigError, match="attention_layer 18 is out of range"):
        local.analyze(PROMPT, attention_layer=18)
    with pytest.raises(CapabilityError, match="scores.*'hf'"):
        local.analyze(PROMPT, scores=True)
    analysis = local.analyze(PROMPT)
    assert "".join(analysis.tokens) == PROMPT and len(analysis.token_ids) == local.count_tokens(PROMPT) + 1
    with pytest.raises(ConfigError, match="is not a GGUF file"):
        build_generator(GeneratorConfig(backend="llamacpp", model="/nonexistent/model.bin"))


def test_hidden_states_do_not_depend_on_reuse_or_order(local: LlamaCppGenerator) -> None:
    """Hidden states read during llama.cpp's own pass: every position's row of a middle layer; the declared levels
    (exemplars, then the prompt the samples share) are evaluated once and stand in exactly for their passes, so
    the states equal those read with every saving off and in another order."""
    exemplars = (
        "Question: Who wrote Hamlet?\nAnswer: William Shakespeare wrote it. So the answer is Shakespeare.\n\n"
        * 6
    )
    context = exemplars + "Question: Where is the Eiffel Tower?\nAnswer:"
    samples = [" It is in Paris.", " The tower stands in Paris, France.", " Paris."]
    layer = local.num_layers // 2
    assert local.num_layers == 18

    def read() -> list[tuple[np.ndarray, int | None, int]]:
        out = []
        for s in samples:
            text = Prompt(context + s, shared=len(context), inner=(len(exemplars),))
            a = local.analyze(text, hidden_layers=[layer])
            out.append((a.hidden[layer], a.evaluated, len(a.token_ids)))
        return out

    local.clear_cache()
    first = read()
    n_context = local.count_tokens(context) + 1
    assert all(rows.shape == (n, 640) and np.isfinite(rows).all() for rows, _, n in first)
    assert first[0][1] == first[0][2]  # nothing kept yet: every token evaluated
    assert all(evaluated == n - n_context for _, evaluated, n in first[1:])  # only the continuation
    # the rows of the shared levels are kept with them: the same for every sample
    assert all(np.array_equal(rows[:n_context], first[0][0][:n_context]) for rows, _, _ in first[1:])
    local.reuse = False
    try:
        samples.reverse()
        again = read()[::-1]
        samples.reverse()
    finally:
        local.reuse = True
    assert all(e == n for _, e, n in again)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(first, again, strict=True))
    for bad in (0, 18, -1):
        with pytest.raises(ConfigError, match="hidden layers 1..17"):
            local.analyze(PROMPT, hidden_layers=[bad])
    assert np.array_equal(
        local.analyze(PROMPT, hidden_layers=[-2]).hidden[-2],
        local.analyze(PROMPT, hidden_layers=[17]).hidden[17],
    )


def test_hidden_states_of_samples_start_from_the_sampled_prompt_exactly(local: LlamaCppGenerator) -> None:
    """SeaKR's pattern: continuations sampled from a prompt, then the last state of prompt + continuation. The
    generating context hands its evaluated prompt state over, so a ``last_only`` read evaluates only the
    continuation, and gives bit-for-bit the state that evaluating every level anew gives."""
    exemplars = (
        "Question: Who wrote Hamlet?\nAnswer: William Shakespeare wrote it. So the answer is Shakespeare.\n\n"
        * 6
    )
    prompt = Prompt(exemplars + "Question: Where is the Louvre?\nAnswer:", shared=len(exemplars))
    layer = 9
    local.analyze(PROMPT, hidden_layers=[layer])  # the reader exists from the first read on
    samples = [g.text for g in local.generate(prompt, max_new_tokens=12, n=3, temperature=1.0, seed=5)]
    n_prompt = local.count_tokens(prompt) + 1

    def read() -> list[tuple[np.ndarray, int | None, int]]:
        out = []
        for s in samples:
            text = Prompt(prompt + s, shared=len(prompt), inner=shared_levels(prompt))
            a = local.analyze(text, hidden_layers=[layer], last_only=True)
            out.append((a.hidden[layer], a.evaluated, len(a.token_ids)))
        return out

    handed = read()
    assert all(rows.shape == (1, 640) for rows, _, _ in handed)
    assert [e for _, e, _ in handed] == [n - n_prompt for _, _, n in handed]  # only the continuations
    local.reuse = False
    try:
        anew = read()
    finally:
        local.reuse = True
    assert [e for _, e, _ in anew] == [n for _, _, n in anew]
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(handed, anew, strict=True))
    full = local.analyze(
        Prompt(prompt + samples[0], shared=len(prompt), inner=shared_levels(prompt)), hidden_layers=[layer]
    )
    assert np.array_equal(full.hidden[layer][-1:], handed[0][0])


def test_hidden_states_of_samples_read_together_equal_those_read_alone(local: LlamaCppGenerator) -> None:
    """SeaKR's reads of one check's samples, together: one sequence per sample over the sampled prompt's state,
    evaluated in one batch. The rows are those read one by one, up to llama.cpp's rounding of other batches; a
    text given twice is read once; texts that do not continue the prompt just sampled from are read one by one."""
    exemplars = (
        "Question: Who wrote Hamlet?\nAnswer: William Shakespeare wrote it. So the answer is Shakespeare.\n\n"
        * 6
    )
    prompt = Prompt(exemplars + "Question: Where is the Prado?\nAnswer:", shared=len(exemplars))
    layer = 9
    local.analyze(PROMPT, hidden_layers=[layer])  # the reader exists from the first read on
    samples = [g.text for g in local.generate(prompt, max_new_tokens=12, n=5, temperature=1.0, seed=8)]
    texts = [Prompt(prompt + s, shared=len(prompt), inner=shared_levels(prompt)) for s in samples]
    together = local.analyze_many(texts, hidden_layers=[layer], last_only=True)
    alone = [local.analyze(t, hidden_layers=[layer], last_only=True) for t in texts]
    n_prompt = local.count_tokens(prompt) + 1
    for a, b in zip(together, alone, strict=True):
        assert a.token_ids == b.token_ids and a.evaluated == b.evaluated == len(a.token_ids) - n_prompt
        x, y = a.hidden[layer][0], b.hidden[layer][0]
        assert a.hidden[layer].shape == (1, 640)
        assert float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)) > 0.9999
        assert np.abs(x - y).max() <= 1e-2 * np.abs(y).max()
    again = local.analyze_many(texts, hidden_layers=[layer], last_only=True)
    assert all(np.array_equal(a.hidden[layer], b.hidden[layer]) for a, b in zip(together, again, strict=True))
    # identical samples get identical states, as when read alone (an EigenScore magnifies their last bits)
    twice = local.analyze_many([texts[0], texts[1], texts[0]], hidden_layers=[layer], last_only=True)
    assert np.array_equal(twice[0].hidden[layer], twice[2].hidden[layer])
    assert twice[0].evaluated == together[0].evaluated
    assert twice[2].evaluated == 0  # the duplicate evaluates nothing
    elsewhere = Prompt(
        exemplars + "Question: Where is the Uffizi?\nAnswer: It is in Florence.", shared=len(exemplars)
    )
    mixed = local.analyze_many([texts[0], elsewhere], hidden_layers=[layer], last_only=True)
    assert np.array_equal(mixed[0].hidden[layer], alone[0].hidden[layer])  # read alone, as before


def test_reproducible_mode_does_not_depend_on_earlier_prompts(local: LlamaCppGenerator) -> None:
    """A repeated prompt re-evaluates only its last token under plain prefix reuse, and llama.cpp's batch
    kernels then round differently: greedy text can change. Reproducible mode reuses whole batches only."""
    first = local.generate(PROMPT, max_new_tokens=10)[0].text
    local.generate("Question: Who wrote Hamlet?\nAnswer:", max_new_tokens=4)
    again = [local.generate(PROMPT, max_new_tokens=10)[0].text for _ in range(2)]
    assert again == [first, first]


def test_samples_share_the_prompt_cache_stay_reproducible_and_stop_when_asked(
    local: LlamaCppGenerator,
) -> None:
    """Decoded one after another, samples after the first re-run only the prompt's last token; the result depends
    on the prompt alone."""
    local.sample_batch = False
    try:
        _sequential_samples_stay_reproducible(local)
    finally:
        local.sample_batch = True


def _sequential_samples_stay_reproducible(local: LlamaCppGenerator) -> None:
    kw = {"max_new_tokens": 12, "temperature": 1.0, "n": 4, "seed": 5}
    first = [g.text for g in local.generate(PROMPT, **kw)]
    assert [g.prompt_tokens_evaluated for g in local.generate(PROMPT, **kw)][1:] == [1, 1, 1]
    local.generate("Question: Who wrote Hamlet?\nAnswer:", max_new_tokens=4)
    assert [g.text for g in local.generate(PROMPT, **kw)] == first
    assert len(set(first)) > 1

    def three_words(text: str) -> bool:
        return len(text.split()) >= 3

    short = local.generate(PROMPT, stop_when=three_words, **kw)
    for g, full in zip(short, first, strict=True):
        assert full.startswith(g.text), (g.text, full)  # same draws, ended early, nothing cut
        if len(full.split()) > 3:
            assert g.finish_reason == "stop" and len(g.text.split()) == 3 and len(g.token_ids) < 12


def test_batched_samples_are_reproducible_counted_and_drawn_as_sequential_ones(
    local: LlamaCppGenerator,
) -> None:
    """The n samples of one prompt decoded together: the prompt is evaluated once, every sequence draws from its
    own seeded sampler, and the samples depend on the prompt and the seed alone, whatever ran before."""
    exemplars = (
        "Question: Who wrote Hamlet?\nAnswer: William Shakespeare wrote it. So the answer is Shakespeare.\n\n"
        * 6
    )
    prompt = Prompt(exemplars + "Question: Where is the Louvre?\nAnswer:", shared=len(exemplars))
    kw = {"max_new_tokens": 16, "temperature": 1.0, "top_k": 50, "top_p": 0.9, "n": 8, "seed": 21}
    assert local.sample_batch  # the default
    local.clear_cache()
    first = local.generate(prompt, logprobs=True, entropy=True, **kw)
    n_prompt = local.count_tokens(prompt) + 1
    assert len(first) == 8 and len({g.text for g in first}) > 1
    # counted as 8 generations of one prompt, evaluated once (by the first)
    assert [g.prompt_tokens for g in first] == [n_prompt] * 8
    assert (
        first[0].prompt_tokens_evaluated == n_prompt
        and [g.prompt_tokens_evaluated for g in first[1:]] == [0] * 7
    )
    for g in first:
        assert "".join(g.tokens) == g.text and len(g.token_ids) == len(g.logprobs) == len(g.entropies)
        assert all(lp <= 0 and math.isfinite(e) for lp, e in zip(g.logprobs, g.entropies, strict=True))
    # something unrelated (another prompt greedy and sampled, with and without the batch), then the same call
    local.generate("Question: Who painted the Mona Lisa?\nAnswer:", max_new_tokens=6)
    local.generate(PROMPT, max_new_tokens=6, temperature=1.0, n=3, seed=2)
    local.sample_batch = False
    try:
        sequential = local.generate(prompt, logprobs=True, entropy=True, **kw)
    finally:
        local.sample_batch = True
    again = local.generate(prompt, logprobs=True, entropy=True, **kw)
    assert [g.token_ids for g in again] == [g.token_ids for g in first]
    assert [g.logprobs for g in again] == [g.logprobs for g in first]
    assert [g.prompt_tokens_evaluated for g in again][1:] == [0] * 7  # the prompt's batches were reused
    # the same sampler chain and seeds: the first token of the first sample comes from the same scores both ways
    assert sequential[0].token_ids[0] == first[0].token_ids[0]
    assert sequential[0].logprobs[0] == first[0].logprobs[0]
    same = sum(a.token_ids == b.token_ids for a, b in zip(sequential, first, strict=True))
    print(f"\nbatched samples equal to sequential ones: {same}/8")

    def three_words(text: str) -> bool:
        return len(text.split()) >= 3

    short = local.generate(prompt, stop_when=three_words, stop=["\n"], **kw)
    assert [g.token_ids for g in local.generate(prompt, stop_when=three_words, stop=["\n"], **kw)] == [
        g.token_ids for g in short
    ]
    for g in short:
        assert len(g.text.split()) <= 3 and "\n" not in g.text
        assert g.finish_reason in ("stop", "eos") or len(g.token_ids) == 16


def test_prefix_reuse_gives_identical_tokens_and_logprobs_in_any_order(
    local: LlamaCppGenerator, hotpot_dev: list[dict]
) -> None:
    """The exemplar prefix's saved state and the previous prompt's cache are reused only where a fresh
    evaluation makes the same computation: tokens, logprobs, entropies and top alternatives are bit-identical
    to evaluating every prompt from scratch, whatever was asked before (other questions, other templates, a
    prompt that shares nothing) and in any order."""
    prompts = run_prompts(hotpot_dev)
    kw = {"max_new_tokens": 10, "logprobs": True, "entropy": True}
    assert all(p.shared > 0 for p in prompts)
    fresh = check_reuse(local, prompts, **kw)
    for i in [5, 4, 2, 1, 0, 3]:  # straight after one another: the previous prompt's state is reused as well
        got = local.generate(prompts[i], **kw)[0]
        assert signature(got) == signature(fresh[i]), f"prompt {i} differs with reuse"
        assert got.prompt_tokens_evaluated < got.prompt_tokens - 450, i


def test_server_logprobs_equal_in_process_logprobs(
    mirror: LlamaCppGenerator, remote: OpenAICompatGenerator
) -> None:
    r = remote.generate(PROMPT, max_new_tokens=8, logprobs=True)[0]
    g = mirror.generate(PROMPT, max_new_tokens=8, logprobs=True)[0]
    assert r.text == g.text and r.tokens == g.tokens and r.token_ids == g.token_ids
    assert r.logprobs == pytest.approx(g.logprobs, abs=1e-3)
    assert list(r.top_logprobs[0]) == list(g.top_logprobs[0])


# ------------------------------------------------------------------------------------------------------------
# The same questions through both backends: every decision must match.


@pytest.fixture(scope="module")
def base_config(tmp_path_factory: pytest.TempPathFactory, small_hotpot_corpus: Path) -> PipelineConfig:
    tmp = tmp_path_factory.mktemp("match-idx")
    return load_config(
        overrides={
            "generator.max_context_tokens": 2048,
            "retriever.corpus": str(small_hotpot_corpus),
            "retriever.index_dir": str(tmp / "bm25"),
            "corpus_stats.index_dir": str(tmp / "stats"),
            "prompt.fewshot": 1,
            "generation.max_new_tokens": 24,
            "generation.max_steps": 3,
        }
    )


METHODS = {
    "quco": {},
    "flare": {},
    # DTR-UGT: the uncertainty gate with plain retrieval from the pipeline's BM25 (no dense index needed)
    "dtr": {"retrieval": "standard", "standard_retriever": "pipeline"},
}


def _decisions(trace) -> list[tuple]:  # noqa: ANN001
    return [(s.stage, s.decision, tuple(s.queries), s.draft, s.kept) for s in trace.steps]


@pytest.mark.parametrize("method", list(METHODS))
def test_decisions_match_between_in_process_and_server(
    method: str,
    base_config: PipelineConfig,
    server: LlamaServer,
    mirror: LlamaCppGenerator,
    hotpot_dev: list[dict],
) -> None:
    """The same questions through the server (OpenAI backend) and in-process: same steps, same decisions."""
    cfg = base_config.model_copy(update={"method": method, "params": METHODS[method]})
    remote_cfg = cfg.model_copy(
        update={
            "generator": cfg.generator.model_copy(update={"backend": "openai", "base_url": server.base_url})
        }
    )
    remote_pipe = Pipeline.from_config(remote_cfg, progress=False)
    # The in-process pipeline: the same parts, the mirror generator, a method instance of its own.
    method_obj = method_class(method)(cfg.params)
    parts = replace(remote_pipe.parts, generator=mirror, config=cfg, extras=dict(remote_pipe.parts.extras))
    method_obj.setup(parts)
    local_pipe = Pipeline(cfg, method_obj, parts)
    for row in hotpot_dev[:1]:
        a = local_pipe.answer(row["question"])
        b = remote_pipe.answer(row["question"])
        assert _decisions(a) == _decisions(b), f"{method}: decisions differ on {row['question']!r}"
        assert a.prediction == b.prediction and a.stop_reason == b.stop_reason
        assert a.counters.llm_calls == b.counters.llm_calls
        assert a.counters.generated_tokens == b.counters.generated_tokens
        assert a.counters.prompt_tokens == b.counters.prompt_tokens
        _assert_close(a.to_dict()["steps"], b.to_dict()["steps"])  # signal values (logprobs, counts) too
        print(f"\n{method}: {[s.decision for s in a.steps]} -> {a.prediction!r} (both backends)")


def test_dragin_reads_attention_on_llamacpp_as_on_transformers(
    base_config: PipelineConfig, hotpot_dev: list[dict]
) -> None:
    """DRAGIN on llama.cpp alone (generation, token entropies and the attention of its re-reads) and with
    ``generator.analysis_backend=hf`` (the re-reads on the same model loaded a second time in transformers): the
    first check judges the same draft with attention that agrees across the two engines."""
    gen_cfg = base_config.generator.model_copy(update={"backend": "llamacpp"})
    cfg = base_config.model_copy(update={"method": "dragin", "params": {}, "generator": gen_cfg})
    alone = Pipeline.from_config(cfg, progress=False)
    assert alone.parts.analyzer is None
    hybrid_cfg = cfg.model_copy(update={"generator": gen_cfg.model_copy(update={"analysis_backend": "hf"})})
    hybrid = Pipeline.from_config(hybrid_cfg, progress=False)
    assert hybrid.parts.generator.name == "llamacpp" and hybrid.parts.analyzer.name == "hf"
    question = hotpot_dev[0]["question"]
    traces = [alone.answer(question), hybrid.answer(question)]
    for trace in traces:
        c = trace.counters
        assert c.llm_calls["main"] >= 1 and c.llm_calls["probe"] >= 1  # a re-read per checked draft, at least
        assert c.prompt_tokens_evaluated["main"] < c.prompt_tokens["main"]  # llama.cpp's exemplar state
    firsts = []
    for trace in traces:
        checked = [s for s in trace.steps if s.signals.get("sentences")]
        assert checked, [s.reason for s in trace.steps]
        assert all(
            len(x["attention"]) == len(x["words"]) > 0 for s in checked for x in s.signals["sentences"]
        )
        firsts.append(checked[0].signals["sentences"])
    mine, theirs = firsts
    assert [x["words"] for x in mine] == [x["words"] for x in theirs]
    for a, b in zip(mine, theirs, strict=True):
        assert a["attention"] == pytest.approx(b["attention"], abs=0.02), (a["attention"], b["attention"])
    print(
        f"\nDRAGIN word attention, llama.cpp {mine[0]['attention']} vs transformers {theirs[0]['attention']}"
    )


def test_seakr_samples_on_llamacpp_and_reads_hidden_states_on_hf(
    base_config: PipelineConfig, hotpot_dev: list[dict]
) -> None:
    """SeaKR with ``generator.analysis_backend=hf``: the samples come from llama.cpp, their hidden states (at the
    middle layer of the transformers model) from a pass per sample over the kept prompt."""
    gen_cfg = base_config.generator.model_copy(update={"backend": "llamacpp", "analysis_backend": "hf"})
    params = {"samples": 3, "rerank": False, "final_stage": False}
    cfg = base_config.model_copy(update={"method": "seakr", "params": params, "generator": gen_cfg})
    pipe = Pipeline.from_config(cfg, progress=False)
    assert pipe.method.layer == pipe.parts.analyzer.model.config.get_text_config().num_hidden_layers // 2
    trace = pipe.answer(hotpot_dev[0]["question"])
    c = trace.counters
    assert c.llm_calls["sampler"] >= 3 and c.llm_calls["probe"] >= 3
    assert c.prompt_tokens_evaluated["probe"] < c.prompt_tokens["probe"] / 2  # the prompt's pass is kept
    eig = [t for s in trace.steps for t in s.triggers if t.signal == "eigen_score" and t.scores]
    assert eig and all(math.isfinite(t.scores[0]) for t in eig), [s.triggers for s in trace.steps]


def test_seakr_reads_hidden_states_on_llamacpp_as_transformers_does(
    base_config: PipelineConfig, hotpot_dev: list[dict]
) -> None:
    """SeaKR on llama.cpp alone: the hidden states of its samples come from the generating model's own pass, and
    they give the EigenScores that the same model in transformers gives (``analysis_backend=hf``)."""
    params = {"samples": 3, "rerank": False, "final_stage": False}
    gen_cfg = base_config.generator.model_copy(update={"backend": "llamacpp"})
    cfg = base_config.model_copy(update={"method": "seakr", "params": params, "generator": gen_cfg})
    pipe = Pipeline.from_config(cfg, progress=False)
    assert pipe.parts.analyzer is None and pipe.method.layer == 9  # the middle of Gemma's 18 blocks
    trace = pipe.answer(hotpot_dev[0]["question"])
    c = trace.counters
    assert c.llm_calls["sampler"] >= 3 and c.llm_calls["probe"] >= 3
    assert c.prompt_tokens_evaluated["probe"] < c.prompt_tokens["probe"] / 2  # the prompt's pass is kept
    hf_cfg = cfg.model_copy(update={"generator": gen_cfg.model_copy(update={"analysis_backend": "hf"})})
    hf_trace = Pipeline.from_config(hf_cfg, progress=False).answer(hotpot_dev[0]["question"])

    def eigen(t: Any) -> list[float]:
        return [x.scores[0] for s in t.steps for x in s.triggers if x.signal == "eigen_score" and x.scores]

    mine, theirs = eigen(trace), eigen(hf_trace)
    assert mine and all(math.isfinite(x) for x in mine)
    # the same samples (llama.cpp draws them either way), read by two engines: scores agree to a few percent
    first = min(len(mine), len(theirs))
    assert first >= 1 and mine[:first] == pytest.approx(theirs[:first], rel=0.05), (mine, theirs)
    print(f"\nSeaKR EigenScores, llama.cpp states {mine} vs transformers {theirs}")


def _assert_close(a: object, b: object, path: str = "steps") -> None:
    """Equal structures, floats within 1e-3 (timings excepted)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), path
        for k in a:
            if k != "seconds":
                _assert_close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, abs=1e-3), path
    else:
        assert a == b, path


def test_a_process_that_exits_with_a_model_open_prints_no_teardown_error() -> None:
    """A model left open at exit is freed before llama_cpp's module is torn down: no "Exception ignored in
    Llama.__del__" traceback on stderr."""
    import subprocess
    import sys

    code = (
        "from quco.config import GeneratorConfig\n"
        "from quco.llm.llamacpp import LlamaCppGenerator\n"
        "g = LlamaCppGenerator.from_config(GeneratorConfig(backend='llamacpp', threads=1))\n"
        "print(g.generate('The capital of France is', max_new_tokens=2)[0].text is not None)\n"
        # held by a module that is torn down after llama_cpp's, as a long-lived cache would hold it
        "import threading\n"
        "threading._quco_kept = [g]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("True")
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_closed_model_raises_and_a_pipeline_loads_it_again() -> None:
    """A closed model is freed: calling it raises a clear error (not a crash inside llama.cpp), and the next
    pipeline that asks for it gets a freshly loaded one, not the closed one (a bench that closes one method's
    model and builds the next method's pipeline crashed here)."""
    config = GeneratorConfig(backend="llamacpp", max_context_tokens=1024)  # a model no other test shares
    gen = shared_generator(config)
    prompt = "Question: Where is the Louvre?\nAnswer:"
    first = gen.generate(prompt, max_new_tokens=4, n=3, temperature=1.0, seed=3)  # the batched samplers too
    greedy = gen.generate(prompt, max_new_tokens=4)[0].text
    gen.close()
    gen.close()  # twice is harmless
    assert gen.closed
    with pytest.raises(LlamaCppError, match="was closed"):
        gen.generate(prompt, max_new_tokens=4)
    with pytest.raises(LlamaCppError, match="was closed"):
        gen.count_tokens(prompt)
    again = shared_generator(config)
    assert again is not gen and not again.closed
    try:
        assert again.generate(prompt, max_new_tokens=4)[0].text == greedy
        assert [g.text for g in again.generate(prompt, max_new_tokens=4, n=3, temperature=1.0, seed=3)] == [
            g.text for g in first
        ]
    finally:
        again.close()
