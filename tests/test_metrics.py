"""Metrics against hand-checked cases: SQuAD normalisation edge cases, EM/F1 over aliases, extraction rules."""

from __future__ import annotations

import pytest

from quco.eval.score.metrics import (
    exact_match,
    extract_2wiki,
    extract_answer,
    extract_hotpotqa,
    f1_score,
    normalize_answer,
    parse_label,
    score_prediction,
    token_f1,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Beatles", "beatles"),
        ("  A   dog!  ", "dog"),
        ("an apple.", "apple"),
        ("theory of the universe", "theory of universe"),  # "the" inside a word stays
        ("Another anthem", "another anthem"),  # so do "an"/"a" prefixes
        ("U.S.A.", "usa"),  # punctuation is deleted, not replaced by a space
        ("rock'n'roll", "rocknroll"),
        ("Small-scale", "smallscale"),
        ("15,140", "15140"),
        ("tHe\tEnd\n", "end"),
        ("the the a an", ""),
        ("Małgorzata Braunek", "małgorzata braunek"),  # accents kept
        ("ÉCOLE Normale", "école normale"),  # Unicode lower-casing
        ("\u201cQuoted\u201d", "\u201cquoted\u201d"),  # curly quotes are not string.punctuation: kept
        ("1914\u20131918", "1914\u20131918"),  # so is the en dash
        ("(the) answer", "answer"),  # "(the)" -> "the" after punctuation removal -> dropped
        ("", ""),
    ],
)
def test_normalize_answer_matches_squad_rules(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_exact_match_is_maximised_over_aliases() -> None:
    golds = ["Mask of Fu Manchu", "The Mask of Fu Manchu"]
    assert exact_match("the mask of fu manchu.", golds) == 1.0
    galati = ["Galati", "Galaţi", "Galac", "Galatz", "Galați"]
    assert exact_match("Galatz", galati) == 1.0
    assert exact_match("Galatia", galati) == 0.0
    assert exact_match("Paris, France", ["Paris"]) == 0.0
    assert exact_match("", ["Paris"]) == 0.0


def test_f1_follows_hotpotqa_rules() -> None:
    # yes/no/noanswer must match exactly, in either direction.
    assert f1_score("yes", ["no"]) == 0.0
    assert f1_score("No.", ["no"]) == 1.0
    assert f1_score("yes it is", ["yes"]) == 0.0
    assert f1_score("noanswer", ["noanswer"]) == 1.0
    # 3 predicted tokens, 2 gold, 2 shared: P = 2/3, R = 1, F1 = 0.8.
    assert f1_score("Barton Lee Hazlewood", ["Lee Hazlewood"]) == pytest.approx(0.8)
    assert token_f1("Barton Lee Hazlewood", "Lee Hazlewood") == pytest.approx((0.8, 2 / 3, 1.0))
    # Articles and punctuation do not count as tokens.
    assert f1_score("the director.", ["director"]) == 1.0
    # Repeated tokens count once per occurrence in the gold: P = 1/2, R = 1.
    assert f1_score("Paris Paris", ["Paris"]) == pytest.approx(2 / 3)
    # Maximum over aliases: "Ptolemy IX" vs "Ptolemy IX Soter II" is P = 1, R = 1/2 -> 2/3.
    assert f1_score("Ptolemy IX", ["Lathyros", "Ptolemy IX Soter II"]) == pytest.approx(2 / 3)
    assert f1_score("Lathyros", ["Lathyros", "Ptolemy IX Soter II"]) == 1.0
    assert f1_score("", ["Paris"]) == 0.0


def test_hotpotqa_extraction_is_quco_rule() -> None:
    assert extract_hotpotqa("Jeremy is an actor. So the answer is producer.") == "producer."
    # "answer" recurs after the marker: cut at the first period.
    assert extract_hotpotqa("So the answer is Paris. Question: what is the answer") == "Paris"
    # ... which also cuts decimals: the published rule, kept as is.
    assert extract_hotpotqa("So the answer is 15.5 million. The answer") == "15"
    assert extract_hotpotqa("So the answer is Paris</s>") == "Paris"
    assert extract_hotpotqa("So the answer is Rome<|endoftext|>") == "Rome"
    assert extract_hotpotqa("Reasoning without a conclusion.") is None
    # The first occurrence wins.
    assert extract_hotpotqa("the answer is A. Then the answer is B.") == "A"


def test_2wiki_extraction_uses_first_answer_sentence() -> None:
    pred = "The film Laughter In Hell was directed by Edward L. Cahn. So the answer is August 25, 1963."
    assert extract_2wiki(pred) == "August 25, 1963"
    assert extract_2wiki("Thus the answer is yes. So the answer is no.") == "yes"
    # Within a sentence the text after the *last* "answer is" is taken.
    assert extract_2wiki("The answer is that the answer is Rome.") == "Rome"
    assert extract_2wiki("No conclusion here.") is None
    # A splitter can be injected (the default is spaCy's parser, as the published code uses).
    assert extract_2wiki("x. So the answer is Bob.", splitter=lambda t: [t]) == "Bob"


def test_missing_answer_counts_as_wrong() -> None:
    assert extract_answer("So the answer is", "hotpotqa") is None  # nothing after the marker
    s = score_prediction("He was born in Paris.", ["Paris"], "span", "hotpotqa")
    assert (s.answer, s.em, s.f1, s.missing) == ("", 0.0, 0.0, True)


def test_yes_no_maybe_labels_are_parsed_strictly() -> None:
    assert parse_label("Yes, because it floats.", allow_maybe=False) == "yes"
    assert parse_label("no.", allow_maybe=False) == "no"
    assert parse_label("maybe", allow_maybe=False) is None
    assert parse_label("maybe", allow_maybe=True) == "maybe"
    assert parse_label("probably yes", allow_maybe=True) is None  # not mapped to "no" as DRAGIN/ETC do
    s = score_prediction("It is unclear. So the answer is maybe.", ["maybe"], "yesnomaybe", "pubmedqa")
    assert (s.answer, s.em, s.f1) == ("maybe", 1.0, 1.0)
    s = score_prediction("So the answer is maybe.", ["no"], "yesno", "strategyqa")
    assert (s.em, s.missing) == (0.0, False)
    s = score_prediction("So the answer is No, never.", ["no"], "yesno", "strategyqa")
    assert (s.answer, s.em) == ("no", 1.0)


def test_span_scoring_end_to_end() -> None:
    s = score_prediction(
        "Ed Wood was American. Scott Derrickson is American. So the answer is yes.",
        ["yes"],
        "span",
        "hotpotqa",
    )
    assert (s.answer, s.em, s.f1) == ("yes.", 1.0, 1.0)
    s = score_prediction(
        "So the answer is Lee Hazlewood.", ["Barton Lee Hazlewood"], "span", "2wikimultihopqa"
    )
    assert s.answer == "Lee Hazlewood"
    assert s.em == 0.0
    assert s.f1 == pytest.approx(0.8)
