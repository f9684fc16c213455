"""A job's ``max_requests`` / ``max_tokens`` are whole numbers of at least 1, checked as the job
is created (``generation_job_create``), whatever path starts it: the API answers 400 naming the
field and the value, and no job is made."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from studies.api.tokens import api_token_create
from studies.models import GenerationJob, RationaleSource
from tests.api.conftest import grant
from tests.factories import DatasetFactory, ItemFactory, RationaleSourceFactory

pytestmark = pytest.mark.django_db

JOB_STARTER = ("studies.add_generationjob", "studies.view_rationalesource", "studies.view_dataset", "studies.view_item")


@pytest.fixture
def client():
    user = grant(get_user_model().objects.create_user("priya", password="pw"), *JOB_STARTER)
    _, key = api_token_create(user=user, name="test", read_only=False, by=None)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return api


@pytest.fixture
def dataset():
    dataset = DatasetFactory(name="gen-dataset")
    ItemFactory(dataset=dataset)
    return dataset


@pytest.mark.parametrize("caps, field", [
    ({"max_requests": "lots"}, "params.max_requests"), ({"max_tokens": -5}, "params.max_tokens"),
    ({"max_requests": 2.5}, "params.max_requests"), ({"max_tokens": [1]}, "params.max_tokens"),
    ({"max_requests": True}, "params.max_requests"), ({"max_tokens": "100"}, "params.max_tokens"),
    ({"max_requests": 0}, "params.max_requests"),
])
@pytest.mark.parametrize("backend", ["seq2seq", "openai"])
def test_a_cap_that_is_not_a_whole_number_of_at_least_1_is_400_naming_it(client, dataset, caps, field, backend):
    source = RationaleSourceFactory(
        name="src", kind=RationaleSource.Kind.LM, backend=backend, model_name_or_path="/models/tiny-t5",
        endpoint_url="https://api.openai.com/v1" if backend == "openai" else "")
    response = client.post("/api/v1/generation-jobs/", {"kind": "rationales", "source": source.name,
                                                        "dataset": dataset.name, "params": caps}, format="json")
    assert response.status_code == 400, response.content
    message = str(response.json())
    assert field in message and repr(next(iter(caps.values()))) in message
    assert not GenerationJob.objects.exists()


def test_whole_number_caps_are_accepted(client, dataset):
    source = RationaleSourceFactory(name="src", kind=RationaleSource.Kind.LM, backend="seq2seq",
                                    model_name_or_path="/models/tiny-t5")
    response = client.post("/api/v1/generation-jobs/", {"kind": "rationales", "source": source.name,
                                                        "dataset": dataset.name,
                                                        "params": {"max_requests": 3, "max_tokens": 100}},
                           format="json")
    assert response.status_code == 202, response.content
    assert GenerationJob.objects.get().params["max_requests"] == 3
