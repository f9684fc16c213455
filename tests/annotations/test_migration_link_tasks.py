"""Migration ``0014_link_tasks`` on a database with link tasks: until now a single-person link's
participant was the link's alone, so the tasks of that participant in the link's study are the
link's tasks; other workers' tasks get no link."""
from __future__ import annotations

import pytest
from django.utils import timezone

BEFORE = [("annotations", "0013_task_proof")]
AFTER = [("annotations", "0014_link_tasks")]


@pytest.mark.django_db(transaction=True)
def test_a_links_tasks_are_its_participants_tasks_in_its_study(migrate_to):
    apps = migrate_to(BEFORE)
    Study = apps.get_model("studies", "Study")
    Dataset = apps.get_model("studies", "Dataset")
    Participant = apps.get_model("annotations", "Participant")
    Assignment = apps.get_model("annotations", "Assignment")
    ParticipantLink = apps.get_model("annotations", "ParticipantLink")
    later = timezone.now() + timezone.timedelta(hours=1)
    study, other = (Study.objects.create(name=name, dataset=Dataset.objects.create(name=f"{name}-data"),
                                         status="open", platform="link") for name in ("linked", "elsewhere"))
    holder = Participant.objects.create(platform="link", external_id="plink-1")
    stranger = Participant.objects.create(platform="link", external_id="anon-1")
    link = ParticipantLink.objects.create(study=study, token="t1", participant=holder)
    ParticipantLink.objects.create(study=study, token="t2")  # unused
    done = Assignment.objects.create(study=study, participant=holder, status="expired", token="a", expires_at=later)
    again = Assignment.objects.create(study=study, participant=holder, status="active", token="b", expires_at=later)
    elsewhere = Assignment.objects.create(study=other, participant=holder, token="c", expires_at=later)
    anonymous = Assignment.objects.create(study=study, participant=stranger, token="d", expires_at=later)

    Assignment = migrate_to(AFTER).get_model("annotations", "Assignment")
    linked = dict(Assignment.objects.values_list("pk", "participant_link_id"))
    assert linked == {done.pk: link.pk, again.pk: link.pk, elsewhere.pk: None, anonymous.pk: None}
