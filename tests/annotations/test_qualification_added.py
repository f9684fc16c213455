"""A qualification test added to an open study holds new tasks and those not yet consented to:
where the task page shows the test, the answer and submit services refuse until the worker
passed it, whichever page added the test (the study page or the test's own admin page). A worker
who consented before the test existed finishes as they were told, and their page shows no test."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotations.models import Assignment, QualificationTest
from annotations.services.qualification import qualification_test_save
from tests.annotations.factories import add_qualification, make_study
from tests.annotations.pages import answer, complete_task, entry_url, form_fields, start
from tests.cockpit.test_study_setup import form_data

pytestmark = pytest.mark.django_db

QUESTIONS = [("Is Paris in France?", "yes"), ("Is Lyon in Spain?", "no")]


def add_test(admin_client, study, page: str) -> QualificationTest:
    if page == "study page":
        url = reverse("admin:studies_study_change", args=[study.pk])
        data = form_data(admin_client.get(url))
        data.update({"qualification_test-TOTAL_FORMS": "1", "qualification_test-0-pass_mark": "2",
                     "qualification_test-0-questions": "\n".join(f"{q} | {a}" for q, a in QUESTIONS)})
        response = admin_client.post(url, data)
    else:
        data = {"study": study.pk, "pass_mark": 2, "instructions": "", "questions-TOTAL_FORMS": len(QUESTIONS),
                "questions-INITIAL_FORMS": 0, "questions-MIN_NUM_FORMS": 0, "questions-MAX_NUM_FORMS": 1000}
        for i, (question, correct) in enumerate(QUESTIONS):
            data.update({f"questions-{i}-position": i, f"questions-{i}-question": question,
                         f"questions-{i}-choices": '["yes", "no"]', f"questions-{i}-correct_answer": correct})
        response = admin_client.post(reverse("admin:annotations_qualificationtest_add"), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    test = QualificationTest.objects.get(study=study)
    assert test.questions.count() == len(QUESTIONS)
    return test


def pass_test(browser: Client, task: str, test: QualificationTest) -> None:
    answers = {f"q_{q.pk}": q.correct_answer for q in test.questions.all()}
    assert browser.post(task + "qualification", answers).status_code == 302


@pytest.mark.parametrize("page", ["study page", "test admin"])
def test_a_test_added_to_an_open_study_holds_new_tasks_not_those_consented_to_before(admin_client, page):
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    browser = Client()
    task = start(browser, entry_url(study))
    fields = form_fields(browser.get(task).content.decode())  # the first question, on screen
    answered = Client()  # another worker, who answered once before the test came
    answered_task = start(answered, entry_url(study))
    assert answer(answered, answered_task)[1].status_code == 302

    test = add_test(admin_client, study, page)

    # Consented before the test existed: the task goes on without it, to its completion code.
    assert 'name="q_' not in browser.get(task).content.decode()
    assert browser.post(task + "answer", {**fields, "answer": "yes"}).status_code == 302
    going = Assignment.objects.get(token=task.rstrip("/").rsplit("/", 1)[-1])
    assert not going.qualification_pending and going.status == Assignment.Status.ACTIVE

    # The task already answered goes on (its page shows no test), to its completion code.
    assert 'name="q_' not in answered.get(answered_task).content.decode()
    complete_task(answered, answered_task)
    assert answered.post(answered_task + "submit").status_code == 302

    complete_task(browser, task)
    assert browser.post(task + "submit").status_code == 302
    going.refresh_from_db()
    assert going.status == Assignment.Status.SUBMITTED

    # A worker who comes after the test takes it first, whichever page added it.
    newcomer = Client()
    later = start(newcomer, entry_url(study))
    assert 'name="q_' in newcomer.get(later).content.decode()
    held = Assignment.objects.get(token=later.rstrip("/").rsplit("/", 1)[-1])
    assert held.qualification_pending
    pass_test(newcomer, later, test)
    complete_task(newcomer, later)
    assert newcomer.post(later + "submit").status_code == 302


def test_a_changed_test_holds_no_task_again():
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    test = add_qualification(study, pass_mark=2)  # tests/annotations/factories: no service
    passed = Client()
    task = start(passed, entry_url(study))
    pass_test(passed, task, test)
    test.instructions = "Read carefully."
    qualification_test_save(test=test, user=None)  # a change is no new test: nothing is held again
    assert not Assignment.objects.get().qualification_pending
    assert answer(passed, task)[1].status_code == 302


def test_a_task_answered_while_the_study_had_no_test_goes_on_when_one_is_added_again():
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    add_qualification(study)
    browser = Client()
    task = start(browser, entry_url(study))
    assert Assignment.objects.get().qualification_pending
    QualificationTest.objects.filter(study=study).delete()  # nobody took it: it may go
    assert answer(browser, task)[1].status_code == 302  # no test: the answers come in
    qualification_test_save(test=QualificationTest(study=study, pass_mark=1), questions=[{"question": "Is Paris in France?", "choices": ["yes", "no"], "correct_answer": "yes"}], user=None)
    assert not Assignment.objects.get().qualification_pending  # its page shows no test, so it goes on
    assert answer(browser, task)[1].status_code == 302


def test_the_service_saves_a_test_only_for_whoever_may_change_the_study():
    """qualification_test_save checks the acting user itself (CHANGE on the study), so the study
    page, the test's admin page and any later caller get one answer; the study page's form, unnamed,
    acts for nobody, never as the operator."""
    from django.contrib.auth import get_user_model

    from annotations.services.qualification import QualificationTestRefused
    from cockpit.study_setup import QualificationTestForm
    from studies.services.sharing import study_share
    from tests.api.conftest import grant

    def user(name):
        return grant(get_user_model().objects.create_user(username=name, password="pw", is_staff=True),
                     "studies.view_study", "studies.change_study")

    owner, viewer, stranger = user("olga"), user("vic"), user("sam")
    study = make_study(n_items=2, n_sources=1, owner=owner)
    study_share(study=study, user=owner, with_user=viewer)  # VIEW: reads the study, changes nothing
    for who in (viewer, stranger):
        with pytest.raises(QualificationTestRefused, match=f"study {study.pk}: not found or not yours to change"):
            qualification_test_save(test=QualificationTest(study=study, pass_mark=1), user=who)
    form = QualificationTestForm(data={"pass_mark": 1, "instructions": "", "questions": "Is Paris in France? | yes"},
                                 instance=QualificationTest(study=study))
    assert form.is_valid(), form.errors
    with pytest.raises(QualificationTestRefused):
        form.save()
    assert not QualificationTest.objects.filter(study=study).exists()
    qualification_test_save(test=QualificationTest(study=study, pass_mark=1), questions=[{"question": "Is Paris in France?", "choices": ["yes", "no"], "correct_answer": "yes"}], user=owner)
    assert QualificationTest.objects.filter(study=study).count() == 1
