"""MTurk through botocore's Stubber: every request below is validated against the real MTurk
service model (API 2017-01-17) and compared with the exact parameters expected; nothing
reaches AWS. A call the code makes without a queued response fails the test."""
from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from decimal import Decimal

import pytest
from botocore.stub import ANY
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from annotations.models import (
    Assignment,
    Bonus,
    MTurkQualificationType,
    PlatformCall,
    PlatformSubmission,
    Publication,
)
from annotations.platforms.base import PlatformConfigError
from annotations.platforms.handoff import study_token
from annotations.platforms.mturk import (
    SANDBOX_ENDPOINT,
    external_question_xml,
    question_form_xml,
    split_assignments,
)
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms import publish as publish_service
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_approve, assignment_reject
from annotations.services.platforms.sync import study_sync
from annotations.services.platforms.tokens import bonus_token, publication_request_token
from annotations.tasks.platforms import publish_study_task
from tests.annotations.factories import add_qualification
from tests.annotations.platforms.conftest import (
    PUBLIC_URL,
    on_platform,
    open_study,
    start_assignment,
    submitted,
)
from tests.annotations.platforms.mturk_stubs import (
    HIT_A,
    HIT_B,
    NOW,
    bonus_paid_answer_lost,
    confirm,
    default_requirements,
    external_question,
    hit,
    hit_params,
    published,
    queue_publish,
    remote,
    sync_page,
)


@pytest.fixture
def study(db, study):
    """The platform tests' draft study, set to run on MTurk: a study is published on its own platform only."""
    return on_platform(study, "mturk")


