"""Black-box triggers: estimators against hand-computed values, similarity backends on real HotpotQA
sentences, the check and the loop with the real default model, cost counters, and threshold calibration."""

from __future__ import annotations

import gzip
import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from quco.errors import ConfigError
from quco.llm.base import Generation
from quco.paths import data_dir
from quco.signals.sampled import (
    EmbeddingSimilarity,
    JaccardSimilarity,
    JudgeSimilarity,
    NLISimilarity,
    affinity,
    dedupe,
    deg_mat,
    eccentricity,
    eig_val_laplacian,
    estimate,
    jaccard_matrix,
    lexical_similarity,
    normalized_laplacian,
    num_sem_sets,
    rouge_l,
    rouge_tokens,
    yes_no_from_logprobs,
    yes_no_probability,
)
from quco.signals.sampled.similarity import load_sentence_model, nli_label_ids

HOTPOT_DEV = "hotpotqa/hotpot_dev_0_300_unified.jsonl"
HOTPOT_CORPUS = "hotpotqa/corpus/hotpot_dev_first500_pooled_paragraphs.jsonl.gz"


@pytest.fixture(scope="module")
def hotpot_rows() -> list[dict]:
    path = data_dir() / HOTPOT_DEV
    assert path.is_file(), f"evaluation data missing: {path} (set QUCO_DATA_DIR)"
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in itertools.islice(fh, 5)]


@pytest.fixture(scope="module")
def real_sentences(hotpot_rows: list[dict]) -> dict[str, str]:
    """A few real context sentences of the first HotpotQA dev questions, by title."""
    return {title: sents[0].strip() for row in hotpot_rows for title, sents in row["context"]}


# -- estimators: hand-computed values ------------------------------------------------------------------------
# Normalised Laplacian L = I - D^-1/2 W D^-1/2. Values below are worked out on paper from its eigenvalues.


def _all(w: np.ndarray, threshold: float = 0.5) -> tuple[float, float, float, int]:
    return eig_val_laplacian(w), deg_mat(w), eccentricity(w), num_sem_sets(w, np.full_like(w, threshold))


def test_all_samples_identical():
    # W = J (all ones, n = 4): L = I - J/4 has eigenvalues 0, 1, 1, 1.
    # EigV = (1-0) + 0 + 0 + 0 = 1; DegMat = 1 - 16/16 = 0; Ecc keeps only the constant eigenvector -> 0.
    eigv, deg, ecc, sets = _all(np.ones((4, 4)))
    assert eigv == pytest.approx(1.0)
    assert deg == pytest.approx(0.0)
    assert ecc == pytest.approx(0.0, abs=1e-12)
    assert sets == 1
    assert lexical_similarity(["Paris is in France."] * 4) == pytest.approx(-1.0)


def test_all_samples_different():
    # W = I (n = 3): L = 0, every eigenvalue 0. EigV = 3; DegMat = 1 - 3/9 = 2/3.
    # Ecc keeps all three (0 < 0.9): ||V - mean||_F^2 = 3 - ||V^T 1||^2 / 3 = 3 - 1 = 2 -> sqrt(2).
    eigv, deg, ecc, sets = _all(np.eye(3))
    assert eigv == pytest.approx(3.0)
    assert deg == pytest.approx(2 / 3)
    assert ecc == pytest.approx(math.sqrt(2))
    assert sets == 3
    assert lexical_similarity(["alpha beta", "gamma delta", "epsilon zeta"]) == pytest.approx(0.0)


def test_single_sample():
    eigv, deg, ecc, sets = _all(np.array([[1.0]]))
    assert (eigv, deg, ecc, sets) == (pytest.approx(1.0), pytest.approx(0.0), pytest.approx(0.0), 1)
    assert lexical_similarity(["only one"]) == -1.0  # no pair: counted as full agreement


def test_two_clusters_of_two():
    # W = blockdiag(J2, J2): L = blockdiag(I - J/2, I - J/2), eigenvalues 0, 0, 1, 1.
    # EigV = 2; DegMat = 1 - 8/16 = 0.5; Ecc: zero eigenspace spanned by (1,1,0,0)/sqrt2, (0,0,1,1)/sqrt2,
    # ||V^T 1||^2 = 2 + 2 = 4 -> ||V - mean||_F^2 = 2 - 4/4 = 1.
    w = np.kron(np.eye(2), np.ones((2, 2)))
    eigv, deg, ecc, sets = _all(w)
    assert eigv == pytest.approx(2.0)
    assert deg == pytest.approx(0.5)
    assert ecc == pytest.approx(1.0)
    assert sets == 2


def test_pair_and_singleton():
    # W = [[1,1,0],[1,1,0],[0,0,1]]: D = diag(2,2,1); L = blockdiag([[.5,-.5],[-.5,.5]], [0]) -> 0, 1, 0.
    # EigV = 1 + 0 + 1 = 2; DegMat = 1 - 5/9 = 4/9; Ecc: zero eigenspace (1,1,0)/sqrt2, (0,0,1):
    # ||V^T 1||^2 = 2 + 1 = 3 -> 2 - 3/3 = 1.
    w = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=float)
    eigv, deg, ecc, sets = _all(w)
    assert eigv == pytest.approx(2.0)
    assert deg == pytest.approx(4 / 9)
    assert ecc == pytest.approx(1.0)
    assert sets == 2


