"""A block refuses the worker in the studies it covers (``worker_block``): no new task there, and
the task they hold in progress ends too (returned: its slots go back, its answers never count),
where before the task pages went on taking its answers and its submit, completion code and all."""
from __future__ import annotations

import pytest

from annotations.models import Assignment, Unit
from annotations.selectors import claims_that_count
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.errors import AnnotationError
from annotations.services.platforms.blocks import worker_block
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def test_blocking_a_worker_ends_their_tasks_in_progress_in_the_studies_the_block_covers():
    alice, _ = staff_client("alice")
    bob, _ = staff_client("bob")
    first = open_utility_study(name="alice-1", owner=alice, n_items=6, n_sources=1, quota=2, units_per_task=2)
    second = open_utility_study(name="alice-2", owner=alice, n_items=3, n_sources=1, quota=2)
    bobs = open_utility_study(name="bob-1", owner=bob, n_items=3, n_sources=1, quota=2)
    done = work(first, "pspammer1")  # a finished task: the block leaves it to the review
    task = work(first, "pspammer1", steps=1, submit=False)
    other = work(second, "pspammer1", steps=1, submit=False)
    elsewhere = work(bobs, "pspammer1", steps=1, submit=False)
    claimed = sum(Unit.objects.filter(study=first).values_list("n_claimed", flat=True))

    worker_block(user=alice, study=first, participant=task.participant, reason="Copied answers.")

    statuses = dict(Assignment.objects.values_list("pk", "status"))
    assert statuses[task.pk] == statuses[other.pk] == Assignment.Status.RETURNED
    assert statuses[done.pk] == Assignment.Status.SUBMITTED
    assert statuses[elsewhere.pk] == Assignment.Status.ACTIVE  # Bob's study: not Alice's to block in
    assert sum(Unit.objects.filter(study=first).values_list("n_claimed", flat=True)) < claimed
    claim = task.claims.order_by("position").first()
    with pytest.raises(AnnotationError):
        annotation_submit(assignment=task, claim=claim, step="after", answer="yes")
    with pytest.raises(AnnotationError):
        assignment_submit(assignment=task)
    assert not claims_that_count(study=first).filter(assignment=task).exists()
    # Blocking again changes nothing.
    worker_block(user=alice, study=first, participant=task.participant, reason="Copied answers.")
    assert Assignment.objects.get(pk=elsewhere.pk).status == Assignment.Status.ACTIVE
