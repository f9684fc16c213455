"""The job list refreshes itself every few seconds while a job is queued or running, judged only
over the jobs the list shows (``GenerationJobAdmin.get_queryset``: ``generation_jobs_for_user``):
another researcher's running job neither refreshes nor tells about itself on one's page."""
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from studies.models import RationaleSource
from studies.services.generation import generation_job_create
from tests.api.conftest import grant
from tests.factories import DatasetFactory, ItemFactory

pytestmark = pytest.mark.django_db
# Starts jobs and reaches the job list (change_generationjob) without reading every job
# (no studies.view_generationjob): the list shows their own.
RESEARCHER = ("studies.add_generationjob", "studies.change_generationjob", "studies.view_dataset", "studies.view_item",
              "studies.view_rationalesource")
REFRESH = 'http-equiv="refresh"'


def _client(name):
    user = grant(get_user_model().objects.create_user(username=name, password="pw", is_staff=True), *RESEARCHER)
    client = Client()
    client.force_login(user)
    return user, client


def test_only_the_researcher_whose_job_runs_gets_the_refresh():
    (alice, alice_client), (_, bob_client) = _client("alice"), _client("bob")
    dataset = DatasetFactory(name="ds")
    for _ in range(2):
        ItemFactory(dataset=dataset, split="dev")
    source = RationaleSource.objects.create(name="t5", kind="lm", backend="seq2seq", model_name_or_path="t5-small")
    job = generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev", user=alice,
                                enqueue=False)
    assert job.status == "queued"
    url = reverse("admin:studies_generationjob_changelist")

    bobs = bob_client.get(url)
    assert bobs.status_code == 200
    assert REFRESH not in bobs.content.decode() and "Jobs are running" not in bobs.content.decode()
    alices = alice_client.get(url)
    assert alices.status_code == 200 and REFRESH in alices.content.decode()
    assert 'content="5"' in alices.content.decode() and "Jobs are running" in alices.content.decode()