@pytest.mark.parametrize(
    ("a", "eigv", "deg", "ecc", "sets"),
    [
        # W = [[1,a],[a,1]]: D = (1+a) I, L = [[a,-a],[-a,a]]/(1+a), eigenvalues 0 and 2a/(1+a).
        # a = 0.5: 2a/(1+a) = 2/3 < 0.9, both eigenvectors kept, ||V - mean||^2 = 2 - 2/2 = 1.
        (0.5, 1 + 1 / 3, 0.25, 1.0, 2),  # W = 0.5 is not > 0.5: two sets
        # a = 0.9: 2a/(1+a) = 18/19 >= 0.9, only the constant eigenvector kept -> Ecc 0; EigV = 1 + 1/19.
        (0.9, 1 + 1 / 19, 0.05, 0.0, 1),
    ],
)
def test_two_samples(a: float, eigv: float, deg: float, ecc: float, sets: int):
    w = np.array([[1.0, a], [a, 1.0]])
    got = _all(w)
    assert got[0] == pytest.approx(eigv)
    assert got[1] == pytest.approx(deg)
    assert got[2] == pytest.approx(ecc, abs=1e-12)
    assert got[3] == sets


def test_eccentricity_threshold_decides_which_eigenvectors_count():
    w = np.array([[1.0, 0.5], [0.5, 1.0]])  # eigenvalues 0 and 2/3
    assert eccentricity(w, threshold=0.9) == pytest.approx(1.0)
    assert eccentricity(w, threshold=0.5) == pytest.approx(0.0, abs=1e-12)


def test_num_sem_sets_needs_entailment_in_both_directions_and_links_transitively():
    # 0 <-> 1 both ways, 1 -> 2 only one way: {0,1}, {2}.
    e = np.array([[0.9, 0.8, 0.1], [0.7, 0.9, 0.8], [0.1, 0.2, 0.9]])
    c = np.array([[0.0, 0.1, 0.5], [0.1, 0.0, 0.1], [0.5, 0.6, 0.0]])
    assert num_sem_sets(e, c) == 2
    # Chain 0 <-> 1 <-> 2 with 0 and 2 unrelated: one connected component, as the published code counts.
    e2 = np.array([[1.0, 0.9, 0.0], [0.9, 1.0, 0.9], [0.0, 0.9, 1.0]])
    c2 = np.array([[0.0, 0.0, 0.9], [0.0, 0.0, 0.0], [0.9, 0.0, 0.0]])
    assert num_sem_sets(e2, c2) == 1
    assert num_sem_sets(np.zeros((5, 5)), np.ones((5, 5))) == 5


def test_affinity_from_directed_scores():
    e = np.array([[1.0, 0.6], [0.2, 1.0]])
    c = np.array([[0.0, 0.3], [0.5, 0.0]])
    assert affinity(e, c, "entail") == pytest.approx(np.array([[1.0, 0.4], [0.4, 1.0]]))
    # 1 - C = [[1, .7], [.5, 1]] -> symmetrised off-diagonal 0.6
    assert affinity(e, c, "contra") == pytest.approx(np.array([[1.0, 0.6], [0.6, 1.0]]))
    # DegMat with the entail affinity: 1 - (1 + 1 + .4 + .4)/4 = 0.3
    assert estimate("deg_mat", ["x", "y"], e, c) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="contradiction matrix"):
        affinity(e, None, "contra")


def test_spectral_estimators_match_the_published_formulas_on_random_matrices():
    """The published formulas written out literally (inverse of sqrt(D), general eig) agree with ours."""
    rng = np.random.default_rng(7)
    for n in (2, 3, 5, 10):
        for _ in range(5):
            a = rng.uniform(0.0, 1.0, (n, n))
            w = (a + a.T) / 2
            np.fill_diagonal(w, 1.0)
            d = np.diag(w.sum(axis=1))
            d_inv_sqrt = np.linalg.inv(np.sqrt(d))
            lap = np.eye(n) - d_inv_sqrt @ w @ d_inv_sqrt
            assert normalized_laplacian(w) == pytest.approx(lap)
            values, vectors = np.linalg.eig(lap)
            values, vectors = values.real, vectors.real
            assert eig_val_laplacian(w) == pytest.approx(sum(max(0.0, 1 - v) for v in values))
            assert deg_mat(w) == pytest.approx(np.trace(n - d) / n**2)
            kept = vectors[:, values < 0.9].T
            ecc = np.linalg.norm([np.linalg.norm(x - x.mean(0), 2) for x in kept], 2) if len(kept) else 0.0
            assert eccentricity(w) == pytest.approx(ecc)


