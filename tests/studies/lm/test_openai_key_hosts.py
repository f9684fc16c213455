"""The operator's RL_OPENAI_API_KEY goes only to an https endpoint on a host of RL_OPENAI_KEY_HOSTS.

A researcher who may add or edit a rationale source (or question generator) chooses its
endpoint_url; the LM worker must not hand the key to whatever host that names. The jobs here run
through the worker's own path (``generation.generation_job_run`` / the Celery task, which builds
the backend from the source record): http endpoints against a local OpenAI-compatible server,
https ones against an httpx mock transport swapped in for the network."""
import logging
import os
import subprocess
import sys

import httpx
import pytest
from django.core.exceptions import ValidationError

from studies.lm.backends import BackendError, Decoding, OpenAIBackend, openai_key_decision
from studies.models import QuestionGenerator, RationaleSource
from studies.services import generation
from studies.tasks import run_generation_job
from tests.conftest import ROOT

from .openai_server import OpenAIServer, completion

KEY = "sk-operator-secret-42"
REPLY = " yes\nReason: Because the facts say so.\n###\nQuestion: next"


@pytest.fixture
def operator_key(settings):
    settings.RL_OPENAI_API_KEY = KEY
    settings.RL_OPENAI_KEY_HOSTS = ["api.openai.com"]
    return settings


@pytest.fixture
def network(monkeypatch):
    """Every httpx client the backend opens talks to this mock instead of the network; the
    requests it got are in ``network.requests``."""
    class Network:
        requests: list[httpx.Request] = []
        status = 200

    def handler(request: httpx.Request) -> httpx.Response:
        Network.requests.append(request)
        if Network.status != 200:
            return httpx.Response(Network.status, json={"error": "no"})
        return httpx.Response(200, json=completion([REPLY]))

    real_client = httpx.Client
    mock = httpx.MockTransport(handler)

    def client(*args, transport=None, **kwargs):
        # In place of the backend's own transport too (a PinnedTransport, which would connect).
        return real_client(*args, transport=mock, **kwargs)

    monkeypatch.setattr(httpx, "Client", client)
    return Network


def lm_source(url: str, name: str = "researcher-endpoint") -> RationaleSource:
    return RationaleSource.objects.create(
        name=name, kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=url,
        decoding={"max_new_tokens": 40, "max_retries": 0, "backoff_s": 0.001, "concurrency": 1})


def run_job(source, dataset):
    job = generation.generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev",
                                           enqueue=False, limit=2)
    run_generation_job.apply(args=[job.pk])
    job.refresh_from_db()
    return job


# --- through the worker's path ------------------------------------------------------------------
@pytest.mark.django_db
def test_a_researchers_own_endpoint_gets_no_key_and_the_job_says_why(
        operator_key, strategyqa_dataset, dev_items, train_items, caplog):
    with OpenAIServer(lambda path, body: (401, {"error": "missing key"}, {})) as server:
        source = lm_source(server.url)
        with caplog.at_level(logging.DEBUG):
            job = run_job(source, strategyqa_dataset)
    assert server.requests, "the endpoint was called"
    assert all("authorization" not in {k.lower() for k in r["headers"]} for r in server.requests)
    assert job.status == "failed"
    assert "answered 401" in job.error and "RL_OPENAI_API_KEY was not sent" in job.error
    assert "not https" in job.error and "RL_OPENAI_KEY_HOSTS" in job.error
    assert KEY not in job.error and KEY not in caplog.text


@pytest.mark.django_db
def test_a_keyless_local_server_keeps_working(operator_key, strategyqa_dataset, dev_items, train_items):
    with OpenAIServer(lambda path, body: (200, completion([REPLY]), {})) as server:
        job = run_job(lm_source(server.url), strategyqa_dataset)
    assert job.status == "done" and job.done == 2
    assert all("authorization" not in {k.lower() for k in r["headers"]} for r in server.requests)


@pytest.mark.django_db
def test_https_on_a_host_not_listed_gets_no_key(operator_key, network, strategyqa_dataset, dev_items, train_items):
    network.status = 403
    job = run_job(lm_source("https://llm.attacker.example/v1"), strategyqa_dataset)
    assert network.requests and all("authorization" not in r.headers for r in network.requests)
    assert str(network.requests[0].url) == "https://llm.attacker.example/v1/completions"
    assert job.status == "failed" and "answered 403" in job.error
    assert "'llm.attacker.example' is not one of the hosts in RL_OPENAI_KEY_HOSTS" in job.error
    assert KEY not in job.error


@pytest.mark.django_db
def test_http_on_a_listed_host_gets_no_key(operator_key, network, strategyqa_dataset, dev_items, train_items):
    job = run_job(lm_source("http://api.openai.com/v1"), strategyqa_dataset)
    assert job.status == "done"
    assert network.requests and all("authorization" not in r.headers for r in network.requests)


@pytest.mark.django_db
def test_http_local_server_listed_by_the_operator_still_gets_no_key(
        operator_key, strategyqa_dataset, dev_items, train_items):
    operator_key.RL_OPENAI_KEY_HOSTS = ["127.0.0.1"]
    with OpenAIServer(lambda path, body: (200, completion([REPLY]), {})) as server:
        job = run_job(lm_source(server.url), strategyqa_dataset)
    assert job.status == "done"
    assert all("authorization" not in {k.lower() for k in r["headers"]} for r in server.requests)


