"""A generalization question's answer is one of the choices it offers, and its own choices
(``metadata["choices"]``) are a list of choices (``GeneralizationQuestion.clean``, whichever form
writes it). Carl holds a CHANGE share on olga's draft generalization study and adds questions to
its item on the admin's add page, as a researcher does; the questions that pass are asked on the
worker page once the study opens."""
from __future__ import annotations

import html
import json

import pytest
from django.test import Client
from django.urls import reverse

from annotations.models import Annotation
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from studies.models import GeneralizationQuestion, Study, StudyShare
from studies.services.sharing import study_share
from tests.admin_forms import admin_form_data
from tests.annotations.factories import make_study
from tests.annotations.pages import answer, entry_url, start
from tests.factories import staff

pytestmark = pytest.mark.django_db

ADD = "admin:studies_generalizationquestion_add"


@pytest.fixture
def lab():
    """Olga's draft generalization study of one yes/no item and no questions yet; carl may change it."""
    olga, _ = staff("olga")
    carl, client = staff("carl")
    study = make_study(kind=Study.Kind.GENERALIZATION, owner=olga, n_items=1, n_sources=1, n_genq=0, quota=1,
                       units_per_task=1, status=Study.Status.DRAFT)
    study_share(study=study, user=olga, with_user=carl, level=StudyShare.Level.CHANGE)
    return study, study.items.get(), client


def _add(client: Client, item, *, answer: str, metadata, text: str = "Is it so?"):
    # validation_status as the form sent it before it became read-only (the actions set it now)
    data = {"item": item.pk, "qtype": "rephrase", "text": text, "answer": answer, "origin": "",
            "validation_status": "unvalidated", "metadata": json.dumps(metadata)}
    return client.post(reverse(ADD), data)


def _errors(response) -> dict[str, list[str]]:
    assert response.status_code == 200, response.status_code  # the form again, with its errors
    return {name: list(errors) for name, errors in response.context["adminform"].form.errors.items()}


def test_a_gold_answer_that_is_not_a_choice_is_refused_on_the_answer(lab):
    _, item, client = lab

    refused = _add(client, item, answer="True", metadata={})
    accepted = _add(client, item, answer="yes", metadata={})

    errors = _errors(refused)
    assert list(errors) == ["answer"]
    assert "'True' is not one of the choices (yes, no)" in errors["answer"][0]
    assert "is not one of the choices (yes, no)" in html.unescape(refused.content.decode())
    assert accepted.status_code == 302
    assert list(GeneralizationQuestion.objects.values_list("answer", flat=True)) == ["yes"]


@pytest.mark.parametrize(("choices", "reason"), [
    (5, 'must be a list of at least two choices, e.g. ["a", "b"], not \'5\''),
    ("a,b", "must be a list of at least two choices"),
    (["a"], "must be a list of at least two choices, not 1"),
    (["a", ""], "choice 2 must be a non-empty string"),
    (["a", 3], "choice 2 must be a non-empty string"),
    ([{"label": "a"}, {"text": "B"}], "choice 2 must be a non-empty string"),
    (["a", "b", "a"], "the choice 'a' is given twice"),
    # An answer stores its label (50 characters): a longer one would be offered and never chosen.
    (["a", "b" * 51], "the label of choice 2 is 51 characters, at most 50"),
], ids=["number", "string", "one", "empty", "not-a-string", "no-label", "twice", "too-long"])
def test_own_choices_that_are_no_list_of_choices_are_refused_on_the_metadata(lab, choices, reason):
    _, item, client = lab

    errors = _errors(_add(client, item, answer="a", metadata={"choices": choices}))

    assert list(errors) == ["metadata"]
    assert errors["metadata"][0].startswith('metadata "choices": ') and reason in errors["metadata"][0]
    assert not GeneralizationQuestion.objects.exists()


def test_metadata_that_is_no_object_is_refused(lab):
    _, item, client = lab

    errors = _errors(_add(client, item, answer="yes", metadata=["a", "b"]))

    assert errors == {"metadata": ["metadata must be a JSON object, e.g. {}."]}


def test_own_choices_decide_which_answer_is_a_choice_and_are_what_workers_see(lab):
    study, item, client = lab

    wrong = _add(client, item, answer="yes", metadata={"choices": ["maybe", "surely"]})
    own = _add(client, item, answer="surely", metadata={"choices": ["maybe", "surely"]})
    labelled = _add(client, item, answer="b", text="Which one?",
                    metadata={"choices": [{"label": "a", "text": "Alpha"}, {"label": "b", "text": "Beta"}]})

    assert "'yes' is not one of the choices (maybe, surely)" in _errors(wrong)["answer"][0]
    assert own.status_code == labelled.status_code == 302
    study = study_open(study=study, user=OPERATOR)
    pages = []
    for worker in ("5a9d64f5f6dfdd0001eaa73d", "5a9d64f5f6dfdd0001eaa73e"):
        worker_client = Client()
        pages.append(worker_client.get(start(worker_client, entry_url(study, PROLIFIC_PID=worker))))
    assert all(page.status_code == 200 for page in pages)
    shown = " ".join(page.content.decode() for page in pages)
    assert 'value="surely"' in shown and 'value="maybe"' in shown


def test_an_edit_that_takes_the_answer_out_of_the_choices_is_refused(lab):
    _, item, client = lab
    assert _add(client, item, answer="yes", metadata={}).status_code == 302
    question = GeneralizationQuestion.objects.get()
    url = reverse("admin:studies_generalizationquestion_change", args=[question.pk])

    response = client.post(url, {**admin_form_data(client.get(url)), "answer": "True"})

    assert "'True' is not one of the choices (yes, no)" in _errors(response)["answer"][0]
    question.refresh_from_db()
    assert question.answer == "yes"


def test_a_label_as_long_as_an_answer_holds_is_offered_and_can_be_chosen(lab):
    """The longest label the rule lets in (50 characters) is one a worker can choose and the answer
    stores whole; one character more is refused when the question is written (above), where before
    it was offered and every choice of it was a 400 on the worker page."""
    study, item, client = lab
    longest = "It depends on the season, and on the weather there"
    assert len(longest) == 50
    assert _add(client, item, answer=longest, metadata={"choices": ["no", longest]}).status_code == 302
    study = study_open(study=study, user=OPERATOR)
    worker = Client()
    task = start(worker, entry_url(study, PROLIFIC_PID="5a9d64f5f6dfdd0001eaa73f"))
    assert html.escape(longest) in worker.get(task).content.decode()
    assert answer(worker, task, longest)[1].status_code == 302
    assert list(Annotation.objects.values_list("answer", flat=True)) == [longest]
