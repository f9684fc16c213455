"""The migration that adds ``GenerationJob.by_operator`` keeps what existing jobs did: a job with no
researcher stored as the operator (a command started it, or its researcher's account was deleted:
the rows cannot tell which), so it stays the operator's; a researcher's job stays theirs."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("studies", "0012_early_stopping")]
AFTER = [("studies", "0013_generationjob_by_operator")]


@pytest.mark.django_db(transaction=True)
def test_jobs_without_a_researcher_stay_the_operators(migration_executor):
    executor = migration_executor
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    User, Job = old.get_model("auth", "User"), old.get_model("studies", "GenerationJob")
    dana = User.objects.create(username="dana")
    researchers = Job.objects.create(kind="rationales", created_by=dana)
    commands = Job.objects.create(kind="rationales")

    after = MigrationExecutor(connection)
    after.migrate(AFTER)
    Job = after.loader.project_state(AFTER).apps.get_model("studies", "GenerationJob")
    assert dict(Job.objects.values_list("pk", "by_operator")) == {researchers.pk: False, commands.pk: True}
