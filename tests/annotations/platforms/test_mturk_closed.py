"""Amazon closed Mechanical Turk for good on 2026-09-30 (``RL_MTURK_CLOSED_ON``, the one rule in
``annotations.platforms.mturk.mturk_closed_reason``): a new live publish on MTurk is refused before
the study opens, the dry run names the closure, and a study already on MTurk is still wound down.
These tests keep the setting's default (the ``mturk`` fixture, which tests the integration itself,
empties it), on the real MTurk client wrapped by botocore's Stubber: nothing reaches AWS, and any
request not queued fails the test."""
from __future__ import annotations

import datetime as dt

import boto3
import pytest
from botocore.stub import Stubber

from annotations.models import PlatformCall, Publication, Unit
from annotations.platforms import use_platform
from annotations.platforms.mturk import SANDBOX_ENDPOINT, MTurkPlatform, mturk_closed, mturk_closed_reason
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.sync import study_sync
from studies.models import Study
from tests.annotations.platforms.conftest import on_platform
from tests.annotations.platforms.mturk_stubs import HIT_A, HIT_B, hit, hit_params, queue_expire, sync_page

CLOSED_ON = "2026-09-30"


@pytest.fixture
def closed_mturk(aws_env):
    """(platform, stubber) as the ``mturk`` fixture, with ``RL_MTURK_CLOSED_ON`` left at its default."""
    client = boto3.client("mturk", region_name="us-east-1", endpoint_url=SANDBOX_ENDPOINT)
    stubber = Stubber(client)
    stubber.activate()
    with use_platform("mturk", MTurkPlatform(client=client, endpoint=SANDBOX_ENDPOINT)):
        yield stubber
    stubber.deactivate()


@pytest.fixture
def study(db, study):
    """The platform tests' draft study, set to run on MTurk (the study page's service accepts it)."""
    return on_platform(study, "mturk")


def assert_names_the_closure(text: str) -> None:
    for words in (f"closed Mechanical Turk for good on {CLOSED_ON}", "RL_MTURK_CLOSED_ON", "Prolific",
                  "participant links"):
        assert words in text, f"{words!r} not in {text!r}"


def test_the_closure_date_is_the_setting_and_empty_means_open(settings):
    assert settings.RL_MTURK_CLOSED_ON == CLOSED_ON  # the default
    day_before = dt.datetime(2026, 9, 29, 23, 59, tzinfo=dt.UTC)
    closing_day = dt.datetime(2026, 9, 30, 0, 0, tzinfo=dt.UTC)
    assert not mturk_closed(day_before)
    assert mturk_closed(closing_day) and mturk_closed()  # today (after 2026-09-30) too
    assert_names_the_closure(mturk_closed_reason(closing_day))

    settings.RL_MTURK_CLOSED_ON = ""
    assert not mturk_closed() and mturk_closed_reason() == ""

    settings.RL_MTURK_CLOSED_ON = "30/09/2026"
    reason = mturk_closed_reason()
    assert mturk_closed() and "RL_MTURK_CLOSED_ON is '30/09/2026', which is not a date (YYYY-MM-DD)" in reason


def test_a_live_publish_on_mturk_while_closed_is_refused_before_the_study_opens(closed_mturk, study):
    # Nothing queued: any request to MTurk would fail the test. The audit's case was MTurk answering an
    # error once the study had been opened (units built, platform fixed, no HITs, no way to change).
    with pytest.raises(PlatformServiceError) as refused:
        study_publish(user=OPERATOR, study=study, platform_name="mturk")

    assert_names_the_closure(refused.value.message)
    assert "Nothing was sent and the study is still a draft." in refused.value.message
    closed_mturk.assert_no_pending_responses()
    study.refresh_from_db()
    assert study.status == Study.Status.DRAFT and study.platform == "mturk"
    assert not Unit.objects.filter(study=study).exists()
    assert not Publication.objects.filter(study=study).exists()
    assert not PlatformCall.objects.exists()
    # Still a draft: the researcher moves it to Prolific or links on the study page.
    assert on_platform(study, "link").platform == "link"


def test_the_dry_run_names_the_closure_in_its_warnings(closed_mturk, study):
    dry = study_publish(user=OPERATOR, study=study, platform_name="mturk", dry_run=True)

    closures = [w for w in dry.plan["warnings"] if "would be refused" in w]
    assert len(closures) == 1, dry.plan["warnings"]
    assert_names_the_closure(closures[0])
    study.refresh_from_db()
    assert study.status == Study.Status.DRAFT


def test_the_dry_run_says_nothing_of_a_closure_when_the_setting_is_empty(closed_mturk, study, settings):
    settings.RL_MTURK_CLOSED_ON = ""
    dry = study_publish(user=OPERATOR, study=study, platform_name="mturk", dry_run=True)
    assert not [w for w in dry.plan["warnings"] if "Mechanical Turk" in w]


def test_a_batch_begun_before_the_closure_is_resumed_synced_and_closed_after_it(closed_mturk, study, settings):
    stubber = closed_mturk
    settings.RL_MTURK_CLOSED_ON = ""  # before the closure: the first HIT is made, the second refused
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_A, 9), hit_params(study, index=0, size=9))
    stubber.add_client_error("create_hit", service_error_code="RequestError", service_message="Try again later.",
                             http_status_code=400)
    with pytest.raises(PlatformServiceError):
        study_publish(user=OPERATOR, study=study, platform_name="mturk")
    assert Publication.objects.get(study=study).status == Publication.Status.PUBLISHING

    settings.RL_MTURK_CLOSED_ON = CLOSED_ON  # closed now: what was begun is wound down
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5))
    publication = study_publish(user=OPERATOR, study=study, platform_name="mturk")
    assert publication.status == Publication.Status.PUBLISHED and publication.hit_ids == [HIT_A, HIT_B]
    # Published: publishing again returns it, sending nothing.
    assert study_publish(user=OPERATOR, study=study, platform_name="mturk").pk == publication.pk

    statuses = ["Submitted", "Approved", "Rejected"]
    for hit_id in (HIT_A, HIT_B):
        stubber.add_response("list_assignments_for_hit", sync_page([]),
                             {"HITId": hit_id, "AssignmentStatuses": statuses, "MaxResults": 100})
    study_sync(study=study)
    queue_expire(stubber, HIT_A, HIT_B)
    study_close(user=OPERATOR, study=study)

    stubber.assert_no_pending_responses()
    study.refresh_from_db()
    assert study.status == Study.Status.CLOSED
