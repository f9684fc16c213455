"""A Quark job rewarded by Gen-U spends its budget on the answerers' requests: with OpenAI
answerers on the operator's key it gets the operator's caps per job (recorded in its params, as a
Gen-U job does) and its reward stops at them, the requests added to the job's stored usage. Tested
at the reward's level (``build_reward(params, job=job)``, what the job's run builds) without
training a policy: a full Quark run needs the models of the ``lm`` marker. The job itself is
created through ``generation_job_create``; the answerers' endpoint is an httpx mock transport."""
from __future__ import annotations

import pytest

from studies.lm.backends import BudgetExceeded
from studies.lm.rewards import RewardSample
from studies.models import GeneralizationQuestion, RationaleSource
from studies.services import generation
from studies.services.generation.quark_rewards import build_reward
from studies.services.questions import generalization_questions_set_validation
from tests.factories import DatasetFactory, ItemFactory

from . import test_openai_key_job_caps as key_caps
from .test_openai_key_job_caps import HOSTED, KEY, source_on

pytestmark = pytest.mark.django_db

operator_key, network = key_caps.operator_key, key_caps.network  # the operator-key tests' fixtures


def quark_job(answerers, **params):
    dataset = DatasetFactory(name=f"quark-ds-{len(params)}-{params.get('max_requests')}")
    questions = []
    for split in ("train", "dev", "test"):
        for _ in range(4):
            item = ItemFactory(dataset=dataset, split=split, gold_answer="yes")
            questions.append(GeneralizationQuestion.objects.create(item=item, qtype="rephrase", answer="yes",
                                                                   text=f"Rephrased: {item.question}"))
    generalization_questions_set_validation(questions=questions, status="valid")
    policy, _ = RationaleSource.objects.get_or_create(name="policy", kind="lm", backend="seq2seq",
                                                      model_name_or_path="/models/tiny-t5")
    return generation.generation_job_create(
        kind="quark", source=policy, dataset=dataset, split="train", enqueue=False,
        params={"reward": "genu", "answerer_i": answerers["I"].pk, "answerer_ir": answerers["IR"].pk,
                "settings": {"steps": 2}, **params})


def samples(job):
    return [RewardSample(item_id, "It is so.") for item_id in job.item_ids]


def test_a_quark_jobs_genu_reward_on_the_operators_key_stops_at_the_operators_cap(operator_key, network):
    answerers = {role: source_on(HOSTED, name=f"answerer-{role}") for role in ("I", "IR")}
    job = quark_job(answerers)
    assert job.params["max_requests"] == 3
    assert job.params["budget_from"] == {"max_requests": "RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB"}
    reward = build_reward(job.params, job=job)
    with pytest.raises(BudgetExceeded, match="3 of 3 requests used"):
        reward.score(samples(job))  # unbounded, F^I and F^IR on 4 questions take 8 requests
    assert len(network) == 3
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in network)
    job.refresh_from_db()
    assert job.params["usage"]["used_requests"] == 3
    # A later reward of the same job (its run rebuilt after a restart) starts from the stored usage.
    with pytest.raises(BudgetExceeded):
        build_reward(job.params, job=job).score(samples(job))
    assert len(network) == 3


def test_a_quark_job_may_set_its_own_smaller_cap_and_not_one_over_the_operators(operator_key, network):
    answerers = {role: source_on(HOSTED, name=f"answerer-{role}") for role in ("I", "IR")}
    job = quark_job(answerers, max_requests=2)
    with pytest.raises(BudgetExceeded, match="2 of 2 requests used"):
        build_reward(job.params, job=job).score(samples(job))
    assert len(network) == 2
    with pytest.raises(generation.GenerationError, match="RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB"):
        quark_job(answerers, max_requests=50)
