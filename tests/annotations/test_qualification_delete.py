"""A qualification test is deleted only through ``qualification_test_delete``, which checks the
acting user's change rights on its study and the fixed rule (a test a worker took is not deleted)
itself, under the study's and the test's locks: the study page's inline, the test's own admin page
and any other caller get one answer."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from annotations.models import QualificationQuestion, QualificationTest
from annotations.services.assignment import assignment_start
from annotations.services.qualification import (
    QualificationSetupError,
    QualificationTestRefused,
    qualification_submit,
    qualification_test_delete,
)
from studies.services.sharing import study_share
from tests.annotations.factories import ParticipantFactory, add_qualification, make_study
from tests.api.conftest import grant

pytestmark = pytest.mark.django_db


def _user(name):
    return grant(get_user_model().objects.create_user(username=name, password="pw", is_staff=True),
                 "studies.view_study", "studies.change_study")


def test_the_qualification_test_delete_service_refuses_a_user_without_change_rights():
    owner, viewer, stranger = _user("olga"), _user("vic"), _user("sam")
    study = make_study(n_items=2, n_sources=1, owner=owner)
    study_share(study=study, user=owner, with_user=viewer)  # VIEW: reads the study, changes nothing
    test = add_qualification(study, pass_mark=1)
    for who in (viewer, stranger):
        with pytest.raises(QualificationTestRefused,
                           match=f"study {study.pk}: not found or not yours to change .* test {test.pk} was not deleted"):
            qualification_test_delete(test=test, user=who)
    assert QualificationTest.objects.filter(pk=test.pk).exists()


def test_the_qualification_test_delete_service_deletes_an_untaken_test_with_its_questions():
    owner = _user("olga")
    test = add_qualification(make_study(n_items=2, n_sources=1, owner=owner), pass_mark=1)
    qualification_test_delete(test=test, user=owner)
    assert not QualificationTest.objects.filter(pk=test.pk).exists()
    assert not QualificationQuestion.objects.filter(test_id=test.pk).exists()
    qualification_test_delete(test=test, user=owner)  # already gone: nothing to do


@pytest.mark.parametrize("who", ["owner", "operator"])
def test_the_qualification_test_delete_service_keeps_a_taken_test(who):
    owner = _user("olga")
    study = make_study(n_items=2, n_sources=1, owner=owner)
    test = add_qualification(study, pass_mark=1)
    task = assignment_start(study=study, participant=ParticipantFactory(), consented=True)
    qualification_submit(assignment=task, answers={str(q.pk): q.correct_answer for q in test.questions.all()})
    with pytest.raises(QualificationSetupError, match=f"already taken .* qualification test {test.pk} of study "
                                                      f"{study.pk} can no longer be deleted"):
        qualification_test_delete(test=test, user=owner if who == "owner" else None)
    assert QualificationTest.objects.filter(pk=test.pk).exists()
