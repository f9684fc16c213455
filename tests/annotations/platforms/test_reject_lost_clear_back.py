"""A rejection of held work not submitted here takes the researcher's clear back before it is
sent. Its answer lost and sync finding it not applied, the clear (who, when), kept on the
rejection's audit row, is given back; a rejection sync finds applied keeps the hold."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from annotations.models import PlatformCall, PlatformSubmission
from annotations.platforms.base import PlatformTransientError
from annotations.services.payments import CallOutcomeUnknown
from annotations.services.platforms.review import assignment_reject, submission_clear
from annotations.services.platforms.sync import study_sync
from tests.annotations.platforms.test_not_submitted_here import REASON, _held_on_prolific


def _cleared_then_reject_lost(prolific, study, *, reaches_platform: bool):
    platform, server = prolific
    _server, sub, task = _held_on_prolific(prolific, study, "returned")
    study_sync(study=study)
    researcher = get_user_model().objects.create_superuser("rev", "rev@example.org", "pw")
    row = submission_clear(user=researcher,
                           submission=PlatformSubmission.objects.get(platform_assignment_id=sub["id"]))
    cleared = (row.cleared_at, row.cleared_by_id)
    real = platform.reject

    def lost(**kwargs):
        if reaches_platform:
            real(**kwargs)
        raise PlatformTransientError("Prolific POST transition: ReadTimeout")

    with pytest.MonkeyPatch.context() as patch, pytest.raises((CallOutcomeUnknown, PlatformTransientError)):
        patch.setattr(platform, "reject", lost)
        assignment_reject(user=researcher, study=study, assignment=task, feedback=REASON)
    row.refresh_from_db()
    assert row.cleared_at is None  # the hold is back while the outcome is unknown
    return row, cleared


@pytest.mark.django_db
def test_rejection_found_not_applied_gives_the_clear_back(prolific, study):
    row, cleared = _cleared_then_reject_lost(prolific, study, reaches_platform=False)
    study_sync(study=study)
    assert PlatformCall.objects.get(operation="reject").status == PlatformCall.Status.FAILED
    row.refresh_from_db()
    assert (row.cleared_at, row.cleared_by_id) == cleared, "the researcher's clear was not given back"
    summary = PlatformCall.objects.get(operation="reject").request_summary
    assert (summary["cleared_at"], summary["cleared_by"]) == (cleared[0].isoformat(), cleared[1])


@pytest.mark.django_db
def test_rejection_found_applied_keeps_the_hold(prolific, study):
    row, _cleared = _cleared_then_reject_lost(prolific, study, reaches_platform=True)
    study_sync(study=study)
    assert PlatformCall.objects.get(operation="reject").status == PlatformCall.Status.CONFIRMED
    row.refresh_from_db()
    assert row.cleared_at is None and row.cleared_by_id is None


@pytest.mark.django_db
def test_a_clear_given_back_after_its_clearer_was_deleted_names_nobody(prolific, study):
    # Clara clears the hold; Rob's rejection takes the clear back and its answer is lost. Nothing
    # keeps Clara's account then (the clear is on the rejection's audit row only), so it can be
    # deleted. Before, sync then wrote her deleted id back as cleared_by: a foreign-key violation
    # that failed the sync and left the work held.
    platform, _server = prolific
    _s, sub, task = _held_on_prolific(prolific, study, "returned")
    study_sync(study=study)
    users = get_user_model().objects
    clara = users.create_superuser("clara", "clara@example.org", "pw")
    rob = users.create_superuser("rob", "rob@example.org", "pw")
    row = submission_clear(user=clara, submission=PlatformSubmission.objects.get(platform_assignment_id=sub["id"]))
    cleared_at = row.cleared_at

    def lost(**kwargs):
        raise PlatformTransientError("Prolific POST transition: ReadTimeout")

    with pytest.MonkeyPatch.context() as patch, pytest.raises((CallOutcomeUnknown, PlatformTransientError)):
        patch.setattr(platform, "reject", lost)
        assignment_reject(user=rob, study=study, assignment=task, feedback=REASON)
    clara.delete()

    study_sync(study=study)
    assert PlatformCall.objects.get(operation="reject").status == PlatformCall.Status.FAILED
    row.refresh_from_db()
    assert (row.cleared_at, row.cleared_by_id) == (cleared_at, None)
