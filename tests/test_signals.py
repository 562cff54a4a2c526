"""Signals and trigger records against hand-computed values on small fixed inputs (no model)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from quco.corpus_stats.base import CountResult
from quco.errors import QucoError
from quco.eval.runs.store import load_traces
from quco.signals import (
    aggregate,
    eigen_score,
    entropy_differences,
    forward_attention,
    masked_text,
    max_attention_received,
    max_attention_to_new,
    rind_values,
    sentence_values,
    smooth_second_order,
    token_uncertainty,
    top_k_in_order,
)
from quco.signals.chance import retrieval_rate, stage_rate, uniform_draw
from quco.signals.corpus import Claim, claim_records, count_value, entity_rarity
from quco.signals.replay import replay, sweep, trace_params
from quco.signals.spans import assign, group_words, locate, token_positions, token_spans
from quco.signals.trend import word_attention
from quco.trigger_record import TriggerRecord, consulted, crosses, first_crossing, step_fired_at

# -- FLARE ------------------------------------------------------------------------------------------------


def test_token_uncertainty_and_aggregates():
    u = token_uncertainty([math.log(0.9), math.log(0.5), 0.0])
    assert u == pytest.approx([0.1, 0.5, 0.0])
    assert aggregate(u, "avg") == pytest.approx(0.2)
    assert aggregate(u, "max") == pytest.approx(0.5)
    assert aggregate(u, "min") == pytest.approx(0.0)
    assert aggregate([], "avg") == 0.0
    with pytest.raises(ValueError, match="unknown aggregate"):
        aggregate(u, "median")


def test_masked_text_drops_flagged_tokens_only():
    text = " Paris is in Germany."
    pieces = [" Paris", " is", " in", " Germ", "any", "."]
    spans = token_spans(pieces)
    drop = [False, False, False, True, True, False]
    assert masked_text(text, spans, drop, 1, len(text)) == "Paris is in ."
    # Restricted to a window: only the part inside [start, end) is returned.
    assert masked_text(text, spans, drop, 1, 9) == "Paris is"


# -- spans ------------------------------------------------------------------------------------------------


def test_group_words_dragin_and_etc_rules():
    pieces = [" The", " Eiff", "el", " Tower", ".", "\n", "It", " opened", "", "é"]
    words = group_words(pieces)
    assert [w.text for w in words] == ["The", "Eiffel", "Tower.", "It", "openedé"]
    assert words[1].tokens == [1, 2]
    assert words[2].tokens == [3, 4]
    assert words[4].tokens == [7, 8, 9]
    text = "".join(pieces)
    for w in words:
        assert text[w.start : w.end] == w.text
    etc_words = group_words(pieces, split_punct=True)
    assert [w.text for w in etc_words] == ["The", "Eiffel", "Tower", ".", "It", "openedé"]


def test_token_positions_and_locate_with_glued_period():
    text = " Born in 1950.So the answer is Paris."
    # The splitter turns "1950.So" into "1950. So": locate still finds both sentences.
    spans = locate(text, ["Born in 1950.", "So the answer is Paris."])
    assert spans == [(1, 14), (14, 37)]
    pieces = [" Born", " in", " 1950", ".", "So", " the", " answer", " is", " Paris", "."]
    pos = token_positions(pieces)
    owner = assign(pos, spans)
    assert owner == [0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    assert token_positions([" a", "\n", "", "é"]) == [1, None, 3, 3]


# -- DRAGIN -----------------------------------------------------------------------------------------------


def test_max_attention_received_is_column_max():
    att = np.array([[1.0, 0.0, 0.0], [0.6, 0.4, 0.0], [0.2, 0.7, 0.1]])
    assert max_attention_received(att) == pytest.approx([1.0, 0.7, 0.1])


def test_rind_values_by_hand():
    # attention normalised within the sentence: [0.25, 0.25, 0.5]; x entropy x 3 words
    assert rind_values([1.0, 1.0, 2.0], [0.5, 1.0, 2.0]) == pytest.approx([0.375, 0.75, 3.0])
    assert rind_values([0.0, 0.0], [1.0, 1.0]) == pytest.approx([0.0, 0.0])


def test_forward_attention_by_hand():
    att = np.array(
        [
            [1.0, 0.0, 0.0, 0.0],
            [0.5, 0.5, 0.0, 0.0],
            [0.2, 0.6, 0.2, 0.0],
            [0.1, 0.3, 0.3, 0.3],
        ]
    )
    words = [[0], [1], [2, 3]]
    # word 2 starts at token 2: rows 1 and 2 over positions [0, 2), each normalised, averaged:
    # row 1 -> [0.5, 0.5]; row 2 -> [0.25, 0.75]; mean -> [0.375, 0.625]; per word -> [0.375, 0.625, 0]
    assert forward_attention(att, words, [2]) == pytest.approx([0.375, 0.625, 0.0])
    # averaged over two hit words: word 1 (token 1) sees row 0 over [0, 1) -> [1, 0, 0]
    assert forward_attention(att, words, [1, 2]) == pytest.approx([(1 + 0.375) / 2, 0.625 / 2, 0.0])
    assert forward_attention(att, words, []) == pytest.approx([0.0, 0.0, 0.0])


def test_top_k_in_order_keeps_original_order():
    scores = [0.1, 0.9, 0.5, 0.7, 0.3]
    eligible = [True, True, False, True, True]
    assert top_k_in_order(scores, eligible, 2) == [1, 3]
    assert top_k_in_order(scores, eligible, 10) == [0, 1, 3, 4]
    assert top_k_in_order(scores, eligible, 0) == []


# -- ETC --------------------------------------------------------------------------------------------------


def test_entropy_differences_by_hand():
    s1, s2 = entropy_differences([1.0, 2.0, 4.0, 3.0, 5.0], [True] * 5)
    assert s1 == pytest.approx([0, 1, 2, -1, 2])
    assert s2 == pytest.approx([0, 0, 1, -3, 3])
    # A function word is skipped: its differences are zero and it is not a neighbour.
    s1, s2 = entropy_differences([1.0, 2.0, 4.0, 3.0, 5.0], [True, False, True, True, True])
    assert s1 == pytest.approx([0, 0, 3, -1, 2])
    assert s2 == pytest.approx([0, 0, 0, -4, 3])


def test_smooth_second_order_by_hand():
    m = smooth_second_order([0, 0, 1, -3, 3])
    # word 2: mean 1, prev 0 -> w = 1, alpha = 1.0 -> M = 1
    # word 3: mean -1, prev 1 -> w = 2/4, alpha = 0.95 -> M = 0.95*-3 + 0.05*1 = -2.8
    # word 4: mean 1/3, prev -3 -> w = (10/3)/6, alpha = 0.9 + 0.1*5/9 -> M = 3*(2*alpha - 1)
    alpha = 0.9 + 0.1 * 5 / 9
    assert m == pytest.approx([0, 0, 1.0, -2.8, 3 * (2 * alpha - 1)])


def test_sentence_values_by_hand():
    # attention normalised to the sentence length: [0.6, 0.6, 1.8]
    assert sentence_values([0.2, 0.2, 0.6], [1.0, -2.0, 0.5]) == pytest.approx([0.6, -1.2, 0.9], abs=1e-8)


def test_word_attention_and_max_to_new():
    att = np.array(
        [
            [1.0, 0.0, 0.0, 0.0],
            [0.5, 0.5, 0.0, 0.0],
            [0.2, 0.6, 0.2, 0.0],
            [0.1, 0.3, 0.3, 0.3],
        ]
    )
    # query word [2, 3] to key word [1]: rows 2, 3 at column 1 -> mean(0.6, 0.3) = 0.45
    assert word_attention(att, [[2, 3]], [[1], [2, 3]])[0] == pytest.approx([0.45, 0.4])
    # generated words [1] and [2, 3]: word 1 pays 0.5 to itself; word [2,3] pays 0.45 to [1] and 0.4 to itself
    assert max_attention_to_new(att, [[1], [2, 3]]) == pytest.approx([0.5, 0.45])


# -- SeaKR ------------------------------------------------------------------------------------------------


def test_eigen_score_identical_and_orthogonal_states():
    # Each state is centred over its features: c = [-0.1, -1.6, 1.6, 0.1], |c|^2 = 5.14, so three identical
    # states give a rank-one Gram matrix 5.14 * ones(3, 3) with eigenvalues 15.42, 0, 0.
    same = np.tile(np.array([[0.3, -1.2, 2.0, 0.5]]), (3, 1))
    expected = (math.log(15.42 + 1e-3) + 2 * math.log(1e-3)) / 3
    assert eigen_score(same, alpha=1e-3) == pytest.approx(expected)
    ortho = np.array([[1.0, -1.0, 0.0, 0.0], [0.0, 0.0, 1.0, -1.0]])
    assert eigen_score(ortho, alpha=1e-3) == pytest.approx(math.log(2.001))


def test_eigen_score_matches_the_centring_matrix_formula():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(5, 7))
    d = z.shape[1]
    j = np.eye(d) - np.ones((d, d)) / d
    sigma = z @ j @ z.T
    expected = np.log(np.linalg.det(sigma + 1e-3 * np.eye(5))) / 5
    assert eigen_score(z, alpha=1e-3) == pytest.approx(expected)
    # More spread-out samples score higher.
    assert eigen_score(z * 3) > eigen_score(z)
    with pytest.raises(ValueError):
        eigen_score(np.zeros((0, 4)))


# -- random trigger ---------------------------------------------------------------------------------------


def test_uniform_draw_is_reproducible_and_uniform():
    a = uniform_draw(7, "Who wrote Hamlet?", 0)
    assert a == uniform_draw(7, "Who wrote Hamlet?", 0)
    assert 0 <= a < 1
    assert a != uniform_draw(7, "Who wrote Hamlet?", 1)
    assert a != uniform_draw(8, "Who wrote Hamlet?", 0)
    draws = [uniform_draw(0, "q", i) for i in range(4000)]
    assert abs(np.mean(draws) - 0.5) < 0.02
    assert abs(np.mean(np.array(draws) < 0.3) - 0.3) < 0.03


def _trace(question, steps, retrievals):
    return {
        "question": question,
        "method": "x",
        "counters": {"retrievals": retrievals},
        "steps": steps,
        "version": 2,
    }


def _step(index, scores, threshold, rule="above", stage="generate", param="threshold"):
    rec = TriggerRecord.decide("u", rule, threshold, scores, "sentence", param=param)
    return {
        "index": index,
        "stage": stage,
        "draft": "x",
        "triggers": [rec.to_dict()],
        "decision": "retrieve" if rec.fired else "keep",
    }


def test_retrieval_rate_and_results_file(tmp_path):
    traces = [
        # fired at the second candidate of three: the third was never consulted
        _trace("a", [_step(0, [0.1, 0.5, 0.9], 0.3), _step(1, [0.2], 0.3)], 1),
        _trace(
            "b", [{"index": 0, "stage": "before", "decision": "retrieve"}, _step(1, [0.1, 0.1, 0.1], 0.3)], 1
        ),
    ]
    rate = retrieval_rate(traces)
    assert (rate.questions, rate.retrievals, rate.check_retrievals, rate.checks, rate.candidates) == (
        2,
        2,
        1,
        3,
        6,
    )
    assert rate.per_question == 1.0
    assert rate.per_candidate == pytest.approx(1 / 6)
    assert rate.per_check == pytest.approx(1 / 3)
    path = tmp_path / "results.jsonl"
    lines = [json.dumps({"id": i, "trace": t}) for i, t in enumerate(traces)]
    path.write_text("\n".join(lines) + '\n{"id": 2, "tra', encoding="utf-8")  # torn last line
    assert retrieval_rate(load_traces(tmp_path)) == rate
    bad = tmp_path / "bad" / "results.jsonl"
    bad.parent.mkdir()
    bad.write_text("not json\n" + lines[0] + "\n", encoding="utf-8")
    with pytest.raises(QucoError, match="line 1"):
        load_traces(bad)
    with pytest.raises(QucoError, match="no results file"):
        load_traces(tmp_path / "missing")


def test_stage_rates_per_step_and_per_candidate():
    traces = [
        _trace("a", [_step(0, [5.0], 10.0, "below", "before"), _step(1, [3.0, 0.0], 1.0, "below")], 1),
        _trace("b", [_step(0, [50.0], 10.0, "below", "before"), _step(1, [2.0, 4.0, 1.0], 1.0, "below")], 0),
    ]
    before, generate = stage_rate(traces, "before"), stage_rate(traces, "generate")
    assert (before.steps, before.fired, before.candidates, before.per_step) == (2, 1, 2, 0.5)
    # the first check fired at its second sentence (2 consulted), the second consulted all 3 and kept
    assert (generate.steps, generate.fired, generate.candidates) == (2, 1, 5)
    assert generate.per_candidate == pytest.approx(1 / 5)


# -- decisions and sweeps ---------------------------------------------------------------------------------


def test_rules_and_recorded_precision():
    assert crosses(0.5, 0.4, "above") and not crosses(0.4, 0.4, "above")
    assert crosses(-0.5, 0.4, "abs_above") and not crosses(-0.5, 0.4, "above")
    assert crosses(0.1, 0.2, "below") and not crosses(0.2, 0.2, "below")
    assert crosses(0.2, 0.2, "at_least") and not crosses(0.19, 0.2, "at_least")
    assert crosses(0.0, 9.0, "always") and crosses(None, 9.0, "always")
    assert not crosses(None, 0.5, "below")  # a candidate without a score never fires
    assert first_crossing([0.1, 0.6, 0.9], 0.5, "above") == 1
    assert first_crossing([], 0.5, "always") is None
    assert first_crossing([0.9, None], 0.5, "below", forced=[1]) == 1
    rec = TriggerRecord.decide("u", "above", 0.1, [0.1000000004, 0.2], "sentence")
    # the rounded score is what was compared: 0.1 is not above 0.1
    assert rec.scores == [0.1, 0.2] and rec.fired_at == 1 and rec.consulted() == 2
    assert rec.at(0.05) == 0 and rec.at(0.3) is None
    assert TriggerRecord.from_dict(rec.to_dict()) == rec
    with pytest.raises(ValueError, match="unknown trigger rule"):
        crosses(1, 0, "sideways")
    with pytest.raises(ValueError, match="unknown trigger rule"):
        TriggerRecord.decide("u", "sideways", 0, [], "sentence")


def test_records_of_one_step_fire_at_the_earliest_candidate():
    cooc = TriggerRecord.decide("c", "below", 1, [3, None, 0], "sentence", param="cooccurrence_threshold")
    head = TriggerRecord.decide("h", "below", 20, [None, 5, None], "sentence", param="head_threshold")
    assert (cooc.fired_at, head.fired_at, step_fired_at([cooc, head])) == (2, 1, 1)
    assert consulted([cooc, head]) == 2
    # a replay at another co-occurrence threshold leaves the head-count record as recorded
    assert step_fired_at([cooc, head], {"cooccurrence_threshold": 4}) == 0
    assert step_fired_at([cooc, head], {"head_threshold": 5}) == 2


def test_quco_stage_rules():
    ok = CountResult("Paris", 120, total_tokens=10**9)
    unknown = CountResult("Xy", None, status="unknown", error="timeout")
    assert count_value(ok, "count") == 120.0 and count_value(ok, "per_billion") == pytest.approx(120.0)
    assert count_value(unknown, "count") is None
    stage1 = entity_rarity([100.0, 300.0], 250.0, "count", True)
    assert (
        stage1.record.scores == [200.0]
        and stage1.record.fired
        and stage1.reason == "mean entity count 200 < 250"
    )
    assert not entity_rarity([100.0, 300.0], 150.0, "count", True).record.fired
    rarest = entity_rarity([100.0, 300.0], 150.0, "count", True, "min")  # ours: the rarest entity decides
    assert rarest.record.signal == "min_entity_count" and rarest.record.scores == [100.0]
    assert rarest.record.fired and rarest.reason == "min entity count 100 < 150"
    with pytest.raises(ValueError, match="aggregate"):
        entity_rarity([1.0], 1.0, "count", True, "median")
    # an unknown count fires under the policy "retrieve" whatever the threshold, not under "keep"
    assert entity_rarity([None, 300.0], 1.0, "count", True).record.forced == [0]
    assert not entity_rarity([None, 300.0], 1.0, "count", False).record.fired
    none = entity_rarity([], 100.0, "count", True)  # no entity: nothing to score, no retrieval
    assert none.record.scores == [None] and not none.record.fired
    judged = [[Claim("cooccurrence", 4.0), Claim("head_count", 30.0)], [Claim("cooccurrence", 0.0)]]
    cooc, head = claim_records(judged, 1, 20, "count", True)
    assert (cooc.scores, cooc.fired_at, cooc.param) == ([4.0, 0.0], 1, "cooccurrence_threshold")
    assert (head.scores, head.fired_at, head.param) == ([30.0, None], None, "head_threshold")


def test_replay_and_sweep_exact_prefix():
    trace = _trace("q", [_step(0, [0.2, 0.35], 0.3), _step(1, [0.1, 0.25], 0.3), _step(2, [0.5], 0.3)], 2)
    same = replay(trace, 0.3)
    assert [(d.fire, d.at) for d in same.decisions] == [(True, 1), (False, None), (True, 0)]
    assert same.exact_steps == 3 and same.retrievals == 2
    lower = replay(trace, 0.15)
    # the first step now fires at the first sentence: a re-run diverges after it
    assert [(d.fire, d.at) for d in lower.decisions] == [(True, 0), (True, 1), (True, 0)]
    assert lower.exact_steps == 1
    higher = replay(trace, 0.4)
    assert [(d.fire, d.at) for d in higher.decisions] == [(False, None), (False, None), (True, 0)]
    points = sweep([trace], [0.15, 0.3, 0.4])
    assert [p.retrievals_per_question for p in points] == [3.0, 2.0, 1.0]
    assert points[1].exact_share == 1.0
    assert trace_params([trace]) == ["threshold"]
    # a stage-1 record of another parameter is replayed only when that parameter is swept
    quco = _trace("q", [_step(0, [500.0], 1000.0, "below", "before", "entity_threshold")], 1)
    assert replay(quco, 0.3).decisions == []
    assert [d.fire for d in replay(quco, 100.0, "entity_threshold").decisions] == [False]
