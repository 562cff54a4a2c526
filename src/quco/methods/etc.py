"""ETC (Entropy-Trend Constraint): retrieve when word uncertainty starts to rise, not when it is already high.

As in pkuserc/ETC (``ETC.hallucination_check``, ``generate_retrieve_qry``): draft a continuation from exemplars
+ question + text (no passages) and re-read prompt + draft; per generated word, entropy = max over its
sub-tokens; the first- and second-order differences of content-word entropies, dynamically smoothed (M), are
weighted by the largest attention the word pays to any generated word (normalised to the sentence length).
The first word whose value exceeds the threshold (``thres_abs``: whose |value| does) flags its sentence; the
text before that word is kept. The query is the top-k content words of the question and the text written so
far by the attention the flagged words pay them. Retrieve, regenerate, keep the first sentence.

The signal functions are in ``quco.signals.trend``. As with DRAGIN, the attention map arrives averaged over
heads from our generator seam, which matches ETC (it averages over heads first).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from pydantic import Field

from quco.engine.context import RunContext
from quco.engine.method import Check, Draft, Method, MethodParams, Shape
from quco.llm.base import Capability
from quco.signals import spans
from quco.signals.attention import max_per_group, top_k_in_order
from quco.signals.trend import (
    entropy_differences,
    max_attention_to_new,
    sentence_values,
    smooth_second_order,
    word_attention,
)
from quco.signals.words import content_words, is_content
from quco.trigger_record import TriggerRecord, crosses, score


class ETCParams(MethodParams):
    # QuCo-RAG's ETC baseline defaults to 0.5; the ETC repository's example config (Llama-3-8B, IIRC) uses 1.3.
    threshold: float = Field(0.5, gt=0)
    thres_abs: bool = False  # compare |value| with the threshold
    keep_top_k: int = Field(35, ge=1)  # words kept in the query (``retrieve_keep_top_k``)
    attention_layer: int = -1


log = logging.getLogger(__name__)


class ETC(Method):
    name = "etc"
    description = "ETC: trend (1st/2nd differences) of word entropies, attention-weighted."
    Params = ETCParams
    SHAPE = Shape(
        draft_logprobs=True,
        draft_docs="none",
        needs=frozenset({Capability.TEXT, Capability.ENTROPY, Capability.ATTENTION}),
    )

    params: ETCParams

    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        p = self.params
        gen = draft.generation
        if gen is None or gen.entropies is None or not draft.prompt:
            return Check.accept(draft.text, "no token scores for this text")
        nlp = ctx.parts.text.nlp()
        prompt = draft.prompt
        full = prompt + gen.text
        analysis = ctx.analyze(full, attention_layer=p.attention_layer)
        if "".join(analysis.tokens) != full:
            log.warning("re-read tokens do not spell prompt + draft; word positions may be off")
        words = spans.group_words(analysis.tokens, split_punct=True)
        new = [i for i, w in enumerate(words) if w.start >= len(prompt)]
        new_words = [words[i] for i in new]
        owner = spans.assign(
            spans.token_positions(gen.tokens, len(prompt)), [(w.start, w.end) for w in new_words]
        )
        entropy = max_per_group(gen.entropies, spans.group_by(owner, len(new_words)))
        real = content_words(gen.text, nlp)
        content = [is_content(w.text, real) for w in new_words]
        s1, s2 = entropy_differences(entropy, content)
        smoothed = smooth_second_order(s2)
        max_att = max_attention_to_new(analysis.attention, [w.tokens for w in new_words])

        sentence_spans = [
            None if s is None else (s[0] + len(prompt), s[1] + len(prompt))
            for s in spans.locate(gen.text, draft.sentences)
        ]
        per_sentence = spans.words_by_sentence(new_words, sentence_spans)
        rule = "abs_above" if p.thres_abs else "above"
        candidates: list[dict[str, Any]] = []
        for si, ws in enumerate(per_sentence):
            if not ws:
                continue
            values = sentence_values(max_att[ws], smoothed[ws])
            recorded = [score(v) for v in values]
            candidates.append(
                {
                    "sentence": si,
                    "text": draft.sentences[si],
                    "words": [new_words[w].text for w in ws],
                    "content": [content[w] for w in ws],
                    "entropy": [score(entropy[w]) for w in ws],
                    "s1": [score(s1[w]) for w in ws],
                    "s2": [score(s2[w]) for w in ws],
                    "m": [score(smoothed[w]) for w in ws],
                    "attention": [score(max_att[w]) for w in ws],
                    "values": recorded,
                    "score": max((abs(v) for v in recorded), default=0.0) if p.thres_abs else max(recorded),
                }
            )
        record = TriggerRecord.decide(
            "entropy_trend", rule, p.threshold, [c["score"] for c in candidates], "sentence"
        )
        at = record.fired_at
        signals: dict[str, Any] = {"sentences": candidates}
        if at is None:
            return Check.accept(draft.text, f"no word value exceeds {p.threshold:g}", signals, record)
        flagged = candidates[at]
        flagged_ws = per_sentence[flagged["sentence"]]
        thres = [crosses(v, p.threshold, rule) for v in flagged["values"]]
        first = thres.index(True)
        k = flagged_ws[first]  # index among the generated words
        keep = full[len(prompt) : new_words[k].start].strip()
        rows = [new[flagged_ws[j]] for j in range(first, len(flagged_ws)) if thres[j]]
        query = self._query(question, prompt, full, words, new, k, rows, analysis.attention, nlp, signals)
        if not query.strip():
            query = draft.sentences[flagged["sentence"]]
            signals["query_fallback"] = "the query rule produced no words; the flagged sentence is the query"
        signals["flagged_word"] = new_words[k].text
        signals["kept_before"] = keep  # the draft up to the flagged word; the regeneration continues it
        why = (
            f"sentence {flagged['sentence']}: word '{new_words[k].text}' value "
            f"{flagged['values'][first]:g} {'|>|' if p.thres_abs else '>'} {p.threshold:g}"
        )
        return Check.retrieve(keep, [query], why, signals, record)

    def _query(
        self,
        question: str,
        prompt: str,
        full: str,
        words: list[Any],
        new: list[int],
        k: int,
        rows: list[int],
        attention: np.ndarray,
        nlp: Any,
        signals: dict[str, Any],
    ) -> str:
        """Top-k content words of the question and of the text so far, by the flagged words' attention."""
        marker = f"Question: {question}\nAnswer:"
        at = prompt.rfind(marker)
        q_start = at + len("Question: ") if at >= 0 else len(prompt)
        q_end = q_start + len(question) if at >= 0 else len(prompt)
        text_start = at + len(marker) if at >= 0 else len(prompt)
        text_end = words[new[k]].start
        cols = [
            i
            for i, w in enumerate(words)
            if (q_start <= w.start < q_end) or (text_start <= w.start < text_end)
        ]
        w2w = word_attention(attention, [words[r].tokens for r in rows], [words[c].tokens for c in cols])
        scores = w2w.sum(axis=0)
        real = content_words(full, nlp)
        eligible = [is_content(words[c].text, real) for c in cols]
        top = top_k_in_order(scores, eligible, self.params.keep_top_k)
        signals["query_words"] = [{"word": words[cols[i]].text, "attention": score(scores[i])} for i in top]
        return " ".join(words[cols[i]].text for i in top)
