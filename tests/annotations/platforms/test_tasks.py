"""Celery tasks run twice (eagerly, as in the test settings) create no second HIT, approval or bonus."""
from __future__ import annotations

from decimal import Decimal

from botocore.stub import ANY
from django.contrib.auth import get_user_model

from annotations.models import Bonus, PlatformCall, Publication
from annotations.services.platforms.sync import study_sync
from annotations.tasks.platforms import (
    approve_assignments_task,
    pay_bonuses_task,
    publish_study_task,
    sync_open_studies_task,
    sync_study_task,
)
from config.celery import app
from tests.annotations.platforms.conftest import on_platform, submitted
from tests.annotations.platforms.mturk_stubs import (
    HIT_A,
    HIT_B,
    NOW,
    published,
    queue_publish,
    remote,
    sync_page,
)


def test_tasks_are_registered_on_the_default_queue():
    app.loader.import_default_modules()
    for name in ("annotations.platforms.publish_study", "annotations.platforms.sync_study",
                 "annotations.platforms.sync_open_studies", "annotations.platforms.approve_assignments",
                 "annotations.platforms.pay_bonuses"):
        task = app.tasks[name]
        assert app.amqp.router.route({}, name, (), {})["queue"].name == "default"
        assert task.acks_late is True


def test_beat_syncs_open_publications():
    from django.conf import settings

    entry = settings.CELERY_BEAT_SCHEDULE["platforms-sync-open-studies"]
    assert entry["task"] == "annotations.platforms.sync_open_studies"


def test_publish_task_twice_makes_each_hit_once(mturk, study):
    platform, stubber = mturk
    on_platform(study, "mturk")
    queue_publish(stubber, study)

    researcher = get_user_model().objects.create_superuser("root", password="pw")
    first = publish_study_task.delay(study.pk, user_id=researcher.pk).get()
    second = publish_study_task.delay(study.pk, user_id=researcher.pk).get()

    stubber.assert_no_pending_responses()
    assert first == second
    assert first["external_ids"] == [{"index": 0, "hit_id": HIT_A, "max_assignments": 9},
                                     {"index": 1, "hit_id": HIT_B, "max_assignments": 5}]
    assert PlatformCall.objects.filter(operation="create_hit").count() == 2
    assert Publication.objects.filter(dry_run=False).count() == 1


def test_approve_and_bonus_tasks_twice_pay_once(mturk, study):
    platform, stubber = mturk
    publication = published(stubber, study)
    works = [submitted(study, platform="mturk", worker_id=f"AW{i}", assignment_id=f"3ASG{i}AAAAAAAAAAAAAAAAAAAAAAAAA",
                       task_id=HIT_A) for i in range(2)]
    # Sync lists them under the study's own HIT: that is the proof the money calls need, so
    # nothing more is asked of MTurk before they are sent.
    for hit_id in publication.hit_ids:
        listed = [remote(w.platform_assignment_id, w.participant.external_id) for w in works if hit_id == HIT_A]
        stubber.add_response("list_assignments_for_hit", sync_page(listed), {
            "HITId": hit_id, "AssignmentStatuses": ["Submitted", "Approved", "Rejected"], "MaxResults": 100})
    study_sync(study=study)
    for work in works:
        stubber.add_response("approve_assignment", {}, {"AssignmentId": work.platform_assignment_id})
    for work in works:
        stubber.add_response("send_bonus", {}, {"WorkerId": work.participant.external_id, "BonusAmount": "0.40",
                                                "AssignmentId": work.platform_assignment_id, "Reason": "Good work.",
                                                "UniqueRequestToken": ANY})
    ids = [w.pk for w in works]
    researcher = get_user_model().objects.create_superuser("root", password="pw")

    for _ in range(2):
        approve_assignments_task.delay(study_id=study.pk, user_id=researcher.pk, assignment_ids=ids).get()
        result = pay_bonuses_task.delay(study_id=study.pk, user_id=researcher.pk, assignment_ids=ids, amount="0.40",
                                        reason="Good work.", kind="good_work").get()

    stubber.assert_no_pending_responses()
    assert result == {"paid": 2, "errors": [], "unsettled": []}
    assert Bonus.objects.filter(status="paid").count() == 2
    assert PlatformCall.objects.filter(operation="bonus").count() == 2
    assert sum(PlatformCall.objects.filter(operation="bonus").values_list("amount", flat=True)) == Decimal("0.80")


def test_sync_tasks_fan_out_to_live_publications(mturk, study):
    platform, stubber = mturk
    on_platform(study, "mturk")
    queue_publish(stubber, study)
    researcher = get_user_model().objects.create_superuser("root", password="pw")
    publish_study_task.delay(study.pk, user_id=researcher.pk).get()
    for _ in range(2):
        for hit_id in (HIT_A, HIT_B):
            stubber.add_response("list_assignments_for_hit", sync_page([]), {
                "HITId": hit_id, "AssignmentStatuses": ["Submitted", "Approved", "Rejected"], "MaxResults": 100})

    assert sync_open_studies_task.delay().get() == {"queued": 1}
    assert sync_study_task.delay(study.pk).get()["remote"] == 0
    stubber.assert_no_pending_responses()



def test_beat_syncs_a_closed_study_whose_bonus_answer_was_lost(mturk, study):
    # A bonus paid while the answer was lost stays "unknown" until a sync asks MTurk. Beat synced
    # only studies with a live publication, so once the study was closed nothing ever asked.
    from annotations.platforms.mturk import EXPIRE_NOW
    from annotations.services.platforms.access import OPERATOR
    from annotations.services.platforms.close import study_close
    from tests.annotations.platforms.mturk_stubs import bonus_paid_answer_lost

    platform, stubber = mturk
    publication = published(stubber, study)
    work = bonus_paid_answer_lost(platform, stubber, study)
    for hit_id in publication.hit_ids:
        stubber.add_response("update_expiration_for_hit", {}, {"HITId": hit_id, "ExpireAt": EXPIRE_NOW})
    study_close(user=OPERATOR, study=study)
    assert not Publication.objects.filter(study=study, status__in=["published", "publishing"]).exists()

    # Beat's sync (run eagerly) asks MTurk about the bonus and finds it paid.
    stubber.add_response("list_bonus_payments", {"BonusPayments": [
        {"WorkerId": "AWORKER", "BonusAmount": "1.00", "AssignmentId": work.platform_assignment_id,
         "Reason": "Flagged a bug.", "GrantTime": NOW}], "NumResults": 1},
        {"AssignmentId": work.platform_assignment_id})
    for hit_id in publication.hit_ids:
        stubber.add_response("list_assignments_for_hit", sync_page([]), {
            "HITId": hit_id, "AssignmentStatuses": ["Submitted", "Approved", "Rejected"], "MaxResults": 100})
    assert sync_open_studies_task.delay().get() == {"queued": 1}

    stubber.assert_no_pending_responses()
    assert Bonus.objects.get().status == Bonus.Status.PAID
    assert PlatformCall.objects.get(operation="bonus").status == PlatformCall.Status.CONFIRMED