def test_publish_creates_hits_of_nine_with_external_question_and_requirements(mturk, study):
    platform, stubber = mturk
    queue_publish(stubber, study)

    publication = study_publish(user=OPERATOR, study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    assert publication.status == Publication.Status.PUBLISHED
    assert publication.endpoint == SANDBOX_ENDPOINT
    assert publication.hit_ids == [HIT_A, HIT_B]
    calls = PlatformCall.objects.filter(operation="create_hit").order_by("id")
    assert [c.status for c in calls] == ["confirmed", "confirmed"]
    # 9 x 2.00 + 20% fee = 21.60; 5 x 2.00 + 20% = 12.00
    assert [c.amount for c in calls] == [Decimal("21.60"), Decimal("12.00")]
    assert calls[0].platform_token.endswith("-h0") and len(calls[0].platform_token) <= 64
    study.refresh_from_db()
    assert study.status == "open"


def test_the_external_question_is_well_formed_and_points_at_the_worker_entry(study):
    root = ET.fromstring(external_question(study))
    ns = {"q": "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2006-07-14/ExternalQuestion.xsd"}
    assert root.find("q:ExternalURL", ns).text == f"{PUBLIC_URL}/w/s/{study_token(study.pk)}/"
    assert root.find("q:FrameHeight", ns).text == "0"


def test_publishing_twice_creates_no_second_hit(mturk, study):
    platform, stubber = mturk
    queue_publish(stubber, study)
    first = study_publish(user=OPERATOR, study=study, platform_name="mturk")

    second = study_publish(user=OPERATOR, study=study, platform_name="mturk")  # no response queued: any call would fail

    assert second.pk == first.pk
    assert PlatformCall.objects.filter(operation="create_hit").count() == 2


def test_duplicate_token_error_recovers_the_existing_hit_id_from_the_message(mturk, study):
    platform, stubber = mturk
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_client_error(
        "create_hit", service_error_code="RequestError", http_status_code=400,
        service_message=f'The HIT with ID "{HIT_A}" already exists. (1767614400123)',
        expected_params=hit_params(study, index=0, size=9),
    )
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5))

    publication = study_publish(user=OPERATOR, study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    assert publication.hit_ids == [HIT_A, HIT_B]
    recovered = PlatformCall.objects.get(platform_token__endswith="-h0")
    assert recovered.status == "confirmed" and recovered.response["recovered"] is True


def test_duplicate_token_without_an_id_finds_the_hit_through_paginated_list_hits(mturk, study):
    platform, stubber = mturk
    token0 = f"{publication_request_token(study=study, platform='mturk', batch=1)}-h0"
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_client_error("create_hit", service_error_code="RequestError",
                             service_message="There is already a HIT with this unique request token.",
                             expected_params=hit_params(study, index=0, size=9))
    stubber.add_response("list_hits", {"HITs": [hit("3OTHERAAAAAAAAAAAAAAAAAAAAAAAA", 3, "someone-else")["HIT"]],
                                       "NextToken": "page2", "NumResults": 1}, {"MaxResults": 100})
    stubber.add_response("list_hits", {"HITs": [hit(HIT_A, 9, token0)["HIT"]], "NumResults": 1},
                         {"MaxResults": 100, "NextToken": "page2"})
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5))

    publication = study_publish(user=OPERATOR, study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    assert publication.hit_ids == [HIT_A, HIT_B]


def test_crash_after_create_hit_was_sent_is_reconciled_without_a_second_hit(mturk, study):
    platform, stubber = mturk
    token0 = f"{publication_request_token(study=study, platform='mturk', batch=1)}-h0"
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_A, 9, token0), hit_params(study, index=0, size=9))
    real_publish = platform.publish

    def publish_then_die(**kwargs):
        real_publish(**kwargs)  # MTurk made the HIT...
        raise RuntimeError("worker killed before recording")  # ...and the answer was lost

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "publish", publish_then_die)
        study_publish(user=OPERATOR, study=study, platform_name="mturk")
    assert PlatformCall.objects.get(platform_token=token0).status == "sent"

    # The retry asks MTurk (list_hits) instead of creating again, then makes only the second HIT.
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("list_hits", {"HITs": [hit(HIT_A, 9, token0)["HIT"]], "NumResults": 1}, {"MaxResults": 100})
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5))
    publication = study_publish(user=OPERATOR, study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    assert publication.hit_ids == [HIT_A, HIT_B]
    assert PlatformCall.objects.get(platform_token=token0).status == "confirmed"


def test_balance_below_the_estimate_refuses_to_publish_and_sends_nothing(mturk, study):
    platform, stubber = mturk
    stubber.add_response("get_account_balance", {"AvailableBalance": "10.00", "OnHoldBalance": "0.00"}, {})

    with pytest.raises(PlatformServiceError, match="balance 10.00 USD is below"):
        study_publish(user=OPERATOR, study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    assert Publication.objects.get(study=study).status == Publication.Status.FAILED
    assert not PlatformCall.objects.exists()


def test_balance_is_read_from_get_account_balance(mturk):
    platform, stubber = mturk
    stubber.add_response("get_account_balance", {"AvailableBalance": "123.45", "OnHoldBalance": "6.00"}, {})
    assert platform.balance() == Decimal("123.45")


def test_graded_qualification_test_is_created_once_and_required(mturk, study):
    platform, stubber = mturk
    add_qualification(study, pass_mark=2)
    stubber.add_response("create_qualification_type", {"QualificationType": {
        "QualificationTypeId": "3QUALAAAAAAAAAAAAAAAAAAAAAAAAA", "Name": "q", "QualificationTypeStatus": "Active"}},
        {"Name": ANY, "Description": ANY, "QualificationTypeStatus": "Active", "Keywords": ANY, "Test": ANY,
         "AnswerKey": ANY, "TestDurationInSeconds": 1200})
    requirements = default_requirements() + [{"QualificationTypeId": "3QUALAAAAAAAAAAAAAAAAAAAAAAAAA",
                                       "Comparator": "GreaterThanOrEqualTo", "IntegerValues": [67],
                                       "ActionsGuarded": "DiscoverPreviewAndAccept"}]
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_A, 9), hit_params(study, index=0, size=9, requirements=requirements))
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5, requirements=requirements))

    study_publish(user=OPERATOR, study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    qualification = MTurkQualificationType.objects.get(study=study)
    assert qualification.min_score == 67  # 2 of 3 correct, as a percentage


def test_sync_pages_through_assignments_matches_answers_and_flags_missing_ones(mturk, study):
    platform, stubber = mturk
    published(stubber, study)
    answered = submitted(study, platform="mturk", worker_id="AWORKERONE", assignment_id="3ASGONEAAAAAAAAAAAAAAAAAAAAAAA",
                         task_id=HIT_A)
    no_answers = start_assignment(study, platform="mturk", worker_id="AWORKERTWO",
                                  assignment_id="3ASGTWOAAAAAAAAAAAAAAAAAAAAAAA", task_id=HIT_A)
    auto_approved = submitted(study, platform="mturk", worker_id="AWORKERTHREE",
                              assignment_id="3ASGTHREEAAAAAAAAAAAAAAAAAAAAA", task_id=HIT_B)
    statuses = ["Submitted", "Approved", "Rejected"]
    stubber.add_response("list_assignments_for_hit", sync_page(
        [remote(answered.platform_assignment_id, "AWORKERONE"), remote(no_answers.platform_assignment_id, "AWORKERTWO")],
        next_token="p2"), {"HITId": HIT_A, "AssignmentStatuses": statuses, "MaxResults": 100})
    stubber.add_response("list_assignments_for_hit", sync_page([remote("3UNKNOWNAAAAAAAAAAAAAAAAAAAAAA", "AGHOST")]),
                         {"HITId": HIT_A, "AssignmentStatuses": statuses, "MaxResults": 100, "NextToken": "p2"})
    stubber.add_response("list_assignments_for_hit", sync_page(
        [remote(auto_approved.platform_assignment_id, "AWORKERTHREE", "Approved", HIT_B)]),
        {"HITId": HIT_B, "AssignmentStatuses": statuses, "MaxResults": 100})

    report = study_sync(study=study)

    stubber.assert_no_pending_responses()
    assert (report.remote, report.matched, report.flagged, report.status_updates) == (4, 3, 2, 1)
    flags = dict(PlatformSubmission.objects.values_list("platform_assignment_id", "flag"))
    assert flags[answered.platform_assignment_id] == ""
    assert flags[no_answers.platform_assignment_id] == "no_answers"
    assert flags["3UNKNOWNAAAAAAAAAAAAAAAAAAAAAA"] == "no_local_assignment"
    auto_approved.refresh_from_db()
    assert auto_approved.status == Assignment.Status.APPROVED


def test_approve_reject_and_bonus_are_sent_once(mturk, study):
    platform, stubber = mturk
    published(stubber, study)
    good = submitted(study, platform="mturk", worker_id="AGOOD", assignment_id="3GOODAAAAAAAAAAAAAAAAAAAAAAAAA",
                     task_id=HIT_A)
    bad = submitted(study, platform="mturk", worker_id="ABAD", assignment_id="3BADAAAAAAAAAAAAAAAAAAAAAAAAAA",
                    task_id=HIT_A, correct=False)
    token = bonus_token(assignment=good, amount=Decimal("0.75"), kind="good_work", reason="Consistently good work.")
    # Each first review or payment asks MTurk whose the work is (sync has not listed it yet).
    confirm(stubber, good)
    stubber.add_response("approve_assignment", {}, {"AssignmentId": good.platform_assignment_id})
    confirm(stubber, bad)
    stubber.add_response("reject_assignment", {}, {"AssignmentId": bad.platform_assignment_id,
                                                   "RequesterFeedback": "You failed every attention check."})
    confirm(stubber, good)
    stubber.add_response("send_bonus", {}, {"WorkerId": "AGOOD", "BonusAmount": "0.75",
                                            "AssignmentId": good.platform_assignment_id,
                                            "Reason": "Consistently good work.", "UniqueRequestToken": token})

    for _ in range(2):  # a double click
        assignment_approve(user=OPERATOR, study=good.study, assignment=good)
        assignment_reject(user=OPERATOR, study=bad.study, assignment=bad, feedback="You failed every attention check.")
        bonus = bonus_pay(user=OPERATOR, study=good.study, assignment=good, amount=Decimal("0.75"), reason="Consistently good work.", kind="good_work")

    stubber.assert_no_pending_responses()
    good.refresh_from_db()
    bad.refresh_from_db()
    assert (good.status, bad.status) == ("approved", "rejected")
    assert bonus.status == Bonus.Status.PAID and Bonus.objects.count() == 1
    money_calls = PlatformCall.objects.filter(operation__in=["approve", "bonus"])
    assert sorted(money_calls.values_list("operation", "amount")) == [("approve", Decimal("2.00")),
                                                                       ("bonus", Decimal("0.75"))]


def test_reject_without_feedback_is_refused_before_any_call(mturk, study):
    platform, stubber = mturk
    open_study(study)
    work = submitted(study, platform="mturk", worker_id="AW", assignment_id="3WAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
    with pytest.raises(PlatformServiceError, match="needs feedback"):
        assignment_reject(user=OPERATOR, study=work.study, assignment=work, feedback="  ")
    assert not PlatformCall.objects.exists()


def test_bonus_crash_between_sent_and_recorded_is_reconciled_on_the_next_sync(mturk, study):
    platform, stubber = mturk
    publication = published(stubber, study)
    work = bonus_paid_answer_lost(platform, stubber, study)
    call = PlatformCall.objects.get(operation="bonus")
    assert call.status == "sent" and Bonus.objects.get().status == Bonus.Status.PENDING

    stubber.add_response("list_bonus_payments", {"BonusPayments": [
        {"WorkerId": "AWORKER", "BonusAmount": "1.00", "AssignmentId": work.platform_assignment_id,
         "Reason": "Flagged a bug.", "GrantTime": NOW}], "NumResults": 1},
        {"AssignmentId": work.platform_assignment_id})
    for hit_id in publication.hit_ids:
        stubber.add_response("list_assignments_for_hit", sync_page([]), {
            "HITId": hit_id, "AssignmentStatuses": ["Submitted", "Approved", "Rejected"], "MaxResults": 100})
    report = study_sync(study=study)

    assert report.reconciled["confirmed"] == 1
    call.refresh_from_db()
    assert call.status == "confirmed"
    assert Bonus.objects.get().status == Bonus.Status.PAID
    # Asked again, nothing is sent (no send_bonus queued: a call would fail the test).
    bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("1.00"), reason="Flagged a bug.", kind="other")
    stubber.assert_no_pending_responses()


def test_bonus_that_never_arrived_is_sent_again_with_the_same_token(mturk, study):
    platform, stubber = mturk
    published(stubber, study)
    work = submitted(study, platform="mturk", worker_id="AWORKER", assignment_id="3WORKAAAAAAAAAAAAAAAAAAAAAAAAA",
                     task_id=HIT_B)
    token = bonus_token(assignment=work, amount=Decimal("0.50"), kind="other", reason="Thanks.")
    confirm(stubber, work, hit_id=HIT_B)

    def die_before_sending(**kwargs):
        raise RuntimeError("connection dropped")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "bonus", die_before_sending)
        bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("0.50"), reason="Thanks.")

    confirm(stubber, work, hit_id=HIT_B)
    stubber.add_response("list_bonus_payments", {"BonusPayments": [], "NumResults": 0},
                         {"AssignmentId": work.platform_assignment_id})
    stubber.add_response("send_bonus", {}, {"WorkerId": "AWORKER", "BonusAmount": "0.50",
                                            "AssignmentId": work.platform_assignment_id, "Reason": "Thanks.",
                                            "UniqueRequestToken": token})
    bonus = bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("0.50"), reason="Thanks.")

    stubber.assert_no_pending_responses()
    assert bonus.status == Bonus.Status.PAID
    assert PlatformCall.objects.get(operation="bonus").attempts == 2


