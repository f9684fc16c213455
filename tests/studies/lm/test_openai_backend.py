"""The OpenAI-compatible backend against a local HTTP server the test starts."""
import logging

import httpx
import pytest

from studies.lm.backends import (
    BackendError,
    Budget,
    BudgetExceeded,
    Decoding,
    OpenAIBackend,
    TransientBackendError,
)

from .openai_server import OpenAIServer, chat, completion

GREEDY = Decoding(max_new_tokens=20, stop=["###"])


def backend(server, **kw):
    sleeps: list[float] = []
    kw.setdefault("concurrency", 1)
    b = OpenAIBackend(endpoint_url=server.url, model="local-model", sleep=sleeps.append, backoff_s=0.5, **kw)
    return b, sleeps


def test_completions_request_shape_and_outputs():
    with OpenAIServer(lambda path, body: (200, completion([" yes\nReason: r.\n###\nQuestion"] * body["n"]), {})) as s:
        b, _ = backend(s)
        out = b.generate(["p1", "p2"], Decoding(do_sample=True, temperature=0.7, num_return_sequences=2, stop=["###"]))
    assert out == [[" yes\nReason: r.\n"] * 2] * 2
    first = s.requests[0]
    assert first["path"] == "/v1/completions"
    assert first["json"]["prompt"] == "p1" and first["json"]["n"] == 2 and first["json"]["temperature"] == 0.7
    assert first["json"]["model"] == "local-model" and first["json"]["stop"] == ["###"]


def test_chat_api_sends_one_user_message():
    with OpenAIServer(lambda path, body: (200, chat(["no\nReason: x."]), {})) as s:
        b, _ = backend(s, api="chat")
        assert b.generate(["hello"], GREEDY) == [["no\nReason: x."]]
    assert s.requests[0]["path"] == "/v1/chat/completions"
    assert s.requests[0]["json"]["messages"] == [{"role": "user", "content": "hello"}]
    assert s.requests[0]["json"]["temperature"] == 0.0


def test_rate_limit_then_success_backs_off_exponentially(caplog):
    with OpenAIServer(lambda path, body: (200, completion(["ok"]), {})) as s:
        s.script = [(429, {"error": "slow down"}, {}), (503, {"error": "busy"}, {})]
        b, sleeps = backend(s)
        with caplog.at_level(logging.WARNING):
            assert b.generate(["p"], GREEDY) == [["ok"]]
    assert sleeps == [0.5, 1.0]
    assert len(s.requests) == 3
    assert b.budget.used_requests == 3


def test_retry_after_header_is_honoured():
    with OpenAIServer(lambda path, body: (200, completion(["ok"]), {})) as s:
        s.script = [(429, {}, {"Retry-After": "3"})]
        b, sleeps = backend(s)
        b.generate(["p"], GREEDY)
    assert sleeps == [3.0]


def test_gives_up_after_max_retries_with_a_transient_error():
    with OpenAIServer(lambda path, body: (500, {"error": "down"}, {})) as s:
        b, sleeps = backend(s, max_retries=2)
        with pytest.raises(TransientBackendError, match="after 2 retries"):
            b.generate(["p"], GREEDY)
    assert len(s.requests) == 3 and sleeps == [0.5, 1.0]


def test_client_errors_are_not_retried():
    with OpenAIServer(lambda path, body: (400, {"error": "bad model"}, {})) as s:
        b, sleeps = backend(s)
        with pytest.raises(BackendError, match="400"):
            b.generate(["p"], GREEDY)
    assert len(s.requests) == 1 and sleeps == []


def test_budget_cap_on_requests_stops_before_sending():
    with OpenAIServer(lambda path, body: (200, completion(["ok"]), {})) as s:
        b, _ = backend(s, budget=Budget(max_requests=2))
        with pytest.raises(BudgetExceeded, match="2 of 2 requests"):
            b.generate(["a", "b", "c"], GREEDY)
    assert len(s.requests) == 2


def test_budget_cap_on_tokens():
    with OpenAIServer(lambda path, body: (200, completion(["ok"], tokens=60), {})) as s:
        b, _ = backend(s, budget=Budget(max_tokens=100))
        with pytest.raises(BudgetExceeded, match="120 of 100 tokens"):
            b.generate(["a", "b", "c"], GREEDY)
    assert len(s.requests) == 2


def test_api_key_comes_from_the_settings_and_never_reaches_errors(settings, caplog):
    # The key goes only to https on a host of RL_OPENAI_KEY_HOSTS (test_openai_key_hosts.py), so
    # this endpoint is a mock transport rather than the local http server.
    settings.RL_OPENAI_API_KEY = "sk-secret-123"
    settings.RL_OPENAI_KEY_HOSTS = ["api.openai.com"]
    seen: list[httpx.Request] = []

    def unauthorised(request):
        seen.append(request)
        return httpx.Response(401, json={"error": "unauthorised"})

    b = OpenAIBackend(endpoint_url="https://api.openai.com/v1", model="m", concurrency=1,
                      transport=httpx.MockTransport(unauthorised))
    with caplog.at_level(logging.DEBUG), pytest.raises(BackendError) as error:
        b.generate(["p"], GREEDY)
    assert seen[0].headers["Authorization"] == "Bearer sk-secret-123"
    assert "sk-secret" not in str(error.value)
    assert "sk-secret" not in caplog.text


def test_concurrent_requests_keep_prompt_order():
    with OpenAIServer(lambda path, body: (200, completion([body["prompt"].upper()]), {})) as s:
        b, _ = backend(s, concurrency=4)
        prompts = [f"p{i}" for i in range(12)]
        assert b.generate(prompts, GREEDY) == [[p.upper()] for p in prompts]
