"""DRAGIN: retrieve when an important word is uncertain (RIND), query with the words the model attends to.

As in ``AttnWeightRAG`` of oneal2000/DRAGIN (current version): draft a continuation from exemplars +
question + text (no passages); re-read it to get each word's attention score; per sentence, value =
normalised attention x entropy x number of words; the first sentence with a value over the threshold is
flagged (the sentence stating the answer is checked too, as both DRAGIN's and QuCo-RAG's code do). With ``check_real_words`` only content words of the
flagged sentence count as "hit" words for the query. The query (``real_words``) is the top-k content words of
question + text by the attention the hit words pay them. Retrieve, regenerate, keep the first sentence.

Signals and query are in ``quco.signals.attention``. Differences forced by our seams, stated so a reader can
weigh them: the re-read starts with the tokenizer's BOS (which takes the attention sink that DRAGIN's
BOS-less re-read gives to the first generated token), and the attention map arrives averaged over heads, so
"max over later positions" is taken after the head average rather than before it.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import numpy as np
from pydantic import Field

from quco.engine.context import RunContext
from quco.engine.method import Check, Draft, Method, MethodParams, Shape
from quco.llm.base import Capability
from quco.signals import spans
from quco.signals.attention import (
    forward_attention,
    max_attention_received,
    mean_per_group,
    rind_values,
    sum_per_group,
    top_k_in_order,
)
from quco.signals.spans import candidate_sentences
from quco.signals.words import content_words, is_content
from quco.trigger_record import TriggerRecord, score

log = logging.getLogger(__name__)


class DraginParams(MethodParams):
    # A sentence is flagged when any word's value exceeds this. Published 0.6-1.5: 1.0 (2WikiMultihopQA) and
    # 1.3 (HotpotQA) in QuCo-RAG's configs.
    threshold: float = Field(1.0, gt=0)
    # Words kept in the query (``retrieve_keep_top_k``): 25 (2WikiMultihopQA), 35 (HotpotQA).
    keep_top_k: int = Field(25, ge=1)
    query: Literal["real_words", "current", "current_wo_wrong", "forward_all", "last_sentence"] = "real_words"
    check_real_words: bool = True  # only content words of the flagged sentence are hit words
    # The paper's RIND multiplies by a stop-word indicator before thresholding; the code does not (False).
    trigger_on_content_words: bool = False
    weight: Literal["entropy", "neg_logprob"] = "entropy"  # "neg_logprob" is the published attn_prob variant
    # The published modifier scores every sentence of the draft, the one stating the answer included.
    scan_answer_sentence: bool = True
    attention_layer: int = -1  # the last layer


class DRAGIN(Method):
    name = "dragin"
    description = "DRAGIN: attention x entropy over content words; attention-selected query."
    Params = DraginParams
    SHAPE = Shape(
        draft_logprobs=True,
        draft_docs="none",
        needs=frozenset({Capability.TEXT, Capability.LOGPROBS, Capability.ENTROPY, Capability.ATTENTION}),
    )

    params: DraginParams

    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        p = self.params
        gen = draft.generation
        if gen is None or gen.entropies is None or gen.logprobs is None:
            return Check.accept(draft.text, "no token scores for this text")
        nlp = ctx.parts.text.nlp()
        sentences = draft.sentences

        # Re-read the generated tokens alone: the attention each word receives from later positions.
        analysis = ctx.analyze(gen.text, attention_layer=p.attention_layer)
        if "".join(analysis.tokens) != gen.text:
            log.warning("re-read tokens do not spell the generated text; word positions may be off")
        words = spans.group_words(analysis.tokens)
        received = max_attention_received(analysis.attention)
        word_att = sum_per_group(received, [w.tokens for w in words])
        owner = spans.assign(spans.token_positions(gen.tokens), [(w.start, w.end) for w in words])
        weights = gen.entropies if p.weight == "entropy" else [-v for v in gen.logprobs]
        word_weight = mean_per_group(weights, spans.group_by(owner, len(words)))

        per_sentence = spans.words_by_sentence(words, spans.locate(gen.text, sentences))
        candidates: list[dict[str, Any]] = []
        for si, sentence, ws in candidate_sentences(sentences, per_sentence, not p.scan_answer_sentence):
            values = rind_values(word_att[ws], word_weight[ws])
            if p.trigger_on_content_words:
                real = content_words(sentence, nlp)
                values = values * np.array([is_content(words[w].text, real) for w in ws], dtype=float)
            candidates.append(
                {
                    "sentence": si,
                    "text": sentence,
                    "words": [words[w].text for w in ws],
                    "attention": [score(a) for a in word_att[ws]],
                    p.weight: [score(e) for e in word_weight[ws]],
                    "values": [score(v) for v in values],
                    "score": float(values.max()),
                }
            )
        record = TriggerRecord.decide(
            "rind", "above", p.threshold, [c["score"] for c in candidates], "sentence", weight=p.weight
        )
        for c in candidates:
            c["score"] = score(c["score"])
        at = record.fired_at
        signals: dict[str, Any] = {"sentences": candidates}
        if at is None:
            return Check.accept(draft.text, f"no word value exceeds {p.threshold:g}", signals, record)
        flagged = candidates[at]
        si = flagged["sentence"]
        ws_flagged = per_sentence[si]
        over = [v > p.threshold for v in flagged["values"]]
        hit = list(over)
        if p.check_real_words:
            real = content_words(sentences[si], nlp)
            hit = [h and is_content(words[w].text, real) for h, w in zip(hit, ws_flagged, strict=True)]
        flagged["hit"] = hit
        ptext = " ".join(sentences[:si])
        curr_words = [words[w].text for w in ws_flagged]
        query = self._query(question, draft.prefix, ptext, curr_words, hit, over, ctx, nlp, signals)
        if not query.strip():
            query = sentences[si]
            signals["query_fallback"] = "the query rule produced no words; the flagged sentence is the query"
        top = int(np.argmax(flagged["values"]))
        return Check.retrieve(
            ptext,
            [query],
            f"sentence {si}: word '{flagged['words'][top]}' value {flagged['values'][top]:g} > {p.threshold:g}",
            signals,
            record,
        )

    def _query(
        self,
        question: str,
        prefix: str,
        ptext: str,
        curr_words: list[str],
        hit: list[bool],
        over: list[bool],
        ctx: RunContext,
        nlp: Any,
        signals: dict[str, Any],
    ) -> str:
        p = self.params
        forward_all = " ".join(s for s in (question, prefix, ptext) if s)
        if p.query == "current":
            return " ".join(curr_words)
        if p.query == "current_wo_wrong":
            return " ".join(w for w, h in zip(curr_words, hit, strict=True) if not h)
        if p.query == "forward_all":
            return forward_all
        if p.query == "last_sentence":
            sents = ctx.parts.text.splitter.split(forward_all)
            return sents[-1] if sents else ""
        # real_words: what the hit words attend to in question + text, content words only.
        curr_text = " ".join(curr_words)
        all_text = f"{forward_all} {curr_text}"
        analysis = ctx.analyze(all_text, attention_layer=p.attention_layer)
        words = spans.group_words(analysis.tokens)
        curr_start = len(forward_all) + 1
        curr_idx = [i for i, w in enumerate(words) if w.start >= curr_start]
        hits = [curr_idx[j] for j, h in enumerate(hit) if h and j < len(curr_idx)]
        if not hits:  # no content word among the hit words: use every over-threshold word instead
            hits = [curr_idx[j] for j, h in enumerate(over) if h and j < len(curr_idx)]
            signals["query_hits"] = "no content word over the threshold; all over-threshold words used"
        scores = forward_attention(analysis.attention, [w.tokens for w in words], hits)
        real = content_words(all_text, nlp)
        hit_set = set(hits)
        eligible = [i not in hit_set and is_content(w.text, real) for i, w in enumerate(words)]
        top = top_k_in_order(scores, eligible, p.keep_top_k)
        signals["query_words"] = [{"word": words[i].text, "attention": score(scores[i])} for i in top]
        return " ".join(words[i].text for i in top)
