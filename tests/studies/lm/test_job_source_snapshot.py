"""A job records, when it is created, the settings of the source, question generator or answerers
it prompts as it runs (backend, model, endpoint, decoding, template: ``inputs.job_settings_snapshot``)
and is cancelled, naming the setting, when one of them was changed since
(``inputs.job_settings_refusal``, asked by ``generation_job_inputs_refusal`` at each batch's start,
on a resume and on beat's requeue). Sources and generators are shared library data: another
researcher allowed to change one must not redirect a queued job's private items to their own
server."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from studies.models import (
    GeneralizationQuestion,
    GenerationJob,
    GenUPrediction,
    QuestionGenerator,
    RationaleSource,
)
from studies.selectors import datasets_for_user, items_for_user
from studies.services.content import content_row_save
from studies.services.generation import (
    GenerationError,
    generation_job_create,
    generation_job_resume,
    generation_job_run,
    generation_job_run_batch,
)
from tests.api.conftest import grant
from tests.factories import DatasetFactory, ItemFactory

from .openai_server import OpenAIServer, completion
from .test_genu_answerer_source import explained_items_with_valid_questions
from .test_job_rights import RATIONALE_REPLY, _train_pool

pytestmark = pytest.mark.django_db

QUESTION_REPLY = " Is the sky blue on a clear day?\nAnswer: yes"
CHANGED = ("Cancelled: the {field} of {what} changed since the job was created; start a new job (a job runs only "
           "on the settings it was started with).")


def _ok(reply: str):
    return lambda path, body: (200, completion([reply]), {})


@pytest.fixture
def lab():
    """Rita's private dataset (two dev items with secret questions), and Xavier, who may change the
    library's sources and generators but may not read her dataset."""
    dataset = DatasetFactory(name="private-ds")
    items = [ItemFactory(dataset=dataset, split="dev", question=f"SECRET question {i}?") for i in range(2)]
    _train_pool(dataset)
    User = get_user_model()
    rita = grant(User.objects.create_user("rita", password="pw", is_staff=True),
                 "studies.add_generationjob", "studies.view_generationjob", "studies.view_dataset",
                 "studies.view_item", "studies.view_rationalesource", "studies.change_rationalesource",
                 "studies.view_questiongenerator", "studies.view_generalizationquestion")
    xavier = grant(User.objects.create_user("xavier", password="pw", is_staff=True),
                   "studies.view_rationalesource", "studies.change_rationalesource",
                   "studies.view_questiongenerator", "studies.change_questiongenerator")
    assert not datasets_for_user(user=xavier).filter(pk=dataset.pk).exists()
    assert not items_for_user(user=xavier).exists()
    return {"dataset": dataset, "items": items, "rita": rita, "xavier": xavier}


def _ritas_rationale_job(lab, url: str, **job_kw) -> GenerationJob:
    source = content_row_save(user=lab["rita"], obj=RationaleSource(
        name="hosted", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=url,
        decoding={"max_new_tokens": 40, "backoff_s": 0.01, "concurrency": 1}), changed=())
    return generation_job_create(kind="rationales", source=source, dataset=lab["dataset"], split="dev",
                                 user=lab["rita"], enqueue=False, **job_kw)


def _xavier_edits_source(lab, job: GenerationJob, **changes) -> None:
    source = RationaleSource.objects.get(pk=job.source_id)
    for field, value in changes.items():
        setattr(source, field, value)
    content_row_save(user=lab["xavier"], obj=source, changed=list(changes))


def _run(job: GenerationJob) -> GenerationJob:
    while generation_job_run_batch(job_id=job.pk):
        pass
    return GenerationJob.objects.get(pk=job.pk)


def test_a_source_endpoint_changed_while_the_job_waits_cancels_it_and_sends_nothing(lab):
    """The audit's scenario: Xavier points the library source Rita's queued job runs on at his own
    server; the job is cancelled at its first batch, naming the setting, and no request goes out."""
    with OpenAIServer(_ok(RATIONALE_REPLY)) as chosen, OpenAIServer(_ok(RATIONALE_REPLY)) as xaviers:
        job = _ritas_rationale_job(lab, chosen.url)
        _xavier_edits_source(lab, job, endpoint_url=xaviers.url)
        job = _run(job)
        with pytest.raises(GenerationError, match="cannot be resumed: the endpoint_url of source 'hosted' changed"):
            generation_job_resume(job=job, user=lab["rita"], enqueue=False)
    assert xaviers.requests == [] and chosen.requests == []
    assert job.status == GenerationJob.Status.CANCELLED
    assert job.error == CHANGED.format(field="endpoint_url", what="source 'hosted'")
    assert not job.source.rationales.exists()


def test_a_setting_changed_between_batches_stops_the_job_at_its_next_batch(lab):
    with OpenAIServer(_ok(RATIONALE_REPLY)) as server:
        job = _ritas_rationale_job(lab, server.url, batch_size=1)
        assert generation_job_run_batch(job_id=job.pk) is True
        sent = len(server.requests)
        _xavier_edits_source(lab, job, decoding={"max_new_tokens": 400, "backoff_s": 0.01, "concurrency": 1})
        job = _run(job)
    assert len(server.requests) == sent
    assert job.status == GenerationJob.Status.CANCELLED
    assert job.error == CHANGED.format(field="decoding", what="source 'hosted'")


