"""A qualification test's pass mark is fixed once a worker has taken the test (the grades given were
against it): ``annotations.services.qualification.qualification_test_save`` refuses a changed one,
whoever calls it, as the study page and the test's admin page already show it read-only."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotations.models import QualificationGrant, QualificationTest
from annotations.services.qualification import QualificationSetupError, qualification_test_save
from tests.annotations.factories import make_study
from tests.annotations.pages import entry_url, start
from tests.annotations.test_qualification_added import add_test, pass_test
from tests.cockpit.test_study_setup import form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def taken(admin_client):
    """An open study whose test (pass mark 2 of 2, added on the study page) a worker has passed."""
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    test = add_test(admin_client, study, "study page")
    browser = Client()
    pass_test(browser, start(browser, entry_url(study)), test)
    assert QualificationGrant.objects.get(study=study).passed
    return study, test


def test_the_service_refuses_a_changed_pass_mark_once_the_test_was_taken(taken):
    study, test = taken
    test.pass_mark = 1
    with pytest.raises(QualificationSetupError, match="its pass mark can no longer change"):
        qualification_test_save(test=test, user=None)  # the operator too
    assert QualificationTest.objects.get(pk=test.pk).pass_mark == 2


def test_the_same_pass_mark_saves_and_other_fields_still_change(taken):
    study, _ = taken
    test = QualificationTest.objects.get(study=study)
    test.instructions = "Answer both questions."
    qualification_test_save(test=test, user=None)
    stored = QualificationTest.objects.get(pk=test.pk)
    assert (stored.pass_mark, stored.instructions) == (2, "Answer both questions.")


def test_a_pass_mark_changes_until_a_worker_takes_the_test(admin_client):
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    test = add_test(admin_client, study, "study page")
    test.pass_mark = 1
    qualification_test_save(test=test, user=None)
    assert QualificationTest.objects.get(pk=test.pk).pass_mark == 1


def test_the_study_page_keeps_the_pass_mark_of_a_taken_test(admin_client, taken):
    study, test = taken
    url = reverse("admin:studies_study_change", args=[study.pk])
    data = form_data(admin_client.get(url))
    data["qualification_test-0-pass_mark"] = "1"
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert QualificationTest.objects.get(pk=test.pk).pass_mark == 2
