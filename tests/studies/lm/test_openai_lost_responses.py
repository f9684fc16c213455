"""What the OpenAI-compatible backend (``studies.lm.backends``) does with a response it cannot use:

- a request that was sent but whose answer was dropped (over ``response_byte_limit``, past the
  deadline, the connection lost) or unreadable (a 200 whose body is not the API's) still spends
  tokens: its valid ``usage`` when a 200 carried one, else ``estimated_tokens``, so the job's and
  the operator's token caps count it; a request that never left (no connection) spends none;
- a ``Retry-After`` that is negative, NaN or infinite is ignored (exponential back-off), one given
  as an HTTP date waits until then;
- the status line and headers are bounded by ``timeout_s`` in all, as the body is (an endpoint
  trickling its headers is dropped at the deadline), on every request, the client keeping no idle
  connection whose socket the deadline could not reach;
- a JSON body nested past the parser's depth is an "unexpected body" error.
Endpoints: the local fake OpenAI server, raw sockets the test answers itself, or an httpx mock."""
from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from email.utils import format_datetime

import httpx
import pytest
from django.contrib.auth import get_user_model

from studies.lm.backends import (
    BackendError,
    Budget,
    Decoding,
    OpenAIBackend,
    RequestWatchdog,
    TransientBackendError,
    estimated_tokens,
    response_byte_limit,
)
from studies.lm.endpoints import PinnedTransport
from studies.models import RationaleSource
from studies.services import generation

from .openai_server import OpenAIServer, completion
from .test_openai_output_bounds import RawServer

DECODING = Decoding(max_new_tokens=10)
PROMPT = "Is it?"


def backend(url: str, **kw) -> OpenAIBackend:
    kw.setdefault("budget", Budget())
    kw.setdefault("sleep", lambda d: None)
    return OpenAIBackend(endpoint_url=url, model="m", concurrency=1, **kw)


# --- tokens of a response that could not be used --------------------------------------------------
def test_a_response_dropped_over_the_byte_limit_is_charged_the_estimate():
    limit = response_byte_limit(DECODING.max_new_tokens, 1)
    server = RawServer(b'{"choices": [{"index": 0, "text": "' + b"a" * limit + b'"}]}', chunk=65536)
    try:
        b = backend(server.url, max_retries=2)
        with pytest.raises(TransientBackendError, match=f"over {limit} bytes"):
            b.generate([PROMPT], DECODING)
    finally:
        server.close()
    usage = b.budget.as_json()
    assert usage["used_requests"] == 3
    assert usage["used_tokens"] == 3 * estimated_tokens(PROMPT, DECODING)
    assert usage["tokens_estimated"] is True


def test_dropped_responses_stop_at_the_token_cap_before_the_retries_run_out():
    limit = response_byte_limit(DECODING.max_new_tokens, 1)
    server = RawServer(b'{"choices": [{"index": 0, "text": "' + b"a" * limit + b'"}]}', chunk=65536)
    per_request = estimated_tokens(PROMPT, DECODING)
    try:
        b = backend(server.url, max_retries=10, budget=Budget(max_tokens=2 * per_request))
        with pytest.raises(BackendError, match="budget cap reached"):
            b.generate([PROMPT], DECODING)
    finally:
        server.close()
    assert b.budget.as_json()["used_requests"] == 2


def test_a_200_whose_body_is_not_the_apis_charges_its_usage_or_else_the_estimate():
    with OpenAIServer(lambda path, body: (200, {"usage": {"total_tokens": 7}}, {})) as server:
        b = backend(server.url)
        with pytest.raises(BackendError, match="unexpected body"):
            b.generate([PROMPT], DECODING)
    assert b.budget.as_json()["used_tokens"] == 7
    assert b.budget.as_json()["tokens_estimated"] is False

    with OpenAIServer(lambda path, body: (200, "not a completion", {})) as server:
        b = backend(server.url)
        with pytest.raises(BackendError, match="unexpected body"):
            b.generate([PROMPT], DECODING)
    assert b.budget.as_json()["used_tokens"] == estimated_tokens(PROMPT, DECODING)
    assert b.budget.as_json()["tokens_estimated"] is True


def test_a_request_that_never_left_spends_no_tokens():
    with socket.socket() as unused:  # a port nothing listens on: the connection is refused
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    b = backend(f"http://127.0.0.1:{port}/v1", max_retries=1)
    with pytest.raises(TransientBackendError, match="ConnectError"):
        b.generate([PROMPT], DECODING)
    assert b.budget.as_json()["used_requests"] == 2
    assert b.budget.as_json()["used_tokens"] == 0


