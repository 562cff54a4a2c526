"""The transformers generator on the real default model (Gemma-3-270m from PyPI), converted once and cached."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from quco.config import GeneratorConfig
from quco.errors import QucoError
from quco.llm import Capability, Generation, Generator, build_generator, hf
from quco.llm.base import cut_at_stop, cut_generation
from quco.paths import cache_dir
from support.prompts import check_reuse, run_prompts

EIFFEL = "The Eiffel Tower is located in"


@pytest.fixture(scope="session")
def gen() -> hf.HFGenerator:
    g = build_generator(GeneratorConfig())
    assert isinstance(g, hf.HFGenerator)
    return g


@pytest.fixture(scope="session")
def eiffel(gen: hf.HFGenerator) -> Generation:
    return gen.generate(EIFFEL, max_new_tokens=16, logprobs=True, entropy=True)[0]


def _check_aligned(g: Generation, scores: bool = True) -> None:
    assert "".join(g.tokens) == g.text
    assert len(g.tokens) == len(g.token_ids)
    if scores:
        assert g.logprobs is not None and g.entropies is not None
        assert len(g.logprobs) == len(g.entropies) == len(g.token_ids)
        assert all(math.isfinite(x) and x <= 0.0 for x in g.logprobs)
        assert all(math.isfinite(x) and x >= 0.0 for x in g.entropies)


# ------------------------------------------------------------------------------------------------------------
# Pure helpers (no model).


def test_cut_at_stop_keeps_the_straddling_token_shortened() -> None:
    pieces = [" Paris", ",", " France", "."]
    gen = Generation(
        text="".join(pieces), token_ids=[1, 2, 3, 4], tokens=pieces, logprobs=[-0.1, -0.2, -0.3, -0.4]
    )
    cut = cut_at_stop(gen, ["ance", "zzz"])
    assert (cut.text, cut.tokens, cut.token_ids, cut.logprobs) == (
        " Paris, Fr",
        [" Paris", ",", " Fr"],
        [1, 2, 3],
        [-0.1, -0.2, -0.3],
    )
    assert cut.finish_reason == "stop" and cut.entropies is None
    # a stop string that starts exactly on a token boundary drops that token entirely
    cut = cut_at_stop(gen, [" France"])
    assert (cut.text, cut.tokens, cut.token_ids) == (" Paris,", [" Paris", ","], [1, 2])
    assert cut_at_stop(gen, ["Lyon"]) is gen
    # the loop's cut keeps a straddling token whole
    assert cut_generation(gen, 10, shorten=False).tokens == [" Paris", ",", " France"]


def test_sampling_filters_keep_only_allowed_tokens() -> None:
    import torch

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).expand(4000, -1)
    rng = torch.Generator().manual_seed(0)
    drawn = hf._sample(logits, 1.0, 0.7, 0, rng)  # nucleus 0.7: tokens 0 and 1 (0.5 + 0.3 reaches it)
    assert set(drawn.tolist()) == {0, 1}
    assert 0.55 < (drawn == 0).float().mean().item() < 0.70  # renormalised: 0.5 / 0.8 = 0.625
    assert set(hf._sample(logits, 1.0, 1.0, 3, rng).tolist()) == {0, 1, 2}  # top-k 3
    assert set(hf._sample(logits, 1.0, 1.0, 0, rng).tolist()) == {0, 1, 2, 3}
    # a flat full-size vocabulary: the nucleus (half of it) is larger than the first top-k slices
    flat = torch.zeros(2, 262144)
    flat[:, :10] = -1e9  # ten impossible tokens
    drawn = hf._sample(flat, 1.0, 0.5, 0, rng)
    assert all(10 <= t < 262144 for t in drawn.tolist())
    logp = torch.log_softmax(flat, dim=-1)
    assert abs(hf._entropy(logp)[0].item() - math.log(262144 - 10)) < 1e-3


def test_incomplete_conversion_is_not_reused(tmp_path: Path) -> None:
    out = tmp_path / "m"
    out.mkdir()
    for name in ("config.json", "tokenizer_config.json", "tokenizer.json"):
        (out / name).write_text("{}")
    (out / hf._WEIGHTS).write_bytes(b"x" * 10)
    assert not hf._conversion_complete(out)  # no marker: a crash before the rename
    (out / hf._MARKER).write_text(json.dumps({"weights_bytes": 11}))
    assert not hf._conversion_complete(out)  # truncated weights
    (out / hf._MARKER).write_text(json.dumps({"weights_bytes": 10}))
    assert hf._conversion_complete(out)


def test_missing_model_directory_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(QucoError, match="does not exist"):
        build_generator(GeneratorConfig(model=str(tmp_path / "nope")))
    with pytest.raises(QucoError, match="no config.json"):
        build_generator(GeneratorConfig(model=str(tmp_path)))


# ------------------------------------------------------------------------------------------------------------
# The real model.


@pytest.mark.model
def test_protocol_and_capabilities(gen: hf.HFGenerator) -> None:
    assert isinstance(gen, Generator)
    assert gen.name == "hf"
    assert gen.max_context_tokens == GeneratorConfig().max_context_tokens
    assert {Capability.LOGPROBS, Capability.ENTROPY, Capability.ATTENTION, Capability.HIDDEN_STATES} <= set(
        gen.capabilities
    )
    assert gen.count_tokens("Hello world") == 2  # no BOS counted
    assert gen.count_tokens("") == 0


@pytest.mark.model
def test_greedy_is_deterministic_and_aligned(gen: hf.HFGenerator, eiffel: Generation) -> None:
    _check_aligned(eiffel)
    assert eiffel.finish_reason == "length" and len(eiffel.token_ids) == 16
    assert eiffel.tokens[0] == " Paris"  # the measured greedy answer of this model
    assert eiffel.prompt_tokens == gen.count_tokens(EIFFEL) + 1  # + BOS
    assert not eiffel.prompt_truncated
    again = gen.generate(EIFFEL, max_new_tokens=16, logprobs=True, entropy=True)[0]
    assert again.token_ids == eiffel.token_ids and again.logprobs == eiffel.logprobs
    plain = gen.generate(EIFFEL, max_new_tokens=16)[0]
    assert plain.text == eiffel.text and plain.logprobs is None and plain.entropies is None


@pytest.mark.model
def test_generate_scores_match_a_forward_pass(gen: hf.HFGenerator, eiffel: Generation) -> None:
    """Generation logprobs are the raw model's: a single forward pass over prompt + text gives the same."""
    a = gen.analyze(EIFFEL + eiffel.text, scores=True)
    n = len(eiffel.token_ids)
    assert a.token_ids[-n:] == eiffel.token_ids
    assert a.logprobs is not None and a.entropies is not None
    np.testing.assert_allclose(a.logprobs[-n:], eiffel.logprobs, atol=2e-3)
    np.testing.assert_allclose(a.entropies[-n:], eiffel.entropies, atol=2e-3)
    # greedy picks the most likely token, so its logprob is at least log(1/vocab) and beats the uniform entropy
    assert all(lp >= -math.log(262144) for lp in eiffel.logprobs)


