"""Database round trips per step of the worker flow, counted on the wire (benchmark only).

One task of a study is walked in-process with Django's test client, the way ``load.py``'s workers
walk it over HTTP: landing page, consent (the claim), first question, then per question the first
answer (before), the reveal, the second answer (after) and the next page (question), the submit
(finish) and the done page. With ``inline`` the consent and the answers are sent as the pages'
script sends them (header ``X-RL-Inline: 1``): the reply is the next page, so the first question,
the reveal and the next question are part of the claim and answer steps and have no requests of
their own. Before each request the
connections are handled as a server does at ``request_started`` (``close_old_connections``: the
``CONN_HEALTH_CHECKS`` query runs there when it is on), which the test client skips.

Two counts per step:

- ``statements``: what passes through Django's cursor (``connection.execute_wrapper``): the
  queries, savepoints and their releases;
- ``round_trips``: every message libpq sends that waits for an answer (``Query`` and ``Sync``),
  read from libpq's trace of the connection (``PGconn.trace``): the statements plus psycopg's
  ``BEGIN``, the ``COMMIT`` / ``ROLLBACK`` and the health check, which bypass the cursor.

Nothing here is installed in the app: the trace is set on the benchmark's own connection.
"""
from __future__ import annotations

import html
import os
import re
import tempfile
from collections import defaultdict

# The header the pages' script sends with a consent or an answer (annotations.worker_pages.INLINE_HEADER),
# as the test client takes it.
INLINE = {"HTTP_X_RL_INLINE": "1"}
FIELD = {name: re.compile(rf'name="{name}" value="([^"]*)"') for name in
         ("csrfmiddlewaretoken", "claim", "step", "shown", "nonce", "consent_sha256")}


def form_values(page: str, *names: str) -> dict[str, str]:
    """The values of the page's form fields ``names`` (the landing page's nonce and consent hash)."""
    return {name: html.unescape(FIELD[name].search(page).group(1)) for name in names}


# libpq's trace lines of frontend messages that wait for the server (simple query; extended
# protocol batches end with Sync). Format: "[timestamp] F <length> <Message> ...".
_WAITS = re.compile(r"^(?:\S+\s+)?F\s+\d+\s+(Query|Sync)\b", re.M)


class _Wire:
    """Counts libpq's round trips on Django's default connection while active (PostgreSQL)."""

    def __init__(self, connection):
        self.connection = connection
        self.file = tempfile.TemporaryFile(mode="w+")
        self.traced = None

    def _attach(self):
        raw = self.connection.connection
        if raw is not None and raw is not self.traced and hasattr(raw, "pgconn"):
            raw.pgconn.trace(self.file.fileno())
            from psycopg import pq

            raw.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            self.traced = raw

    def count(self) -> int:
        self.file.flush()
        self.file.seek(0)
        n = len(_WAITS.findall(self.file.read()))
        self.file.seek(0)
        self.file.truncate()
        return n