def test_duplicate_bonus_token_reported_by_mturk_counts_as_paid(mturk, study):
    platform, stubber = mturk
    published(stubber, study)
    work = submitted(study, platform="mturk", worker_id="AWORKER", assignment_id="3WORKAAAAAAAAAAAAAAAAAAAAAAAAA",
                     task_id=HIT_A)
    confirm(stubber, work)
    stubber.add_client_error("send_bonus", service_error_code="RequestError",
                             service_message='The idempotency token "x" has already been processed. (1767614400123)')

    bonus = bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("0.50"), reason="Thanks.")

    assert bonus.status == Bonus.Status.PAID


def test_external_question_needs_https_and_question_text_is_escaped():
    with pytest.raises(PlatformConfigError, match="RL_PUBLIC_URL"):
        external_question_xml("http://127.0.0.1:8000/w/s/x/")
    xml = question_form_xml(instructions="Read <b>carefully</b>", questions=[
        {"id": "q1", "text": "Is 1 < 2 & <script>alert(1)</script>?", "choices": [{"label": "yes", "text": "Yes"}],
         "correct": "yes"}])
    root = ET.fromstring(xml)  # well-formed despite the markup in the text
    texts = [el.text for el in root.iter() if el.tag.endswith("Text")]
    assert "Is 1 < 2 & <script>alert(1)</script>?" in texts
    assert "<script>" not in xml