@pytest.mark.model
def test_stop_string_cuts_inside_a_token_and_stops_early(gen: hf.HFGenerator, eiffel: Generation) -> None:
    assert eiffel.text.startswith(" Paris, France")
    g = gen.generate(EIFFEL, max_new_tokens=64, stop=["ance"], logprobs=True, entropy=True)[0]
    assert g.finish_reason == "stop"
    assert g.text == " Paris, Fr"
    assert g.tokens == [" Paris", ",", " Fr"]  # ' France' straddles the cut: kept, shortened
    assert g.token_ids == eiffel.token_ids[:3]
    assert g.logprobs == eiffel.logprobs[:3]
    _check_aligned(g)
    g = gen.generate(EIFFEL, max_new_tokens=64, stop=[",", "\n"])[0]
    assert (g.text, g.finish_reason, g.token_ids) == (" Paris", "stop", eiffel.token_ids[:1])


@pytest.mark.model
def test_length_and_eos_finish_reasons(gen: hf.HFGenerator) -> None:
    g = gen.generate(EIFFEL, max_new_tokens=3)[0]
    assert g.finish_reason == "length" and len(g.token_ids) == 3
    # After an in-context pattern of documents ending with <eos>, EOS is likely (p ~ 0.2 per sample): with a
    # fixed seed some of the samples end there. EOS is not part of the text or the tokens.
    prompt = "Comments are closed.<eos>Comments are closed.<eos>Comments are closed."
    outs = gen.generate(prompt, max_new_tokens=6, temperature=1.0, n=8, seed=7, logprobs=True, entropy=True)
    eos = [g for g in outs if g.finish_reason == "eos"]
    assert eos, [g.text for g in outs]
    for g in outs:
        _check_aligned(g)
        assert gen.tokenizer.eos_token_id not in g.token_ids
        assert g.finish_reason == "eos" or len(g.token_ids) == 6


