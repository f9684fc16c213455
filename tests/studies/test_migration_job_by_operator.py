"""The migration that adds ``GenerationJob.by_operator`` keeps what existing jobs did: a job with no
researcher stored as the operator (a command started it, or its researcher's account was deleted:
the rows cannot tell which), so it stays the operator's; a researcher's job stays theirs."""
from __future__ import annotations

import pytest

BEFORE = [("studies", "0012_early_stopping")]
AFTER = [("studies", "0013_generationjob_by_operator")]


@pytest.mark.django_db(transaction=True)
def test_jobs_without_a_researcher_stay_the_operators(migrate_to):
    old = migrate_to(BEFORE)
    User, Job = old.get_model("auth", "User"), old.get_model("studies", "GenerationJob")
    dana = User.objects.create(username="dana")
    researchers = Job.objects.create(kind="rationales", created_by=dana)
    commands = Job.objects.create(kind="rationales")

    Job = migrate_to(AFTER).get_model("studies", "GenerationJob")
    assert dict(Job.objects.values_list("pk", "by_operator")) == {researchers.pk: False, commands.pk: True}
