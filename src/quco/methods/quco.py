"""QuCo-RAG: retrieval decided by pre-training-corpus statistics instead of model confidence.

Stage 1 (before generation): the question's entities are counted in the corpus; if their mean count is
below ``entity_threshold`` the question is rare knowledge, so retrieve with the question.
Stage 2 (after generation): the continuation is scanned sentence by sentence; each sentence's
(head, relation, tail) claims are checked — a 3-tuple whose head and tail never co-occur
(count < ``cooccurrence_threshold``), or a 2-tuple whose head is rare (count < ``head_threshold``), flags the
sentence; retrieval uses "head relation", the model regenerates, the first sentence is kept and the rest is
re-checked without a new call. Defaults are the published code's (see docs/methods.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import Field

from quco.engine.context import RunContext
from quco.engine.method import Check, Decision, Draft, Method, MethodParams, Shape
from quco.llm.base import StopWhen
from quco.signals.corpus import (
    COOCCURRENCE,
    HEAD_COUNT,
    Claim,
    claim_flagged,
    claim_records,
    count_record,
    count_value,
    entity_rarity,
)
from quco.text.base import Triplet
from quco.text.stopping import read_through_done
from quco.trigger_record import TriggerRecord

# Sentences a chat model adds around an answer carry no claim: the published ``filter_invalid_sentences`` list,
# matched in the lower-cased sentence, on every generation (drafts and regenerations).
CHATTY_PHRASES = (
    "happy to help",
    "here's the",
    "i'd be happy",
    "i'm happy to",
    "sure,",
    "certainly",
    "of course",
    "let me help",
    "i can help",
    "here are the",
    "here is the",
    "let me provide",
    "i'll help",
    "glad to help",
)
# A sentence that disclaims knowledge is dropped and ends the scan: the published ``not_strings``, matched
# case-sensitively as published ("No information", but not "no information").
NEGATION_PHRASES = (
    "does not",
    "not provide",
    "not mention",
    "not available",
    "not include",
    "not specif",
    "not explicitly",
    "not publicly",
    "No information",
)
ANSWER_MARK = (
    "the answer is"  # a sentence containing it is kept and ends the scan (case-sensitive, as published)
)


@dataclass
class Verdict:
    """Stage 2's finding on one judged sentence: what the trace shows, its counted claims, and (when it fires)
    the queries and why."""

    detail: dict[str, Any]
    claims: list[Claim] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    reason: str = ""
    draw: float | None = None  # the random control's draw for the sentence


class QuCoParams(MethodParams):
    # Stage 1: mean corpus count of the question's entities below this => retrieve with the question.
    # Published: 100000 for HotpotQA, 1000 for 2WikiMultihopQA, on a 4.6T-token index.
    entity_threshold: float = 100000
    # How the entities' counts become the one stage-1 score: "mean" (published) or "min" (ours: the rarest
    # entity decides, so one common word in the question cannot hide a rare name).
    entity_aggregate: Literal["mean", "min"] = "mean"
    # "count": thresholds are absolute counts; "per_billion": occurrences per billion tokens of the index,
    # so a threshold set on the hosted index transfers to a local index of another size.
    threshold_unit: Literal["count", "per_billion"] = "count"
    stage1: bool = True
    stage2: bool = True
    question_query: Literal["direct", "key_terms"] = "direct"
    # Stage 2: a 2-tuple's head counted below this is flagged; a 3-tuple's head/tail co-occurrence below
    # this is flagged (published: 20 and 1, i.e. zero co-occurrence).
    head_threshold: float = 20
    cooccurrence_threshold: float = 1
    # The stage-2 query per flagged claim: "head relation" (published), the whole claim, the flagged sentence,
    # or (ours) the question followed by "head relation".
    sentence_query: Literal[
        "head_relation", "full_triplet", "original_sentence", "question_head_relation"
    ] = "head_relation"
    # The stage-2 passages replace the passages the regeneration reads (published), or (ours) go before them.
    stage2_passages: Literal["replace", "merge"] = "replace"
    max_queries: int = Field(-1, ge=-1)  # -1 (or 0): every flagged claim becomes a query
    negation_phrases: list[str] = Field(default_factory=lambda: list(NEGATION_PHRASES))
    chatty_phrases: list[str] = Field(default_factory=lambda: list(CHATTY_PHRASES))
    # Negation and answer phrases are matched as written (published); False matches them in any case.
    case_sensitive: bool = True
    # A negation sentence is dropped and the outer loop goes on (published); True ends generation there.
    negation_stops: bool = False
    # The published loop puts the stage-1 passages into the first draft only and later drafts carry none (the
    # stage-2 passages inform their regeneration); True puts the latest passages into every draft.
    carry_passages: bool = False
    # Ours: end each draft and regeneration once the sentence stating the answer is complete. The published loop
    # generates the whole budget and reads nothing after that sentence, so answers, decisions and kept text are
    # the same; only the unread tokens are saved (docs/methods.md). Off: the published token counts.
    stop_after_answer: bool = False


class QuCoRAG(Method):
    name = "quco"
    description = "QuCo-RAG: corpus entity frequency before, entity co-occurrence during generation."
    Params = QuCoParams
    template = "quco"
    SHAPE = Shape(recheck_remainder=True, draft_docs="first", corpus_stats=True)

    params: QuCoParams

    @property
    def shape(self) -> Shape:
        shape = replace(self.SHAPE, draft_docs="latest") if self.params.carry_passages else self.SHAPE
        return replace(shape, merge_passages=self.params.stage2_passages == "merge")

    def clean(self, sentences: list[str]) -> list[str]:
        """Drop chatty sentences, as the published code filters every generation."""
        chatty = self.params.chatty_phrases
        return [s for s in sentences if not any(c in s.lower() for c in chatty)]

    def _has(self, sentence: str, phrases: list[str] | tuple[str, ...]) -> bool:
        if self.params.case_sensitive:
            return any(ph in sentence for ph in phrases)
        low = sentence.lower()
        return any(ph.lower() in low for ph in phrases)

    def draft_stop(self, ctx: RunContext) -> StopWhen | None:
        """With ``stop_after_answer``: stop once the first answer sentence ``check`` reads is whole."""
        if not self.params.stop_after_answer:
            return None

        def complete(sentences: list[str]) -> bool:
            kept = self.clean(sentences)
            for i, sentence in enumerate(kept):
                if self._has(sentence, self.params.negation_phrases):
                    return False  # the scan would end here without the answer: generation goes on
                if self._has(sentence, (ANSWER_MARK,)):
                    return i < len(kept) - 1
            return False

        mark = ANSWER_MARK if self.params.case_sensitive else ""
        return read_through_done(ctx.parts.text.splitter.split, complete, mark)

    def _unknown_retrieves(self, ctx: RunContext) -> bool:
        return ctx.parts.config.corpus_stats.unknown_policy == "retrieve"

    # -- stage 1 -------------------------------------------------------------------------------------
    def question_entities(self, question: str, ctx: RunContext) -> list[str]:
        """Stage 1's entities of the question, once each (none: stage 1 cannot retrieve)."""
        with ctx.timed("extraction"):
            entities = ctx.parts.text.entities.question_entities(question, ctx.llm_call("extractor"))
        return list(dict.fromkeys(e for e in entities if e.strip()))

    def before(self, question: str, ctx: RunContext) -> Decision | None:
        p = self.params
        if not p.stage1:
            return None
        entities = self.question_entities(question, ctx)
        signals: dict[str, Any] = {"entities": entities}
        results = ctx.count(entities)
        if results:
            signals["entity_counts"] = [
                count_record(r) | {"entity": e} for e, r in zip(entities, results, strict=True)
            ]
        values = [count_value(r, p.threshold_unit) for r in results]
        verdict = entity_rarity(
            values, p.entity_threshold, p.threshold_unit, self._unknown_retrieves(ctx), p.entity_aggregate
        )
        query = question if p.question_query == "direct" else " ".join(entities)
        return Decision(
            verdict.record.fired,
            [query] if verdict.record.fired else [],
            signals,
            verdict.reason,
            triggers=[verdict.record],
        )

    # -- stage 2 -------------------------------------------------------------------------------------
    def _query_for(self, t: Triplet, sentence: str, question: str) -> str:
        mode = self.params.sentence_query
        if mode == "head_relation":
            return f"{t.head} {t.relation}".strip()
        if mode == "question_head_relation":
            return f"{question} {t.head} {t.relation}".strip()
        if mode == "full_triplet":
            return " ".join(t.as_list())
        return sentence

    def _queries(self, flagged: list[Triplet], sentence: str, question: str) -> list[str]:
        queries = list(dict.fromkeys(self._query_for(t, sentence, question) for t in flagged))
        return queries[: self.params.max_queries] if self.params.max_queries > 0 else queries

    def _judge(self, sentence: str, question: str, index: int, ctx: RunContext) -> Verdict:
        """Stage 2 on one sentence (the ``index``-th judged in this check): extract its claims, count each,
        flag those below their threshold."""
        p = self.params
        with ctx.timed("extraction"):
            triplets = ctx.parts.text.triplets.triplets(sentence, ctx.llm_call("extractor"))
        pairs = [(t.head, t.tail) for t in triplets if t.tail is not None]
        heads = [t.head for t in triplets if t.tail is None]
        co_results = iter(ctx.cooccur(pairs))
        head_results = iter(ctx.count(heads))
        unknown_retrieves = self._unknown_retrieves(ctx)
        records, claims, flagged = [], [], []
        for t in triplets:
            if t.tail is not None:
                r, threshold, kind = next(co_results), p.cooccurrence_threshold, COOCCURRENCE
            else:
                r, threshold, kind = next(head_results), p.head_threshold, HEAD_COUNT
            claim = Claim(kind, count_value(r, p.threshold_unit))
            rec = {"triplet": t.as_list(), "kind": kind, "threshold": threshold} | count_record(r)
            rec["flagged"] = claim_flagged(claim, threshold, unknown_retrieves)
            if rec["flagged"]:
                flagged.append(t)
            records.append(rec)
            claims.append(claim)
        if not flagged:
            return Verdict({"claims": records}, claims)
        first = records[[r["flagged"] for r in records].index(True)]
        why = (
            f"{first['kind']} of {first['triplet']} = {first['count']} < {first['threshold']:g}"
            if first["status"] == "ok"
            else f"count of {first['triplet']} unknown; policy: retrieve"
        )
        return Verdict({"claims": records}, claims, self._queries(flagged, sentence, question), why)

    def _records(self, verdicts: list[Verdict], question: str, ctx: RunContext) -> list[TriggerRecord]:
        p = self.params
        return claim_records(
            [v.claims for v in verdicts],
            p.cooccurrence_threshold,
            p.head_threshold,
            p.threshold_unit,
            self._unknown_retrieves(ctx),
        )

    def check(self, draft: Draft, question: str, ctx: RunContext) -> Check:
        """Scan the draft's sentences in order: a negation or the answer ends the scan; the first sentence
        whose verdict flags it fires, with the sentences before it kept."""
        p = self.params
        sentences = draft.sentences  # chatty sentences are gone already (``clean``)
        if not p.stage2:
            return Check.accept(" ".join(sentences), "stage 2 disabled")
        clear: list[str] = []
        scanned: list[dict[str, Any]] = []
        verdicts: list[Verdict] = []

        def done(reason: str, stop: bool = False) -> Check:
            records = self._records(verdicts, question, ctx)
            check = Check.accept(" ".join(clear), reason, {"sentences": scanned}, *records)
            check.stop = stop
            return check

        for sentence in sentences:
            if self._has(sentence, p.negation_phrases):
                scanned.append({"sentence": sentence, "negation": True})
                if p.negation_stops:
                    return done(
                        "a sentence disclaims knowledge; it is dropped and generation ends", stop=True
                    )
                return done("a sentence disclaims knowledge; it and the rest of the draft are dropped")
            if self._has(sentence, (ANSWER_MARK,)):
                clear.append(sentence)
                scanned.append({"sentence": sentence, "answer": True})
                return done("answer stated")
            verdict = self._judge(sentence, question, len(verdicts), ctx)
            scanned.append({"sentence": sentence, **verdict.detail})
            verdicts.append(verdict)
            if verdict.queries:
                signals = {"sentences": scanned, "flagged_sentence": sentence}
                records = self._records(verdicts, question, ctx)
                return Check.retrieve(" ".join(clear), verdict.queries, verdict.reason, signals, *records)
            clear.append(sentence)
        return done("no claim flagged")