@pytest.mark.django_db
def test_https_on_a_listed_host_gets_the_key(operator_key, network, strategyqa_dataset, dev_items, train_items):
    operator_key.RL_OPENAI_KEY_HOSTS = "llm.lab.example, api.openai.com"  # the environment's form works too
    job = run_job(lm_source("https://api.openai.com/v1"), strategyqa_dataset)
    assert job.status == "done" and job.done == 2
    assert network.requests and all(r.headers["authorization"] == f"Bearer {KEY}" for r in network.requests)


def test_no_key_configured_sends_no_header_and_no_withheld_note(settings, network):
    settings.RL_OPENAI_API_KEY = ""
    network.status = 401
    backend = OpenAIBackend(endpoint_url="https://api.openai.com/v1", model="m", max_retries=0)
    with pytest.raises(BackendError) as error:
        backend.generate(["p"], Decoding(max_new_tokens=5))
    assert "authorization" not in network.requests[0].headers
    assert "was not sent" not in str(error.value)


def test_a_redirect_is_not_followed_with_the_key(operator_key, monkeypatch):
    seen: list[httpx.Request] = []

    def handler(request):
        seen.append(request)
        return httpx.Response(307, headers={"Location": "https://elsewhere.example/v1/completions"})

    backend = OpenAIBackend(endpoint_url="https://api.openai.com/v1", model="m", max_retries=0,
                            transport=httpx.MockTransport(handler))
    with pytest.raises(BackendError, match="307"):
        backend.generate(["p"], Decoding(max_new_tokens=5))
    assert [str(r.url) for r in seen] == ["https://api.openai.com/v1/completions"]


# --- the decision the sender makes ---------------------------------------------------------------
@pytest.mark.parametrize("url", [
    "https://api.openai.com/v1",
    "https://API.OpenAI.com/v1/",
    "https://api.openai.com./v1",
    "https://api.openai.com:443/v1/chat/completions",
])
def test_the_key_goes_to_https_on_a_listed_host(settings, url):
    settings.RL_OPENAI_KEY_HOSTS = ["api.openai.com"]
    assert openai_key_decision(url) == (True, "")


@pytest.mark.parametrize(("url", "why"), [
    ("http://api.openai.com/v1", "not https"),
    ("http://127.0.0.1:8000/v1", "not https"),
    ("https://api.openai.com.attacker.example/v1", "is not one of the hosts"),
    ("https://api.openai.com@attacker.example/v1", "credentials"),
    ("https://user:pw@api.openai.com/v1", "credentials"),
    ("https://openai.com/v1", "is not one of the hosts"),
    ("https://10.0.0.5/v1", "is not one of the hosts"),
    ("https://localhost/v1", "is not one of the hosts"),
    ("ftp://api.openai.com/v1", "not https"),
    ("api.openai.com/v1", "not https"),
])
def test_the_key_goes_nowhere_else(settings, url, why):
    settings.RL_OPENAI_KEY_HOSTS = ["api.openai.com"]
    allowed, reason = openai_key_decision(url)
    assert not allowed and why in reason


def test_an_empty_host_list_sends_the_key_nowhere(settings):
    settings.RL_OPENAI_KEY_HOSTS = []
    assert openai_key_decision("https://api.openai.com/v1")[0] is False
    settings.RL_OPENAI_KEY_HOSTS = ""
    assert openai_key_decision("https://api.openai.com/v1")[0] is False


@pytest.mark.parametrize(("environment", "hosts"), [
    (None, ["api.openai.com"]),
    ("llm.lab.example, api.openai.com", ["llm.lab.example", "api.openai.com"]),
    ("", []),
])
def test_the_setting_comes_from_the_environment(environment, hosts):
    env = {k: v for k, v in os.environ.items() if k != "RL_OPENAI_KEY_HOSTS"}
    if environment is not None:
        env["RL_OPENAI_KEY_HOSTS"] = environment
    result = subprocess.run(
        [sys.executable, "-c", "import config.settings.base as b; print(repr(b.RL_OPENAI_KEY_HOSTS))"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr(hosts)


# --- what a source or generator may name ---------------------------------------------------------
@pytest.mark.parametrize("model", [RationaleSource, QuestionGenerator])
@pytest.mark.parametrize("url", ["", "http://127.0.0.1:8000/v1", "https://api.openai.com/v1",
                                 "http://vllm.lab.internal:8000/v1"])
def test_endpoint_urls_that_are_accepted(model, url):
    obj = model(name="x", backend="openai", model_name_or_path="m", endpoint_url=url)
    obj.clean_fields(exclude=[f.name for f in model._meta.fields if f.name != "endpoint_url"])


@pytest.mark.parametrize("model", [RationaleSource, QuestionGenerator])
@pytest.mark.parametrize(("url", "why"), [
    ("ftp://files.example/v1", "http:// or https://"),
    ("https://user:secret@api.openai.com/v1", "user name or password"),
    ("http://token@127.0.0.1:8000/v1", "user name or password"),
])
def test_endpoint_urls_that_are_refused(model, url, why):
    obj = model(name="x", backend="openai", model_name_or_path="m", endpoint_url=url)
    with pytest.raises(ValidationError) as error:
        obj.clean_fields()
    assert why in " ".join(error.value.message_dict["endpoint_url"])


def test_a_form_without_the_endpoint_field_is_not_refused_for_it():
    obj = RationaleSource(name="x", kind="lm", backend="openai", endpoint_url="ftp://bad.example/")
    obj.clean_fields(exclude=["endpoint_url", "model_name_or_path"])
