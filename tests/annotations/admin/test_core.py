"""``annotations.admin.core``: the qualification test's own admin page saves the test and its
questions through ``qualification_test_save``, and refuses, on the page and saving nothing, a test
no worker can pass (a pass mark above the number of questions, or no question left), as the study
page does: one rule, ``qualification_test_problem``."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from annotations.admin import core as admin_core
from annotations.models import QualificationTest
from annotations.services.assignment import assignment_start
from annotations.services.qualification import qualification_questions, qualification_submit
from tests.annotations.factories import ParticipantFactory, add_qualification, make_study
from tests.api.conftest import grant

pytestmark = pytest.mark.django_db

QUESTIONS = [("Is Paris in France?", "yes"), ("Is Lyon in Spain?", "no"), ("Is Rome in Italy?", "yes")]


def _add_data(study, pass_mark: int) -> dict:
    data = {"study": study.pk, "pass_mark": pass_mark, "instructions": "", "questions-TOTAL_FORMS": len(QUESTIONS),
            "questions-INITIAL_FORMS": 0, "questions-MIN_NUM_FORMS": 0, "questions-MAX_NUM_FORMS": 1000}
    for i, (question, correct) in enumerate(QUESTIONS):
        data.update({f"questions-{i}-position": i, f"questions-{i}-question": question,
                     f"questions-{i}-choices": '["yes", "no"]', f"questions-{i}-correct_answer": correct})
    return data


def _change_data(test, *, pass_mark: int, delete: bool = False) -> dict:
    questions = list(test.questions.order_by("position", "id"))
    data = {"study": test.study_id, "pass_mark": pass_mark, "instructions": test.instructions,
            "questions-TOTAL_FORMS": len(questions), "questions-INITIAL_FORMS": len(questions),
            "questions-MIN_NUM_FORMS": 0, "questions-MAX_NUM_FORMS": 1000}
    for i, q in enumerate(questions):
        data.update({f"questions-{i}-id": q.pk, f"questions-{i}-test": test.pk, f"questions-{i}-position": q.position,
                     f"questions-{i}-question": q.question, f"questions-{i}-choices": '["yes", "no"]',
                     f"questions-{i}-correct_answer": q.correct_answer})
        if delete:
            data[f"questions-{i}-DELETE"] = "on"
    return data


def test_the_add_page_refuses_a_pass_mark_above_the_number_of_questions(admin_client):
    study = make_study(n_items=2, n_sources=1)
    response = admin_client.post(reverse("admin:annotations_qualificationtest_add"), _add_data(study, pass_mark=5))
    assert response.status_code == 200
    assert "The pass mark is higher than the number of questions (3)." in response.content.decode()
    assert not QualificationTest.objects.filter(study=study).exists()


def test_the_add_page_saves_a_passable_test_with_its_questions(admin_client):
    study = make_study(n_items=2, n_sources=1)
    response = admin_client.post(reverse("admin:annotations_qualificationtest_add"), _add_data(study, pass_mark=3))
    assert response.status_code == 302, response.content.decode()[:3000]
    test = QualificationTest.objects.get(study=study)
    assert test.pass_mark == 3
    assert [(q["question"], q["correct_answer"]) for q in qualification_questions(test)] == QUESTIONS


def test_the_change_page_refuses_a_pass_mark_above_the_number_of_questions(admin_client):
    study = make_study(n_items=2, n_sources=1)
    test = add_qualification(study, pass_mark=2)  # three questions
    before = qualification_questions(test)
    url = reverse("admin:annotations_qualificationtest_change", args=[test.pk])
    response = admin_client.post(url, _change_data(test, pass_mark=5))
    assert response.status_code == 200
    assert "The pass mark is higher than the number of questions (3)." in response.content.decode()
    assert QualificationTest.objects.get(pk=test.pk).pass_mark == 2
    assert qualification_questions(test) == before


def test_the_change_page_refuses_deleting_every_question(admin_client):
    study = make_study(n_items=2, n_sources=1)
    test = add_qualification(study, pass_mark=1)
    before = qualification_questions(test)
    url = reverse("admin:annotations_qualificationtest_change", args=[test.pk])
    response = admin_client.post(url, _change_data(test, pass_mark=1, delete=True))
    assert response.status_code == 200
    assert "Write at least one question." in response.content.decode()
    assert qualification_questions(test) == before


def test_the_change_page_deletes_a_question_the_pass_mark_still_reaches(admin_client):
    study = make_study(n_items=2, n_sources=1)
    test = add_qualification(study, pass_mark=2)
    data = _change_data(test, pass_mark=2)
    data["questions-0-DELETE"] = "on"
    response = admin_client.post(reverse("admin:annotations_qualificationtest_change", args=[test.pk]), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert [q["correct_answer"] for q in qualification_questions(test)] == ["no", "yes"]


def _bob() -> tuple[object, Client]:
    """Staff "bob": the test's and the study's model rights, none on the questions (no inline)."""
    bob = grant(get_user_model().objects.create_user(username="bob", password="pw", is_staff=True),
                "annotations.view_qualificationtest", "annotations.change_qualificationtest",
                "annotations.add_qualificationtest", "studies.view_study", "studies.change_study")
    client = Client()
    client.force_login(bob)
    return bob, client


def test_without_the_questions_the_change_page_judges_the_stored_ones():
    # Given: Bob's study with a three-question test; Bob may not see its questions.
    bob, client = _bob()
    study = make_study(n_items=2, n_sources=1, owner=bob)
    test = add_qualification(study, pass_mark=2)
    url = reverse("admin:annotations_qualificationtest_change", args=[test.pk])

    # When: he asks a pass mark above them, then one they reach.
    refused = client.post(url, {"pass_mark": 5, "instructions": ""})
    saved = client.post(url, {"pass_mark": 3, "instructions": ""})

    # Then: the first is refused on the page, the second saved.
    assert refused.status_code == 200
    assert "The pass mark is higher than the number of questions (3)." in refused.content.decode()
    assert saved.status_code == 302, saved.content.decode()[:3000]
    assert QualificationTest.objects.get(pk=test.pk).pass_mark == 3


def test_without_the_questions_the_add_page_refuses_a_test_with_none():
    bob, client = _bob()
    study = make_study(n_items=2, n_sources=1, owner=bob)
    response = client.post(reverse("admin:annotations_qualificationtest_add"),
                           {"study": study.pk, "pass_mark": 1, "instructions": ""})
    assert response.status_code == 200
    assert "Write at least one question." in response.content.decode()
    assert not QualificationTest.objects.filter(study=study).exists()


def test_a_test_taken_between_the_page_and_its_save_is_refused_on_the_page(admin_client, monkeypatch):
    # Given: the change page was read while nobody had taken the test (its check said so), and a
    # worker took it since.
    study = make_study(n_items=2, n_sources=1)
    test = add_qualification(study, pass_mark=2)
    data = _change_data(test, pass_mark=3)
    task = assignment_start(study=study, participant=ParticipantFactory(), consented=True)
    qualification_submit(assignment=task, answers={str(q.pk): q.correct_answer for q in test.questions.all()})
    monkeypatch.setattr(admin_core, "qualification_test_taken", lambda test: False)  # the page's read

    # When: the page is saved with another pass mark.
    url = reverse("admin:annotations_qualificationtest_change", args=[test.pk])
    response = admin_client.post(url, data, follow=True)

    # Then: the service's refusal is on the page, and nothing was saved.
    assert response.status_code == 200
    assert "its pass mark can no longer change" in response.content.decode()
    assert QualificationTest.objects.get(pk=test.pk).pass_mark == 2


def _failed(study):
    """``study``'s test (pass mark 2 of three questions), which a worker took and failed."""
    test = add_qualification(study, pass_mark=2)
    task = assignment_start(study=study, participant=ParticipantFactory(), consented=True)
    wrong = {str(q.pk): "no" if q.correct_answer == "yes" else "yes" for q in test.questions.all()}
    grant = qualification_submit(assignment=task, answers=wrong)
    assert not grant.passed
    return test


