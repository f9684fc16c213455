"""MTurk through botocore's Stubber: every request below is validated against the real MTurk
service model (API 2017-01-17) and compared with the exact parameters expected; nothing
reaches AWS. A call the code makes without a queued response fails the test."""
from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from decimal import Decimal

import pytest
from botocore.stub import ANY

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
    EXPIRE_NOW,
    QUAL_LOCALE,
    QUAL_PERCENT_APPROVED,
    SANDBOX_ENDPOINT,
    external_question_xml,
    question_form_xml,
)
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.close import study_close, worker_block
from annotations.services.platforms.publish import study_add_assignments, study_publish
from annotations.services.platforms.review import assignment_approve, assignment_reject
from annotations.services.platforms.sync import study_sync
from annotations.services.platforms.tokens import bonus_token, publication_request_token
from tests.annotations.factories import add_qualification
from tests.annotations.platforms.conftest import PUBLIC_URL, open_study, start_assignment, submitted

HIT_A = "3AAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
HIT_B = "3BBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
NOW = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.UTC)


def _requirements() -> list[dict]:
    return [
        {"QualificationTypeId": QUAL_LOCALE, "Comparator": "In", "LocaleValues": [{"Country": "US"}]},
        {"QualificationTypeId": QUAL_PERCENT_APPROVED, "Comparator": "GreaterThanOrEqualTo", "IntegerValues": [98]},
    ]


def _external_question(study) -> str:
    return (
        '<ExternalQuestion xmlns="http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2006-07-14/'
        f'ExternalQuestion.xsd"><ExternalURL>{PUBLIC_URL}/w/s/{study_token(study.pk)}/</ExternalURL>'
        "<FrameHeight>0</FrameHeight></ExternalQuestion>"
    )


def _hit_params(study, *, index: int, size: int, requirements=None) -> dict:
    token = f"{publication_request_token(study=study, platform='mturk', batch=1)}-h{index}"
    return {
        "MaxAssignments": size,
        "AutoApprovalDelayInSeconds": 3 * 24 * 3600,
        "LifetimeInSeconds": 7 * 24 * 3600,
        "AssignmentDurationInSeconds": 1800,
        "Reward": "2.00",
        "Title": study.name,
        "Keywords": ANY,
        "Description": ANY,
        "Question": _external_question(study),
        "RequesterAnnotation": token,
        "QualificationRequirements": requirements or _requirements(),
        "UniqueRequestToken": token,
    }


def _hit(hit_id: str, size: int, token: str = "") -> dict:
    return {"HIT": {"HITId": hit_id, "HITTypeId": "3TYPEAAAAAAAAAAAAAAAAAAAAAAAAA", "MaxAssignments": size,
                    "Reward": "2.00", "RequesterAnnotation": token, "HITStatus": "Assignable"}}


def _queue_publish(stubber, study, *, balance: str = "10000.00") -> None:
    stubber.add_response("get_account_balance", {"AvailableBalance": balance}, {})
    stubber.add_response("create_hit", _hit(HIT_A, 9), _hit_params(study, index=0, size=9))
    stubber.add_response("create_hit", _hit(HIT_B, 5), _hit_params(study, index=1, size=5))


def test_publish_creates_hits_of_nine_with_external_question_and_requirements(mturk, study):
    platform, stubber = mturk
    _queue_publish(stubber, study)

    publication = study_publish(study=study, platform_name="mturk")

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
    root = ET.fromstring(_external_question(study))
    ns = {"q": "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2006-07-14/ExternalQuestion.xsd"}
    assert root.find("q:ExternalURL", ns).text == f"{PUBLIC_URL}/w/s/{study_token(study.pk)}/"
    assert root.find("q:FrameHeight", ns).text == "0"


def test_publishing_twice_creates_no_second_hit(mturk, study):
    platform, stubber = mturk
    _queue_publish(stubber, study)
    first = study_publish(study=study, platform_name="mturk")

    second = study_publish(study=study, platform_name="mturk")  # no response queued: any call would fail

    assert second.pk == first.pk
    assert PlatformCall.objects.filter(operation="create_hit").count() == 2


