"""``POST /api/v1/generation-jobs/`` asked again while the requester's own job with the same inputs
is queued or running (a retried request whose 202 was lost) answers 200 with that job and a
``detail``, and starts nothing: a second job would generate, spend an OpenAI budget or train a
checkpoint twice (``generation_job_create``, ``_active_twin``)."""
from __future__ import annotations

import pytest

from studies.models import GenerationJob
from studies.services.generation import generation_job_cancel
from tests.api.test_generation_job_inputs import _post, lab  # noqa: F401 - lab is a fixture

pytestmark = pytest.mark.django_db

BODY = {"kind": "rationales", "source": "bob-lm", "dataset": "public-ds", "split": "test"}


def test_the_same_job_asked_for_twice_is_started_once(client_for, lab):  # noqa: F811
    client = client_for(lab["bob"])
    first = _post(client, BODY)
    assert first.status_code == 202, first.json()
    again = _post(client, BODY)
    assert again.status_code == 200, again.json()
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["detail"] == (f"Job {first.json()['id']} with the same inputs is already queued; no second "
                                      "job was started. Cancel it first to start it again.")
    assert GenerationJob.objects.count() == 1


def test_a_running_job_is_the_one_asked_for_though_it_has_written_its_progress(client_for, lab):  # noqa: F811
    client = client_for(lab["bob"])
    first = _post(client, BODY).json()
    job = GenerationJob.objects.get(pk=first["id"])
    GenerationJob.objects.filter(pk=job.pk).update(status="running", params={**job.params, "cursor": 1})
    again = _post(client, BODY)
    assert (again.status_code, again.json()["id"]) == (200, first["id"])
    assert "already running" in again.json()["detail"]
    assert GenerationJob.objects.count() == 1


def test_other_inputs_an_ended_or_cancelled_job_and_another_principal_start_their_own(
        client_for, lab, make_user):  # noqa: F811
    client = client_for(lab["bob"])
    first = _post(client, BODY).json()
    started = [_post(client, {**BODY, "batch_size": 8}), _post(client, {**BODY, "limit": 1}),
               _post(client_for(make_user("op", superuser=True)), BODY)]
    assert [r.status_code for r in started] == [202, 202, 202]
    generation_job_cancel(job=GenerationJob.objects.get(pk=first["id"]), user=lab["bob"])
    after_cancel = _post(client, BODY)
    assert after_cancel.status_code == 202
    GenerationJob.objects.filter(pk=after_cancel.json()["id"]).update(status="done")
    assert _post(client, BODY).status_code == 202
    assert GenerationJob.objects.count() == 6