KEY = "sk-operator-secret-42"


@pytest.mark.django_db
def test_a_job_on_the_operators_key_stops_at_its_token_cap_when_every_response_is_dropped(
        settings, monkeypatch, strategyqa_dataset, dev_items, train_items):
    """The audit's probe: the operator's token cap, an endpoint answering 200 with a body over the
    byte limit, ten retries a prompt. Each dropped answer is charged, so the job stops at the cap
    after one request instead of sending eleven a prompt, and a resumed job sends none."""
    settings.RL_OPENAI_API_KEY = KEY
    settings.RL_OPENAI_KEY_HOSTS = ["api.openai.com"]
    settings.RL_OPENAI_KEY_MAX_REQUESTS_PER_JOB = 0
    settings.RL_OPENAI_KEY_MAX_TOKENS_PER_JOB = 100
    seen: list[httpx.Request] = []

    def oversized(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b" " * (response_byte_limit(40, 1) + 1))

    real_client = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda *args, transport=None, **kwargs: real_client(
        *args, transport=httpx.MockTransport(oversized), **kwargs))
    root = get_user_model().objects.create_superuser("root", password="pw")
    source = RationaleSource.objects.create(
        name="hosted", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url="https://api.openai.com/v1",
        decoding={"max_new_tokens": 40, "max_retries": 10, "backoff_s": 0.001, "concurrency": 1})
    job = generation.generation_job_create(kind="rationales", source=source, dataset=strategyqa_dataset,
                                           split="dev", user=root, enqueue=False, limit=8, batch_size=2)
    job = generation.generation_job_run(job_id=job.pk)
    assert len(seen) == 1  # 40 tokens and the prompt's, estimated: over the cap after the first
    assert job.status == "failed"
    assert "RL_OPENAI_KEY_MAX_TOKENS_PER_JOB" in job.error
    assert job.params["usage"]["used_tokens"] > 100
    assert job.params["usage"]["tokens_estimated"] is True

    for _ in range(2):  # resumed: the cap is spent, nothing more is sent
        generation.generation_job_resume(job=job, user=root, enqueue=False)
        job = generation.generation_job_run(job_id=job.pk)
        assert job.status == "failed"
    assert len(seen) == 1


# --- Retry-After ---------------------------------------------------------------------------------
def test_a_negative_nan_or_infinite_retry_after_falls_back_to_exponential_backoff():
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # the real sleep, which refuses a negative or NaN wait
        sleeps.append(seconds)
        time.sleep(seconds)

    with OpenAIServer(lambda path, body: (200, completion(["ok"]), {})) as server:
        server.script = [(429, {}, {"Retry-After": "-5"}), (503, {}, {"Retry-After": "nan"}),
                         (429, {}, {"Retry-After": "inf"})]
        b = backend(server.url, sleep=sleep, backoff_s=0.01, max_backoff_s=5.0)
        assert b.generate([PROMPT], DECODING) == [["ok"]]
    assert sleeps == [0.01, 0.02, 0.04]


def test_a_retry_after_given_as_an_http_date_waits_until_then():
    from datetime import UTC, datetime, timedelta

    sleeps: list[float] = []
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    past = "Sun, 06 Nov 1994 08:49:37 GMT"
    with OpenAIServer(lambda path, body: (200, completion(["ok"]), {})) as server:
        server.script = [(429, {}, {"Retry-After": soon}), (429, {}, {"Retry-After": past}),
                         (429, {}, {"Retry-After": "Someday, 99 Foo 2024"})]
        b = backend(server.url, sleep=sleeps.append, backoff_s=0.5)
        assert b.generate([PROMPT], DECODING) == [["ok"]]
    assert 25 < sleeps[0] <= 30
    assert sleeps[1:] == [0.0, 2.0]  # a date past: no wait; no date: the back-off (0.5 * 2**2)


# --- the deadline over the status line and headers ------------------------------------------------
class TricklingHeaders:
    """A socket server whose first ``honest`` requests get a whole response at once (on a kept-alive
    connection) and every later one a status line and then a header a byte every ``every`` seconds."""

    def __init__(self, *, honest: int = 0, every: float = 0.25, tls: ssl.SSLContext | None = None):
        self.honest, self.every, self.tls = honest, every, tls
        self.answered = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    @staticmethod
    def _read_request(conn) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        while len(body) < length:
            body += conn.recv(65536)
        return True

    def _connection(self, conn):
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            while self._read_request(conn):
                self.answered += 1
                if self.answered <= self.honest:
                    body = b'{"choices": [{"index": 0, "text": "ok"}], "usage": {"total_tokens": 3}}'
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                    continue
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
                for byte in b"X-Slow: " + b"a" * 200:
                    if self.stop.is_set():
                        break
                    conn.sendall(bytes([byte]))
                    time.sleep(self.every)
                return
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.sock.close()


