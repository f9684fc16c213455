"""A queued bonus or approve batch that meets a withdrawal before it runs.

The publish page queues long lists as ``pay_bonuses_task`` / ``approve_assignments_task``
batches; a participant may withdraw (``participant_withdraw`` deletes their unpaid tasks) before
a worker runs one. The others in the batch are still paid or approved and the vanished id is an
error of its row; an id of another study's task still refuses the whole batch
(``access.study_assignments``)."""
from __future__ import annotations

from decimal import Decimal

import pytest

from annotations.models import Assignment, Bonus
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from annotations.services.withdrawal import participant_withdraw
from annotations.tasks.platforms import approve_assignments_task, pay_bonuses_task
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import prolific, prolific_server, submitted  # noqa: F401
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db

REASON = "Good work."


def _published_study(server, owner, *, name: str, workers: tuple[str, ...]) -> tuple[object, list[Assignment]]:
    """A study of ``owner`` published on Prolific, with one submitted task per worker of ``workers``
    (each with a submission on the local Prolific server)."""
    study = make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, reward=Decimal("2.00"), owner=owner,
                       estimated_minutes_per_task=Decimal("6.0"), name=name, platform="prolific")
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    works = []
    for worker in workers:
        sub = server.add_submission(publication.prolific_study_id, participant_id=worker)
        works.append(submitted(study, platform="prolific", worker_id=worker, assignment_id=sub["id"],
                               task_id=publication.prolific_study_id))
    return study, works


@pytest.fixture
def withdrawn(prolific):  # noqa: F811
    """(server, owner, study, its three tasks' ids as queued, the withdrawn one's id, the other two
    tasks): the batch was queued, then the second worker withdrew."""
    _, server = prolific
    alice, _ = staff_client("alice")
    study, works = _published_study(server, alice, name="s", workers=("pw0rker1", "pw0rker2", "pw0rker3"))
    ids = [w.pk for w in works]  # what the publish page queued (queue_in_batches)
    participant_withdraw(user=alice, study=study, worker_id="pw0rker2")
    assert not Assignment.objects.filter(pk=works[1].pk).exists()
    return server, alice, study, ids, works[1].pk, [works[0], works[2]]


def test_the_bonus_batch_pays_the_others_and_reports_the_withdrawn_task(withdrawn):
    server, alice, study, ids, gone, others = withdrawn

    result = pay_bonuses_task.delay(study_id=study.pk, user_id=alice.pk, assignment_ids=ids, amount="0.50",
                                    reason=REASON).get()

    assert result["paid"] == 2 and result["unsettled"] == []
    assert len(result["errors"]) == 1 and result["errors"][0].startswith(f"assignment {gone}: not found in study")
    assert len(server.payments) == 2
    assert sorted(Bonus.objects.values_list("assignment_id", flat=True)) == sorted(w.pk for w in others)


def test_the_approve_batch_approves_the_others_and_reports_the_withdrawn_task(withdrawn):
    server, alice, study, ids, gone, others = withdrawn

    result = approve_assignments_task.delay(study_id=study.pk, user_id=alice.pk, assignment_ids=ids).get()

    assert result["approved"] == 2 and result["unsettled"] == []
    assert len(result["errors"]) == 1 and result["errors"][0].startswith(f"assignment {gone}: not found in study")
    for work in others:
        work.refresh_from_db()
        assert work.status == Assignment.Status.APPROVED


def test_an_id_of_another_study_still_refuses_the_whole_batch(withdrawn):
    server, alice, study, ids, gone, others = withdrawn
    _, theirs = _published_study(server, alice, name="other", workers=("pw0rker9",))
    batch = ids + [theirs[0].pk]

    with pytest.raises(PlatformServiceError, match=rf"assignment\(s\) {theirs[0].pk}: not found in study "
                                                   rf"{study.pk}; nothing was done"):
        pay_bonuses_task.delay(study_id=study.pk, user_id=alice.pk, assignment_ids=batch, amount="0.50",
                               reason=REASON).get()
    with pytest.raises(PlatformServiceError, match="nothing was done"):
        approve_assignments_task.delay(study_id=study.pk, user_id=alice.pk, assignment_ids=batch).get()

    assert server.payments == [] and not Bonus.objects.exists()
    for work in [*others, theirs[0]]:
        work.refresh_from_db()
        assert work.status == Assignment.Status.SUBMITTED
