"""A rationale source's, question generator's or answerer's ``decoding.max_new_tokens`` is at most
the operator's ``RL_LM_MAX_NEW_TOKENS``, on every backend: checked where the decoding is read
(``studies.lm.backends.Decoding.from_json``), so a job asking for more is refused as it is created
and, on a source edited since (or a setting lowered since), as its batch runs. What an output may
grow to (``output_char_cap``, ``response_byte_limit``) is bounded by the same setting, whatever a
decoding asks for. The audit's probe: ``max_new_tokens`` 10**9 let a loopback endpoint's 150 MiB
completion into the shared worker and a stored rationale of 157 million characters."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings

from studies.lm.backends import (
    MAX_CHARS_PER_TOKEN,
    MAX_JSON_BYTES_PER_CHAR,
    RESPONSE_OVERHEAD_BYTES,
    Decoding,
    output_char_cap,
    response_byte_limit,
)
from studies.models import GenerationJob, QuestionGenerator, RationaleSource
from studies.services.generation import GenerationError, generation_job_create, generation_job_run_batch
from tests.factories import DatasetFactory, ItemFactory

from .openai_server import OpenAIServer, completion
from .test_job_rights import RATIONALE_REPLY, _train_pool

pytestmark = pytest.mark.django_db

HUGE = 10**9
OVER = r"decoding\.max_new_tokens {value} is over the operator's maximum of {most} tokens an output \(RL_LM_MAX_NEW_TOKENS\)"


@pytest.fixture
def lab():
    dataset = DatasetFactory(name="strategyqa")
    for i in range(2):
        ItemFactory(dataset=dataset, split="dev", question=f"Question {i}?")
    _train_pool(dataset)
    root = get_user_model().objects.create_superuser("root", password="pw")
    return {"dataset": dataset, "root": root}


def _source(backend: str, decoding: dict, url: str = "http://127.0.0.1:9/v1") -> RationaleSource:
    return RationaleSource.objects.create(
        name="probe", kind="lm", backend=backend, model_name_or_path="gpt-x" if backend == "openai" else "t5-small",
        endpoint_url=url if backend == "openai" else "", decoding=decoding)


def _job(lab, source: RationaleSource) -> GenerationJob:
    return generation_job_create(kind="rationales", source=source, dataset=lab["dataset"], split="dev",
                                 user=lab["root"], enqueue=False)


def _run(job: GenerationJob) -> GenerationJob:
    while generation_job_run_batch(job_id=job.pk):
        pass
    return GenerationJob.objects.get(pk=job.pk)


def _ok(reply: str):
    return lambda path, body: (200, completion([reply]), {})


def test_the_default_maximum_fits_every_shipped_setting(settings):
    assert settings.RL_LM_MAX_NEW_TOKENS == 1024


@pytest.mark.parametrize("backend", ["seq2seq", "causal", "openai"])
def test_a_job_asking_for_more_tokens_than_the_maximum_is_refused_at_creation(lab, backend):
    """The audit's probe, on every backend: refused naming the field, its value and the maximum."""
    source = _source(backend, {"max_new_tokens": HUGE, "concurrency": 16, "timeout_s": 600})
    with pytest.raises(GenerationError, match=OVER.format(value=HUGE, most=1024)):
        _job(lab, source)
    assert not GenerationJob.objects.exists()


def test_a_question_generator_asking_for_more_is_refused_at_creation(lab):
    generator = QuestionGenerator.objects.create(name="qg", backend="openai", model_name_or_path="gpt-x",
                                                 endpoint_url="http://127.0.0.1:9/v1",
                                                 decoding={"max_new_tokens": 5000})
    with pytest.raises(GenerationError, match=OVER.format(value=5000, most=1024)):
        generation_job_create(kind="generalization_questions", generator=generator, dataset=lab["dataset"],
                              split="dev", user=lab["root"], enqueue=False)
    assert not GenerationJob.objects.exists()


