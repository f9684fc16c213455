"""An openai source's or question generator's backend options (``timeout_s``, ``max_retries``,
``backoff_s``, ``concurrency`` in its decoding JSON) outside ``backends.OPENAI_OPTION_BOUNDS`` are
refused as a job is created (``inputs.backend_options_check``), naming the row, the field and the
value, and refused again when a worker builds the backend; options within bounds are taken."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from studies.lm.backends import BackendError, build_backend
from studies.models import GenerationJob, RationaleSource
from studies.services.generation import GenerationError, generation_job_create
from tests.factories import DatasetFactory, ItemFactory

from .test_job_rights import _train_pool

pytestmark = pytest.mark.django_db


def create_job(decoding: dict):
    dataset = DatasetFactory(name="strategyqa")
    ItemFactory(dataset=dataset, split="dev")
    _train_pool(dataset)
    root = get_user_model().objects.create_superuser("root", password="pw")
    source = RationaleSource.objects.create(
        name="hosted", kind="lm", backend="openai", model_name_or_path="gpt-x",
        endpoint_url="http://127.0.0.1:9/v1", decoding={"max_new_tokens": 40, **decoding})
    return generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev", user=root,
                                 enqueue=False)


@pytest.mark.parametrize(("option", "value"), [
    ("timeout_s", 1e9), ("timeout_s", 0), ("max_retries", 10**9),
    ("max_retries", -1), ("max_retries", 2.5), ("backoff_s", 3600), ("concurrency", 0), ("concurrency", 1000),
    ("concurrency", True), ("timeout_s", "30"),
])
def test_hostile_backend_options_are_refused_at_creation(option, value):
    with pytest.raises(GenerationError, match=rf"source 'hosted': decoding\.{option} must be .* not "):
        create_job({option: value})
    assert not GenerationJob.objects.exists()


def test_options_within_bounds_are_taken():
    job = create_job({"timeout_s": 600, "max_retries": 10, "backoff_s": 60, "concurrency": 16})
    assert job.pk is not None


def test_a_worker_refuses_to_build_a_backend_with_options_out_of_bounds():
    with pytest.raises(BackendError, match=r"decoding\.max_retries must be a whole number at least 0 and at most 10"):
        build_backend(backend="openai", model_name_or_path="m", endpoint_url="http://127.0.0.1:9/v1",
                      options={"max_retries": 10**9})