def test_missing_credentials_give_an_actionable_error(monkeypatch, settings):
    from annotations.platforms.mturk import MTurkPlatform

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(PlatformConfigError, match="AWS_ACCESS_KEY_ID"):
        MTurkPlatform(endpoint="https://127.0.0.1:9").balance()


def test_http_public_url_is_refused_before_any_call_and_the_batch_is_reused(mturk, study, settings):
    platform, stubber = mturk
    settings.RL_PUBLIC_URL = "http://127.0.0.1:8000"
    with pytest.raises(PlatformServiceError, match="RL_PUBLIC_URL"):
        study_publish(user=OPERATOR, study=study, platform_name="mturk")  # nothing queued: any MTurk call would fail
    failed = Publication.objects.get(study=study)
    assert failed.status == Publication.Status.FAILED

    settings.RL_PUBLIC_URL = PUBLIC_URL
    queue_publish(stubber, study)
    publication = study_publish(user=OPERATOR, study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    assert (publication.pk, publication.batch, publication.status) == (failed.pk, 1, Publication.Status.PUBLISHED)


def test_app_granted_qualification_is_granted_once_to_workers_who_passed(mturk, study):
    from annotations.services.platforms.qualification import mturk_qualification_grant_passed
    from annotations.services.qualification import qualification_submit

    platform, stubber = mturk
    open_study(study)
    test = add_qualification(study, pass_mark=2)
    right = {str(q.pk): q.correct_answer for q in test.questions.all()}
    wrong = {str(q.pk): ("no" if q.correct_answer == "yes" else "yes") for q in test.questions.all()}
    for worker, answers in (("APASS", right), ("AFAIL", wrong)):
        assignment = start_assignment(study, platform="mturk", worker_id=worker, assignment_id=f"3{worker}")
        qualification_submit(assignment=assignment, answers=answers)
    stubber.add_response("create_qualification_type", {"QualificationType": {
        "QualificationTypeId": "3APPQUALAAAAAAAAAAAAAAAAAAAAAA"}},
        {"Name": ANY, "Description": ANY, "QualificationTypeStatus": "Active", "Keywords": ANY})
    stubber.add_response("associate_qualification_with_worker", {}, {
        "QualificationTypeId": "3APPQUALAAAAAAAAAAAAAAAAAAAAAA", "WorkerId": "APASS", "IntegerValue": 100,
        "SendNotification": False})

    mturk_qualification_grant_passed(study=study)
    mturk_qualification_grant_passed(study=study)

    stubber.assert_no_pending_responses()
    assert PlatformCall.objects.filter(operation="associate_qualification", status="confirmed").count() == 1


# A half-made batch keeps the HIT sizes it was made with: a resume skips HITs by index, so splitting
# its tasks again with another per-HIT size (a deploy changed RL_MTURK_MAX_ASSIGNMENTS_PER_HIT, or the
# command's --max-assignments-per-hit against the page's default) published more or fewer assignments
# than its tasks.
HIT_C = "3CCCCCCCCCCCCCCCCCCCCCCCCCCCCC"


def _first_hit_made_then_refused(stubber, study, *, size: int, publish) -> Publication:
    """``publish()`` makes the batch's first HIT (``size`` assignments), then MTurk refuses the second."""
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_A, size), hit_params(study, index=0, size=size))
    stubber.add_client_error("create_hit", service_error_code="RequestError", http_status_code=400,
                             service_message="Your account is not permitted to do this.",
                             expected_params=hit_params(study, index=1, size=split_assignments(14, size)[1]))
    with pytest.raises((PlatformServiceError, CommandError)):
        publish()
    stubber.assert_no_pending_responses()
    publication = Publication.objects.get(study=study, dry_run=False)
    assert publication.status == Publication.Status.PUBLISHING and publication.hit_ids == [HIT_A]
    return publication