def test_estimate_dispatch_and_errors():
    w = np.array([[1.0, 0.7], [0.7, 1.0]])
    assert estimate("num_sem_sets", ["a", "b"], w) == 1.0  # 0.7 > set_threshold 0.5
    assert estimate("num_sem_sets", ["a", "b"], w, set_threshold=0.8) == 2.0
    assert estimate("eccentricity", ["a", "b"], w) == pytest.approx(eccentricity(w))
    assert estimate("lexical_similarity", ["a b", "a b"]) == -1.0
    with pytest.raises(ValueError, match="unknown estimator"):
        estimate("entropy", ["a"], np.eye(1))
    with pytest.raises(ValueError, match="square"):
        deg_mat(np.ones((2, 3)))


# -- ROUGE-L -------------------------------------------------------------------------------------------------


def test_rouge_l_by_hand():
    # LCS("the cat sat on the mat", "the cat is on the mat") = 5 of 6 tokens each -> F = 5/6.
    assert rouge_l("the cat sat on the mat", "the cat is on the mat") == pytest.approx(5 / 6)
    # Porter stemming of tokens longer than 3 characters, punctuation dropped, lower-cased.
    assert rouge_tokens("Running dogs!") == ["run", "dog"]
    assert rouge_l("Running dogs!", "run dog") == pytest.approx(1.0)
    # "a b c" vs "a b d": LCS 2 of 3 -> 2/3; both unrelated to "x y z": mean over 3 pairs = 2/9.
    assert lexical_similarity(["a b c", "a b d", "x y z"]) == pytest.approx(-2 / 9)
    assert rouge_l("", "anything") == 0.0
    # P = 2/2, R = 2/4 -> F = 2/3 (asymmetric lengths, symmetric F)
    assert rouge_l("born in Warsaw Poland", "Warsaw Poland") == pytest.approx(2 / 3)
    assert rouge_l("Warsaw Poland", "born in Warsaw Poland") == pytest.approx(2 / 3)


# -- similarity backends on real sentences -------------------------------------------------------------------


def test_dedupe_keeps_first_seen_order():
    unique, inverse = dedupe(["b", "a", "b", "c", "a"])
    assert unique == ["b", "a", "c"]
    assert inverse.tolist() == [0, 1, 0, 2, 1]


def test_jaccard_on_real_sentences(real_sentences: dict[str, str]):
    derrickson = real_sentences["Scott Derrickson"]
    bates = real_sentences["Tyler Bates"]
    samples = [derrickson, bates, derrickson, "", ""]
    w = JaccardSimilarity().scores(samples).entail
    a, b = set(derrickson.lower().split()), set(bates.lower().split())
    assert w[0, 1] == pytest.approx(len(a & b) / len(a | b))
    assert 0 < w[0, 1] < 1  # both are "(born ...) is an American ..." sentences
    assert w[0, 2] == 1.0 and (w[0] == w[2]).all()  # duplicates score identically
    assert np.diag(w).tolist() == [1.0] * 5
    # Two empty samples: the published pairwise formula gives 0 (no words); the backend scores identical
    # samples once, so they count as identical (1), as the NLI path of LM-Polygraph also does.
    assert jaccard_matrix(["", ""])[0, 1] == 0.0
    assert w[3, 4] == 1.0
    # Words are split on whitespace only: "1966)" and "1966" differ, as in the published code.
    assert jaccard_matrix(["born 1966", "born 1966)"])[0, 1] == pytest.approx(1 / 3)


@pytest.fixture(scope="module")
def embedder() -> EmbeddingSimilarity:
    return EmbeddingSimilarity()


def test_embedding_similarity_on_real_sentences(
    embedder: EmbeddingSimilarity, real_sentences: dict[str, str]
):
    film = real_sentences["Ed Wood (film)"]
    clause = film.split(",")[0]  # "Ed Wood is a 1994 American biographical ... Tim Burton"
    other = real_sentences["Woodson, Arkansas"]
    samples = [film, clause, other, film]
    scores = embedder.scores(samples)
    w = scores.entail
    assert scores.unique == 3 and scores.contra is None
    assert w.shape == (4, 4) and np.allclose(w, w.T) and np.allclose(np.diag(w), 1.0)
    assert ((w >= 0) & (w <= 1)).all()
    assert w[0, 1] > 0.7 > w[0, 2]  # a sentence and its first clause vs an unrelated sentence
    assert w[0, 3] == pytest.approx(1.0)
    model = embedder.load()
    v = model.encode([film, other], normalize_embeddings=True)
    assert w[0, 2] == pytest.approx(max(0.0, float(v[0] @ v[1])), abs=1e-5)
    # Loaded once per process: a second backend reuses the same model object.
    assert EmbeddingSimilarity().load() is model
    assert load_sentence_model.cache_info().currsize >= 1


@pytest.fixture(scope="module")
def tiny_nli_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer BERT cross-encoder with 3 NLI labels and random weights, and the bundled MiniLM tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from quco.signals.sampled.similarity import bundled_embedding_model

    out = tmp_path_factory.mktemp("tiny-nli")
    tokenizer = AutoTokenizer.from_pretrained(bundled_embedding_model())
    tokenizer.save_pretrained(out)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
        num_labels=3,
        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
        label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2},
    )
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(out)
    return out


