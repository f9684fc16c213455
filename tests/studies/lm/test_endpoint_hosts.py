"""The LM worker calls no endpoint on the metadata service, its own machine or its network unless
the operator listed the host in RL_LM_ENDPOINT_PRIVATE_HOSTS (studies.lm.endpoints).

A researcher who may add a rationale source chooses its endpoint_url, and a failed reply's first
200 characters end up in the job's error, which they read: without the rule they could make the
server POST to http://169.254.169.254/latest/meta-data or 127.0.0.1:<port> and read the answer."""
import logging
import shutil
import socket
import ssl
import subprocess

import httpx
import pytest

from studies.lm.backends import BackendError, Decoding, OpenAIBackend, TransientBackendError
from studies.lm.endpoints import PinnedTransport, endpoint_refusal, environment_proxied
from studies.models import RationaleSource
from studies.services import generation
from studies.tasks import run_generation_job

from .openai_server import OpenAIServer, completion

SECRET = "INTERNAL-SECRET-iam-role-creds"
REPLY = " yes\nReason: Because the facts say so.\n###\nQuestion: next"


@pytest.fixture
def recorder():
    """A transport that records what reaches it and answers with an internal service's secret."""
    seen: list[httpx.Request] = []

    def handler(request):
        seen.append(request)
        return httpx.Response(404, text=SECRET)

    return seen, httpx.MockTransport(handler)


def call(url: str, transport) -> BackendError:
    backend = OpenAIBackend(endpoint_url=url, model="m", max_retries=0, concurrency=1, transport=transport)
    with pytest.raises(BackendError) as error:
        backend.generate(["q"], Decoding(max_new_tokens=5))
    return error.value


@pytest.mark.parametrize("url, why", [
    ("http://169.254.169.254/latest/meta-data", "link-local"),
    ("http://[fe80::1]/v1", "link-local"),
    ("http://[::ffff:169.254.169.254]/v1", "link-local"),
    ("http://224.0.0.1/v1", "multicast"),
    ("http://0.0.0.0:8000/v1", "unspecified"),
    ("http://240.0.0.1/v1", "reserved"),
])
def test_link_local_multicast_reserved_and_unspecified_are_never_called(settings, recorder, url, why):
    settings.RL_LM_ENDPOINT_PRIVATE_HOSTS = ["169.254.169.254", "fe80::1", "0.0.0.0", "224.0.0.1", "240.0.0.1",
                                             "::ffff:169.254.169.254"]  # listing them changes nothing
    seen, transport = recorder
    error = str(call(url, transport))
    assert seen == [], "nothing was sent"
    assert why in error and "RL_LM_ENDPOINT_PRIVATE_HOSTS" in error and "refused to call the endpoint" in error
    assert SECRET not in error


@pytest.mark.parametrize("url", [
    "http://10.0.0.5:9200",
    "http://192.168.1.10/v1",
    "http://172.16.0.1/v1",
    "http://100.64.0.1/v1",
    "http://[fd00::1]/v1",
    "http://127.0.0.1:5432",
    "http://[::1]:8000/admin",
    "http://2130706433:8000/v1",  # 127.0.0.1 spelt as one number
])
def test_private_and_loopback_addresses_not_listed_are_refused_before_any_request(settings, recorder, url):
    settings.RL_LM_ENDPOINT_PRIVATE_HOSTS = ["localhost"]  # the default, less its two addresses
    seen, transport = recorder
    error = str(call(url, transport))
    assert seen == []
    assert "loopback or private" in error and "RL_LM_ENDPOINT_PRIVATE_HOSTS" in error and url in error
    assert SECRET not in error


def test_an_empty_setting_refuses_even_the_local_server(settings):
    settings.RL_LM_ENDPOINT_PRIVATE_HOSTS = ""
    with OpenAIServer(lambda path, body: (404, {"error": SECRET}, {})) as server:
        error = str(call(server.url, None))
    assert server.requests == [], "the local server got nothing"
    assert "'127.0.0.1'" in error and "not one of the hosts in RL_LM_ENDPOINT_PRIVATE_HOSTS" in error
    assert SECRET not in error


def test_the_default_lets_a_local_server_on_the_loopback_work(settings):
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        backend = OpenAIBackend(endpoint_url=server.url, model="m", max_retries=0, concurrency=1)
        assert backend.generate(["q"], Decoding(max_new_tokens=5)) == [[" yes"]]
    assert len(server.requests) == 1


def test_a_listed_private_address_is_called_and_its_body_still_echoed(settings, recorder):
    settings.RL_LM_ENDPOINT_PRIVATE_HOSTS = "gpu-box.lab, 10.0.0.5"  # the environment's form works too
    seen, transport = recorder
    error = str(call("http://10.0.0.5:8000/v1", transport))
    assert [str(r.url) for r in seen] == ["http://10.0.0.5:8000/v1/completions"]
    assert "answered 404" in error and SECRET in error  # an allowed endpoint is the researcher's own


