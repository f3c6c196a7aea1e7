"""The answer scorers: answer extraction, letters, numbers, exact match and token F1."""

from __future__ import annotations

from fractions import Fraction

import pytest

from skillopt.benchmarks.scorers import (
    choice_match,
    exact_match,
    extract_answer,
    extract_choice,
    f1_match,
    final_number,
    find_answer,
    find_numbers,
    normalize_text,
    numeric_match,
    parse_number,
    token_f1,
)

CHOICES = ("Planetary density will decrease.", "Planetary years will become longer.",
           "Planetary days will become shorter.", "Planetary gravity will become stronger.")


# ---------------------------------------------------------------- extract_answer


@pytest.mark.parametrize("text, expected, marker", [
    ("Let me think.\nAnswer: 42", "42", "answer"),
    ("Work...\n#### 1,234", "1,234", "####"),
    ("So $\\boxed{\\frac{3}{4}}$.", "\\frac{3}{4}", "boxed"),
    ("We get \\boxed{\\text{B}}", "B", "boxed"),
    ("**Final Answer:** Paris", "Paris", "answer"),
    ("Answer:\n\nC", "C", "answer"),
    ("blah\nso the answer is b.", "b.", "answer is"),
    ("line one\n\nthe last line  \n\n", "the last line", None),
    ("", "", None),
])
def test_extract_answer_prefers_markers_then_last_line(text, expected, marker):
    got = find_answer(text)
    assert (got.text, got.marker) == (expected, marker)
    assert extract_answer(text) == expected


def test_extract_answer_takes_the_last_explicit_marker_over_a_later_phrase():
    text = "Answer: 12\nI checked it twice; the answer is consistent with the data."
    assert find_answer(text).text == "12"
    assert find_answer("Answer: 3\nwait, recount.\nAnswer: 4").text == "4"
    assert find_answer("Answer: 7 and \\boxed{8}").text == "8"


# ---------------------------------------------------------------- multiple choice


@pytest.mark.parametrize("text", [
    "Answer: C",
    "Answer: (C)",
    "Answer: C.",
    "answer: c",
    "The answer is c",
    "reasoning...\n\n**Answer: C**",
    "Answer: C. Planetary days will become shorter.",
    "Answer: C) shorter days",
    "Answer: Option C",
    "\\boxed{C}",
    "Answer: Planetary days will become shorter",
    "Faster rotation means shorter days.\nPlanetary days will become shorter.",
    "I pick option C because days shorten.",
    "C",
    "(C)",
    "Answer: C because the days get shorter",
    "Faster spin, shorter days.\nC. Planetary days will become shorter.",
    "Faster spin, shorter days.\n(C) Planetary days will become shorter",
])
def test_choice_match_accepts_common_formats(text):
    score = choice_match(text, "C", CHOICES)
    assert (score.hard, score.soft) == (1, 1), score.feedback
    assert score.feedback.startswith("correct: C")


def test_choice_match_wrong_letter_gives_both_choices_in_feedback():
    score = choice_match("Answer: B", "C", CHOICES)
    assert (score.hard, score.soft) == (0, 0)
    assert score.feedback.startswith("expected C (Planetary days will become shorter.), got B (Planetary years")


def test_choice_match_no_letter_and_out_of_range():
    none = choice_match("I am not sure about this one.", "C", CHOICES)
    assert none.hard == 0 and "no choice letter found" in none.feedback and "Answer: <letter>" in none.feedback
    out = choice_match("Answer: E", "C", CHOICES)
    assert out.hard == 0 and "not one of A-D" in out.feedback
    five = choice_match("Answer: E", "E", ("a", "b", "c", "d", "e"))
    assert five.hard == 1


def test_extract_choice_does_not_guess_between_several_options():
    letter, why = extract_choice("(A) is wrong, (B) is wrong too, so hmm", CHOICES)
    assert letter is None and why == "no choice letter found"
    assert extract_choice("Only (D) fits.", CHOICES)[0] == "D"
    assert extract_choice("Answer: a", ("x", "y"))[0] == "A"  # a lone lowercase letter after the marker
    assert extract_choice("Answer: A planet spins", CHOICES)[0] is None  # "A" may be the article
    assert extract_choice("Answer: I think so", CHOICES)[0] is None


def test_choice_text_matching_needs_a_unique_choice():
    choices = ("2", "12", "21")
    assert extract_choice("Answer: 12", choices)[0] == "B"
    assert extract_choice("Answer: 2", choices)[0] == "A"
    assert extract_choice("Answer: between 2 and 12", choices)[0] is None


# ---------------------------------------------------------------- numbers