def walk_task(entry: str, *, inline: bool = False) -> dict[str, dict[str, list[int]]]:
    """Walk one task of the study at ``entry`` (``/w/s/<token>/``) as a new participant; returns
    ``{step: {"statements": [...], "round_trips": [...]}}`` (one value per request of that step)."""
    from django.db import close_old_connections, connection
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")
    counts: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"statements": [], "round_trips": []})
    wire = _Wire(connection)
    statements = [0]

    def counter(execute, sql, params, many, context):
        statements[0] += 1
        return execute(sql, params, many, context)

    def request(step: str, method: str, path: str, data: dict | None = None, headers: dict | None = None):
        close_old_connections()  # what request_started does in a server (health check, max age)
        connection.ensure_connection()
        wire._attach()
        wire.count()  # drop what came before
        statements[0] = 0
        with connection.execute_wrapper(counter):
            response = client.get(path) if method == "GET" else client.post(path, data, **(headers or {}))
            wire._attach()  # a connection opened during the request (none when persistent)
        close_old_connections()  # request_finished
        counts[step]["statements"].append(statements[0])
        counts[step]["round_trips"].append(wire.count())
        return response

    page = request("landing", "GET", entry).content.decode()
    token = FIELD["csrfmiddlewaretoken"].search(page).group(1)
    consent = {"consent": "yes", "csrfmiddlewaretoken": token, **form_values(page, "nonce", "consent_sha256")}
    if inline:  # the consent's reply is the first question
        response = request("claim", "POST", entry, consent, INLINE)
        assert response.status_code == 200, response.status_code
        task, page = response["Content-Location"], response.content.decode()
    else:
        response = request("claim", "POST", entry, consent)
        assert response.status_code == 302, response.status_code
        task = response["Location"]
        page = request("first_question", "GET", task).content.decode()
    while (claim := FIELD["claim"].search(page)) is not None:
        step = FIELD["step"].search(page).group(1)
        form = {"csrfmiddlewaretoken": token, "claim": claim.group(1), "step": step,
                "shown": html.unescape(FIELD["shown"].search(page).group(1)), "answer": "yes"}
        if inline:
            response = request(step, "POST", task + "answer", form, INLINE)
            assert response.status_code == 200, (step, response.status_code)
            page = response.content.decode()
        else:
            response = request(step, "POST", task + "answer", form)
            assert response.status_code == 302, (step, response.status_code)
            page = request("reveal" if step == "before" else "question", "GET", task).content.decode()
    response = request("finish", "POST", task + "submit", {"csrfmiddlewaretoken": token})
    assert response.status_code == 302, response.status_code
    request("done", "GET", task)
    return dict(counts)


def cpu_per_unit(entry: str, *, tasks: int = 20, inline: bool = False) -> dict:
    """Django's CPU per completed unit, in-process: ``tasks`` tasks walked as above with nothing
    counted (process CPU time, so other load on the machine slows it but is not in it; the
    database's own CPU is not in it either). Comparable between two versions of the code run
    one after the other on the same machine."""
    import time

    from django.db import close_old_connections
    from django.test import Client

    units = 0
    began = time.process_time()
    for _ in range(tasks):
        client = Client(HTTP_HOST="127.0.0.1")

        def request(method, path, data=None, headers=None, client=client):
            close_old_connections()
            response = client.get(path) if method == "GET" else client.post(path, data, **(headers or {}))
            close_old_connections()
            return response

        page = request("GET", entry).content.decode()
        token = FIELD["csrfmiddlewaretoken"].search(page).group(1)
        consent = {"consent": "yes", "csrfmiddlewaretoken": token, **form_values(page, "nonce", "consent_sha256")}
        if inline:
            response = request("POST", entry, consent, INLINE)
            task, page = response["Content-Location"], response.content.decode()
        else:
            task = request("POST", entry, consent)["Location"]
            page = request("GET", task).content.decode()
        while (claim := FIELD["claim"].search(page)) is not None:
            step = FIELD["step"].search(page).group(1)
            form = {"csrfmiddlewaretoken": token, "claim": claim.group(1), "step": step,
                    "shown": html.unescape(FIELD["shown"].search(page).group(1)), "answer": "yes"}
            units += step == "after"
            if inline:
                page = request("POST", task + "answer", form, INLINE).content.decode()
            else:
                request("POST", task + "answer", form)
                page = request("GET", task).content.decode()
        request("POST", task + "submit", {"csrfmiddlewaretoken": token})
    return {"tasks": tasks, "units": units, "django_cpu_ms_per_unit": round((time.process_time() - began) * 1000 / units, 2)}


def summary(counts: dict) -> dict[str, dict[str, int]]:
    """Per step: the most statements and round trips one request of it took."""
    return {step: {kind: max(values) for kind, values in c.items()} for step, c in counts.items()}


if __name__ == "__main__":  # DATABASE_URL=postgres://... python benchmarks/questionnaire/round_trips.py <entry> [--inline]
    import json
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    import django

    django.setup()
    print(json.dumps(summary(walk_task(sys.argv[1], inline="--inline" in sys.argv[2:])), indent=1))
