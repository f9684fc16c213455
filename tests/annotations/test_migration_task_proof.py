"""Migration ``0013_task_proof`` on a database with tasks in it: tasks in progress that still
wait for their study's qualification test are marked, and platform assignments that already have
several live or finished tasks stop the migration with a message naming them (the constraint
could not be added over them)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("annotations", "0012_mturk_qualification_type_name")]
AFTER = [("annotations", "0013_task_proof")]


def _tasks(apps, *, name, platform_ids):
    """A study with a qualification test, and one task per platform id (history: no services at 0009)."""
    Study = apps.get_model("studies", "Study")
    Dataset = apps.get_model("studies", "Dataset")
    Participant = apps.get_model("annotations", "Participant")
    Assignment = apps.get_model("annotations", "Assignment")
    QualificationTest = apps.get_model("annotations", "QualificationTest")
    from django.utils import timezone

    study = Study.objects.create(name=name, dataset=Dataset.objects.create(name=f"{name}-data"),
                                 status="open", platform="mturk")
    QualificationTest.objects.create(study=study, pass_mark=1)
    tasks = []
    for i, (platform_id, status) in enumerate(platform_ids):
        worker = Participant.objects.create(platform="mturk", external_id=f"A{name.upper()}{i}")
        tasks.append(Assignment.objects.create(study=study, participant=worker, status=status, token=f"{name}{i}",
                                               platform_assignment_id=platform_id,
                                               expires_at=timezone.now() + timezone.timedelta(hours=1)))
    return tasks


def test_tasks_in_progress_wait_for_the_test_and_duplicates_stop_the_migration(migrate_to):
    """(``migrate_to`` brings the schema back to the latest migrations afterwards.)"""
    apps = migrate_to(BEFORE)
    try:
        waiting, done = _tasks(apps, name="first", platform_ids=[("3WAITING", "active"), ("3DONE", "submitted")])
        apps = migrate_to(AFTER)
        Assignment = apps.get_model("annotations", "Assignment")
        assert Assignment.objects.get(pk=waiting.pk).qualification_pending
        assert not Assignment.objects.get(pk=done.pk).qualification_pending

        apps = migrate_to(BEFORE)
        _tasks(apps, name="second", platform_ids=[("3TWICE", "submitted"), ("3TWICE", "approved")])
        with pytest.raises(RuntimeError, match="3TWICE"):
            migrate_to(AFTER)
    finally:
        apps = migrate_to(BEFORE)
        apps.get_model("annotations", "Assignment").objects.all().delete()