def test_nli_similarity_scores_ordered_pairs_of_unique_samples(tiny_nli_dir: Path, real_sentences: dict):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    a, b, c = real_sentences["Scott Derrickson"], real_sentences["Tyler Bates"], real_sentences["Janet Waldo"]
    samples = [a, b, a, c, b]
    nli = NLISimilarity(str(tiny_nli_dir), batch_size=4)
    scores = nli.scores(samples)
    assert scores.unique == 3 and scores.model_calls == 9  # 3 distinct samples -> 3 x 3 ordered pairs
    e, con = scores.entail, scores.contra
    assert e.shape == con.shape == (5, 5)
    assert ((e > 0) & (e < 1) & (con > 0) & (con < 1) & (e + con < 1)).all()  # three-way softmax
    assert (e[0] == e[2]).all() and (e[:, 1] == e[:, 4]).all()  # duplicates expanded, not rescored
    # Direction: entail[i, j] is P(entailment | premise i, hypothesis j), computed here independently.
    tok = AutoTokenizer.from_pretrained(tiny_nli_dir)
    net = AutoModelForSequenceClassification.from_pretrained(tiny_nli_dir).eval()
    with torch.inference_mode():
        probs = torch.softmax(net(**tok([a], [b], return_tensors="pt")).logits, -1)[0]
    assert e[0, 1] == pytest.approx(float(probs[2]), abs=1e-5)
    assert con[0, 1] == pytest.approx(float(probs[0]), abs=1e-5)
    assert e[0, 1] != pytest.approx(e[1, 0], abs=1e-7)  # premise/hypothesis order matters
    # All estimators run on it; DegMat by hand from the matrix.
    w = (e + e.T) / 2
    assert estimate("deg_mat", samples, e, con) == pytest.approx(1 - w.mean())


