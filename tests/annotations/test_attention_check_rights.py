"""An attention check is written only through ``attention_check_save`` / ``attention_check_delete``,
which check the acting user's change rights on its study and the fixed rule (a check once given to
a worker neither changes nor goes) themselves: the study page's inline, the checks' own admin page
and any other caller get one answer."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.urls import reverse

from annotations.models import AttentionCheck
from annotations.services.qualification import (
    AttentionCheckRefused,
    attention_check_delete,
    attention_check_save,
)
from cockpit.study_setup import AttentionCheckForm
from studies.models import StudyShare
from tests.api.conftest import grant
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab():
    User = get_user_model()
    alice = grant(User.objects.create_user(username="alice", password="pw", is_staff=True),
                  "studies.view_study", "studies.change_study", "annotations.view_attentioncheck",
                  "annotations.add_attentioncheck", "annotations.change_attentioncheck",
                  "annotations.delete_attentioncheck")
    bob = grant(User.objects.create_user(username="bob", password="pw", is_staff=True),
                "studies.view_study", "studies.change_study", "annotations.view_attentioncheck",
                "annotations.add_attentioncheck", "annotations.change_attentioncheck",
                "annotations.delete_attentioncheck")
    study = open_utility_study(name="alices", owner=alice, n_items=2, n_sources=1, quota=2)
    check = attention_check_save(check=AttentionCheck(study=study, question="Choose no.", correct_answer="no"),
                                 user=alice)
    return {"alice": alice, "bob": bob, "study": study, "check": check}


def test_another_researcher_may_not_add_change_or_delete_a_check(lab):
    bob, study, check = lab["bob"], lab["study"], lab["check"]
    with pytest.raises(AttentionCheckRefused, match=f"study {study.pk}: not found or not yours to change"):
        attention_check_save(check=AttentionCheck(study=study, question="Choose yes.", correct_answer="yes"), user=bob)
    check.correct_answer = "yes"
    with pytest.raises(AttentionCheckRefused, match="not yours to change"):
        attention_check_save(check=check, user=bob)
    with pytest.raises(AttentionCheckRefused, match="not yours to change"):
        attention_check_delete(check=check, user=bob)
    assert list(AttentionCheck.objects.filter(study=study).values_list("correct_answer", flat=True)) == ["no"]
    # A share with change rights makes it his to change.
    StudyShare.objects.create(study=study, user=bob, level="change")
    bob = get_user_model().objects.get(pk=bob.pk)
    assert attention_check_save(check=check, user=bob).correct_answer == "yes"


def test_a_check_given_to_a_worker_is_fixed_for_its_owner_too_but_new_ones_may_be_added(lab):
    alice, study, check = lab["alice"], lab["study"], lab["check"]
    work(study, "W1", submit=False, steps=0)  # the task carries the check
    check.correct_answer = "yes"
    with pytest.raises(AttentionCheckRefused, match="no longer change"):
        attention_check_save(check=check, user=alice)
    with pytest.raises(AttentionCheckRefused, match="not deleted"):
        attention_check_delete(check=check, user=alice)
    assert AttentionCheck.objects.get(pk=check.pk).correct_answer == "no"
    added = attention_check_save(check=AttentionCheck(study=study, question="Choose yes.", correct_answer="yes"),
                                 user=alice)
    assert AttentionCheck.objects.filter(study=study).count() == 2 and added.pk


def test_a_checks_study_never_changes(lab):
    other = open_utility_study(name="alices-second", owner=lab["alice"], n_items=1, n_sources=1, quota=1)
    check = lab["check"]
    check.study = other
    with pytest.raises(AttentionCheckRefused, match="its study never changes"):
        attention_check_save(check=check, user=lab["alice"])


def test_a_form_that_names_no_user_saves_nothing(lab):
    """The study page's inline form names the request's user; a form used without one is refused,
    never acting as the operator."""
    form = AttentionCheckForm(data={"question": "Choose no.", "choices": "", "correct_answer": "no"},
                              instance=AttentionCheck(study=lab["study"]))
    assert form.acting_user == AnonymousUser() and form.is_valid(), form.errors
    with pytest.raises(AttentionCheckRefused):
        form.save()
    assert AttentionCheck.objects.filter(study=lab["study"]).count() == 1


def test_the_checks_admin_page_deletes_through_the_service(client, lab):
    """The checks' own admin page: the owner deletes an unused check there (``delete_model``)."""
    client.force_login(lab["alice"])
    url = reverse("admin:annotations_attentioncheck_delete", args=[lab["check"].pk])
    assert client.post(url, {"post": "yes"}).status_code == 302
    assert not AttentionCheck.objects.filter(pk=lab["check"].pk).exists()
