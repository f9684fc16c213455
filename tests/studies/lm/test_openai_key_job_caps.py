"""The operator's caps per job on what is spent with its OpenAI key (``RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB``,
``RL_OPENAI_KEY_MAX_TOKENS_PER_JOB``): a job whose requests carry the key (an https endpoint on a host
of ``RL_OPENAI_KEY_HOSTS``) and sets no cap gets the operator's, recorded in its params; one asking
for more is refused; each batch runs under the smaller of the job's cap and the setting as it is
then; Gen-U's answerers are bounded as rationale sources are; a job on an endpoint that does not
get the key (a researcher's own server) is not bounded by them. Jobs run through the worker's path
against an httpx mock transport (https) or the local fake OpenAI server (http), counting requests."""
from __future__ import annotations

import httpx
import pytest

from studies.models import QuestionGenerator, RationaleSource
from studies.services import generation
from studies.services.generation import GenerationError

from .openai_server import OpenAIServer, completion
from .test_genu_answerer_source import explained_items_with_valid_questions

pytestmark = pytest.mark.django_db

KEY = "sk-operator-secret-42"
REPLY = " yes\nReason: Because the facts say so.\n###\nQuestion: next"
HOSTED = "https://api.openai.com/v1"
# The error of a job the operator's cap stopped: it names the setting.
OPERATORS_CAP = "operator's cap reached: {} requests used with the operator's key (RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB)"
QUESTION_DEMOS = {qtype: [{"question": "Q?", "context": "c", "output": "Is it?", "answer": "True"}] * 6
                  for qtype in ("rephrase", "similar", "counterfactual")}


@pytest.fixture
def operator_key(settings):
    settings.RL_OPENAI_API_KEY = KEY
    settings.RL_OPENAI_KEY_HOSTS = ["api.openai.com"]
    settings.RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB = 3
    settings.RL_OPENAI_KEY_MAX_TOKENS_PER_JOB = 0  # no token cap: the request cap is what these tests count
    return settings


