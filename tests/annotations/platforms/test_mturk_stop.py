"""Stopping an MTurk study through botocore's Stubber: the one ``study_close`` (HITs expired, from
the services and from the study admin's action), blocks, notifications and extra assignments."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

import studies.services.studies as study_services
from annotations.models import Publication
from annotations.platforms.mturk import EXPIRE_NOW
from annotations.services.platforms.close import study_close, worker_block
from annotations.services.platforms.publish import study_add_assignments
from studies.models import Study
from tests.annotations.platforms.conftest import open_study, submitted
from tests.annotations.platforms.mturk_stubs import HIT_A, HIT_B, published


def test_there_is_one_study_close_and_it_lives_with_the_platforms():
    assert not hasattr(study_services, "study_close")


def test_closing_from_the_study_admin_expires_the_hits(mturk, study):
    platform, stubber = mturk
    publication = published(stubber, study)
    stubber.add_response("update_expiration_for_hit", {}, {"HITId": HIT_A, "ExpireAt": EXPIRE_NOW})
    stubber.add_response("update_expiration_for_hit", {}, {"HITId": HIT_B, "ExpireAt": EXPIRE_NOW})
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.org", "pw"))

    response = client.post(reverse("admin:studies_study_changelist"),
                           {"action": "close_studies", "_selected_action": [study.pk]}, follow=True)

    assert response.status_code == 200
    assert "1 study closed." in response.content.decode()
    stubber.assert_no_pending_responses()  # both HITs expired: no live HIT is left behind
    study.refresh_from_db()
    publication.refresh_from_db()
    assert (study.status, publication.status) == (Study.Status.CLOSED, Publication.Status.CLOSED)


def test_block_expire_and_add_assignments(mturk, study):
    platform, stubber = mturk
    publication = published(stubber, study)
    work = submitted(study, platform="mturk", worker_id="ASPAMMER", assignment_id="3SPAMAAAAAAAAAAAAAAAAAAAAAAAAA")
    stubber.add_response("create_worker_block", {}, {"WorkerId": "ASPAMMER", "Reason": "Failed every attention check."})
    worker_block(participant=work.participant, reason="Failed every attention check.", study=study)
    worker_block(participant=work.participant, reason="Failed every attention check.", study=study)
    work.participant.refresh_from_db()
    assert work.participant.blocked

    # 37 of 40 places still open (this worker did 3 units): 13 tasks; HIT B has 1 free assignment
    # and may grow by 4 (it stays below 10, as MTurk requires); 8 tasks are left for a new batch.
    stubber.add_response("get_hit", {"HIT": {"HITId": HIT_A, "MaxAssignments": 9, "NumberOfAssignmentsAvailable": 0}},
                         {"HITId": HIT_A})
    stubber.add_response("get_hit", {"HIT": {"HITId": HIT_B, "MaxAssignments": 5, "NumberOfAssignmentsAvailable": 1}},
                         {"HITId": HIT_B})
    stubber.add_response("create_additional_assignments_for_hit", {}, {
        "HITId": HIT_B, "NumberOfAdditionalAssignments": 4, "UniqueRequestToken": f"{publication.request_token}-x1-9"})
    result = study_add_assignments(study=study)
    assert (result["needed"], result["available"], result["added"], result["not_placed"]) == (13, 1, 4, 8)

    stubber.add_response("update_expiration_for_hit", {}, {"HITId": HIT_A, "ExpireAt": EXPIRE_NOW})
    stubber.add_response("update_expiration_for_hit", {}, {"HITId": HIT_B, "ExpireAt": EXPIRE_NOW})
    study_close(study=study)
    study_close(study=study)

    stubber.assert_no_pending_responses()
    publication.refresh_from_db()
    assert publication.status == Publication.Status.CLOSED


def test_notify_workers_sends_one_message_per_content(mturk, study):
    from annotations.services.platforms.close import workers_notify

    platform, stubber = mturk
    open_study(study)
    submitted(study, platform="mturk", worker_id="AONE", assignment_id="3ONE")
    submitted(study, platform="mturk", worker_id="ATWO", assignment_id="3TWO")
    stubber.add_response("notify_workers", {"NotifyWorkersFailureStatuses": []}, {
        "Subject": "New batch", "MessageText": "A new batch is up.", "WorkerIds": ["AONE", "ATWO"]})

    for _ in range(2):
        result = workers_notify(study=study, subject="New batch", message="A new batch is up.")

    stubber.assert_no_pending_responses()
    assert result["notified"] == 2
