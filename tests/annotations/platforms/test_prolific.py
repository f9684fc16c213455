"""Prolific against a local HTTP server that checks the documented request shapes (see
prolific_server.py) and keeps state, so a bonus paid twice would show twice."""
from __future__ import annotations

import json
import logging
from decimal import Decimal

import pytest

from annotations.models import Assignment, Bonus, PlatformCall, PlatformSubmission, Publication
from annotations.platforms.base import PlatformConfigError
from annotations.platforms.handoff import study_completion_code
from annotations.platforms.prolific import ProlificPlatform
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_approve, assignment_reject
from annotations.services.platforms.sync import study_sync
from tests.annotations.platforms.conftest import (
    PROLIFIC_TOKEN,
    PUBLIC_URL,
    on_platform,
    start_assignment,
    submitted,
)

REJECTION = (
    "Your answers failed all three attention checks in this task, which asked you to pick a stated option; "
    "we cannot use the data."
)


@pytest.fixture
def study(db, study):
    """The platform tests' draft study, set to run on Prolific: a study is published on its own platform only."""
    return on_platform(study, "prolific")


def _publish(study) -> Publication:
    return study_publish(user=OPERATOR, study=study, platform_name="prolific")


def test_publish_creates_and_publishes_a_study_with_the_documented_fields(prolific, study):
    platform, server = prolific

    publication = _publish(study)

    create = server.calls("POST", r"/api/v1/studies/")
    assert len(create) == 1
    body = create[0]["body"]
    assert create[0]["headers"]["authorization"] == f"Token {PROLIFIC_TOKEN}"
    assert body["reward"] == 200 and isinstance(body["reward"], int)  # pence / cents
    assert body["total_available_places"] == 14
    assert body["estimated_completion_time"] == 6
    assert body["prolific_id_option"] == "url_parameters"
    assert body["external_study_url"].startswith(f"{PUBLIC_URL}/w/s/")
    assert body["completion_codes"][0]["code"] == publication.completion_code
    transition = server.calls("POST", r"/api/v1/studies/\w+/transition/")
    assert [c["body"] for c in transition] == [{"action": "PUBLISH"}]
    assert publication.status == Publication.Status.PUBLISHED
    assert server.studies[publication.prolific_study_id]["status"] == "ACTIVE"
    assert study_completion_code(study) == publication.completion_code
    assert publication.plan["completion_code"] == publication.completion_code
    publish_call = PlatformCall.objects.get(operation="publish_study")
    assert publish_call.amount == Decimal("37.33")  # 14 x 2.00 + Prolific's fee (0.3333)


def test_publishing_twice_makes_one_prolific_study(prolific, study):
    platform, server = prolific
    first = _publish(study)
    second = _publish(study)
    assert first.pk == second.pk
    assert len(server.calls("POST", r"/api/v1/studies/")) == 1
    assert len(server.calls("POST", r"/api/v1/studies/\w+/transition/")) == 1


def test_crash_after_create_study_is_reconciled_by_internal_name(prolific, study):
    platform, server = prolific
    real_create = platform.create_study

    def create_then_die(**kwargs):
        real_create(**kwargs)
        raise RuntimeError("worker killed")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "create_study", create_then_die)
        _publish(study)

    publication = _publish(study)

    assert len(server.calls("POST", r"/api/v1/studies/")) == 1  # found through GET studies/, not made again
    assert publication.prolific_study_id in server.studies
    assert publication.status == Publication.Status.PUBLISHED


def test_sync_follows_pages_and_flags_submissions_without_answers(prolific, study):
    platform, server = prolific
    publication = _publish(study)
    prolific_id = publication.prolific_study_id
    s1 = server.add_submission(prolific_id, participant_id="p1")
    s2 = server.add_submission(prolific_id, participant_id="p2")
    server.add_submission(prolific_id, participant_id="p3")  # never reached the app
    answered = submitted(study, platform="prolific", worker_id="p1", assignment_id=s1["id"], task_id=prolific_id)
    start_assignment(study, platform="prolific", worker_id="p2", assignment_id=s2["id"], task_id=prolific_id)

    report = study_sync(study=study)

    assert len(server.calls("GET", rf"/api/v1/studies/{prolific_id}/submissions/")) == 2  # two pages
    assert (report.remote, report.matched, report.flagged) == (3, 2, 2)
    flags = dict(PlatformSubmission.objects.values_list("platform_assignment_id", "flag"))
    assert flags[answered.platform_assignment_id] == ""
    assert flags[s2["id"]] == "no_answers"


def test_approve_and_reject_send_the_documented_transitions_once(prolific, study):
    platform, server = prolific
    publication = _publish(study)
    prolific_id = publication.prolific_study_id
    good_sub = server.add_submission(prolific_id, participant_id="pgood")
    bad_sub = server.add_submission(prolific_id, participant_id="pbad")
    good = submitted(study, platform="prolific", worker_id="pgood", assignment_id=good_sub["id"], task_id=prolific_id)
    bad = submitted(study, platform="prolific", worker_id="pbad", assignment_id=bad_sub["id"], task_id=prolific_id,
                    correct=False)

    with pytest.raises(PlatformServiceError, match="at least 100 characters"):
        assignment_reject(user=OPERATOR, study=bad.study, assignment=bad, feedback="Failed checks.")
    for _ in range(2):
        assignment_approve(user=OPERATOR, study=good.study, assignment=good)
        assignment_reject(user=OPERATOR, study=bad.study, assignment=bad, feedback=REJECTION, category="FAILED_CHECK")

    transitions = server.calls("POST", r"/api/v1/submissions/\w+/transition/")
    assert [t["body"]["action"] for t in transitions] == ["APPROVE", "REJECT"]
    assert transitions[1]["body"] == {"action": "REJECT", "message": REJECTION, "rejection_category": "FAILED_CHECK"}
    assert server.submissions[good_sub["id"]]["status"] == "APPROVED"
    assert server.submissions[bad_sub["id"]]["status"] == "REJECTED"
    good.refresh_from_db()
    assert good.status == Assignment.Status.APPROVED