def _assignments(publication) -> int:
    return sum(entry["max_assignments"] for entry in publication.external_ids)


def test_resume_after_a_deploy_changed_the_per_hit_setting_keeps_the_batch_sizes(mturk, study, settings):
    platform, stubber = mturk
    researcher = get_user_model().objects.create_superuser("root", password="pw")
    task = lambda: publish_study_task.apply(args=[study.pk], kwargs={"user_id": researcher.pk}).get()  # noqa: E731
    first = _first_hit_made_then_refused(stubber, study, size=9, publish=task)  # 14 tasks: [9, 5]

    settings.RL_MTURK_MAX_ASSIGNMENTS_PER_HIT = 5  # a deploy; the queued task carries no options
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5))
    result = task()

    stubber.assert_no_pending_responses()  # only the second HIT, of 5: not [5, 5, 4] less index 0
    publication = Publication.objects.get(pk=first.pk)
    assert result["status"] == Publication.Status.PUBLISHED
    assert publication.external_ids == [{"index": 0, "hit_id": HIT_A, "max_assignments": 9},
                                        {"index": 1, "hit_id": HIT_B, "max_assignments": 5}]
    assert _assignments(publication) == publication.n_tasks == 14
    assert publication.plan["hit_sizes"] == [9, 5] and publication.plan["max_assignments_per_hit"] == 9


