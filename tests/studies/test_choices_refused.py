"""The choice rules the questionnaire reads (``studies.choices``, their one owner): a value that is no list of choices is refused with a ``ValueError`` that says
what it got, never a ``TypeError`` from iterating a number (the worker page of a question whose
``metadata["choices"]`` was 5 answered 500), and a correct answer over such choices is a problem
named, not a crash."""
from __future__ import annotations

import pytest

from studies.choices import correct_answer_problem, normalise_choices
from studies.models import YES_NO_CHOICES


@pytest.mark.parametrize("value", [5, 2.5, True, "a,b", {"label": "a"}, ["a", None], ["a", ["b"]]],
                         ids=["int", "float", "bool", "string", "object", "none-choice", "list-choice"])
def test_normalise_choices_refuses_what_is_no_list_of_choices(value):
    with pytest.raises(ValueError, match="choice"):
        normalise_choices(value)


def test_normalise_choices_reads_what_it_always_read():
    assert normalise_choices(None) == normalise_choices([]) == YES_NO_CHOICES
    assert normalise_choices(["a", "b"]) == [{"label": "a", "text": "a"}, {"label": "b", "text": "b"}]
    assert normalise_choices([{"label": " a ", "text": "Alpha"}, {"label": "b"}]) == [
        {"label": "a", "text": "Alpha"}, {"label": "b", "text": "b"}]


def test_a_correct_answer_over_unusable_choices_is_a_problem_named():
    problem = correct_answer_problem(5, "a")
    assert problem is not None and problem.startswith("the choices are not usable: choices must be a list")
    assert correct_answer_problem(["a", "b"], "a") is None
    assert "'True' is not one of the choices (yes, no)" in correct_answer_problem([], "True")