@pytest.mark.parametrize("value", [True, 2.5, "100", 0])
def test_a_max_new_tokens_that_is_not_a_whole_number_of_at_least_1_is_refused(lab, value):
    with pytest.raises(GenerationError, match=r"decoding\.max_new_tokens must be a whole number of at least 1"):
        _job(lab, _source("openai", {"max_new_tokens": value}))


def test_a_source_edited_after_the_job_was_created_is_refused_as_the_job_runs(lab):
    """A job that runs on the source's live settings (one from before jobs recorded them): the edit to
    10**9 tokens is refused at its batch, before any request, and nothing is stored."""
    with OpenAIServer(_ok(RATIONALE_REPLY)) as server:
        source = _source("openai", {"max_new_tokens": 40, "concurrency": 1, "backoff_s": 0.01}, server.url)
        job = _job(lab, source)
        GenerationJob.objects.filter(pk=job.pk).update(
            params={k: v for k, v in job.params.items() if k != "settings_snapshot"})
        RationaleSource.objects.filter(pk=source.pk).update(
            decoding={"max_new_tokens": HUGE, "concurrency": 1, "backoff_s": 0.01})
        with pytest.raises(GenerationError, match=OVER.format(value=HUGE, most=1024)):
            _run(job)  # a batch's error marks the job failed, then propagates (to the worker)
    job.refresh_from_db()
    assert server.requests == []
    assert not source.rationales.exists()
    assert job.status == GenerationJob.Status.FAILED
    assert f"decoding.max_new_tokens {HUGE} is over the operator's maximum of 1024" in job.error


def test_a_maximum_lowered_after_the_job_was_created_is_applied_as_the_job_runs(lab):
    with OpenAIServer(_ok(RATIONALE_REPLY)) as server:
        job = _job(lab, _source("openai", {"max_new_tokens": 400, "concurrency": 1, "backoff_s": 0.01}, server.url))
        with override_settings(RL_LM_MAX_NEW_TOKENS=100), pytest.raises(GenerationError,
                                                                      match=OVER.format(value=400, most=100)):
            _run(job)
    job.refresh_from_db()
    assert server.requests == []
    assert job.status == GenerationJob.Status.FAILED
    assert not job.source.rationales.exists()
    assert "decoding.max_new_tokens 400 is over the operator's maximum of 100 tokens" in job.error


def test_a_value_at_the_maximum_is_accepted_and_its_outputs_are_kept_within_the_cap(lab):
    """At the maximum the job runs; an endpoint that ignores max_tokens has its output cut to the cap."""
    with OpenAIServer(_ok(RATIONALE_REPLY + "x" * (1024 * MAX_CHARS_PER_TOKEN + 5000))) as server:
        job = _job(lab, _source("openai", {"max_new_tokens": 1024, "concurrency": 1, "backoff_s": 0.01}, server.url))
        job = _run(job)
    assert job.status == GenerationJob.Status.DONE, job.error
    assert [r["json"]["max_tokens"] for r in server.requests] == [1024, 1024]
    rationales = list(job.source.rationales.all())
    assert len(rationales) == 2
    assert all(len(r.raw_output) <= 1024 * MAX_CHARS_PER_TOKEN for r in rationales)
    assert all(len(r.text) <= 1024 * MAX_CHARS_PER_TOKEN for r in rationales)


def test_what_an_output_may_grow_to_is_bounded_by_the_setting_whatever_the_decoding_asks():
    """A decoding built without ``from_json`` (as Quark builds its own) still cannot raise the caps."""
    decoding = Decoding(max_new_tokens=HUGE)
    assert output_char_cap(decoding) == 1024 * MAX_CHARS_PER_TOKEN
    assert response_byte_limit(HUGE, 16) == (16 * 1024 * MAX_CHARS_PER_TOKEN * MAX_JSON_BYTES_PER_CHAR
                                             + RESPONSE_OVERHEAD_BYTES)
    assert output_char_cap(Decoding(max_new_tokens=40)) == 40 * MAX_CHARS_PER_TOKEN
    with override_settings(RL_LM_MAX_NEW_TOKENS=0):  # 0: no maximum
        assert Decoding.from_json({"max_new_tokens": 5000}).max_new_tokens == 5000