def test_duplicate_token_error_recovers_the_existing_hit_id_from_the_message(mturk, study):
    platform, stubber = mturk
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_client_error(
        "create_hit", service_error_code="RequestError", http_status_code=400,
        service_message=f'The HIT with ID "{HIT_A}" already exists. (1767614400123)',
        expected_params=_hit_params(study, index=0, size=9),
    )
    stubber.add_response("create_hit", _hit(HIT_B, 5), _hit_params(study, index=1, size=5))

    publication = study_publish(study=study, platform_name="mturk")

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
                             expected_params=_hit_params(study, index=0, size=9))
    stubber.add_response("list_hits", {"HITs": [_hit("3OTHERAAAAAAAAAAAAAAAAAAAAAAAA", 3, "someone-else")["HIT"]],
                                       "NextToken": "page2", "NumResults": 1}, {"MaxResults": 100})
    stubber.add_response("list_hits", {"HITs": [_hit(HIT_A, 9, token0)["HIT"]], "NumResults": 1},
                         {"MaxResults": 100, "NextToken": "page2"})
    stubber.add_response("create_hit", _hit(HIT_B, 5), _hit_params(study, index=1, size=5))

    publication = study_publish(study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    assert publication.hit_ids == [HIT_A, HIT_B]


def test_crash_after_create_hit_was_sent_is_reconciled_without_a_second_hit(mturk, study):
    platform, stubber = mturk
    token0 = f"{publication_request_token(study=study, platform='mturk', batch=1)}-h0"
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", _hit(HIT_A, 9, token0), _hit_params(study, index=0, size=9))
    real_publish = platform.publish

    def publish_then_die(**kwargs):
        real_publish(**kwargs)  # MTurk made the HIT...
        raise RuntimeError("worker killed before recording")  # ...and the answer was lost

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "publish", publish_then_die)
        study_publish(study=study, platform_name="mturk")
    assert PlatformCall.objects.get(platform_token=token0).status == "sent"

    # The retry asks MTurk (list_hits) instead of creating again, then makes only the second HIT.
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("list_hits", {"HITs": [_hit(HIT_A, 9, token0)["HIT"]], "NumResults": 1}, {"MaxResults": 100})
    stubber.add_response("create_hit", _hit(HIT_B, 5), _hit_params(study, index=1, size=5))
    publication = study_publish(study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    assert publication.hit_ids == [HIT_A, HIT_B]
    assert PlatformCall.objects.get(platform_token=token0).status == "confirmed"


def test_balance_below_the_estimate_refuses_to_publish_and_sends_nothing(mturk, study):
    platform, stubber = mturk
    stubber.add_response("get_account_balance", {"AvailableBalance": "10.00", "OnHoldBalance": "0.00"}, {})

    with pytest.raises(PlatformServiceError, match="balance 10.00 USD is below"):
        study_publish(study=study, platform_name="mturk")

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
    requirements = _requirements() + [{"QualificationTypeId": "3QUALAAAAAAAAAAAAAAAAAAAAAAAAA",
                                       "Comparator": "GreaterThanOrEqualTo", "IntegerValues": [67],
                                       "ActionsGuarded": "DiscoverPreviewAndAccept"}]
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", _hit(HIT_A, 9), _hit_params(study, index=0, size=9, requirements=requirements))
    stubber.add_response("create_hit", _hit(HIT_B, 5), _hit_params(study, index=1, size=5, requirements=requirements))

    study_publish(study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    qualification = MTurkQualificationType.objects.get(study=study)
    assert qualification.min_score == 67  # 2 of 3 correct, as a percentage


def _sync_page(assignments: list[dict], next_token: str | None = None) -> dict:
    page = {"Assignments": assignments, "NumResults": len(assignments)}
    if next_token:
        page["NextToken"] = next_token
    return page


def _remote(assignment_id: str, worker_id: str, status: str = "Submitted", hit_id: str = HIT_A) -> dict:
    return {"AssignmentId": assignment_id, "WorkerId": worker_id, "HITId": hit_id, "AssignmentStatus": status,
            "AcceptTime": NOW - dt.timedelta(minutes=8), "SubmitTime": NOW, "Answer": "<QuestionFormAnswers/>"}


def _published(stubber, study) -> Publication:
    _queue_publish(stubber, study)
    return study_publish(study=study, platform_name="mturk")


def test_sync_pages_through_assignments_matches_answers_and_flags_missing_ones(mturk, study):
    platform, stubber = mturk
    _published(stubber, study)
    answered = submitted(study, platform="mturk", worker_id="AWORKERONE", assignment_id="3ASGONEAAAAAAAAAAAAAAAAAAAAAAA",
                         task_id=HIT_A)
    no_answers = start_assignment(study, platform="mturk", worker_id="AWORKERTWO",
                                  assignment_id="3ASGTWOAAAAAAAAAAAAAAAAAAAAAAA", task_id=HIT_A)
    auto_approved = submitted(study, platform="mturk", worker_id="AWORKERTHREE",
                              assignment_id="3ASGTHREEAAAAAAAAAAAAAAAAAAAAA", task_id=HIT_B)
    statuses = ["Submitted", "Approved", "Rejected"]
    stubber.add_response("list_assignments_for_hit", _sync_page(
        [_remote(answered.platform_assignment_id, "AWORKERONE"), _remote(no_answers.platform_assignment_id, "AWORKERTWO")],
        next_token="p2"), {"HITId": HIT_A, "AssignmentStatuses": statuses, "MaxResults": 100})
    stubber.add_response("list_assignments_for_hit", _sync_page([_remote("3UNKNOWNAAAAAAAAAAAAAAAAAAAAAA", "AGHOST")]),
                         {"HITId": HIT_A, "AssignmentStatuses": statuses, "MaxResults": 100, "NextToken": "p2"})
    stubber.add_response("list_assignments_for_hit", _sync_page(
        [_remote(auto_approved.platform_assignment_id, "AWORKERTHREE", "Approved", HIT_B)]),
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
    open_study(study)
    good = submitted(study, platform="mturk", worker_id="AGOOD", assignment_id="3GOODAAAAAAAAAAAAAAAAAAAAAAAAA")
    bad = submitted(study, platform="mturk", worker_id="ABAD", assignment_id="3BADAAAAAAAAAAAAAAAAAAAAAAAAAA",
                    correct=False)
    token = bonus_token(assignment=good, amount=Decimal("0.75"), kind="good_work", reason="Consistently good work.")
    stubber.add_response("approve_assignment", {}, {"AssignmentId": good.platform_assignment_id})
    stubber.add_response("reject_assignment", {}, {"AssignmentId": bad.platform_assignment_id,
                                                   "RequesterFeedback": "You failed every attention check."})
    stubber.add_response("send_bonus", {}, {"WorkerId": "AGOOD", "BonusAmount": "0.75",
                                            "AssignmentId": good.platform_assignment_id,
                                            "Reason": "Consistently good work.", "UniqueRequestToken": token})

    for _ in range(2):  # a double click
        assignment_approve(assignment=good)
        assignment_reject(assignment=bad, feedback="You failed every attention check.")
        bonus = bonus_pay(assignment=good, amount=Decimal("0.75"), reason="Consistently good work.", kind="good_work")

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
        assignment_reject(assignment=work, feedback="  ")
    assert not PlatformCall.objects.exists()


def test_bonus_crash_between_sent_and_recorded_is_reconciled_on_the_next_sync(mturk, study):
    platform, stubber = mturk
    publication = _published(stubber, study)
    work = submitted(study, platform="mturk", worker_id="AWORKER", assignment_id="3WORKAAAAAAAAAAAAAAAAAAAAAAAAA",
                     task_id=HIT_A)
    stubber.add_response("send_bonus", {}, {"WorkerId": "AWORKER", "BonusAmount": "1.00",
                                            "AssignmentId": work.platform_assignment_id, "Reason": "Flagged a bug.",
                                            "UniqueRequestToken": ANY})
    real_bonus = platform.bonus

    def pay_then_die(**kwargs):
        real_bonus(**kwargs)  # the money moved...
        raise RuntimeError("worker killed")  # ...and the process died before recording it

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "bonus", pay_then_die)
        bonus_pay(assignment=work, amount=Decimal("1.00"), reason="Flagged a bug.", kind="flagged_error")
    call = PlatformCall.objects.get(operation="bonus")
    assert call.status == "sent" and Bonus.objects.get().status == Bonus.Status.PENDING

    stubber.add_response("list_bonus_payments", {"BonusPayments": [
        {"WorkerId": "AWORKER", "BonusAmount": "1.00", "AssignmentId": work.platform_assignment_id,
         "Reason": "Flagged a bug.", "GrantTime": NOW}], "NumResults": 1},
        {"AssignmentId": work.platform_assignment_id})
    for hit_id in publication.hit_ids:
        stubber.add_response("list_assignments_for_hit", _sync_page([]), {
            "HITId": hit_id, "AssignmentStatuses": ["Submitted", "Approved", "Rejected"], "MaxResults": 100})
    report = study_sync(study=study)

    assert report.reconciled["confirmed"] == 1
    call.refresh_from_db()
    assert call.status == "confirmed"
    assert Bonus.objects.get().status == Bonus.Status.PAID
    # Asked again, nothing is sent (no send_bonus queued: a call would fail the test).
    bonus_pay(assignment=work, amount=Decimal("1.00"), reason="Flagged a bug.", kind="flagged_error")
    stubber.assert_no_pending_responses()


def test_bonus_that_never_arrived_is_sent_again_with_the_same_token(mturk, study):
    platform, stubber = mturk
    open_study(study)
    work = submitted(study, platform="mturk", worker_id="AWORKER", assignment_id="3WORKAAAAAAAAAAAAAAAAAAAAAAAAA")
    token = bonus_token(assignment=work, amount=Decimal("0.50"), kind="other", reason="Thanks.")

    def die_before_sending(**kwargs):
        raise RuntimeError("connection dropped")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "bonus", die_before_sending)
        bonus_pay(assignment=work, amount=Decimal("0.50"), reason="Thanks.")

    stubber.add_response("list_bonus_payments", {"BonusPayments": [], "NumResults": 0},
                         {"AssignmentId": work.platform_assignment_id})
    stubber.add_response("send_bonus", {}, {"WorkerId": "AWORKER", "BonusAmount": "0.50",
                                            "AssignmentId": work.platform_assignment_id, "Reason": "Thanks.",
                                            "UniqueRequestToken": token})
    bonus = bonus_pay(assignment=work, amount=Decimal("0.50"), reason="Thanks.")

    stubber.assert_no_pending_responses()
    assert bonus.status == Bonus.Status.PAID
    assert PlatformCall.objects.get(operation="bonus").attempts == 2


def test_duplicate_bonus_token_reported_by_mturk_counts_as_paid(mturk, study):
    platform, stubber = mturk
    open_study(study)
    work = submitted(study, platform="mturk", worker_id="AWORKER", assignment_id="3WORKAAAAAAAAAAAAAAAAAAAAAAAAA")
    stubber.add_client_error("send_bonus", service_error_code="RequestError",
                             service_message='The idempotency token "x" has already been processed. (1767614400123)')

    bonus = bonus_pay(assignment=work, amount=Decimal("0.50"), reason="Thanks.")

    assert bonus.status == Bonus.Status.PAID


def test_block_expire_and_add_assignments(mturk, study):
    platform, stubber = mturk
    publication = _published(stubber, study)
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
        study_publish(study=study, platform_name="mturk")  # nothing queued: any MTurk call would fail
    failed = Publication.objects.get(study=study)
    assert failed.status == Publication.Status.FAILED

    settings.RL_PUBLIC_URL = PUBLIC_URL
    _queue_publish(stubber, study)
    publication = study_publish(study=study, platform_name="mturk")

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