def test_a_job_whose_source_settings_are_unchanged_runs(lab):
    """An edit to what does not decide where the prompts go or what comes back (the description) leaves the job be."""
    with OpenAIServer(_ok(RATIONALE_REPLY)) as chosen:
        job = _ritas_rationale_job(lab, chosen.url)
        assert set(job.params["settings_snapshot"]) == {"source"}
        _xavier_edits_source(lab, job, description="Xavier's notes")
        job = _run(job)
    assert job.status == GenerationJob.Status.DONE, job.error
    assert len(chosen.requests) == 2 and job.source.rationales.count() == 2


def test_a_job_from_before_the_snapshot_runs_on_the_live_settings(lab):
    """A job created before jobs recorded their settings has none to compare: it runs as it always did."""
    with OpenAIServer(_ok(RATIONALE_REPLY)) as chosen, OpenAIServer(_ok(RATIONALE_REPLY)) as moved:
        job = _ritas_rationale_job(lab, chosen.url)
        # Such a job cannot be made through the services any more: drop what they record now.
        GenerationJob.objects.filter(pk=job.pk).update(
            params={k: v for k, v in job.params.items() if k != "settings_snapshot"})
        _xavier_edits_source(lab, job, endpoint_url=moved.url)
        job = _run(job)
    assert job.status == GenerationJob.Status.DONE, job.error
    assert chosen.requests == [] and len(moved.requests) == 2


def test_a_question_generator_changed_while_the_job_waits_cancels_it(lab):
    """A generator without an owner is changed by whoever reads it (the admin's change page):
    Xavier points it at his server after Rita queued her job on it."""
    with OpenAIServer(_ok(QUESTION_REPLY)) as chosen, OpenAIServer(_ok(QUESTION_REPLY)) as xaviers:
        generator = QuestionGenerator.objects.create(
            name="shared-questions", backend="openai", model_name_or_path="gpt-x", endpoint_url=chosen.url,
            decoding={"backoff_s": 0.01, "concurrency": 1})
        job = generation_job_create(kind="generalization_questions", generator=generator, dataset=lab["dataset"],
                                    split="dev", user=lab["rita"], enqueue=False)
        assert set(job.params["settings_snapshot"]) == {"generator"}
        client = _client(lab["xavier"])
        response = client.post(reverse("admin:studies_questiongenerator_change", args=[generator.pk]), {
            "name": generator.name, "description": "", "backend": "openai", "model_name_or_path": "gpt-x",
            "endpoint_url": xaviers.url, "seed": 0, "instructions": "{}", "demonstrations": "{}",
            "decoding": '{"backoff_s": 0.01, "concurrency": 1}'})
        assert response.status_code == 302, response.content.decode()[:2000]
        assert QuestionGenerator.objects.get(pk=generator.pk).endpoint_url == xaviers.url
        job = _run(job)
    assert xaviers.requests == [] and chosen.requests == []
    assert job.status == GenerationJob.Status.CANCELLED
    assert job.error == CHANGED.format(field="endpoint_url", what="question generator 'shared-questions'")
    assert not GeneralizationQuestion.objects.filter(origin=generator.origin).exists()


def test_a_question_job_whose_generator_is_unchanged_runs(lab):
    with OpenAIServer(_ok(QUESTION_REPLY)) as chosen:
        generator = QuestionGenerator.objects.create(
            name="shared-questions", backend="openai", model_name_or_path="gpt-x", endpoint_url=chosen.url,
            decoding={"backoff_s": 0.01, "concurrency": 1})
        job = _run(generation_job_create(kind="generalization_questions", generator=generator, dataset=lab["dataset"],
                                         split="dev", user=lab["rita"], enqueue=False))
    assert job.status == GenerationJob.Status.DONE, job.error
    assert chosen.requests


def test_a_genu_answerer_changed_while_the_job_waits_cancels_it():
    """Gen-U reads its answerers (``params.answerer_i`` / ``answerer_ir``) as it runs: the operator's
    job too stops when one of them is pointed elsewhere."""
    source, items = explained_items_with_valid_questions()
    root = get_user_model().objects.create_superuser("root", password="pw")
    with OpenAIServer(_ok(" yes")) as chosen, OpenAIServer(_ok(" yes")) as other:
        answerers = {role: RationaleSource.objects.create(
            name=f"answerer-{role}", kind="lm", backend="openai", model_name_or_path="gpt-x",
            endpoint_url=chosen.url, decoding={"backoff_s": 0.01, "concurrency": 1}) for role in ("I", "IR")}
        job = generation_job_create(kind="genu_answers", source=source, item_ids=[i.pk for i in items], user=None,
                                    enqueue=False,
                                    params={"answerer_i": answerers["I"].pk, "answerer_ir": answerers["IR"].pk})
        assert set(job.params["settings_snapshot"]) == {"answerer_i", "answerer_ir"}
        moved = answerers["IR"]
        moved.endpoint_url = other.url
        content_row_save(user=root, obj=moved, changed=["endpoint_url"])
        job = generation_job_run(job_id=job.pk)
    assert other.requests == [] and chosen.requests == []
    assert job.status == GenerationJob.Status.CANCELLED
    assert job.error == CHANGED.format(field="endpoint_url", what="answerer_ir source 'answerer-IR'")
    assert not GenUPrediction.objects.exists()


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client
