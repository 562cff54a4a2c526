"""Black-box uncertainty: estimators over sampled texts and the pairwise similarities they are computed from.

Pure numpy estimators (``estimators``), ROUGE-L for lexical similarity (``rouge``), and the similarity
backends (``similarity``): Jaccard, sentence-embedding cosine, an NLI cross-encoder, the LLM as judge.
"""

from quco.signals.sampled.estimators import (
    ESTIMATORS,
    affinity,
    deg_mat,
    eccentricity,
    eig_val_laplacian,
    estimate,
    lexical_similarity,
    normalized_laplacian,
    num_sem_sets,
)
from quco.signals.sampled.rouge import rouge_l, rouge_tokens
from quco.signals.sampled.similarity import (
    DEFAULT_NLI_MODEL,
    JUDGE_PROMPT,
    SIMILARITIES,
    EmbeddingSimilarity,
    JaccardSimilarity,
    JudgeSimilarity,
    NLISimilarity,
    PairScores,
    SampleSimilarity,
    dedupe,
    jaccard_matrix,
    yes_no_from_logprobs,
    yes_no_probability,
)

__all__ = [
    "DEFAULT_NLI_MODEL",
    "ESTIMATORS",
    "JUDGE_PROMPT",
    "SIMILARITIES",
    "EmbeddingSimilarity",
    "JaccardSimilarity",
    "JudgeSimilarity",
    "NLISimilarity",
    "PairScores",
    "SampleSimilarity",
    "affinity",
    "dedupe",
    "deg_mat",
    "eccentricity",
    "eig_val_laplacian",
    "estimate",
    "jaccard_matrix",
    "lexical_similarity",
    "normalized_laplacian",
    "num_sem_sets",
    "rouge_l",
    "rouge_tokens",
    "yes_no_from_logprobs",
    "yes_no_probability",
]
