"""The time limit a platform is sent is the app's own deadline for a task
(``deadlines.assignment_duration``) and the minutes to get there and back
(``PLATFORM_HANDOFF_SECONDS``), never shorter: publishing told the platform three times the
estimate while the app gave four, so a worker who finished in the app's last stretch was told
"your answers are saved", given a code, and timed out unpaid on the platform (a 20-minute
Prolific study: ``maximum_allowed_time`` 60, the app's deadline 80 minutes). An explicit shorter
limit is refused, naming both values; what was sent is recorded on the publication's plan."""
from __future__ import annotations

import math
from decimal import Decimal

import pytest

from annotations.models import PlatformCall, Publication
from annotations.services.deadlines import assignment_duration
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import PLATFORM_HANDOFF_SECONDS, study_publish
from studies.services.studies import study_update
from tests.annotations.platforms.mturk_stubs import HIT_A, HIT_B, hit, hit_params

pytestmark = pytest.mark.django_db


def _twenty_minute_study(study, platform: str):
    """The platform tests' draft study, set through the study page's service to run on
    ``platform`` with a 20-minute estimate (and a reward that pays for it)."""
    return study_update(study=study, user=None, platform=platform, estimated_minutes_per_task=Decimal("20"),
                        reward=Decimal("5.00"))


def _app_deadline_seconds(study) -> float:
    return assignment_duration(study).total_seconds()


def _platform_seconds(study) -> int:
    """What the platform must be given: the app's deadline in whole seconds, plus the hand-off."""
    return math.ceil(_app_deadline_seconds(study)) + PLATFORM_HANDOFF_SECONDS


@pytest.mark.parametrize("setting", [None, 47.5, 12])
def test_prolific_is_never_told_less_time_than_the_app_gives(prolific, study, settings, setting):
    settings.RL_ASSIGNMENT_MINUTES = setting
    platform, server = prolific
    study = _twenty_minute_study(study, "prolific")

    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")

    sent = server.calls("POST", r"/api/v1/studies/")[0]["body"]["maximum_allowed_time"]
    assert isinstance(sent, int)
    assert sent * 60 >= _app_deadline_seconds(study)
    assert sent == max(2, math.ceil(_platform_seconds(study) / 60))  # whole minutes, rounded up
    if setting is None:
        assert sent == 85  # four times the 20-minute estimate, and 5 to get there and back (was 60)
    publication.refresh_from_db()
    assert publication.plan["assignment_duration_seconds"] == _platform_seconds(study)
    create = PlatformCall.objects.get(operation="create_study")
    assert create.request_summary["maximum_allowed_time"] == sent


@pytest.mark.parametrize("setting", [None, 47.5, 0.2])
def test_mturk_is_never_told_less_time_than_the_app_gives(mturk, study, settings, setting):
    settings.RL_ASSIGNMENT_MINUTES = setting
    platform, stubber = mturk
    study = _twenty_minute_study(study, "mturk")
    expected = max(30, _platform_seconds(study))  # whole seconds, MTurk's minimum 30
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    for index, (hit_id, size) in enumerate(((HIT_A, 9), (HIT_B, 5))):
        params = {**hit_params(study, index=index, size=size), "AssignmentDurationInSeconds": expected,
                  "Reward": "5.00"}
        stubber.add_response("create_hit", hit(hit_id, size), params)

    publication = study_publish(user=OPERATOR, study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()  # each HIT was sent exactly ``expected``
    assert expected >= _app_deadline_seconds(study)
    if setting is None:
        assert expected == 85 * 60
    publication.refresh_from_db()
    assert publication.status == Publication.Status.PUBLISHED
    assert publication.plan["assignment_duration_seconds"] == expected
    summaries = PlatformCall.objects.filter(operation="create_hit").values_list("request_summary", flat=True)
    assert [s["assignment_duration_seconds"] for s in summaries] == [expected, expected]


def test_a_dry_run_shows_and_records_the_apps_deadline(mturk, study):
    study = _twenty_minute_study(study, "mturk")
    publication = study_publish(user=OPERATOR, study=study, platform_name="mturk", dry_run=True)
    hits = [r for r in publication.plan["requests"] if r["operation"] == "create_hit"]
    assert {r["params"]["AssignmentDurationInSeconds"] for r in hits} == {85 * 60}
    assert publication.plan["assignment_duration_seconds"] == 85 * 60


@pytest.mark.parametrize("setting", [None, 45])
def test_an_explicit_limit_shorter_than_the_apps_deadline_is_refused(prolific, study, settings, setting):
    settings.RL_ASSIGNMENT_MINUTES = setting
    platform, server = prolific
    study = _twenty_minute_study(study, "prolific")
    own = _platform_seconds(study)

    with pytest.raises(PlatformServiceError) as refused:
        study_publish(user=OPERATOR, study=study, platform_name="prolific",
                      options={"assignment_duration_seconds": own - 60})

    assert str(own - 60) in refused.value.message and str(own) in refused.value.message
    assert server.calls("POST", r"/api/v1/studies/") == []  # nothing sent
    assert not Publication.objects.filter(study=study).exists()
    study.refresh_from_db()
    assert study.status == "draft"  # refused before the study was opened


def test_an_explicit_longer_limit_is_sent(prolific, study):
    platform, server = prolific
    study = _twenty_minute_study(study, "prolific")
    study_publish(user=OPERATOR, study=study, platform_name="prolific",
                  options={"assignment_duration_seconds": 2 * 3600 + 1})
    assert server.calls("POST", r"/api/v1/studies/")[0]["body"]["maximum_allowed_time"] == 121