def test_a_public_name_resolving_to_a_private_address_is_refused(settings, recorder, monkeypatch):
    answers = {"llm.example.com": "10.1.2.3", "gpu-box.lab": "10.1.2.4", "meta.example.com": "169.254.169.254",
               "api.example.com": "93.184.216.34"}

    def getaddrinfo(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    settings.RL_LM_ENDPOINT_PRIVATE_HOSTS = ["gpu-box.lab", "meta.example.com"]
    seen, transport = recorder
    error = str(call("https://llm.example.com/v1", transport))
    assert seen == [] and "'llm.example.com' resolves to 10.1.2.3" in error
    error = str(call("http://meta.example.com/v1", transport))
    assert seen == [] and "link-local" in error
    assert endpoint_refusal("http://gpu-box.lab:8000/v1/completions") == ""  # listed by name
    assert endpoint_refusal("https://api.example.com/v1/completions") == ""  # a public address


@pytest.mark.parametrize("url", [
    "http://api.example.com/v1#",
    "http://api.example.com/v1?x=",
    "http://api.example.com/latest/meta-data?",
    "http://127.0.0.1:8000/v1#",
    "http://user:pass@127.0.0.1:8000/v1",
])
def test_urls_that_hide_the_appended_path_or_carry_credentials_are_refused(recorder, url):
    seen, transport = recorder
    error = str(call(url, transport))
    assert seen == []
    assert "query string or fragment" in error or "user name or password" in error


@pytest.mark.django_db
def test_a_job_on_the_metadata_address_fails_without_calling_it(strategyqa_dataset, dev_items, train_items,
                                                                monkeypatch):
    seen: list[httpx.Request] = []
    real_client = httpx.Client

    def client(*args, transport=None, **kwargs):
        return real_client(*args, transport=httpx.MockTransport(lambda r: seen.append(r) or httpx.Response(
            404, text=SECRET)), **kwargs)

    monkeypatch.setattr(httpx, "Client", client)
    source = generation_source("http://169.254.169.254/latest/meta-data#")
    job = generation.generation_job_create(kind="rationales", source=source, dataset=strategyqa_dataset,
                                           split="dev", enqueue=False, limit=2)
    run_generation_job.apply(args=[job.pk])
    job.refresh_from_db()
    assert seen == []
    assert job.status == "failed" and "refused to call the endpoint" in job.error
    assert SECRET not in job.error


@pytest.mark.django_db
def test_a_job_on_the_local_server_still_runs_end_to_end(strategyqa_dataset, dev_items, train_items):
    with OpenAIServer(lambda path, body: (200, completion([REPLY]), {})) as server:
        job = generation.generation_job_create(kind="rationales", source=generation_source(server.url),
                                               dataset=strategyqa_dataset, split="dev", enqueue=False, limit=2)
        run_generation_job.apply(args=[job.pk])
    job.refresh_from_db()
    assert job.status == "done" and job.done == 2 and len(server.requests) == 2


def generation_source(url: str) -> RationaleSource:
    return RationaleSource.objects.create(
        name="researcher-endpoint", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=url,
        decoding={"max_new_tokens": 40, "max_retries": 0, "backoff_s": 0.001, "concurrency": 1})


# --- the connection goes to the address the check saw (DNS rebinding) ----------------------------
REBINDING_HOST = "llm-rebind.lab.example"


@pytest.fixture
def rebinding_dns(monkeypatch):
    """``REBINDING_HOST`` answers 127.0.0.1 to its first lookup and 169.254.169.254 (the metadata
    service) to every later one; other names resolve as usual. ``connects`` records every address
    a connection is opened to, and one to 169.254.169.254 fails at once instead of leaving."""
    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.create_connection
    lookups: list[str] = []
    connects: list[str] = []

    def getaddrinfo(host, port, *args, **kwargs):
        if host != REBINDING_HOST:
            return real_getaddrinfo(host, port, *args, **kwargs)
        lookups.append(host)
        address = "127.0.0.1" if len(lookups) == 1 else "169.254.169.254"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    def create_connection(address, *args, **kwargs):
        connects.append(address[0])
        if address[0] in {REBINDING_HOST, "169.254.169.254"}:
            raise OSError(f"the test refuses to connect to {address[0]}")
        return real_connect(address, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    return lookups, connects


@pytest.mark.django_db
def test_a_dns_answer_that_changes_after_the_check_is_not_used(settings, rebinding_dns, strategyqa_dataset,
                                                               dev_items, train_items):
    settings.RL_LM_ENDPOINT_PRIVATE_HOSTS = ["localhost", REBINDING_HOST]
    lookups, connects = rebinding_dns
    with OpenAIServer(lambda path, body: (200, completion([REPLY]), {})) as server:
        port = server.httpd.server_address[1]
        source = generation_source(f"http://{REBINDING_HOST}:{port}/v1")
        job = generation.generation_job_create(kind="rationales", source=source, dataset=strategyqa_dataset,
                                               split="dev", enqueue=False, limit=1)
        run_generation_job.apply(args=[job.pk])
    job.refresh_from_db()
    assert job.status == "done", job.error
    assert "169.254.169.254" not in connects and REBINDING_HOST not in connects
    assert connects == ["127.0.0.1"] and lookups == [REBINDING_HOST], "looked up once, connected to what was checked"
    assert [r["headers"]["Host"] for r in server.requests] == [f"{REBINDING_HOST}:{port}"]


def test_a_name_whose_answer_turns_to_the_metadata_address_is_refused_at_the_next_request(settings,
                                                                                            rebinding_dns):
    settings.RL_LM_ENDPOINT_PRIVATE_HOSTS = ["localhost", REBINDING_HOST]
    lookups, connects = rebinding_dns
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        url = f"http://{REBINDING_HOST}:{server.httpd.server_address[1]}/v1"
        backend = OpenAIBackend(endpoint_url=url, model="m", max_retries=0, concurrency=1)
        assert backend.generate(["q"], Decoding(max_new_tokens=5)) == [[" yes"]]
        with pytest.raises(BackendError) as error:
            backend.generate(["q"], Decoding(max_new_tokens=5))
    assert len(server.requests) == 1 and connects == ["127.0.0.1"]
    assert f"refused to call the endpoint {url}/completions" in str(error.value)
    assert "169.254.169.254, a link-local address" in str(error.value)


def test_a_name_that_does_not_resolve_fails_naming_the_host(settings, monkeypatch, caplog):
    def getaddrinfo(host, port, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    sleeps: list[float] = []
    backend = OpenAIBackend(endpoint_url="https://llm.nowhere.example/v1", model="m", max_retries=2,
                            concurrency=1, sleep=sleeps.append)
    with caplog.at_level(logging.WARNING), pytest.raises(TransientBackendError) as error:
        backend.generate(["q"], Decoding(max_new_tokens=5))
    # A DNS failure is a connection error: retried with back-off, then a transient error (resume later).
    assert len(sleeps) == 2
    assert str(error.value) == ("https://llm.nowhere.example/v1/completions still failing after 2 retries "
                                "(its host 'llm.nowhere.example' does not resolve)")
    assert "its host 'llm.nowhere.example' does not resolve" in caplog.text


def test_https_keeps_the_host_name_for_sni_the_certificate_and_the_api_key(settings, tmp_path, rebinding_dns):
    """The TLS server's certificate names only the host, not 127.0.0.1: the handshake succeeds only
    if the server name sent and checked is the host's; the key goes by the URL's host name too."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make the test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    f"/CN={REBINDING_HOST}", "-addext", f"subjectAltName=DNS:{REBINDING_HOST}",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    settings.RL_LM_ENDPOINT_PRIVATE_HOSTS = [REBINDING_HOST]
    settings.RL_OPENAI_API_KEY = "sk-operator-key"
    settings.RL_OPENAI_KEY_HOSTS = [REBINDING_HOST]
    server_names: list[str] = []
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    server_tls.sni_callback = lambda sock, name, context: server_names.append(name)
    client_tls = ssl.create_default_context(cafile=str(cert))
    lookups, connects = rebinding_dns
    with OpenAIServer(lambda path, body: (200, completion([" yes"]), {})) as server:
        server.httpd.socket = server_tls.wrap_socket(server.httpd.socket, server_side=True)
        port = server.httpd.server_address[1]
        backend = OpenAIBackend(endpoint_url=f"https://{REBINDING_HOST}:{port}/v1", model="m", max_retries=0,
                                concurrency=1, transport=PinnedTransport(verify=client_tls))
        assert backend.generate(["q"], Decoding(max_new_tokens=5)) == [[" yes"]]
    assert connects == ["127.0.0.1"] and server_names == [REBINDING_HOST]
    assert server.requests[0]["headers"]["Host"] == f"{REBINDING_HOST}:{port}"
    assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-operator-key"


def test_an_environment_proxy_keeps_httpx_proxy_handling(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert not environment_proxied("https://api.example.com/v1")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.lab:3128")
    assert environment_proxied("https://api.example.com/v1")
    assert not environment_proxied("http://api.example.com/v1")
    monkeypatch.setenv("NO_PROXY", "*")
    assert not environment_proxied("https://api.example.com/v1")


@pytest.mark.parametrize("error", [httpx.ConnectError, httpx.ConnectTimeout])
def test_an_address_that_cannot_be_reached_falls_back_to_the_next_checked_one(error):
    """A dual-stack host whose first address is unreachable (a blackholed IPv6 route times out)
    is reached at its next checked address, as a plain connect would."""
    from studies.lm.endpoints import CHECKED_ADDRESSES

    tried: list[str] = []

    class Inner(httpx.BaseTransport):
        def handle_request(self, request):
            tried.append(request.url.host)
            if len(tried) == 1:
                raise error("unreachable", request=request)
            return httpx.Response(200, json={"ok": True}, request=request)

    transport = PinnedTransport()
    transport._inner = Inner()
    request = httpx.Request("POST", "https://api.example.org/v1/completions",
                            extensions={CHECKED_ADDRESSES: ["2001:db8::1", "93.184.216.34"]})
    assert transport.handle_request(request).status_code == 200
    assert tried == ["2001:db8::1", "93.184.216.34"]