@pytest.mark.model
def test_seeded_samples_are_reproducible_and_diverse(gen: hf.HFGenerator) -> None:
    prompts = [EIFFEL, "The capital of Japan is", "My favourite food is"]
    kw = dict(max_new_tokens=8, temperature=1.0, n=3, seed=1234, logprobs=True, entropy=True)
    first = [gen.generate(p, **kw) for p in prompts]
    second = gen.generate(prompts[1], **kw)  # same seed, same samples
    assert [g.token_ids for g in second] == [g.token_ids for g in first[1]]
    assert any(len({g.text for g in outs}) > 1 for outs in first)
    for outs in first:
        assert len(outs) == 3
        for g in outs:
            _check_aligned(g)
    other = gen.generate(prompts[2], **{**kw, "seed": 99})
    assert [g.token_ids for g in other] != [g.token_ids for g in first[2]]
    # nucleus / top-k sampling stays within the candidates they allow
    top1 = gen.generate(EIFFEL, max_new_tokens=4, temperature=1.0, top_k=1, n=2, seed=5)
    greedy = gen.generate(EIFFEL, max_new_tokens=4)[0]
    assert all(g.token_ids == greedy.token_ids for g in top1)
    tiny_p = gen.generate(EIFFEL, max_new_tokens=4, temperature=1.0, top_p=1e-6, seed=5)[0]
    assert tiny_p.token_ids == greedy.token_ids


@pytest.mark.model
def test_stop_when_ends_each_sample_where_it_says(gen: hf.HFGenerator) -> None:
    kw = dict(max_new_tokens=10, temperature=1.0, n=3, seed=21)
    full = gen.generate(EIFFEL, **kw)

    def three_words(text: str) -> bool:
        return len(text.split()) >= 3

    short = gen.generate(EIFFEL, stop_when=three_words, **kw)
    for s, f in zip(short, full, strict=True):
        assert f.text.startswith(s.text) and f.token_ids[: len(s.token_ids)] == s.token_ids
        if len(f.text.split()) > 3:
            assert s.finish_reason == "stop" and len(s.text.split()) == 3 and len(s.token_ids) < 10


@pytest.mark.model
def test_analyze_shapes(gen: hf.HFGenerator, hotpot_dev: list[dict]) -> None:
    text = hotpot_dev[0]["context_paragraphs"][0]["text"]
    a = gen.analyze(text, attention_layer=-1, hidden_layers=(0, 5, -1), scores=True)
    seq = len(a.token_ids)
    assert seq == gen.count_tokens(text) + 1
    assert "".join(a.tokens) == text
    assert a.attention is not None and a.attention.shape == (seq, seq)
    np.testing.assert_allclose(a.attention.sum(axis=1), 1.0, atol=1e-4)
    assert np.allclose(np.triu(a.attention, k=1), 0.0)  # causal: nothing attends to the future
    assert set(a.hidden) == {0, 5, -1}
    assert all(h.shape == (seq, 640) for h in a.hidden.values())
    assert not np.allclose(a.hidden[0], a.hidden[-1])
    assert a.logprobs is not None and a.entropies is not None
    assert len(a.logprobs) == len(a.entropies) == seq and a.logprobs[0] == 0.0
    assert all(x <= 0 for x in a.logprobs) and all(x >= 0 for x in a.entropies)
    bare = gen.analyze(text)
    assert bare.attention is None and bare.hidden == {} and bare.logprobs is None
    with pytest.raises(QucoError, match="attention_layer"):
        gen.analyze(text, attention_layer=18)


