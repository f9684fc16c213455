"""What an OpenAI-compatible endpoint's answer may cost (``studies.lm.backends``): an output far past
``max_new_tokens`` is cut to ``output_char_cap`` characters and its tokens charged at least at the
estimate of the text sent, whatever ``usage`` says; choices beyond the ``n`` asked are ignored; a
response body is read within ``timeout_s`` in all (an endpoint trickling a byte at a time is
dropped at that deadline) and up to ``response_byte_limit`` bytes."""
from __future__ import annotations

import socket
import threading
import time

import pytest
from django.contrib.auth import get_user_model

from studies.lm.backends import Budget, Decoding, OpenAIBackend, TransientBackendError, estimated_tokens
from studies.models import Rationale, RationaleSource
from studies.services.generation import generation_job_create, generation_job_run_batch
from tests.factories import DatasetFactory, ItemFactory

from .openai_server import OpenAIServer, completion
from .test_job_rights import RATIONALE_REPLY, _train_pool

CHARS_PER_TOKEN = 32  # backends.MAX_CHARS_PER_TOKEN


def backend(url: str, **kw) -> OpenAIBackend:
    kw.setdefault("budget", Budget())
    return OpenAIBackend(endpoint_url=url, model="m", sleep=lambda d: None, concurrency=1, **kw)


def test_an_output_far_past_max_new_tokens_is_cut_and_charged_from_its_text():
    decoding = Decoding(max_new_tokens=10)
    huge = "a" * 50_000
    with OpenAIServer(lambda path, body: (200, completion([huge], tokens=5), {})) as server:
        b = backend(server.url)
        [[text]] = b.generate(["What?"], decoding)
    assert len(text) == 10 * CHARS_PER_TOKEN
    usage = b.budget.as_json()
    assert usage["used_tokens"] >= estimated_tokens("What?", decoding)
    assert usage["used_tokens"] >= len(huge) // 3  # the text it sent, at the estimate's 3 characters a token
    assert usage["tokens_estimated"] is True
    assert b.run_info()["outputs_cut"] == 1


def test_an_endpoint_keeping_to_the_limit_keeps_its_exact_count_and_record():
    decoding = Decoding(max_new_tokens=10)
    with OpenAIServer(lambda path, body: (200, completion(["a short answer"], tokens=7), {})) as server:
        b = backend(server.url)
        assert b.generate(["What?"], decoding) == [["a short answer"]]
    assert b.budget.as_json()["used_tokens"] == 7
    assert b.budget.as_json()["tokens_estimated"] is False
    assert "outputs_cut" not in b.run_info()


def test_choices_beyond_the_n_asked_are_ignored():
    with OpenAIServer(lambda path, body: (200, completion(["one", "two", "three"]), {})) as server:
        assert backend(server.url).generate(["p"], Decoding(num_return_sequences=2)) == [["one", "two"]]


@pytest.mark.django_db
def test_a_job_stores_the_cut_output_and_charges_at_least_the_estimate():
    dataset = DatasetFactory(name="strategyqa")
    ItemFactory(dataset=dataset, split="dev")
    _train_pool(dataset)
    root = get_user_model().objects.create_superuser("root", password="pw")
    reply = RATIONALE_REPLY.replace("###", "x" * 20_000 + "###")
    with OpenAIServer(lambda path, body: (200, completion([reply], tokens=5), {})) as server:
        source = RationaleSource.objects.create(
            name="hosted", kind="lm", backend="openai", model_name_or_path="gpt-x", endpoint_url=server.url,
            decoding={"max_new_tokens": 10, "concurrency": 1})
        job = generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev", user=root,
                                    enqueue=False)
        while generation_job_run_batch(job_id=job.pk):
            pass
        prompt = server.requests[0]["json"]["prompt"]
    job.refresh_from_db()
    rationale = Rationale.objects.get(source=source)
    assert len(rationale.raw_output) <= 10 * CHARS_PER_TOKEN
    assert rationale.generation_info["outputs_cut"] == 1
    assert job.params["usage"]["used_tokens"] >= estimated_tokens(prompt, Decoding(max_new_tokens=10))
    assert job.params["usage"]["tokens_estimated"] is True


class RawServer:
    """A socket server answering every request with ``head`` then ``body`` bytes, ``every`` seconds
    apart per ``chunk`` bytes (a trickling endpoint)."""

    def __init__(self, body: bytes, *, chunk: int = 1, every: float = 0.0):
        self.body, self.chunk, self.every = body, chunk, every
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
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
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        try:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            while len(body) < length:  # read it all: closing on unread data would reset the connection
                body += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(self.body))
            for start in range(0, len(self.body), self.chunk):
                if self.stop.is_set():
                    break
                conn.sendall(self.body[start:start + self.chunk])
                time.sleep(self.every)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.sock.close()


def test_a_trickling_endpoint_is_dropped_at_the_request_deadline():
    server = RawServer(b'{"choices": [{"index": 0, "text": "' + b"a" * 40 + b'"}]}', every=0.2)
    try:
        b = backend(server.url, timeout_s=1.0, max_retries=0)
        started = time.monotonic()
        with pytest.raises(TransientBackendError, match="still arriving after 1s"):
            b.generate(["p"], Decoding(max_new_tokens=10))
        assert time.monotonic() - started < 2.5  # the whole body would take 12 s
    finally:
        server.close()


def test_a_response_over_the_byte_limit_is_dropped():
    from studies.lm.backends import response_byte_limit

    limit = response_byte_limit(10, 1)
    server = RawServer(b'{"choices": [{"index": 0, "text": "' + b"a" * limit + b'"}]}', chunk=65536)
    try:
        with pytest.raises(TransientBackendError, match=f"over {limit} bytes"):
            backend(server.url, max_retries=0).generate(["p"], Decoding(max_new_tokens=10))
    finally:
        server.close()
