"""A queued approve batch that meets a withdrawal before it runs.

The publish page queues long lists as ``approve_assignments_task`` batches. A participant of a
study run with participant links may withdraw before a worker runs one: their tasks have no
platform submission waiting for a decision, so ``participant_withdraw`` erases them (on MTurk and
Prolific it waits for the review instead: ``test_withdrawal_waits_for_review``). The others in
the batch are still approved and the vanished id is an error of its row; an id of another study's
task still refuses the whole batch (``access.study_assignments``)."""
from __future__ import annotations

from decimal import Decimal

import pytest

from annotations.models import Assignment
from annotations.services.payments import PlatformServiceError
from annotations.services.withdrawal import participant_withdraw
from annotations.tasks.platforms import approve_assignments_task, pay_bonuses_task
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import submitted
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db


def _link_study(owner, *, name: str, workers: tuple[str, ...]) -> tuple[object, list[Assignment]]:
    """An open study of ``owner`` run with participant links, with one submitted task per worker."""
    study = make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, reward=Decimal("2.00"), owner=owner,
                       estimated_minutes_per_task=Decimal("6.0"), name=name, platform="link")
    return study, [submitted(study, platform="link", worker_id=worker, assignment_id="") for worker in workers]


@pytest.fixture
def withdrawn():
    """(owner, study, its three tasks' ids as queued, the withdrawn one's id, the other two tasks):
    the batch was queued, then the second worker withdrew."""
    alice, _ = staff_client("alice")
    study, works = _link_study(alice, name="s", workers=("lw0rker1", "lw0rker2", "lw0rker3"))
    ids = [w.pk for w in works]  # what the publish page queued (queue_in_batches)
    participant_withdraw(user=alice, study=study, worker_id="lw0rker2")
    assert not Assignment.objects.filter(pk=works[1].pk).exists()
    return alice, study, ids, works[1].pk, [works[0], works[2]]


def test_the_approve_batch_approves_the_others_and_reports_the_withdrawn_task(withdrawn):
    alice, study, ids, gone, others = withdrawn

    result = approve_assignments_task.delay(study_id=study.pk, user_id=alice.pk, assignment_ids=ids).get()

    assert result["approved"] == 2 and result["unsettled"] == []
    assert len(result["errors"]) == 1 and result["errors"][0].startswith(f"assignment {gone}: not found in study")
    for work in others:
        work.refresh_from_db()
        assert work.status == Assignment.Status.APPROVED


def test_an_id_of_another_study_still_refuses_the_whole_batch(withdrawn):
    alice, study, ids, gone, others = withdrawn
    _, theirs = _link_study(alice, name="other", workers=("lw0rker9",))
    batch = ids + [theirs[0].pk]

    with pytest.raises(PlatformServiceError, match=rf"assignment\(s\) {theirs[0].pk}: not found in study "
                                                   rf"{study.pk}; nothing was done"):
        pay_bonuses_task.delay(study_id=study.pk, user_id=alice.pk, assignment_ids=batch, amount="0.50",
                               reason="Good work.").get()
    with pytest.raises(PlatformServiceError, match="nothing was done"):
        approve_assignments_task.delay(study_id=study.pk, user_id=alice.pk, assignment_ids=batch).get()
    for work in others:
        work.refresh_from_db()
        assert work.status == Assignment.Status.SUBMITTED
