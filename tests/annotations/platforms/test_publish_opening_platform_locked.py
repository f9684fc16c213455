"""A publish opens a draft only on the platform it means, checked under the study's row lock at
the opening (``publish._study_open_on``), with MTurk's closure for it: a researcher who switches
the draft to MTurk (``study_update``, which takes the same lock) after the publish read it, or
MTurk closing meanwhile, leaves the study a draft with no units, never open (its platform fixed)
on a platform nothing will publish it on. The switch is made from inside the publish, between its
first checks and the opening (in ``study_cost_and_pay``, which runs between them)."""
from __future__ import annotations

import pytest

from annotations.models import Publication, Unit
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms import publish
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from studies.models import Study
from studies.services.studies import study_update
from tests.annotations.platforms.conftest import on_platform


def _meanwhile(monkeypatch, then):
    """Run ``then()`` once during the publish, after its first checks and before the opening."""
    real = publish.study_cost_and_pay

    def cost_then(**kwargs):
        answer = real(**kwargs)
        then()
        return answer

    monkeypatch.setattr(publish, "study_cost_and_pay", cost_then)


def _still_a_draft(study, platform: str):
    study.refresh_from_db()
    assert study.status == Study.Status.DRAFT and study.platform == platform
    assert not Unit.objects.filter(study=study).exists()
    assert not Publication.objects.filter(study=study, dry_run=False).exists()


def test_a_draft_switched_to_mturk_during_a_prolific_publish_stays_a_draft(prolific, mturk, study, monkeypatch):
    _, server = prolific
    study = on_platform(study, "prolific")
    _meanwhile(monkeypatch, lambda: study_update(study=Study.objects.get(pk=study.pk), user=None, platform="mturk"))

    with pytest.raises(PlatformServiceError, match="cannot be published on Prolific") as refused:
        study_publish(user=OPERATOR, study=study, platform_name="prolific")

    assert "its platform (the study's platform field) is Amazon Mechanical Turk" in refused.value.message
    _still_a_draft(study, "mturk")
    assert server.requests == []  # nothing sent to Prolific
    mturk[1].assert_no_pending_responses()


def test_mturk_closing_during_a_publish_on_mturk_leaves_it_a_draft(mturk, study, monkeypatch, settings):
    _, stubber = mturk  # nothing queued: any request to MTurk fails the test
    study = on_platform(study, "mturk")
    _meanwhile(monkeypatch, lambda: setattr(settings, "RL_MTURK_CLOSED_ON", "2026-09-30"))

    with pytest.raises(PlatformServiceError) as refused:
        study_publish(user=OPERATOR, study=study, platform_name="mturk")

    assert "closed Mechanical Turk for good on 2026-09-30" in refused.value.message
    assert "Nothing was sent and the study is still a draft." in refused.value.message
    _still_a_draft(study, "mturk")
    stubber.assert_no_pending_responses()
