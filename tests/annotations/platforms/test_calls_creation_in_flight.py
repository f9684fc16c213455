"""Creating and publishing (a Prolific study, an MTurk HIT) reconciled while the request may
still be on its way (``calls.call_in_flight``): the platform's "not there yet" is "cannot tell
yet", as for a review decision, so a sync during a publish neither marks the call failed (its own
answer would then crash on the failed row) nor lets a retry create a second study. An answer that
comes after all the same (a request slower than ``REQUEST_IN_FLIGHT``): publishing a study is
recorded confirmed (applied once, whoever sent it); a creation's is recorded as the
publication's error, never raised raw."""
from __future__ import annotations

import datetime as dt

import pytest

from annotations.models import PlatformCall, Publication
from annotations.services.payments import CallSpec, PlatformServiceError, platform_call_execute
from annotations.services.platforms import calls
from annotations.services.platforms.calls import reconcile_call
from annotations.services.platforms.common import OP
from annotations.services.platforms.sync import study_sync
from tests.annotations.platforms.conftest import on_platform, publish_on


@pytest.fixture
def study(db, study):
    return on_platform(study, "prolific")


def _sync_during(platform, monkeypatch, study, method: str) -> list:
    """Run ``study_sync`` while ``platform.<method>`` is on its way, before it reaches Prolific;
    the reports are returned."""
    real = getattr(platform, method)
    reports = []

    def slow(**kwargs):
        reports.append(study_sync(study=study))
        return real(**kwargs)

    monkeypatch.setattr(platform, method, slow)
    return reports


@pytest.mark.parametrize("method, op", [("publish_study", OP.PUBLISH_STUDY), ("create_study", OP.CREATE_STUDY)])
def test_a_sync_during_a_publish_leaves_its_call_undecided(prolific, study, monkeypatch, method, op):
    platform, server = prolific
    reports = _sync_during(platform, monkeypatch, study, method)

    publication = publish_on(study, "prolific")

    assert reports[0].reconciled["unknown"] == 1 and reports[0].reconciled["failed"] == 0
    assert PlatformCall.objects.get(operation=op).status == PlatformCall.Status.CONFIRMED
    assert publication.status == Publication.Status.PUBLISHED and publication.error == ""
    assert [s["status"] for s in server.studies.values()] == ["ACTIVE"]  # one study, published


def _in_flight_for(monkeypatch, seconds: int) -> None:
    monkeypatch.setattr(calls, "REQUEST_IN_FLIGHT", dt.timedelta(seconds=seconds))


def test_a_publish_answered_after_sync_settled_it_is_confirmed(prolific, study, monkeypatch):
    platform, server = prolific
    _in_flight_for(monkeypatch, 0)  # the request outlasted its in-flight window
    reports = _sync_during(platform, monkeypatch, study, "publish_study")

    publication = publish_on(study, "prolific")

    assert reports[0].reconciled["failed"] == 1
    call = PlatformCall.objects.get(operation=OP.PUBLISH_STUDY)
    assert call.status == PlatformCall.Status.CONFIRMED and "confirmed_after_failed" in call.response
    assert publication.status == Publication.Status.PUBLISHED
    assert [s["status"] for s in server.studies.values()] == ["ACTIVE"]


def test_a_creation_answered_after_sync_settled_it_is_the_publications_error(prolific, study, monkeypatch):
    platform, server = prolific
    _in_flight_for(monkeypatch, 0)
    _sync_during(platform, monkeypatch, study, "create_study")

    with pytest.raises(PlatformServiceError, match="answered after sync had settled it as not applied"):
        publish_on(study, "prolific")

    publication = Publication.objects.get(study=study)
    assert "answered after sync had settled it as not applied" in publication.error
    assert PlatformCall.objects.get(operation=OP.CREATE_STUDY).status == PlatformCall.Status.FAILED
    assert server.calls("POST", r"/api/v1/studies/\w+/transition/") == []  # its draft was never published


class _NotThereYet:
    """A platform that has no record yet of anything created or published."""

    def was_published(self, *, spec_token):
        return None

    def get_study(self, *, study_id):
        return {"id": study_id, "status": "UNPUBLISHED"}


@pytest.mark.parametrize("op, summary", [(OP.CREATE_HIT, {}), (OP.CREATE_STUDY, {}),
                                         (OP.PUBLISH_STUDY, {"study_id": "f" * 24})])
def test_not_there_yet_is_undecided_while_in_flight_and_not_applied_after(db, op, summary):
    key = f"mturk:{op}:tok-1"
    seen = []

    def send():
        seen.append(reconcile_call(platform=_NotThereYet(), call=PlatformCall.objects.get(idempotency_key=key)))
        return {"id": "f" * 24}

    call = platform_call_execute(spec=CallSpec(platform="mturk", operation=op, idempotency_key=key,
                                               platform_token="tok-1", request_summary=summary), send=send)

    assert seen == [None]  # while it was on its way
    PlatformCall.objects.filter(pk=call.pk).update(status=PlatformCall.Status.SENT,
                                                   sent_at=call.sent_at - calls.REQUEST_IN_FLIGHT)
    assert reconcile_call(platform=_NotThereYet(), call=PlatformCall.objects.get(pk=call.pk)) is False
