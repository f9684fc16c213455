"""Splitting raw outputs into (answer label, rationale); malformed outputs become failures."""
import pytest

from studies.lm import parsing, questions, templates

YES_NO = (("yes", "Yes"), ("no", "No"))
FOUR = (("a", "the sun"), ("b", "the moon"), ("c", "a rock"), ("d", "water"))
YN = templates.PromptItem(question="Q?", choices=YES_NO)
MC = templates.PromptItem(question="Q?", choices=FOUR)


def test_t5_output_with_sentinels_parses_to_label_and_rationale():
    parsed = parsing.parse_t5_rationale("<pad> <extra_id_0> no <extra_id_1> Asteroids are small. <extra_id_2></s>", YN)
    assert (parsed.answer, parsed.rationale) == ("no", "Asteroids are small.")


@pytest.mark.parametrize("answer, label", [("the moon", "b"), ("The Moon.", "b"), ("(c)", "c"), ("d", "d")])
def test_multiple_choice_answers_map_to_labels(answer, label):
    parsed = parsing.parse_t5_rationale(f"<extra_id_0> {answer} <extra_id_1> because. <extra_id_2>", MC)
    assert parsed.answer == label


@pytest.mark.parametrize("raw, reason", [
    ("just some words", "no <extra_id_1>"),
    ("<extra_id_0> maybe <extra_id_1> whatever", "not one of the choices"),
    ("<extra_id_0> yes <extra_id_1> <extra_id_2>", "empty rationale"),
    ("<extra_id_0> <extra_id_1> text", "empty answer"),
    ("", "no <extra_id_1>"),
])
def test_malformed_t5_outputs_are_failures_with_the_raw_text(raw, reason):
    parsed = parsing.parse_t5_rationale(raw, YN)
    assert isinstance(parsed, parsing.ParseFailure)
    assert parsed.raw == raw and reason in parsed.reason
    assert not parsed


def test_missing_opening_sentinel_still_parses():
    parsed = parsing.parse_t5_rationale("yes <extra_id_1> Because.", YN)
    assert (parsed.answer, parsed.rationale) == ("yes", "Because.")


def test_causal_continuation_parses_and_stops_at_the_separator():
    raw = " the sun\nReason: The sun is a star.\n###\nQuestion: next?"
    parsed = parsing.parse_causal_rationale(raw, MC)
    assert (parsed.answer, parsed.rationale) == ("a", "The sun is a star.")


def test_causal_output_without_reason_is_a_failure():
    parsed = parsing.parse_causal_rationale(" yes, no\nAnswer: yes", YN)
    assert isinstance(parsed, parsing.ParseFailure) and "Reason" in parsed.reason


def test_t5_answer_only_output():
    assert parsing.parse_t5_answer("<pad> <extra_id_0> True <extra_id_1></s>", YN).answer == "yes"
    assert isinstance(parsing.parse_t5_answer("<extra_id_0> <extra_id_1>", YN), parsing.ParseFailure)


def test_generalization_output_with_answer_line():
    parsed = parsing.parse_generalization(" Is grass usually green?\nanswer: True\n\nquestion: x")
    assert (parsed.text, parsed.answer) == ("Is grass usually green?", "yes")
    inline = parsing.parse_generalization("Is grass red? answer: False")
    assert (inline.text, inline.answer) == ("Is grass red?", "no")


def test_counterfactual_answer_is_the_lms_not_the_negated_original():
    # "Does Ramen have high sodium levels?" flips nothing: its answer is the LM's, kept as written.
    parsed = parsing.parse_generalization("Does Ramen have high sodium levels?\nanswer: True")
    assert (parsed.text, parsed.answer) == ("Does Ramen have high sodium levels?", "yes")


def test_generalization_without_answer_is_a_failure():
    assert isinstance(parsing.parse_generalization("Is grass red?"), parsing.ParseFailure)
    assert isinstance(parsing.parse_generalization("Is it? answer: maybe"), parsing.ParseFailure)


@pytest.mark.parametrize("raw, reason", [
    ("No, it would not. Ramen is known to have high sodium levels.\nanswer: False", "does not end with '?'"),
    ("No, would Ramen be low in salt?\nanswer: False", "reads as an answer"),
    ("Is it salty? Is it sweet?\nanswer: True", "more than one question"),
])
def test_outputs_that_are_not_questions_are_refused(raw, reason):
    parsed = parsing.parse_generalization(raw)
    assert isinstance(parsed, parsing.ParseFailure) and reason in parsed.reason


def test_causal_answer_takes_the_first_line():
    assert parsing.parse_causal_answer(" yes\nQuestion: more", YN).answer == "yes"
    assert parsing.parse_causal_answer(" No, because it is not.", YN).answer == "no"
    failure = parsing.parse_causal_answer(" maybe\n", YN)
    assert isinstance(failure, parsing.ParseFailure) and "not one of the choices" in failure.reason
    assert isinstance(parsing.parse_causal_answer("   ", YN), parsing.ParseFailure)


def test_filter_keeps_minimal_edits_and_drops_only_copies_with_their_reason():
    c = [questions.Candidate(text=t, answer="yes", raw=t, index=i) for i, t in enumerate([
        "Did Abraham Lincoln eat lunch at the White House?",   # the original
        "did abraham lincoln eat LUNCH at the White House",    # the original again, case and punctuation aside
        "Did Abraham Lincoln eat dinner at the White House?",  # a counterfactual: one word changed
        "Did Abraham Lincoln have lunch at the White House?",  # a rephrase: one word changed
        "Did Abraham Lincoln eat dinner at the White House ?", # the counterfactual again
        "   ?",
        "Did George Washington eat lunch at Mount Vernon?",
    ])]
    kept, dropped = questions.filter_questions(c[1:], original=c[0].text)
    assert [k.index for k in kept] == [2, 3, 6]
    assert [(d.candidate.index, d.reason, d.matched) for d in dropped] == [
        (1, "duplicate_of_original", c[0].text), (4, "repeat", c[2].text), (5, "empty", "")]
    assert set(questions.DROP_REASONS) == {d.reason for d in dropped}
    # The item's stored questions of this type count as already there; other types are not compared.
    kept, dropped = questions.filter_questions(c[2:4], original=c[0].text, existing=[c[3].text.upper()])
    assert [k.index for k in kept] == [2] and [(d.reason, d.matched) for d in dropped] == [("repeat", c[3].text.upper())]


@pytest.mark.parametrize("text", [
    'Could Alice be the main character of "Alice\'s Adventures in Wonderland?"',
    '"Can a pancreas removal cause someone to go bankrupt?"',
    "Do ABBA's 1970's genre still matter",
    "Was long hair associated with the youth movements of the 1960s, such as Hippies.",
])
def test_questions_people_validated_are_questions(text):
    assert parsing.question_problem(text) is None


@pytest.mark.parametrize("text", [
    'All of the following are good negations of the question, "Is Amazonas a safe place?"',
    "Moon Jae-In was born in South Korea, not in Beijing.",
    "Is it salty. It is sweet",
    "question:",
])
def test_statements_are_still_not_questions(text):
    assert parsing.question_problem(text) is not None