def test_a_qualification_test_taken_between_its_delete_page_and_the_delete_stays(admin_client, monkeypatch):
    # Given: the delete page was read while nobody had taken the test (its check said so), and a
    # worker took it (and failed) since.
    study = make_study(n_items=2, n_sources=1)
    test = _failed(study)
    monkeypatch.setattr(admin_core, "qualification_test_taken", lambda test: False)  # the page's read

    # When: the deletion is confirmed.
    url = reverse("admin:annotations_qualificationtest_delete", args=[test.pk])
    response = admin_client.post(url, {"post": "yes"}, follow=True)

    # Then: the service's refusal is on the test's page, and the test stays (the failed worker's grant
    # refers to it).
    assert response.status_code == 200
    assert response.redirect_chain[-1][0] == reverse("admin:annotations_qualificationtest_change", args=[test.pk])
    assert "Nothing deleted: Workers have already taken this qualification test" in response.content.decode()
    assert QualificationTest.objects.filter(pk=test.pk).exists()


def test_a_qualification_test_taken_before_delete_selected_stays(admin_client, monkeypatch):
    study = make_study(n_items=2, n_sources=1)
    test = _failed(study)
    untaken = add_qualification(make_study(n_items=2, n_sources=1), pass_mark=1)
    monkeypatch.setattr(admin_core, "qualification_test_taken", lambda test: False)  # the page's read

    url = reverse("admin:annotations_qualificationtest_changelist")
    response = admin_client.post(url, {"action": "delete_selected", "_selected_action": [test.pk, untaken.pk],
                                       "post": "yes"}, follow=True)

    # Both or neither: the taken test refuses, so the untaken one stays too.
    assert response.status_code == 200
    assert "can no longer be deleted" in response.content.decode()
    assert QualificationTest.objects.filter(pk__in=[test.pk, untaken.pk]).count() == 2


def test_an_untaken_qualification_test_is_deleted_on_its_admin_page(admin_client):
    test = add_qualification(make_study(n_items=2, n_sources=1), pass_mark=1)
    url = reverse("admin:annotations_qualificationtest_delete", args=[test.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    assert not QualificationTest.objects.filter(pk=test.pk).exists()