@pytest.mark.model
def test_long_prompt_is_left_truncated(gen: hf.HFGenerator, hotpot_dev: list[dict]) -> None:
    paragraphs = [p["text"] for row in hotpot_dev[:10] for p in row["context_paragraphs"]]
    prompt = "\n".join(paragraphs)[:20000] + "\nQuestion: " + hotpot_dev[0]["question"] + "\nAnswer:"
    assert len(prompt) > 20000
    # a shorter context window than the default keeps this test fast; it still exceeds the 512-token sliding
    # window of Gemma-3, so the sliding-window cache is exercised
    small = hf.HFGenerator(gen.model, gen.tokenizer, max_context_tokens=1024)
    g = small.generate(prompt, max_new_tokens=8, logprobs=True, entropy=True)[0]
    assert g.prompt_truncated and g.prompt_tokens == 1024 - 8
    _check_aligned(g)
    assert len(g.token_ids) >= 1
    with pytest.raises(QucoError, match="max_new_tokens"):
        small.generate(prompt, max_new_tokens=1024)


@pytest.mark.model
def test_conversion_cache_is_reused(gen: hf.HFGenerator, eiffel: Generation, monkeypatch) -> None:
    out = cache_dir() / "models" / "gemma3-270m-hf"
    for name in ("config.json", "model.safetensors", "tokenizer.json", hf._MARKER):
        assert (out / name).is_file(), name
    assert gen.load_source in ("converted", "cache")

    def no_gguf(*_args, **_kwargs):
        raise AssertionError("the GGUF path ran although the conversion cache exists")

    monkeypatch.setattr(hf, "_convert_gguf", no_gguf)
    monkeypatch.setattr(hf, "default_gguf_path", no_gguf)
    again = build_generator(GeneratorConfig())
    assert again.load_source == "cache"
    g = again.generate(EIFFEL, max_new_tokens=4)[0]
    assert g.token_ids == eiffel.token_ids[:4]


@pytest.mark.model
def test_fast_tokenizer_matches_autotokenizer(gen: hf.HFGenerator, hotpot_dev: list[dict]) -> None:
    """The cache is read with a plain fast tokenizer (3x quicker to load); it must encode as AutoTokenizer does."""
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(str(cache_dir() / "models" / "gemma3-270m-hf"))
    texts = [row["question"] for row in hotpot_dev[:50]] + ["", "Żuławski 東京 😀\n\n\tx", "a<eos>b"]
    for text in texts:
        ids = ref(text)["input_ids"]
        assert gen.tokenizer(text)["input_ids"] == ids
        assert gen.tokenizer.decode(ids, skip_special_tokens=True) == ref.decode(
            ids, skip_special_tokens=True
        )
    assert (gen.tokenizer.bos_token_id, gen.tokenizer.eos_token_id) == (ref.bos_token_id, ref.eos_token_id)


@pytest.mark.model
def test_token_pieces_match_the_exact_decoding(gen: hf.HFGenerator, hotpot_dev: list[dict]) -> None:
    """Pieces come from a sliding decode window; they must equal decoding every prefix, multi-byte text included."""
    texts = [p["text"] for p in hotpot_dev[1]["context_paragraphs"]] + [
        "Żuławski 東京 😀😀\n\n\tx  y",
        "日本語 𓀀𓀁 end",
    ]
    for text in texts:
        ids = gen.tokenizer(text)["input_ids"]
        pieces, decoded = hf._pieces(gen.tokenizer, ids)
        assert (pieces, decoded) == hf._pieces_exact(gen.tokenizer, ids)
        assert "".join(pieces) == decoded == text
    rare = gen.tokenizer("𓀀", add_special_tokens=False)[
        "input_ids"
    ]  # a hieroglyph: four byte-fallback tokens
    assert len(rare) == 4
    assert hf._pieces(gen.tokenizer, rare)[0] == ["", "", "", "𓀀"]  # the completing token carries it