@pytest.fixture
def network(monkeypatch):
    """Every httpx client the backend opens talks to this mock (the operator's endpoint)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=completion([REPLY]))

    real_client = httpx.Client
    mock = httpx.MockTransport(handler)

    def client(*args, transport=None, **kwargs):
        return real_client(*args, transport=mock, **kwargs)

    monkeypatch.setattr(httpx, "Client", client)
    return seen


def source_on(url: str, name: str = "hosted") -> RationaleSource:
    return RationaleSource.objects.create(
        name=name, kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=url,
        decoding={"max_new_tokens": 40, "max_retries": 0, "backoff_s": 0.001, "concurrency": 1})


def rationale_job(source, dataset, *, limit=8, params=None):
    return generation.generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev",
                                           enqueue=False, limit=limit, batch_size=2, params=params)


def test_a_job_on_the_operators_key_without_a_cap_gets_the_operators_and_stops_there(
        operator_key, network, strategyqa_dataset, dev_items, train_items):
    job = generation.generation_job_run(job_id=rationale_job(source_on(HOSTED), strategyqa_dataset).pk)
    assert len(network) == 3  # unbounded, the 8 items take 8 requests
    assert job.params["max_requests"] == 3
    assert job.params["budget_from"] == {"max_requests": "RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB"}
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in network)
    assert job.status == "failed"
    assert job.error == OPERATORS_CAP.format("3 of 3")
    assert job.params["usage"]["used_requests"] == 3


def test_a_job_asking_for_more_than_the_operators_cap_is_refused(
        operator_key, network, strategyqa_dataset, dev_items, train_items):
    with pytest.raises(GenerationError) as error:
        rationale_job(source_on(HOSTED), strategyqa_dataset, params={"max_requests": 50})
    message = str(error.value)
    assert "RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB" in message and "50" in message and "3" in message
    operator_key.RL_OPENAI_KEY_MAX_TOKENS_PER_JOB = 1000
    with pytest.raises(GenerationError, match=r"max_tokens 5000 .* cap of 1000 .*RL_OPENAI_KEY_MAX_TOKENS_PER_JOB"):
        rationale_job(source_on(HOSTED, name="hosted-2"), strategyqa_dataset, params={"max_tokens": 5000})
    assert not network


def test_a_job_within_the_cap_keeps_its_own_and_a_setting_lowered_later_bounds_it(
        operator_key, network, strategyqa_dataset, dev_items, train_items):
    job = rationale_job(source_on(HOSTED), strategyqa_dataset, params={"max_requests": 3})
    assert job.params["max_requests"] == 3 and "budget_from" not in job.params
    operator_key.RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB = 2  # lowered while the job waits
    job = generation.generation_job_run(job_id=job.pk)
    assert len(network) == 2
    assert job.error == OPERATORS_CAP.format("2 of 2")


def test_a_genu_job_with_an_openai_answerer_on_the_operators_key_is_capped(operator_key, network):
    source, items = explained_items_with_valid_questions(n=4)
    answerers = {role: source_on(HOSTED, name=f"answerer-{role}") for role in ("I", "IR")}
    job = generation.generation_job_create(
        kind="genu_answers", source=source, item_ids=[i.pk for i in items], user=None, enqueue=False,
        params={"answerer_i": answerers["I"].pk, "answerer_ir": answerers["IR"].pk})
    job = generation.generation_job_run(job_id=job.pk)
    assert len(network) == 3  # unbounded, F^I and F^IR on the 4 questions take 8 requests
    assert job.params["max_requests"] == 3
    assert job.status == "failed" and job.error == OPERATORS_CAP.format("3 of 3")


def test_a_job_on_an_endpoint_without_the_key_is_not_capped(operator_key, strategyqa_dataset, dev_items,
                                                            train_items):
    with OpenAIServer(lambda path, body: (200, completion([REPLY]), {})) as server:
        job = rationale_job(source_on(server.url, name="own-vllm"), strategyqa_dataset, limit=5)
        assert "max_requests" not in job.params and "budget_from" not in job.params
        job = generation.generation_job_run(job_id=job.pk)
    assert job.status == "done", job.error
    assert len(server.requests) == 5
    assert all("authorization" not in {k.lower() for k in r["headers"]} for r in server.requests)


def test_no_operator_cap_when_the_setting_is_zero(operator_key, network, strategyqa_dataset, dev_items,
                                                  train_items):
    operator_key.RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB = 0
    job = rationale_job(source_on(HOSTED), strategyqa_dataset, limit=5)
    assert "max_requests" not in job.params
    job = generation.generation_job_run(job_id=job.pk)
    assert job.status == "done", job.error
    assert len(network) == 5


def test_a_source_asking_for_more_outputs_per_prompt_than_the_operator_allows_is_refused(
        operator_key, network, strategyqa_dataset, dev_items, train_items):
    operator_key.RL_LM_MAX_RETURN_SEQUENCES = 4
    source = source_on(HOSTED)
    source.decoding = {**source.decoding, "num_return_sequences": 50}
    source.save()
    with pytest.raises(GenerationError) as error:
        rationale_job(source, strategyqa_dataset)
    assert str(error.value) == ("decoding.num_return_sequences 50 is over the operator's maximum of 4 outputs per "
                                "prompt (RL_LM_MAX_RETURN_SEQUENCES)")
    assert not network


def test_a_question_job_on_the_operators_key_is_capped(operator_key, network, strategyqa_dataset, dev_items,
                                                       train_items):
    generator = QuestionGenerator.objects.create(
        name="hosted-questions", backend="openai", model_name_or_path="gpt-x", endpoint_url=HOSTED,
        decoding={"max_retries": 0, "backoff_s": 0.001, "concurrency": 1}, demonstrations=QUESTION_DEMOS)
    job = generation.generation_job_create(kind="generalization_questions", generator=generator,
                                           dataset=strategyqa_dataset, split="dev", limit=4, enqueue=False)
    job = generation.generation_job_run(job_id=job.pk)
    assert len(network) == 3
    assert job.params["max_requests"] == 3 and job.error == OPERATORS_CAP.format("3 of 3")
