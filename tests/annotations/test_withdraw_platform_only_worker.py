"""A worker the study knows only from its platform's rows (sync stored a ``PlatformSubmission`` with
their raw Prolific id for work that has no task here, or that another participant's task holds) is
withdrawn like any other: by platform id or pseudonym, their raw id leaves the rows, the
``Withdrawal`` is recorded and a later sync stores nothing of theirs. Before, ``participant_withdraw``
searched only participants with a task in the study: ``ParticipantNotFound``, and the id stayed.
A task holding their platform submission that waits for a decision refuses it, as for anyone."""
from __future__ import annotations

import pytest

from annotations.models import Assignment, PlatformSubmission, Withdrawal
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_reject
from annotations.services.platforms.sync import study_sync
from annotations.services.withdrawal import WithdrawalError, participant_withdraw
from lab.pseudonyms import worker_pseudonym
from studies.models import Platform
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import open_study, submitted

pytestmark = pytest.mark.django_db


def _published(server):
    study = make_study(n_items=3, n_sources=1, quota=2, units_per_task=3, status="draft", platform="prolific")
    open_study(study)
    return study, study_publish(user=OPERATOR, study=study, platform_name="prolific").prolific_study_id


@pytest.mark.parametrize("named_by", ["worker_id", "pseudonym"])
def test_a_worker_known_only_from_the_platforms_rows_is_withdrawn_and_their_id_goes(prolific, named_by):
    _platform, server = prolific
    study, pid = _published(server)
    server.add_submission(pid, participant_id="p_ghost")  # submitted there, no task here
    study_sync(study=study)
    row = PlatformSubmission.objects.get(worker_id="p_ghost")
    assert row.flag == PlatformSubmission.Flag.NO_LOCAL_ASSIGNMENT
    name = {"worker_id": "p_ghost", "pseudonym": worker_pseudonym(Platform.PROLIFIC, "p_ghost")}[named_by]

    outcome = participant_withdraw(user=OPERATOR, study=study, **{named_by: name})

    assert outcome.created and (outcome.answers_erased, outcome.tasks_ended) == (0, 0)
    assert Withdrawal.objects.filter(study=study).count() == 1
    assert not PlatformSubmission.objects.filter(worker_id="p_ghost").exists()
    study_sync(study=study)  # the platform still lists it: nothing of theirs is stored again
    assert not PlatformSubmission.objects.filter(worker_id="p_ghost").exists()
    again = participant_withdraw(user=OPERATOR, study=study, **{named_by: name})
    assert not again.created and again.withdrawal.pk == outcome.withdrawal.pk


def test_a_held_task_owed_a_decision_refuses_until_decided_then_the_hold_stays_without_the_id(prolific):
    """p_fake answered p_real's Prolific session (held as a worker mismatch): withdrawing p_real,
    known here only from that row, waits for the task's decision; after it, the hold keeps the
    work out but no longer names p_real."""
    _platform, server = prolific
    study, pid = _published(server)
    real = server.add_submission(pid, participant_id="p_real")
    spoof = submitted(study, platform="prolific", worker_id="p_fake", assignment_id=real["id"], task_id=pid)
    study_sync(study=study)
    assert PlatformSubmission.objects.get(worker_id="p_real").flag == PlatformSubmission.Flag.WORKER_MISMATCH

    with pytest.raises(WithdrawalError, match=rf"task\(s\) {spoof.pk} .* approve or reject these first"):
        participant_withdraw(user=OPERATOR, study=study, worker_id="p_real")
    assert not Withdrawal.objects.exists() and PlatformSubmission.objects.filter(worker_id="p_real").exists()

    assignment_reject(user=OPERATOR, study=study, assignment=spoof, category="FAILED_CHECK",
                      feedback="Your session was answered from another account, so this work cannot be accepted. " * 2)
    assert participant_withdraw(user=OPERATOR, study=study, worker_id="p_real").created

    held = PlatformSubmission.objects.get(assignment=spoof)
    assert (held.worker_id, held.flag) == ("", PlatformSubmission.Flag.WORKER_MISMATCH)
    assert Assignment.objects.get(pk=spoof.pk).status == Assignment.Status.REJECTED  # p_fake's task is theirs
