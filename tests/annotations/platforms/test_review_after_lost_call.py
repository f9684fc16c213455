"""A review decision waits while the contrary one was sent and its answer lost.

A rejection whose answer was lost (its ``PlatformCall`` left ``sent``) leaves the task submitted.
"Approve all" and the single approval checked the task's status only: they sent an approval that
the platform took, overriding the researcher's rejection and paying the reward (the bonus was
refused already: ``bonus._lock_bonusable``). Each decision now reads the contrary call under the
task's row lock before its own is sent (``review._lock_undecided``), and once sync settles the lost
call as not applied, the other decision goes through."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from annotations.models import Assignment, PlatformCall
from annotations.platforms.base import PlatformTransientError
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_approve, assignment_reject
from annotations.services.platforms.sync import study_sync
from annotations.tasks.platforms import approve_assignments_task
from tests.annotations.platforms.conftest import (  # noqa: F401
    _public_url,
    prolific,
    prolific_server,
    publish_on,
    study,
    submitted,
)

pytestmark = pytest.mark.django_db

WHY = "The answers did not follow the instructions: several explanations were copied from the item text." * 2


def _work(server, on) -> tuple[Assignment, dict]:
    """One submitted task of ``on`` on the fake Prolific, with its submission."""
    publication = publish_on(on, "prolific")
    sub = server.add_submission(publication.prolific_study_id, participant_id="a" * 24)
    return submitted(on, platform="prolific", worker_id="a" * 24, assignment_id=sub["id"],
                     task_id=publication.prolific_study_id), sub


def _lost(platform, name: str, decide) -> None:
    """``decide()`` with the platform's ``name`` call losing its answer before it reaches Prolific:
    the call stays ``sent``, the task submitted."""
    def lost(**kwargs):
        raise PlatformTransientError(f"Prolific POST transition ({name}): ReadTimeout")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(PlatformTransientError):
        patch.setattr(platform, name, lost)
        decide()


def _calls(of) -> list[tuple[str, str]]:
    return sorted(PlatformCall.objects.filter(study=of, operation__in=["approve", "reject"])
                  .values_list("operation", "status"))


def test_approve_all_and_approve_refused_after_a_lost_rejection(prolific, study):  # noqa: F811
    platform, server = prolific
    task, sub = _work(server, study)
    _lost(platform, "reject", lambda: assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=WHY))
    researcher = get_user_model().objects.create_superuser("root", password="pw")
    refusal = (f"assignment {task.pk} is being rejected (its rejection was sent to prolific, its outcome not "
               "recorded yet): nothing was sent. The next sync settles it; decide again if it finds the rejection "
               "not applied")

    result = approve_assignments_task.apply(
        kwargs={"study_id": study.pk, "user_id": researcher.pk, "assignment_ids": [task.pk]}).get()
    assert result == {"approved": 0, "errors": [f"assignment {task.pk}: {refusal}"], "unsettled": []}
    with pytest.raises(PlatformServiceError) as refused:
        assignment_approve(user=researcher, study=study, assignment=Assignment.objects.get(pk=task.pk))
    assert refused.value.message == refusal

    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.SUBMITTED
    assert server.submissions[sub["id"]]["status"] == "AWAITING REVIEW"
    assert _calls(study) == [("reject", "sent")]


def test_reject_refused_after_a_lost_approval(prolific, study):  # noqa: F811
    platform, server = prolific
    task, sub = _work(server, study)
    _lost(platform, "approve", lambda: assignment_approve(user=OPERATOR, study=study, assignment=task))

    with pytest.raises(PlatformServiceError) as refused:
        assignment_reject(user=OPERATOR, study=study, assignment=Assignment.objects.get(pk=task.pk), feedback=WHY)
    assert refused.value.message == (
        f"assignment {task.pk} is being approved (its approval was sent to prolific, its outcome not recorded "
        "yet): nothing was sent. The next sync settles it; decide again if it finds the approval not applied")

    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.SUBMITTED
    assert server.submissions[sub["id"]]["status"] == "AWAITING REVIEW"
    assert _calls(study) == [("approve", "sent")]


def test_after_sync_settles_a_lost_rejection_as_not_applied_approve_all_approves(prolific, study):  # noqa: F811
    platform, server = prolific
    task, sub = _work(server, study)
    _lost(platform, "reject", lambda: assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=WHY))
    study_sync(study=study)
    assert _calls(study) == [("reject", "failed")]

    researcher = get_user_model().objects.create_superuser("root", password="pw")
    result = approve_assignments_task.apply(
        kwargs={"study_id": study.pk, "user_id": researcher.pk, "assignment_ids": [task.pk]}).get()
    assert result == {"approved": 1, "errors": [], "unsettled": []}
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.APPROVED
    assert server.submissions[sub["id"]]["status"] == "APPROVED"
    assert _calls(study) == [("approve", "confirmed"), ("reject", "failed")]


def test_after_sync_settles_a_lost_approval_as_not_applied_reject_rejects(prolific, study):  # noqa: F811
    platform, server = prolific
    task, sub = _work(server, study)
    _lost(platform, "approve", lambda: assignment_approve(user=OPERATOR, study=study, assignment=task))
    study_sync(study=study)
    assert _calls(study) == [("approve", "failed")]

    assignment_reject(user=OPERATOR, study=study, assignment=Assignment.objects.get(pk=task.pk), feedback=WHY)
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.REJECTED
    assert server.submissions[sub["id"]]["status"] == "REJECTED"
    assert _calls(study) == [("approve", "failed"), ("reject", "confirmed")]


def test_an_approval_that_passed_its_first_check_is_refused_where_it_is_marked_sent(prolific, study):  # noqa: F811
    # An approval checks the contrary call first, then records its own call as sent in a later
    # transaction. A rejection sent (and its answer lost) between the two was not seen: both went to
    # Prolific. The check runs again as the call's guard, under the task's lock, where it is marked sent.
    from annotations.services.platforms import review

    platform, server = prolific
    task, sub = _work(server, study)
    passed_first_check = []
    first_check = review._lock_undecided

    def approve_meanwhile_rejected(assignment, *, operation):
        first_check(assignment, operation=operation)
        if operation != "approve":
            return
        passed_first_check.append(operation)  # the approval's first check passes: nothing sent yet...
        _lost(platform, "reject", lambda: assignment_reject(user=OPERATOR, study=study, assignment=task,
                                                             feedback=WHY))  # ...then a rejection goes out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(review, "_lock_undecided", approve_meanwhile_rejected)
        with pytest.raises(PlatformServiceError) as refused:
            assignment_approve(user=OPERATOR, study=study, assignment=task)
    assert passed_first_check == ["approve"]
    assert refused.value.message.startswith(f"assignment {task.pk} is being rejected")
    assert server.submissions[sub["id"]]["status"] == "AWAITING REVIEW"  # no approval reached Prolific
    assert _calls(study) == [("approve", "failed"), ("reject", "sent")]
    assert PlatformCall.objects.get(operation="approve").error == refused.value.message
    assert Assignment.objects.get(pk=task.pk).status == Assignment.Status.SUBMITTED


def test_a_decision_after_the_contrary_one_was_confirmed_says_so(prolific, study):  # noqa: F811
    platform, server = prolific
    task, _sub = _work(server, study)
    assignment_approve(user=OPERATOR, study=study, assignment=task)
    PlatformCall.objects.filter(operation="approve").update(status=PlatformCall.Status.CONFIRMED)
    Assignment.objects.filter(pk=task.pk).update(status=Assignment.Status.SUBMITTED)  # not yet recorded here
    with pytest.raises(PlatformServiceError) as refused:
        assignment_reject(user=OPERATOR, study=study, assignment=Assignment.objects.get(pk=task.pk), feedback=WHY)
    assert refused.value.message == (f"assignment {task.pk} was approved on prolific (its approval was confirmed): "
                                     "nothing was sent. The next sync records the decision here")
