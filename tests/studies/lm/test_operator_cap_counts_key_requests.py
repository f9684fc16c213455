"""The operator's caps per job (``RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB``) bound only the requests that
carry its key: a Gen-U job with F^I on the researcher's own server and F^IR on the operator's key
does not spend the operator's cap on its local requests; a job's own cap still counts all its
requests; and a job the operator's cap stopped says so, naming the setting. Also a job created
before the key's requests were counted apart (its usage without ``key_requests``) stays bounded."""
from __future__ import annotations

import pytest

from studies.models import GenerationJob
from studies.services import generation

from .openai_server import OpenAIServer, completion
from .test_genu_answerer_source import explained_items_with_valid_questions
from .test_openai_key_job_caps import HOSTED, network, operator_key, rationale_job, source_on  # noqa: F401

pytestmark = pytest.mark.django_db


def hosts(seen) -> list[str]:
    """Where the requests went (the mock transport answers them all: ``network``)."""
    return [r.url.host for r in seen]


def mixed_genu_job(server, items, source, **params):
    own = source_on(server.url, name="own-vllm-I")
    hosted = source_on(HOSTED, name="hosted-IR")
    return generation.generation_job_create(
        kind="genu_answers", source=source, item_ids=[i.pk for i in items], user=None, enqueue=False,
        params={"answerer_i": own.pk, "answerer_ir": hosted.pk, **params})


def test_local_answerer_requests_do_not_spend_the_operators_cap(operator_key, network):  # noqa: F811 (the fixtures imported above)
    operator_key.RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB = 4
    source, items = explained_items_with_valid_questions(n=4)
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        job = mixed_genu_job(server, items, source)
        assert job.params["max_requests"] == 4
        assert job.params["budget_from"] == {"max_requests": "RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB"}
        job = generation.generation_job_run(job_id=job.pk)
    assert job.status == "done", job.error
    assert hosts(network).count("127.0.0.1") == 4  # F^I, on the researcher's server
    assert hosts(network).count("api.openai.com") == 4  # F^IR, on the operator's key
    usage = job.params["usage"]
    assert usage["used_requests"] == 8 and usage["key_requests"] == 4


def test_a_mixed_job_stops_at_the_operators_cap_on_its_key_requests_naming_the_setting(operator_key, network):  # noqa: F811 (the fixtures imported above)
    source, items = explained_items_with_valid_questions(n=4)  # cap 3 (the fixture)
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        job = generation.generation_job_run(job_id=mixed_genu_job(server, items, source).pk)
    assert hosts(network).count("127.0.0.1") == 4 and hosts(network).count("api.openai.com") == 3
    assert job.status == "failed"
    assert job.error == ("operator's cap reached: 3 of 3 requests used with the operator's key "
                         "(RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB)")
    assert job.params["usage"]["key_requests"] == 3 and job.params["usage"]["used_requests"] == 7


def test_a_jobs_own_cap_lower_than_the_operators_counts_every_request(operator_key, network):  # noqa: F811 (the fixtures imported above)
    operator_key.RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB = 10
    source, items = explained_items_with_valid_questions(n=4)
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        job = mixed_genu_job(server, items, source, max_requests=6)
        assert "budget_from" not in job.params
        job = generation.generation_job_run(job_id=job.pk)
    assert hosts(network).count("127.0.0.1") == 4 and hosts(network).count("api.openai.com") == 2  # 6 in all
    assert job.status == "failed" and job.error == "budget cap reached: 6 of 6 requests used"


def test_the_operators_setting_lowered_below_a_jobs_own_cap_is_named(operator_key, network, strategyqa_dataset,  # noqa: F811
                                                                     dev_items, train_items):
    job = rationale_job(source_on(HOSTED), strategyqa_dataset, params={"max_requests": 3})
    operator_key.RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB = 2
    job = generation.generation_job_run(job_id=job.pk)
    assert len(network) == 2
    assert job.error == ("operator's cap reached: 2 of 2 requests used with the operator's key "
                         "(RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB)")


def test_a_job_whose_usage_predates_the_key_count_is_still_bounded(operator_key, network, strategyqa_dataset,  # noqa: F811
                                                                    dev_items, train_items):
    job = rationale_job(source_on(HOSTED), strategyqa_dataset)  # budget_from: the operator's 3
    # Stored by a batch before key-carrying requests were counted apart: all 2 count as the key's.
    GenerationJob.objects.filter(pk=job.pk).update(params={**job.params, "usage": {
        "max_requests": 3, "max_tokens": None, "used_requests": 2, "used_tokens": 20}})
    job = generation.generation_job_run(job_id=job.pk)
    assert len(network) == 1
    assert job.status == "failed" and job.error.startswith("operator's cap reached: 3 of 3 requests")