def test_resume_from_the_page_keeps_the_commands_per_hit_size(mturk, study):
    platform, stubber = mturk
    command = lambda: call_command("publish_study", study.pk, "--max-assignments-per-hit", "5")  # noqa: E731
    first = _first_hit_made_then_refused(stubber, study, size=5, publish=command)  # [5, 5, 4]

    # The publish page sends no per-HIT option (the setting says 9): the batch's own 5 are kept.
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5))
    stubber.add_response("create_hit", hit(HIT_C, 4), hit_params(study, index=2, size=4))
    publication = study_publish(user=OPERATOR, study=study, platform_name="mturk", options={"link_mode": "single"})

    stubber.assert_no_pending_responses()
    assert publication.pk == first.pk and publication.status == Publication.Status.PUBLISHED
    assert [entry["max_assignments"] for entry in publication.external_ids] == [5, 5, 4]
    assert _assignments(publication) == publication.n_tasks == 14


def test_resume_asking_explicitly_for_another_per_hit_size_is_refused_and_sends_nothing(mturk, study):
    platform, stubber = mturk
    publish = lambda: study_publish(user=OPERATOR, study=study, platform_name="mturk")  # noqa: E731
    first = _first_hit_made_then_refused(stubber, study, size=9, publish=publish)
    error = first.error

    with pytest.raises(CommandError) as refused:  # no response queued: any call would fail
        call_command("publish_study", study.pk, "--max-assignments-per-hit", "5")
    # The same split asked explicitly resumes it.
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5))
    publication = study_publish(user=OPERATOR, study=study, platform_name="mturk",
                                options={"max_assignments_per_hit": 9})

    message = str(refused.value)
    assert f"batch 1 of study {study.name!r}" in message
    assert "at most 9 assignments ([9, 5])" in message and "max_assignments_per_hit 5" in message
    assert "[5, 5, 4]" in message
    stubber.assert_no_pending_responses()
    assert error and PlatformCall.objects.filter(operation="create_hit").count() == 2
    assert publication.status == Publication.Status.PUBLISHED and _assignments(publication) == 14