def test_bonus_is_set_up_and_paid_once(prolific, study):
    platform, server = prolific
    publication = _publish(study)
    sub = server.add_submission(publication.prolific_study_id, participant_id="pflag")
    work = submitted(study, platform="prolific", worker_id="pflag", assignment_id=sub["id"],
                     task_id=publication.prolific_study_id)

    for _ in range(3):
        bonus = bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("0.50"), reason="You flagged a broken question.",
                          kind="other")

    setups = server.calls("POST", r"/api/v1/submissions/bonus-payments/")
    assert len(setups) == 1
    assert setups[0]["body"] == {"study_id": publication.prolific_study_id, "csv_bonuses": f"{sub['id']},0.50\r\n"}
    assert len(server.payments) == 1
    assert server.submissions[sub["id"]]["bonus_payments"] == [50]
    assert bonus.status == Bonus.Status.PAID
    assert PlatformCall.objects.filter(operation="bonus", status="confirmed").count() == 1


def test_bonus_pay_crash_is_reconciled_from_the_submission_and_never_paid_twice(prolific, study):
    platform, server = prolific
    publication = _publish(study)
    sub = server.add_submission(publication.prolific_study_id, participant_id="pgood")
    work = submitted(study, platform="prolific", worker_id="pgood", assignment_id=sub["id"],
                     task_id=publication.prolific_study_id)
    real_pay = platform.bonus_pay

    def pay_then_die(**kwargs):
        real_pay(**kwargs)  # Prolific took the payment (its pay endpoint is not idempotent)...
        raise RuntimeError("worker killed")  # ...and the answer was lost

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "bonus_pay", pay_then_die)
        bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("1.25"), reason="Consistently good work.", kind="good_work")
    assert PlatformCall.objects.get(operation="bonus").status == "sent"

    report = study_sync(study=study)  # the next sync asks Prolific (GET submission) and records it
    bonus = bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("1.25"), reason="Consistently good work.", kind="good_work")

    assert report.reconciled == {"confirmed": 1, "failed": 0, "unknown": 0}
    assert len(server.payments) == 1
    assert server.submissions[sub["id"]]["bonus_payments"] == [125]
    assert bonus.status == Bonus.Status.PAID


def test_unconfirmed_bonus_not_yet_visible_is_left_alone(prolific, study, settings):
    platform, server = prolific
    publication = _publish(study)
    sub = server.add_submission(publication.prolific_study_id, participant_id="p")
    work = submitted(study, platform="prolific", worker_id="p", assignment_id=sub["id"],
                     task_id=publication.prolific_study_id)

    def die_before_paying(**kwargs):
        raise RuntimeError("connection dropped")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "bonus_pay", die_before_paying)
        bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("1.00"), reason="Thanks.")

    # Within the settle window the payment may still be on its way: nothing is sent.
    with pytest.raises(PlatformServiceError, match="cannot yet say"):
        bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("1.00"), reason="Thanks.")
    assert server.payments == []
    # After it, Prolific's silence means it was never paid: the retry pays once.
    settings.RL_PROLIFIC_BONUS_SETTLE_SECONDS = 0
    bonus = bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("1.00"), reason="Thanks.")
    assert bonus.status == Bonus.Status.PAID
    assert len(server.payments) == 1


def test_close_stops_the_study(prolific, study):
    platform, server = prolific
    publication = _publish(study)
    study_close(user=OPERATOR, study=study)
    study_close(user=OPERATOR, study=study)
    stops = [c for c in server.calls("POST", r"/api/v1/studies/\w+/transition/") if c["body"]["action"] == "STOP"]
    assert len(stops) == 1
    publication.refresh_from_db()
    assert publication.status == Publication.Status.CLOSED


def test_the_token_is_never_stored_or_logged(prolific, study, caplog):
    platform, server = prolific
    caplog.set_level(logging.DEBUG)
    publication = _publish(study)
    sub = server.add_submission(publication.prolific_study_id, participant_id="p")
    work = submitted(study, platform="prolific", worker_id="p", assignment_id=sub["id"],
                     task_id=publication.prolific_study_id)
    bonus_pay(user=OPERATOR, study=work.study, assignment=work, amount=Decimal("0.10"), reason="Thanks.")
    stored = json.dumps([list(PlatformCall.objects.values()), list(Publication.objects.values())], default=str)
    assert PROLIFIC_TOKEN not in stored
    assert PROLIFIC_TOKEN not in caplog.text


def test_missing_token_names_the_setting(settings, prolific_server):
    settings.RL_PROLIFIC_TOKEN = ""
    platform = ProlificPlatform(base_url=prolific_server.api_url)
    with pytest.raises(PlatformConfigError, match="RL_PROLIFIC_TOKEN"):
        platform.get_study(study_id="abc")
    assert prolific_server.requests == []


def test_a_wrong_token_is_a_refusal_not_a_crash(settings, prolific_server):
    settings.RL_PROLIFIC_TOKEN = "wrong"
    platform = ProlificPlatform(base_url=prolific_server.api_url)
    with pytest.raises(Exception, match="HTTP 401") as info:
        platform.get_study(study_id="abc")
    assert "wrong" not in str(info.value)