@pytest.mark.parametrize("text, value", [
    ("#### 42", 42),
    ("Answer: 1,234", 1234),
    ("Answer: $5.00", 5),
    ("Answer: -3", -3),
    ("Answer: −3", -3),
    ("Answer: 3/4", Fraction(3, 4)),
    ("so \\boxed{\\frac{3}{4}}", Fraction(3, 4)),
    ("Answer: 0.75", Fraction(3, 4)),
    ("Answer: .5", Fraction(1, 2)),
    ("Answer: 50%", 50),
    ("Answer: 18 dollars.", 18),
    ("She pays 5 + 3 = 8 dollars.\nAnswer: 5 + 3 = 8", 8),
    ("Answer: 1,000,000", 1_000_000),
    ("Answer: -$7", -7),
    ("Answer: 12.", 12),
])
def test_final_number_formats(text, value):
    num, where = final_number(text)
    assert num.value == value
    assert where.startswith("from ")


def test_final_number_falls_back_to_the_last_number_and_ignores_bullets_and_words():
    num, where = final_number("- 5 apples\n- 3 pears\nIn total 8 fruits")
    assert (num.value, where) == (8, "last number in the answer")
    assert final_number("The answer: eighteen, no digits at all") is None
    assert [n.value for n in find_numbers("H2O costs 3-4 dollars, 1,2,3")] == [3, 4, 1, 2, 3]


def test_parse_number_accepts_only_a_single_number():
    assert parse_number("2,125") == 2125
    assert parse_number("-6") == -6
    assert parse_number("3/4") == Fraction(3, 4)
    assert parse_number("$5.00") == 5
    assert parse_number("12 apples") is None
    assert parse_number("Canberra") is None
    assert parse_number("1/0") is None or parse_number("1/0") == 1  # a zero denominator never divides


def test_numeric_match_scores_and_explains():
    ok = numeric_match("Janet sells 9 eggs at $2.\n#### 18", ["18"])
    assert (ok.hard, ok.soft) == (1, 1) and ok.feedback == "correct: 18 (from the '####' line)"
    wrong = numeric_match("She makes 16 dollars.", ["18"])
    assert (wrong.hard, wrong.soft) == (0, 0)
    assert wrong.feedback == "expected 18, got 16 (last number in the answer)"
    assert numeric_match("Answer: 2125", ["2,125"]).hard == 1
    assert numeric_match("Answer: 0.3333333333", ["1/3"]).hard == 1  # within the relative tolerance
    assert numeric_match("Answer: 0.33", ["1/3"]).hard == 0
    assert numeric_match("Answer: 0.33", ["1/3"], rel_tol=0.05).hard == 1
    # a rambling model writes numbers no float holds: scored wrong, never a crash of the run
    huge = "9" * 400
    assert numeric_match(f"Answer: {huge}", ["18"]).hard == 0
    assert numeric_match(f"Answer: {huge}/3", [f"{huge}/3"]).hard == 1
    assert numeric_match(f"Answer: {huge}", [huge + "1"]).hard == 0
    none = numeric_match("I give up.", ["18"])
    assert none.hard == 0 and none.feedback.startswith("no final number found (expected 18)")
    with pytest.raises(ValueError):
        numeric_match("Answer: 3", ["three"])


# ---------------------------------------------------------------- text


def test_normalize_text_and_token_f1():
    assert normalize_text("  The Eiffel-Tower!  ") == "eiffeltower"
    assert normalize_text("An apple, a day") == "apple day"
    assert token_f1("Jane Austen", "jane austen.") == 1.0
    assert token_f1("Austen", "Jane Austen") == pytest.approx(2 / 3)
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0
    assert token_f1("blue sky", "green grass") == 0.0


def test_exact_match_with_several_accepted_answers():
    ok = exact_match("Thinking...\nAnswer: the Carbon Dioxide.", ["carbon dioxide", "CO2"])
    assert (ok.hard, ok.soft) == (1, 1)
    assert exact_match("Answer: CO2", ["carbon dioxide", "CO2"]).hard == 1
    partial = exact_match("Answer: bright green paint", ["green"])
    assert partial.hard == 0 and partial.soft == pytest.approx(0.5)
    assert "expected 'green', got 'bright green paint'" in partial.feedback
    empty = exact_match("   ", ["green"])
    assert (empty.hard, empty.soft) == (0, 0) and "empty answer" in empty.feedback


def test_f1_match_threshold():
    assert f1_match("Answer: Jane Austen", ["Jane Austen"]).hard == 1
    half = f1_match("Answer: Austen", ["Jane Austen"])
    assert half.hard == 0 and half.soft == pytest.approx(2 / 3)
    assert f1_match("Answer: Austen", ["Jane Austen"], threshold=0.6).hard == 1
