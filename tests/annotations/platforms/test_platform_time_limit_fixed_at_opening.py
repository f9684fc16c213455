"""The time limit a platform is sent is the one the study fixed when it opened: a publish after a
redeploy that changed RL_ASSIGNMENT_MINUTES (a second batch, or a study opened by hand and published
later) sent the new setting while the study's tasks kept the old one, or told workers of the old
limit while the app gave them the new. Publishing a draft opens it first, which fixes the limit."""
from __future__ import annotations

import math
from decimal import Decimal

import pytest
from django.test import override_settings

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import PLATFORM_HANDOFF_SECONDS, study_publish
from studies.models import Study
from studies.services.studies import study_update
from tests.annotations.platforms.mturk_stubs import HIT_A, HIT_B, hit, hit_params

pytestmark = pytest.mark.django_db
FIXED = 40 * 60 + PLATFORM_HANDOFF_SECONDS  # the 40 minutes it opened with, and the way there and back


def _opened_at_40_minutes(study, platform: str) -> Study:
    """The platform tests' draft, set to ``platform`` with a 20-minute estimate (the rule: 80
    minutes), opened by ``study_open`` while RL_ASSIGNMENT_MINUTES reads 40."""
    study = study_update(study=study, user=None, platform=platform, estimated_minutes_per_task=Decimal("20"),
                         reward=Decimal("5.00"))
    with override_settings(RL_ASSIGNMENT_MINUTES=40):
        return study_open(study=study, user=OPERATOR)


@pytest.mark.parametrize("later", [90, 12, None])
def test_prolific_is_sent_the_limit_the_study_opened_with(prolific, study, later):
    platform, server = prolific
    study = _opened_at_40_minutes(study, "prolific")
    with override_settings(RL_ASSIGNMENT_MINUTES=later):
        publication = study_publish(user=OPERATOR, study=Study.objects.get(pk=study.pk), platform_name="prolific")
    sent = server.calls("POST", r"/api/v1/studies/")[0]["body"]["maximum_allowed_time"]
    assert sent == math.ceil(FIXED / 60) == 45
    publication.refresh_from_db()
    assert publication.plan["assignment_duration_seconds"] == FIXED


@pytest.mark.parametrize("later", [90, 12])
def test_mturk_is_sent_the_limit_the_study_opened_with(mturk, study, later):
    platform, stubber = mturk
    study = _opened_at_40_minutes(study, "mturk")
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    for index, (hit_id, size) in enumerate(((HIT_A, 9), (HIT_B, 5))):
        params = {**hit_params(study, index=index, size=size), "AssignmentDurationInSeconds": FIXED,
                  "Reward": "5.00"}
        stubber.add_response("create_hit", hit(hit_id, size), params)
    with override_settings(RL_ASSIGNMENT_MINUTES=later):
        publication = study_publish(user=OPERATOR, study=Study.objects.get(pk=study.pk), platform_name="mturk")
    stubber.assert_no_pending_responses()  # each HIT was sent the 40 minutes it opened with
    publication.refresh_from_db()
    assert publication.plan["assignment_duration_seconds"] == FIXED


def test_publishing_a_draft_fixes_the_limit_it_sends(prolific, study):
    platform, server = prolific
    study = study_update(study=study, user=None, platform="prolific", estimated_minutes_per_task=Decimal("20"),
                         reward=Decimal("5.00"))
    with override_settings(RL_ASSIGNMENT_MINUTES=40):
        study_publish(user=OPERATOR, study=study, platform_name="prolific")  # opens it
    assert server.calls("POST", r"/api/v1/studies/")[0]["body"]["maximum_allowed_time"] == 45
    row = Study.objects.get(pk=study.pk)
    assert (row.status, row.assignment_minutes) == (Study.Status.OPEN, 40)
    with override_settings(RL_ASSIGNMENT_MINUTES=90):  # a later redeploy: a dry run shows the same limit
        dry = study_publish(user=OPERATOR, study=row, platform_name="prolific", dry_run=True)
    assert dry.plan["assignment_duration_seconds"] == FIXED