@pytest.mark.parametrize(("started", "explicit"), [(9, False), (5, True)])
def test_batch_started_before_sizes_were_recorded_resumes_with_the_sizes_it_was_started_with(
        mturk, study, settings, started, explicit):
    """Its plan has no ``hit_sizes``: the option it was started with (``plan["options"]``), else
    the setting of then, read from its first HIT (every HIT but the last holds the per-HIT size)."""
    platform, stubber = mturk
    options = {"max_assignments_per_hit": started} if explicit else {}
    publish = lambda: study_publish(user=OPERATOR, study=study, platform_name="mturk", options=options)  # noqa: E731
    first = _first_hit_made_then_refused(stubber, study, size=started, publish=publish)
    # The plan as publishes before the sizes were recorded wrote it (no service writes it so now).
    Publication.objects.filter(pk=first.pk).update(plan={k: v for k, v in first.plan.items()
                                                         if k not in ("hit_sizes", "max_assignments_per_hit")})

    settings.RL_MTURK_MAX_ASSIGNMENTS_PER_HIT = 7  # another size now: [7, 7]
    sizes = [9, 5] if started == 9 else [5, 5, 4]
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    for index, hit_id in zip(range(1, len(sizes)), (HIT_B, HIT_C), strict=False):
        stubber.add_response("create_hit", hit(hit_id, sizes[index]), hit_params(study, index=index, size=sizes[index]))
    publication = study_publish(user=OPERATOR, study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    assert publication.status == Publication.Status.PUBLISHED
    assert [entry["max_assignments"] for entry in publication.external_ids] == sizes
    assert Publication.objects.get(pk=first.pk).plan["hit_sizes"] == sizes  # recorded now


@pytest.mark.parametrize(("started", "resplit", "made"), [(9, 5, [5, 4]), (5, 9, [5])])
def test_a_batch_whose_hits_do_not_add_up_to_its_tasks_is_not_marked_published(
        mturk, study, monkeypatch, started, resplit, made):
    """The last guard: were a resume to split the batch again (as it did before its sizes were
    recorded), its HITs would hold 18 or 10 assignments for 14 tasks, and it stays publishing."""
    platform, stubber = mturk
    publish = lambda **kw: study_publish(user=OPERATOR, study=study, platform_name="mturk", **kw)  # noqa: E731
    first = _first_hit_made_then_refused(stubber, study, size=started, publish=lambda: publish(
        options={"max_assignments_per_hit": started}))

    def resplit_like_before(*, publication, study, options):
        sizes = split_assignments(publication.n_tasks, resplit)
        publication.plan = {**publication.plan, "hit_sizes": sizes, "max_assignments_per_hit": resplit}
        publication.save(update_fields=["plan"])
        return publication

    monkeypatch.setattr(publish_service, "_mturk_batch_sizes", resplit_like_before, raising=False)
    monkeypatch.setattr(publish_service, "_per_hit", lambda options: resplit)  # as the code before the fix
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    for index, hit_id, size in zip(range(1, 3), (HIT_B, HIT_C), made, strict=False):
        stubber.add_response("create_hit", hit(hit_id, size), hit_params(study, index=index, size=size))
    with pytest.raises(PlatformServiceError) as refused:
        publish()

    stubber.assert_no_pending_responses()
    publication = Publication.objects.get(pk=first.pk)
    total = started + sum(made)
    assert publication.status == Publication.Status.PUBLISHING
    assert f"its HITs hold {total} assignments for its 14 tasks" in str(refused.value)
    assert publication.error == str(refused.value)


def test_the_command_quotes_a_resumed_batch_with_the_hit_size_it_was_made_with(mturk, study, settings):
    platform, stubber = mturk
    command = lambda: call_command("publish_study", study.pk)  # noqa: E731
    _first_hit_made_then_refused(stubber, study, size=9, publish=command)  # HITs of 9: MTurk's 20% fee

    settings.RL_MTURK_MAX_ASSIGNMENTS_PER_HIT = 10  # HITs of 10 or more would pay 40%
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5))
    out = io.StringIO()
    call_command("publish_study", study.pk, stdout=out)

    stubber.assert_no_pending_responses()
    assert "14 tasks, rewards 28.00 + fee 5.60 (0.20) = 33.60 USD" in out.getvalue()


def test_a_resumed_batch_is_priced_with_the_hit_sizes_it_was_made_with(mturk, study, settings, monkeypatch):
    """The publish's own estimate of a resumed batch reads the batch's recorded HIT size and tasks
    (what ``_publish_mturk`` sends), not this call's option or the setting of now: HITs of 10 or
    more would be priced at MTurk's 40% fee for a batch made of HITs of 9."""
    platform, stubber = mturk
    publish = lambda **kw: study_publish(user=OPERATOR, study=study, platform_name="mturk", **kw)  # noqa: E731
    first = _first_hit_made_then_refused(stubber, study, size=9, publish=publish)  # [9, 5]
    priced = []
    real = publish_service.study_cost_and_pay

    def spy(**kwargs):
        cost = real(**kwargs)
        priced.append((kwargs["max_assignments_per_hit"], kwargs["n_tasks"], cost.estimate.fee_rate))
        return cost

    monkeypatch.setattr(publish_service, "study_cost_and_pay", spy)
    settings.RL_MTURK_MAX_ASSIGNMENTS_PER_HIT = 10  # a deploy: the page sends no per-HIT option
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5))
    publication = publish()

    stubber.assert_no_pending_responses()
    assert publication.pk == first.pk and publication.status == Publication.Status.PUBLISHED
    assert priced == [(9, 14, Decimal("0.20"))]
    # A new batch (nothing publishing) is priced with the call's size again.
    assert publish_service._priced_sizes(study=study, name="mturk", n_tasks=14, options={}) == (10, 14)
