"""Stopping an MTurk study through botocore's Stubber: the one ``study_close`` (HITs expired, from
the services and from the study admin's action), blocks, notifications and extra assignments."""
from __future__ import annotations

from decimal import Decimal

from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

import studies.services.studies as study_services
from annotations.models import Publication
from annotations.platforms.mturk import EXPIRE_NOW
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.blocks import worker_block
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import study_add_assignments
from studies.design import tasks_for_places
from studies.models import Study
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import open_study, publish_on, submitted
from tests.annotations.platforms.mturk_stubs import HIT_A, HIT_B, hit, hit_params, published


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
    for _ in range(2):  # a block everywhere (the operator's) blocks on the MTurk account, once
        worker_block(user=OPERATOR, participant=work.participant, reason="Failed every attention check.", study=study,
                     everywhere=True)
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
    result = study_add_assignments(user=OPERATOR, study=study)
    assert (result["needed"], result["available"], result["added"], result["not_placed"]) == (13, 1, 4, 8)

    stubber.add_response("update_expiration_for_hit", {}, {"HITId": HIT_A, "ExpireAt": EXPIRE_NOW})
    stubber.add_response("update_expiration_for_hit", {}, {"HITId": HIT_B, "ExpireAt": EXPIRE_NOW})
    study_close(user=OPERATOR, study=study)
    study_close(user=OPERATOR, study=study)

    stubber.assert_no_pending_responses()
    publication.refresh_from_db()
    assert publication.status == Publication.Status.CLOSED


def test_notify_workers_sends_one_message_per_content(mturk, study):
    from annotations.services.platforms.notify import workers_notify

    platform, stubber = mturk
    open_study(study)
    submitted(study, platform="mturk", worker_id="AONE", assignment_id="3ONE")
    submitted(study, platform="mturk", worker_id="ATWO", assignment_id="3TWO")
    stubber.add_response("notify_workers", {"NotifyWorkersFailureStatuses": []}, {
        "Subject": "New batch", "MessageText": "A new batch is up.", "WorkerIds": ["AONE", "ATWO"]})

    for _ in range(2):
        result = workers_notify(user=OPERATOR, study=study, subject="New batch", message="A new batch is up.")

    stubber.assert_no_pending_responses()
    assert result["notified"] == 2


def test_tasks_for_places_follow_the_assignment_rule():
    # A task holds one unit of each question at most: 10 places on one question need 10 tasks.
    assert tasks_for_places(places={"item:1": 10}, units_per_task=3) == 10
    assert tasks_for_places(places={"item:1": 4, "item:2": 4, "item:3": 4, "item:4": 0}, units_per_task=3) == 4
    assert tasks_for_places(places={"item:1": 5, "item:2": 1}, units_per_task=3) == 5
    assert tasks_for_places(places={}, units_per_task=3) == 0


def test_extra_assignments_count_the_tasks_the_open_places_need(db, mturk):
    """1 item x 2 sources x 5 workers in tasks of 3: no worker may see the item twice, so each
    task holds one unit and the 10 places need 10 tasks (published as HITs of 9 and 1, all still
    available): nothing to add. The service counted ceil(10 / 3) = 4 tasks."""
    platform, stubber = mturk
    study = make_study(n_items=1, n_sources=2, quota=5, units_per_task=3, status="draft", reward=Decimal("2.00"),
                       estimated_minutes_per_task=Decimal("6.0"))
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_A, 9), hit_params(study, index=0, size=9))
    stubber.add_response("create_hit", hit(HIT_B, 1), hit_params(study, index=1, size=1))
    publish_on(study, "mturk")
    stubber.add_response("get_hit", {"HIT": {"HITId": HIT_A, "MaxAssignments": 9, "NumberOfAssignmentsAvailable": 9}},
                         {"HITId": HIT_A})
    stubber.add_response("get_hit", {"HIT": {"HITId": HIT_B, "MaxAssignments": 1, "NumberOfAssignmentsAvailable": 1}},
                         {"HITId": HIT_B})

    result = study_add_assignments(user=OPERATOR, study=study)

    assert (result["needed"], result["available"], result["added"], result["not_placed"]) == (10, 10, 0, 0)
    stubber.assert_no_pending_responses()