def test_an_endpoint_trickling_its_headers_is_dropped_at_the_deadline_and_charged():
    server = TricklingHeaders()
    try:
        b = backend(server.url, timeout_s=1.0, max_retries=0)
        started = time.monotonic()
        with pytest.raises(TransientBackendError, match="still arriving after 1s"):
            b.generate([PROMPT], DECODING)
        assert time.monotonic() - started < 2.5  # the headers alone would take 50 s
    finally:
        server.close()
    assert b.budget.as_json()["used_tokens"] == estimated_tokens(PROMPT, DECODING)


def test_a_tls_endpoint_trickling_its_headers_is_dropped_at_the_deadline(tmp_path):
    """The deadline shuts the TLS connection's socket down under the read blocked in it."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make the test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    server = TricklingHeaders(tls=server_tls)
    try:
        b = backend(server.url.replace("http://", "https://"), timeout_s=1.0, max_retries=0,
                    transport=PinnedTransport(verify=ssl.create_default_context(cafile=str(cert)),
                                              limits=httpx.Limits(max_keepalive_connections=0)))
        started = time.monotonic()
        with pytest.raises(TransientBackendError, match="still arriving after 1s"):
            b.generate([PROMPT], DECODING)
        assert time.monotonic() - started < 2.5
    finally:
        server.close()


def test_a_request_after_an_answered_one_is_bounded_too():
    """The second request does not ride the first one's connection, whose socket the deadline
    could not reach."""
    server = TricklingHeaders(honest=1)
    try:
        b = backend(server.url, timeout_s=1.0, max_retries=0)
        assert b.generate([PROMPT], DECODING) == [["ok"]]
        started = time.monotonic()
        with pytest.raises(TransientBackendError, match="still arriving after 1s"):
            b.generate([PROMPT], DECODING)
        assert time.monotonic() - started < 2.5
    finally:
        server.close()


def test_the_deadline_timer_ends_with_its_request():
    with OpenAIServer(lambda path, body: (200, completion(["ok"]), {})) as server:
        before = {t for t in threading.enumerate() if isinstance(t, threading.Timer)}
        b = backend(server.url, timeout_s=300.0)
        assert b.generate([PROMPT, PROMPT], DECODING) == [["ok"], ["ok"]]
        timers = [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t not in before]
    for timer in timers:
        timer.join(2)
    assert not any(t.is_alive() for t in timers)


# --- a body nested past the parser's depth -------------------------------------------------------
def test_a_deeply_nested_body_is_an_unexpected_body():
    server = RawServer(b"[" * 200_000 + b"]" * 200_000, chunk=65536)
    try:
        b = backend(server.url, max_retries=3)
        with pytest.raises(BackendError, match="unexpected body"):
            b.generate([PROMPT], DECODING)
    finally:
        server.close()
    assert b.budget.as_json()["used_requests"] == 1  # not retried
    assert b.budget.as_json()["used_tokens"] == estimated_tokens(PROMPT, DECODING)


class _Stream:
    """What httpcore hands a ``trace`` callback as a connection's ``return_value``."""

    def __init__(self, sock):
        self.sock = sock

    def get_extra_info(self, name):
        return self.sock if name == "socket" else None


@pytest.mark.parametrize("event", ["connection.connect_tcp.complete", "connection.start_tls.complete",
                                   "proxy.start_tls.complete"])
def test_the_watchdog_shuts_the_socket_of_each_connection_it_is_told_of(event):
    # Through an HTTPS proxy httpcore names the tunnelled TLS step "proxy.start_tls.complete": before,
    # only "connection.*" events were taken, so the deadline shut nothing and a slow header block
    # ran on (22.9 s for a 1 s timeout in a review's probe).
    ours, theirs = socket.socketpair()
    try:
        with RequestWatchdog(0.2) as watchdog:
            watchdog.trace(event, {"return_value": _Stream(ours)})
            ours.settimeout(5)
            started = time.monotonic()
            assert ours.recv(1) == b""  # shut at the deadline: the blocked read ends
            assert time.monotonic() - started < 3
        assert watchdog.fired
    finally:
        ours.close()
        theirs.close()
