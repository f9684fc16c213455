"""The database statements each step of the worker flow sends, pinned (issue 25): a change that
adds a query to a hot path fails here. The load benchmark reports the same counts on the wire
(``benchmarks/questionnaire/round_trips.py``, with psycopg's BEGIN and the COMMITs)."""
from __future__ import annotations

import html

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from annotations.models import Assignment
from tests.annotations.factories import make_study
from tests.annotations.pages import FIELD, entry_url

# The most statements one request of each step may send, BEGIN and COMMIT included (Django logs
# them with the queries): on PostgreSQL each is one round trip, and there is no health-check query
# (CONN_HEALTH_CHECKS is off: lab.dbretry). The same on SQLite.
MOST = {
    "landing": 2,  # the study and its attention checks (the design's question count is kept per process)
    "claim": 28,  # once per task: receipt, participant, checks (blocks and withdrawals), the claim itself
    #              (its savepoint: a caller inside a transaction may catch "no work" and go on; the
    #              index reads of the least-filled level), two transactions
    "first_question": 4,  # + the qualification test check, before the first answer only
    "before": 7,  # claim+assignment+study, BEGIN, row lock, the task's claims with their first answers
    #              (which steps are stored), deadline (first answer only), insert, COMMIT
    "reveal": 3,  # assignment+study, claims with their first answers, the shown claim's content
    "after": 7,  # claim+assignment+study, BEGIN, row lock, the task's claims, insert, completed, COMMIT
    "question": 3,
    "finish": 10,  # assignment, BEGIN, lock, claims, status, the claims that count now (held work does
    #               not), unit lock, unit counters, COMMIT, participant
    "done": 2,
}


# A consent and answers sent by the pages' script (header X-RL-Inline: 1) are replied to with the
# next page: the first question's, the reveal's and the next question's reads join the consent's
# and the answer's request. The task's own row is read once for both, and so are the task's claims
# (under the row lock, for the answer's checks and the next page alike).
MOST_INLINE = {**{k: v for k, v in MOST.items() if k not in ("first_question", "reveal", "question")},
               "claim": MOST["claim"] + MOST["first_question"] - 1,
               "before": MOST["before"] + MOST["reveal"] - 2, "after": MOST["after"] + MOST["question"] - 2}


def _walk(client: Client, url: str, *, inline: bool = False) -> dict[str, list[int]]:
    counts: dict[str, list[int]] = {}

    def request(step, method, path, data=None, **headers):
        with CaptureQueriesContext(connection) as captured:
            response = client.get(path) if method == "GET" else client.post(path, data, **headers)
        counts.setdefault(step, []).append(len(captured))
        return response

    request("landing", "GET", url)  # the first landing of a study reads its design: not counted
    counts.clear()
    page = request("landing", "GET", url).content.decode()
    # The consent form as the page fills it: its nonce and the hash of the consent text it shows.
    consent = {"consent": "yes", **{name: html.unescape(FIELD[name].search(page).group(1))
                                    for name in ("nonce", "consent_sha256")}}
    if inline:
        response = request("claim", "POST", url, consent, HTTP_X_RL_INLINE="1")
        assert response.status_code == 200
        task, page = response["Content-Location"], response.content.decode()
    else:
        response = request("claim", "POST", url, consent)
        assert response.status_code == 302
        task = response["Location"]
        page = request("first_question", "GET", task).content.decode()
    while (claim := FIELD["claim"].search(page)) is not None:
        step = FIELD["step"].search(page).group(1)
        form = {"claim": claim.group(1), "step": step, "shown": html.unescape(FIELD["shown"].search(page).group(1)),
                "answer": "yes"}
        if inline:
            response = request(step, "POST", task + "answer", form, HTTP_X_RL_INLINE="1")
            assert response.status_code == 200
            page = response.content.decode()
        else:
            assert request(step, "POST", task + "answer", form).status_code == 302
            page = request("reveal" if step == "before" else "question", "GET", task).content.decode()
    assert request("finish", "POST", task + "submit").status_code == 302
    assert request("done", "GET", task).status_code == 200
    return counts


@pytest.mark.django_db
def test_each_step_sends_at_most_its_statements():
    study = make_study(n_items=6, n_sources=2, units_per_task=4)
    counts = _walk(Client(), entry_url(study))
    assert Assignment.objects.get().status == Assignment.Status.SUBMITTED
    assert set(counts) == set(MOST)
    over = {step: max(values) for step, values in counts.items() if max(values) > MOST[step]}
    assert not over, f"more statements than pinned: {over} (counts {counts})"
    # every question step of the task was seen (4 units: 4 before, 4 after, 3 reveals + 4 next pages)
    assert len(counts["before"]) == len(counts["after"]) == 4


@pytest.mark.django_db
def test_an_answer_that_brings_the_next_page_sends_at_most_its_statements():
    study = make_study(n_items=6, n_sources=2, units_per_task=4)
    counts = _walk(Client(), entry_url(study), inline=True)
    assert Assignment.objects.get().status == Assignment.Status.SUBMITTED
    assert set(counts) == set(MOST_INLINE)
    over = {step: max(values) for step, values in counts.items() if max(values) > MOST_INLINE[step]}
    assert not over, f"more statements than pinned: {over} (counts {counts})"
    assert len(counts["before"]) == len(counts["after"]) == 4