def test_prefix_reuse_gives_identical_tokens_and_scores_in_any_order(
    gen: hf.HFGenerator, hotpot_dev: list[dict]
) -> None:
    """The exemplars' saved cache stands in for their forward pass exactly: tokens, logprobs and entropies are
    bit-identical to evaluating every prompt from scratch, in any order and after unrelated prompts, with
    fewer prompt tokens evaluated; greedy copies evaluate nothing more."""
    prompts = run_prompts(hotpot_dev)
    kw = {"max_new_tokens": 6, "logprobs": True, "entropy": True}
    assert all(p.shared > 0 for p in prompts)
    gen.clear_cache()
    check_reuse(gen, prompts, **kw)
    copies = gen.generate(prompts[1], n=3, max_new_tokens=2)
    assert copies[0].prompt_tokens_evaluated < copies[0].prompt_tokens - 450
    assert [g.prompt_tokens_evaluated for g in copies[1:]] == [0, 0]
    gen.shared_prefix = False  # one forward pass for the whole prompt
    try:
        whole = gen.generate(prompts[1], max_new_tokens=2)[0]
    finally:
        gen.shared_prefix = True
    assert whole.prompt_tokens_evaluated == whole.prompt_tokens


def test_analysis_after_a_shared_context_reuses_it_exactly(
    gen: hf.HFGenerator, hotpot_dev: list[dict]
) -> None:
    """SeaKR's pattern: many continuations of one prompt, each analysed for hidden states. The exemplars and
    the whole prompt are forward passes of their own whose caches and states are kept; a continuation then
    evaluates only its own tokens, and another prompt with the same exemplars only what follows them. The
    states equal a fresh evaluation's bit for bit, and one pass over the whole text's up to float noise."""
    from quco.llm.base import Prompt, shared_levels

    prompts = run_prompts(hotpot_dev)
    contexts = [prompts[1], prompts[3]]  # two questions, the same exemplars
    steps = [" Scott Derrickson is American.", " Ed Wood was born in 1924."]
    layers = (0, 9, -1)

    def text(context: Prompt, step: str) -> Prompt:
        return Prompt(context + step, shared=len(context), inner=shared_levels(context))

    gen.clear_cache()
    gen.reuse = False
    try:
        fresh = [[gen.analyze(text(c, s), hidden_layers=layers) for s in steps] for c in contexts]
    finally:
        gen.reuse = True
    assert all(a.evaluated == len(a.token_ids) for row in fresh for a in row)
    gen.clear_cache()
    for c, context in enumerate(contexts):
        for i in (1, 0):
            got = gen.analyze(text(context, steps[i]), hidden_layers=layers)
            want = fresh[c][i]
            assert got.token_ids == want.token_ids
            for layer in layers:
                assert got.hidden[layer].shape == (len(got.token_ids), want.hidden[layer].shape[1])
                assert np.array_equal(got.hidden[layer], want.hidden[layer]), (c, i, layer)
            if i == 0:  # the prompt's cache stands in: only the continuation is evaluated
                assert got.evaluated < 20
            elif c == 1:  # a new prompt: its exemplars (about 530 tokens) come from the first one's
                assert len(got.token_ids) - 450 > got.evaluated > 20
    whole = gen.analyze(contexts[0] + steps[0], hidden_layers=layers)  # a plain string: one pass
    assert whole.evaluated is None and whole.token_ids == fresh[0][0].token_ids
    for layer in layers:
        assert np.allclose(whole.hidden[layer], fresh[0][0].hidden[layer], atol=1e-3, rtol=1e-3), layer