def test_nli_label_names():
    assert nli_label_ids({0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}) == (2, 0)
    assert nli_label_ids({0: "entailment", 1: "neutral", 2: "contradiction"}) == (0, 2)
    assert nli_label_ids({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, "label_2", "LABEL_0") == (2, 0)
    with pytest.raises(ConfigError, match="nli_entail_label"):
        nli_label_ids({0: "LABEL_0", 1: "LABEL_1"})


def test_nli_model_that_cannot_be_loaded_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot load the NLI model"):
        NLISimilarity(str(tmp_path / "no-such-model")).scores(["a", "b"])


def test_yes_no_probability_of_a_judge_answer():
    yes = Generation(text=" Yes", tokens=[" Yes"], token_ids=[1], logprobs=[math.log(0.8)])
    assert yes_no_probability(yes) == pytest.approx((0.8, 0.2))
    no = Generation(text=" no.", tokens=[" no."], token_ids=[1], logprobs=[math.log(0.6)])
    assert yes_no_probability(no) == pytest.approx((0.4, 0.6))
    assert yes_no_probability(Generation(text=" Maybe", tokens=[" Maybe"], logprobs=[-0.1])) is None
    assert yes_no_probability(Generation(text=" NO", tokens=[" NO"])) == (0.0, 1.0)  # no logprobs: certain
    alternatives = {" Yes": math.log(0.3), " No": math.log(0.1), " The": math.log(0.5)}
    top = Generation(text=" The", tokens=[" The"], logprobs=[math.log(0.5)], top_logprobs=[alternatives])
    assert yes_no_probability(top) == pytest.approx((0.75, 0.25))


def test_yes_no_from_logprobs_renormalises_over_the_two_words():
    assert yes_no_from_logprobs(math.log(0.3), math.log(0.1)) == pytest.approx((0.75, 0.25))
    assert yes_no_from_logprobs(-2.0, -2.0) == pytest.approx((0.5, 0.5))
    assert yes_no_from_logprobs(-1e6, 0.0) == pytest.approx((0.0, 1.0))


def test_judge_asks_each_ordered_pair_of_distinct_samples_once():
    asked: list[str] = []

    def judge(prompt: str) -> tuple[float, float] | None:
        # A deterministic judge: "yes" when both statements mention the same year, no answer for "made".
        asked.append(prompt)
        a, b = (line for line in prompt.splitlines()[-3:-1])
        if "made" in a:
            return None
        return (0.9, 0.1) if a[-5:-1] == b[-5:-1] else (0.2, 0.8)

    samples = ["born in 1966.", "born in 1966.", "made in 1994.", "born in 1965."]
    scores = JudgeSimilarity(judge).scores(samples)
    assert scores.model_calls == len(asked) == 3 * 2  # 3 distinct samples, both directions, no self-pairs
    assert scores.unique == 3 and scores.unparsed == 2  # "made ..." as premise: neither yes nor no
    assert all(p.endswith("\nAnswer:") and "A: born in 1966.\nB: made in 1994." in p for p in asked[:1])
    assert np.diag(scores.entail).tolist() == [1.0] * 4
    assert scores.entail[0, 1] == 1.0  # duplicates
    assert scores.entail[0, 2] == 0.2 and scores.contra[0, 2] == 0.8
    assert scores.entail[2, 0] == 0.0 and scores.contra[2, 0] == 0.0  # unparsed: neutral
    assert estimate("num_sem_sets", samples, scores.entail, scores.contra) == 3.0


# -- calibration (pure parts) --------------------------------------------------------------------------------


def test_threshold_for_rate_with_ties():
    from quco.eval.calibrate.search import fire_rate, threshold_for_rate

    scores = [1.0, 1.0, 2.0, 3.0]  # NumSemSets-like: integer scores with ties
    assert threshold_for_rate(scores, 0.5) == 1.0 and fire_rate(scores, 1.0) == 0.5
    assert threshold_for_rate(scores, 0.25) == 2.0
    assert threshold_for_rate(scores, 0.0) == 3.0 and fire_rate(scores, 3.0) == 0.0
    low = threshold_for_rate(scores, 1.0)
    assert low < 1.0 and fire_rate(scores, low) == 1.0
    # 0.4 is closer to 0.5 (θ = 1) than to 0.25 (θ = 2)
    assert threshold_for_rate(scores, 0.4) == 1.0
    # Equally close: the higher θ (fewer retrievals) wins.
    assert threshold_for_rate([0.1, 0.2], 0.25) == 0.2


def test_check_score_of_recorded_triggers():
    from quco.errors import QucoError
    from quco.eval.calibrate.search import check_score, fire_rate, threshold_for_rate
    from quco.trigger_record import TriggerRecord

    def rec(rule: str, scores: list) -> TriggerRecord:
        return TriggerRecord.decide("u", rule, 0.0, scores, "sentence")

    assert check_score(rec("above", [0.2, 0.7, 0.1])) == 0.7
    assert check_score(rec("abs_above", [0.2, -0.9])) == 0.9
    # a "below" rule (QuCo-RAG's counts) is decided by its smallest score, an unknown one has none
    assert check_score(rec("below", [20.0, None, 3.0])) == 3.0
    assert check_score(rec("at_least", [0.2, 0.5])) == 0.5
    with pytest.raises(QucoError, match="rule 'always'"):
        check_score(rec("always", [0.2]))
    # rates for a "below" rule: the share of scores strictly below θ
    counts = [0.0, 5.0, 50.0, 500.0]
    assert threshold_for_rate(counts, 0.5, "below") == 50.0 and fire_rate(counts, 50.0, "below") == 0.5
    assert fire_rate(counts, threshold_for_rate(counts, 0.0, "below"), "below") == 0.0
    assert fire_rate(counts, threshold_for_rate(counts, 1.0, "below"), "below") == 1.0


def test_best_candidate_prefers_em_then_fewer_retrievals():
    from quco.eval.calibrate.search import Candidate, best_candidate

    cands = [
        Candidate(2.0, em=0.30, retrieval_rate=0.2, retrievals_per_question=1.0, llm_calls_per_question=40),
        Candidate(1.0, em=0.35, retrieval_rate=0.6, retrievals_per_question=3.0, llm_calls_per_question=45),
        Candidate(1.5, em=0.35, retrieval_rate=0.4, retrievals_per_question=2.0, llm_calls_per_question=42),
    ]
    assert best_candidate(cands).threshold == 1.5


def test_write_threshold_keeps_the_config_and_its_comments(tmp_path: Path):
    from quco.config import load_config
    from quco.eval.calibrate.search import write_threshold

    src = Path(__file__).resolve().parents[1] / "configs" / "blackbox" / "eccentricity-jaccard.yaml"
    path = tmp_path / "ecc.yaml"
    path.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    before = path.read_text(encoding="utf-8").splitlines()
    write_threshold(path, 1.2345, "calibrated: rate 0.5 on hotpotqa questions 0:100")
    after = path.read_text(encoding="utf-8").splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 1 and changed[0][1].strip().startswith("threshold: 1.2345  # calibrated")
    cfg = load_config(path)
    assert cfg.params["threshold"] == 1.2345 and cfg.params["estimator"] == "eccentricity"
    # A config without params.threshold gets one; a file without params gets the block.
    bare = tmp_path / "bare.yaml"
    bare.write_text("method: blackbox\nparams:\n  estimator: deg_mat\n", encoding="utf-8")
    write_threshold(bare, 0.25, "note")
    assert load_config(bare).params == {"threshold": 0.25, "estimator": "deg_mat"}
    empty = tmp_path / "empty.yaml"
    empty.write_text("method: blackbox\n", encoding="utf-8")
    write_threshold(empty, -0.5, "note")
    assert load_config(empty).params == {"threshold": -0.5}


def test_every_blackbox_config_is_valid():
    from quco.config import load_config
    from quco.methods import method_class

    configs = sorted((Path(__file__).resolve().parents[1] / "configs" / "blackbox").glob("*.yaml"))
    control = load_config(configs.pop(configs.index(configs[0].parent / "random-sentence.yaml")))
    assert control.method == "random" and control.params["unit"] == "sentence"
    assert len(configs) == 17  # 4 estimators x 4 similarities + lexical similarity
    for path in configs:
        cfg = load_config(path)
        method = method_class(cfg.method)(cfg.params)
        assert method.params.threshold is not None, path.name
        assert method.params.n_samples == 10 and method.params.temperature == 1.0


def test_blackbox_params_are_validated():
    from quco.methods.blackbox import DEFAULT_THRESHOLDS, BlackBoxRAG

    assert BlackBoxRAG().threshold == DEFAULT_THRESHOLDS["eccentricity"]
    with pytest.raises(ConfigError, match="params.estimator"):
        BlackBoxRAG({"estimator": "entropy"})
    with pytest.raises(ConfigError, match="params.n_samples"):
        BlackBoxRAG({"n_samples": 0})
    with pytest.raises(ConfigError, match="params.simlarity"):
        BlackBoxRAG({"simlarity": "jaccard"})


# -- the check and the loop with the real default model ---------------------------------------------------------

N = 3  # samples per check in the model tests (small, to keep them fast)


@pytest.fixture(scope="module")
def slice_titles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """The first 200 real HotpotQA paragraphs (they cover dev questions 0-19) as a JSONL corpus in tmp."""
    src = data_dir() / HOTPOT_CORPUS
    assert src.is_file(), f"evaluation data missing: {src} (set QUCO_DATA_DIR)"
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        lines = list(itertools.islice(fh, 200))
    path = tmp_path_factory.mktemp("bb-corpus") / "hotpot_slice.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    return path, {json.loads(line)["title"] for line in lines}


@pytest.fixture(scope="module")
def pipe(slice_titles: tuple[Path, set[str]], tmp_path_factory: pytest.TempPathFactory):
    """One pipeline on the default model (loaded once); tests swap in the method they need."""
    from quco.config import load_config
    from quco.pipeline import Pipeline

    corpus, _ = slice_titles
    cfg = load_config(
        None,
        method="blackbox",
        overrides={
            "params.n_samples": N,
            "params.sentence_tokens": 12,
            "retriever.corpus": str(corpus),
            "retriever.index_dir": str(tmp_path_factory.mktemp("bb-index") / "bm25"),
            "retriever.top_k": 2,
            "prompt.fewshot": 1,
            "generation.max_new_tokens": 24,
            "generation.max_steps": 2,
        },
    )
    return Pipeline.from_config(cfg, progress=False)


def _use(pipe, **params):  # noqa: ANN001, ANN202
    from quco.methods.blackbox import BlackBoxRAG

    base = {"n_samples": N, "sentence_tokens": 12}
    pipe.method = BlackBoxRAG(base | params)
    pipe.method.setup(pipe.parts)
    return pipe.method


@pytest.mark.model
def test_check_counts_every_sample_and_judge_call(pipe, hotpot_rows: list[dict], real_sentences: dict):
    from quco.engine.context import RunContext
    from quco.engine.method import Draft
    from quco.prompts import build_prompt
    from quco.trace import Trace

    method = _use(pipe, estimator="num_sem_sets", similarity="jaccard", threshold=1.0)
    question = hotpot_rows[0]["question"]
    ctx = RunContext(parts=pipe.parts, trace=Trace(question=question, method=method.name))
    prompt = build_prompt(question, pipe.parts.exemplars, pipe.parts.template)
    gen = ctx.generate(prompt, max_new_tokens=12)[0]
    draft = Draft(gen.text.strip(), pipe.parts.text.splitter.split(gen.text), gen, prefix="", prompt=prompt)

    check = method.check(draft, question, ctx)
    sig = check.signals
    m = sig["unique"]
    counters = ctx.trace.counters
    assert sig["n"] == len(sig["samples"]) == N and 1 <= m <= N
    assert counters.llm_calls == {"main": 1, "sampler": N}
    assert counters.generated_tokens["sampler"] >= N  # every sample's tokens are counted
    u = check.triggers[0].scores[0]
    assert 1 <= u <= m and check.fire == (u > 1.0) and check.triggers[0].signal == "num_sem_sets"
    # Same seed, same question, same prefix: the same samples again (a rerun is reproducible).
    assert method.sample(draft, question, ctx) == sig["samples"]
    assert counters.llm_calls["sampler"] == 2 * N
    # Stopping samples after their first sentence gives the same samples (fewer tokens: see the next test).
    gen_cfg = pipe.parts.config.generation
    budget, gen_cfg.max_new_tokens = gen_cfg.max_new_tokens, 64  # room for a second sentence
    try:
        got = {
            stop: _use(pipe, sentence_tokens=64, sample_stop=stop).sample(draft, question, ctx)
            for stop in ("length", "sentence")
        }
    finally:
        gen_cfg.max_new_tokens = budget
    assert got["sentence"] == got["length"]

    # The judge on real sentences, both scoring modes: every judgement is counted as it is made.
    a, b = real_sentences["Scott Derrickson"], real_sentences["Tyler Bates"]
    method = _use(pipe, estimator="num_sem_sets", similarity="judge")
    u, info = method.score([a, b, a], ctx)
    # Forced scoring: one scoring pass for " yes" and one for " no" per ordered pair of distinct samples.
    assert info == {"unique": 2, "judge_pairs": 2} and counters.llm_calls["judge"] == 4
    assert u in (1.0, 2.0)  # NumSemSets of two distinct sentences
    by_token = _use(pipe, similarity="judge", judge_scoring="generate")._judge(ctx).scores([a, b])
    assert by_token.model_calls == 2 and counters.llm_calls["judge"] == 4 + 2
    assert ((by_token.entail >= 0) & (by_token.entail <= 1)).all()
    assert counters.llm_calls == {"main": 1, "sampler": 4 * N, "judge": 6}


def test_first_sentence_done_waits_for_a_whole_word_of_the_next_sentence():
    from quco.methods.blackbox import first_sentence_done
    from quco.text.sentences import SpacySentenceSplitter

    splitter = SpacySentenceSplitter()
    calls: list[str] = []

    def split(text: str) -> list[str]:
        calls.append(text)
        return splitter.split(text)

    def stops_at(text: str) -> str | None:
        done, grown = first_sentence_done(split), ""
        for word in text.split(" "):
            grown += " " + word
            if done(grown):
                return grown
        return None

    assert stops_at("He was born in 1950. So the answer is yes.") == " He was born in 1950. So the"
    assert calls == ["He was born in 1950. So"]  # the splitter runs only once a boundary has a word after it
    # abbreviations and initials are not boundaries: the sentence goes on
    assert stops_at("Edward L. Cahn directed it. The film") == " Edward L. Cahn directed it. The film"
    assert stops_at("Dr. Smith was born in the U.S. Army base in Ohio. He") is None
    assert stops_at("Paris\nThe") == " Paris\nThe"  # a new line ends the first line's sentence
    assert not first_sentence_done(split)("\n ")


@pytest.mark.model
def test_sentence_stop_keeps_the_first_sentences_and_saves_tokens(pipe):
    from quco.methods.blackbox import first_sentence_done

    split = pipe.parts.text.splitter.split
    prompt = "Question: Were Scott Derrickson and Ed Wood of the same nationality?\nAnswer:"
    kw = dict(max_new_tokens=40, temperature=1.0, n=4, seed=3, stop=["\n"])
    full = pipe.parts.generator.generate(prompt, **kw)
    short = pipe.parts.generator.generate(prompt, stop_when=first_sentence_done(split), **kw)
    assert [split(g.text)[0] for g in short] == [split(g.text)[0] for g in full]
    assert any(len(split(g.text)) > 1 for g in full)  # some samples went on past their first sentence ...
    assert sum(len(g.token_ids) for g in short) < sum(len(g.token_ids) for g in full)  # ... and now stop


@pytest.mark.model
def test_loop_end_to_end_on_two_hotpotqa_questions(pipe, hotpot_rows: list[dict], slice_titles):
    _, titles = slice_titles
    runs = [
        ({"estimator": "eccentricity", "similarity": "jaccard", "threshold": 1.0}, hotpot_rows[0]),
        # DegMat is >= 0, so a threshold of -1 fires on every sentence: the retrieval path runs for sure.
        ({"estimator": "deg_mat", "similarity": "embedding", "threshold": -1.0}, hotpot_rows[1]),
    ]
    for params, row in runs:
        _use(pipe, **params)
        trace = pipe.answer(row["question"])
        assert trace.prediction.strip(), trace.to_json()
        steps = [s for s in trace.steps if s.stage == "generate"]
        checks = [s for s in steps if s.triggers]
        fired = [s for s in checks if s.decision == "retrieve"]
        assert checks, trace.to_json()
        c = trace.counters
        # Cost accounting: each check drew N samples; each draft and each regeneration is one main call.
        assert c.llm_calls["sampler"] == N * len(checks)
        assert c.llm_calls["main"] == len(steps) + len(fired)
        assert c.retrievals == len(fired) and c.retrieval_calls == len(fired)
        for s in checks:
            sig = s.signals
            assert sig["estimator"] == params["estimator"] and sig["n"] == N == len(sig["samples"])
            record = s.triggers[0]
            assert (s.decision == "retrieve") == (record.scores[0] > params["threshold"])
            assert (
                record.rule == "above" and record.threshold == params["threshold"] and len(record.scores) == 1
            )
            if s.decision == "retrieve":
                # The temporary sentence is the query; one without a word falls back to the question.
                assert s.queries == ([s.draft] if re.search(r"\w", s.draft) else [row["question"]])
                assert s.retrieved and {r.title for r in s.retrieved} <= titles
                assert s.kept and s.kept in s.regenerated
            else:
                assert s.kept == s.draft
        if params["threshold"] < 0:
            assert fired == checks
            assert c.seconds.get("similarity", 0) > 0


@pytest.mark.model
def test_calibrate_on_a_question_writes_the_threshold(pipe, hotpot_rows: list[dict], tmp_path: Path):
    from quco.eval.calibrate.search import calibrate, fire_rate, write_threshold

    _use(pipe, estimator="eig_val_laplacian", similarity="jaccard", threshold=1.5)
    result = calibrate(pipe, "hotpotqa", offset=0, limit=1, target="rate", rate=0.5)
    assert result.questions == 1 and result.scores
    assert all(1.0 - 1e-9 <= u <= N + 1e-9 for u in result.scores)  # EigV lies in [1, n]
    assert result.predicted_rate == fire_rate(result.scores, result.threshold)
    config = tmp_path / "eigv.yaml"
    config.write_text("method: blackbox\nparams:\n  estimator: eig_val_laplacian\n  threshold: 1.5\n")
    write_threshold(config, result.threshold, "calibrated: rate 0.5 on hotpotqa questions 0:1")
    from quco.config import load_config

    assert load_config(config).params["threshold"] == result.threshold


def test_calibrate_command_rejects_bad_input_in_one_line(tmp_path: Path):
    from typer.testing import CliRunner

    from quco.eval.cli.calibrate import calibrate_app

    config = tmp_path / "c.yaml"
    config.write_text("method: blackbox\n", encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(calibrate_app, ["--config", str(config), "--questions", "5:2", "--dry-run"])
    assert result.exit_code == 2 and "--questions 5:2 selects no question" in result.output
    result = runner.invoke(calibrate_app, ["--config", str(config), "--questions", "a:b"])
    assert result.exit_code == 2 and "START:END" in result.output
    result = runner.invoke(calibrate_app, ["--config", str(config), "--target", "f1"])
    assert result.exit_code == 2 and "unknown calibration target 'f1'" in result.output


@pytest.mark.model
def test_calibrate_from_a_recorded_pass_matches_fresh_passes(pipe, tmp_path: Path):
    """One never-retrieving pass with recorded samples calibrates every estimator as its own pass would."""
    from quco.errors import QucoError
    from quco.eval.calibrate.search import calibrate, scores_from_run
    from quco.eval.run.runner import EvalOptions, Questions, run_eval

    _use(pipe, estimator="eig_val_laplacian", similarity="jaccard", threshold=math.inf)
    run_dir = tmp_path / "pass"
    run_eval(pipe, "hotpotqa", Questions(limit=1), EvalOptions(out_dir=run_dir, progress=False))

    def config(**params):  # noqa: ANN003, ANN202
        return pipe.config.model_copy(update={"params": pipe.config.params | params})

    # A graph estimator other than the pass's own, and the lexical one (each fresh calibration is a whole pass).
    for estimator in ("deg_mat", "lexical_similarity"):
        _use(pipe, estimator=estimator, similarity="jaccard")
        fresh = calibrate(pipe, "hotpotqa", offset=0, limit=1, target="rate", rate=0.5)
        scores, questions, span = scores_from_run(run_dir, config(estimator=estimator))
        assert (questions, span) == (1, "0:1")
        assert scores == pytest.approx(fresh.scores, abs=1e-6) and len(scores) >= 1  # traces keep 6 decimals

    # A pass recorded in two parts calibrates as one (the command takes --from-run once per part).
    from typer.testing import CliRunner

    from quco.config import load_config
    from quco.eval.calibrate.search import threshold_for_rate
    from quco.eval.cli.calibrate import calibrate_app

    _use(pipe, estimator="eig_val_laplacian", similarity="jaccard", threshold=math.inf)
    second = tmp_path / "pass-2"
    run_eval(pipe, "hotpotqa", Questions(offset=1, limit=1), EvalOptions(out_dir=second, progress=False))
    cfg_file, written = tmp_path / "eigv.yaml", tmp_path / "calibrated.yaml"
    cfg_file.write_text(yaml.safe_dump(config().model_dump(mode="json")), encoding="utf-8")
    parts = [scores_from_run(d, config())[0] for d in (run_dir, second)]
    out = CliRunner().invoke(
        calibrate_app,
        ["-c", str(cfg_file), "--from-run", str(run_dir), "--from-run", str(second), "--out", str(written)],
    )
    assert out.exit_code == 0, out.output
    theta = threshold_for_rate(parts[0] + parts[1], 0.5)
    assert (
        f"threshold {theta:.6g}" in out.output
        and f"{len(parts[0]) + len(parts[1])} decisions of 2" in out.output
    )
    note = written.read_text(encoding="utf-8")
    assert "questions 0:1 (recorded pass pass), 1:2 (recorded pass pass-2)" in note
    assert load_config(written).params["threshold"] == pytest.approx(theta)

    with pytest.raises(QucoError, match="n_samples"):
        scores_from_run(run_dir, config(n_samples=N + 1))
    with pytest.raises(QucoError, match="LLM-judge"):
        scores_from_run(run_dir, config(similarity="judge"))
    retrieved = tmp_path / "retrieved"
    retrieved.mkdir()
    (retrieved / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    rec = json.loads((run_dir / "results.jsonl").read_text().splitlines()[0])
    rec["trace"]["steps"][-1]["decision"] = "retrieve"
    (retrieved / "results.jsonl").write_text(json.dumps(rec) + "\n")
    with pytest.raises(QucoError, match="threshold=.inf"):
        scores_from_run(retrieved, config())
