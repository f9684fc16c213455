"""The early-stop close (``stopping.study_close_when_decided``) is the app's own decision, taken at
the study's own setting (``stop_when_decided``): it acts as the operator, not as the study's owner,
so a study whose owner was deactivated or lost ``studies.change_study`` still stops recruiting once
every unit is decided, from the task queued at the last submit (and beat's fallback finds nothing
left). It moves no money; the log says the app closed the study because every unit was decided."""
from __future__ import annotations

import logging

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from annotations.models import ParticipantLink, Publication, Unit
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.platforms.publish import study_publish
from annotations.tasks.assignments import close_decided_studies
from studies.models import Study, StudyShare
from studies.services.sharing import study_share
from tests.annotations.factories import ParticipantFactory, make_study
from tests.api.conftest import grant

pytestmark = pytest.mark.django_db


def _answer_with_gold(study: Study):
    assignment = assignment_start(study=study, participant=ParticipantFactory())
    for claim in assignment.claims.select_related("unit__item"):
        gold = claim.unit.item.gold_answer
        annotation_submit(assignment=assignment, claim=claim, step="before", answer=gold)
        annotation_submit(assignment=assignment, claim=claim, step="after", answer=gold)
    return assignment


def _lose_rights(owner, how: str) -> None:
    if how == "deactivated":
        owner.is_active = False
        owner.save(update_fields=["is_active"])
    else:
        owner.user_permissions.remove(Permission.objects.get(content_type__app_label="studies",
                                                             codename="change_study"))


@pytest.mark.parametrize("how", ["deactivated", "change_study removed"])
def test_a_decided_study_closes_although_its_owner_lost_their_rights(django_capture_on_commit_callbacks, caplog,
                                                                     how):
    users = get_user_model().objects
    owner = grant(users.create_user("olive", "o@example.org", "pw", is_staff=True),
                  "studies.change_study", "studies.pay_workers")
    colleague = grant(users.create_user("colin", "c@example.org", "pw", is_staff=True),
                      "studies.change_study", "studies.pay_workers")
    study = make_study(n_items=2, n_sources=1, quota=5, units_per_task=2, stop_when_decided=True, owner=owner)
    study_share(study=study, user=owner, with_user=colleague, level=StudyShare.Level.PAY)
    publication = study_publish(study=study, user=owner, platform_name="link")
    unused = ParticipantLink.objects.filter(study=study, participant__isnull=True, revoked=False)
    assert unused.exists()

    _lose_rights(owner, how)
    for _ in range(2):
        assignment_submit(assignment=_answer_with_gold(study))
    last = _answer_with_gold(study)
    with caplog.at_level(logging.INFO, logger="annotations.services.stopping"), \
            django_capture_on_commit_callbacks(execute=True) as queued:
        assignment_submit(assignment=last)
    assert len(queued) == 1  # the close, queued once the last unit was decided
    assert not Unit.objects.filter(study=study, decided_at__isnull=True).exists()

    study.refresh_from_db()
    publication.refresh_from_db()
    assert (study.status, publication.status) == (Study.Status.CLOSED, Publication.Status.CLOSED)
    assert not unused.exists()  # every unused link withdrawn: nobody else is recruited
    closed_by_app = [r.getMessage() for r in caplog.records if "closed by the app" in r.getMessage()]
    assert closed_by_app == [f"study {study.pk} closed by the app (stop_when_decided): every unit is decided; "
                             "1 publication(s) closed"]
    assert close_decided_studies() == 0  # beat's fallback: nothing left to close
