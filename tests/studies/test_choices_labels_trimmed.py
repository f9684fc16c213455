"""A choice's label is read by one rule, ``studies.choices.as_label`` (no surrounding white space),
whether the choice is a plain string or a ``{"label", "text"}`` object. Before, a plain string kept
its spaces ("Paris ") while the answer check trimmed the worker's answer ("Paris"): the option was
shown and could never be answered, and ``choices_problem`` (which trimmed) let such a list through."""
from __future__ import annotations

from studies.choices import choices_problem, correct_answer_problem, normalise_choices


def test_a_string_choice_label_is_read_as_an_object_choice_label_is():
    assert [c["label"] for c in normalise_choices(["Yes ", "No"])] == ["Yes", "No"]
    assert normalise_choices(["Yes ", "No"]) == [{"label": "Yes", "text": "Yes "}, {"label": "No", "text": "No"}]
    assert [c["label"] for c in normalise_choices([{"label": "Yes "}, " No"])] == ["Yes", "No"]


def test_choices_problem_judges_the_labels_offered():
    assert choices_problem(["Paris ", "London"]) is None
    assert choices_problem(["Paris ", "Paris"]) == "the choice 'Paris' is given twice"
    assert choices_problem([{"label": "Paris"}, " Paris "]) == "the choice 'Paris' is given twice"
    assert choices_problem(["Paris", "  "]).startswith("choice 2 must be a non-empty string")


def test_a_correct_answer_is_one_of_the_labels_offered_exactly():
    assert correct_answer_problem(["Yes ", "No"], "Yes") is None
    assert correct_answer_problem(["Yes ", "No"], "No") is None
    assert correct_answer_problem(["Yes ", "No"], "Yes ") == "'Yes ' is not one of the choices (Yes, No): write 'Yes', without the white space around it."
    assert correct_answer_problem(["Yes", "No"], "Maybe").startswith("'Maybe' is not one of the choices (Yes, No).")
