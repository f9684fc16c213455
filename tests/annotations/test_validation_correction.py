"""A validation judge who calls the proposed answer wrong corrects it to another answer: the page
offers only the other choices, and the answer path (``steps.clean_answer``) refuses a "correction"
to the proposed answer itself, with a worker-facing reason and nothing stored."""
from __future__ import annotations

import re

import pytest
from django.test import Client

from annotations.models import Annotation
from studies.models import Study
from tests.annotations.factories import make_study
from tests.annotations.pages import entry_url, form_fields, start

pytestmark = pytest.mark.django_db

CALLED_WRONG = {"answer": "", "well_formed": "yes", "type_correct": "yes", "answer_correct": "no"}


def _corrections_offered(page: str) -> list[str]:
    return re.findall(r'name="corrected_answer" id="corrected-[^"]*" value="([^"]*)"', page)


def test_the_page_leaves_the_proposed_answer_out_of_the_corrections(client):
    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=1, n_genq=1, units_per_task=1)
    task = start(client, entry_url(study))
    page = client.get(task).content.decode()
    assert "Proposed answer: <strong>Yes</strong>" in page
    assert _corrections_offered(page) == ["", "no"]  # "the proposed answer is right", and the other choice


def test_three_judges_cannot_correct_the_proposed_answer_to_itself():
    """The audit's probe: 3 judges call the proposed answer "yes" wrong and "correct" it to "yes".
    Each is refused with the reason shown on the page, and nothing is stored; a correction to the
    other answer is stored."""
    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=1, n_genq=1, units_per_task=1, quota=3)
    for _ in range(3):
        judge = Client()
        task = start(judge, entry_url(study))
        fields = form_fields(judge.get(task).content.decode())
        refused = judge.post(task + "answer", {**fields, **CALLED_WRONG, "corrected_answer": "yes"})
        assert refused.status_code == 400
        assert "is the proposed answer you called wrong" in refused.content.decode()
        assert not Annotation.objects.filter(claim__assignment__token=task.rstrip("/").split("/")[-1]).exists()
        stored = judge.post(task + "answer", {**fields, **CALLED_WRONG, "corrected_answer": "no"})
        assert stored.status_code == 302
    assert list(Annotation.objects.values_list("answer", "payload__corrected_answer")) == [("invalid", "no")] * 3
