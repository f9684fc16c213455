"""``annotations.services.entry``: which task an entry gets, called as the entry pages call it
(the pages' own tests are ``test_views_entry.py`` and ``test_views_entry_task_proof.py``)."""
from __future__ import annotations

import pytest

from annotations.services.entry import (
    PlatformRefs,
    assignment_enter,
    consent_take,
    consent_text_sha256,
    may_resume,
)
from annotations.services.errors import TaskInProgress
from tests.annotations.factories import ParticipantFactory, make_study

pytestmark = pytest.mark.django_db


def test_only_the_browser_holding_the_task_or_its_platform_assignment_resumes_it():
    study = make_study(n_items=4, n_sources=1, quota=2, units_per_task=2)
    worker = ParticipantFactory()
    task = assignment_enter(study=study, participant=worker, refs=PlatformRefs(assignment_id="A1"), held_task_id=None)

    assert may_resume(active=task, refs=PlatformRefs(), held_task_id=task.pk)
    assert may_resume(active=task, refs=PlatformRefs(assignment_id="A1"), held_task_id=None)
    assert not may_resume(active=task, refs=PlatformRefs(assignment_id="A2"), held_task_id=None)
    assert not may_resume(active=task, refs=PlatformRefs(), held_task_id=task.pk + 1)

    # The same worker from a browser that holds nothing (an old cookie of another task, no id) is refused.
    with pytest.raises(TaskInProgress):
        assignment_enter(study=study, participant=worker, refs=PlatformRefs(), held_task_id=task.pk + 1)
    again = assignment_enter(study=study, participant=worker, refs=PlatformRefs(), held_task_id=task.pk)
    assert again.pk == task.pk


def test_a_consent_form_sent_twice_gets_the_same_task():
    study = make_study(n_items=4, n_sources=1, quota=2, units_per_task=2)
    worker = ParticipantFactory()
    first = consent_take(key="nonce-1", study=study, consent_sha256=consent_text_sha256(study),
                         participant=lambda: worker, refs=PlatformRefs(), held_task_id=None)
    second = consent_take(key="nonce-1", study=study, consent_sha256=consent_text_sha256(study),
                          participant=lambda: worker, refs=PlatformRefs(), held_task_id=None)
    assert second.pk == first.pk
    assert first.consented_at is not None
