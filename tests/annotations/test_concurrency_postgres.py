"""Many workers claim at once on PostgreSQL: no unit over-filled, no worker sees a question twice.

Run with ``DATABASE_URL=postgres://postgres@127.0.0.1:5432/rl_questionnaire``; skipped on SQLite."""
from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from django.db import connection, connections, transaction
from django.test import Client

from annotations.models import Annotation, Assignment, Claim, ConsentReceipt, Unit
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.errors import NoWorkAvailable, StudyNotOpen
from annotations.tasks.assignments import close_decided_studies
from studies.models import Platform, Study
from tests.annotations.factories import ParticipantFactory, make_study
from tests.annotations.pages import entry_url, landing_form
from tests.annotations.platforms.mturk_stubs import published_as

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

N_WORKERS = 50
N_UNITS = 20
QUOTA = 5


@pytest.fixture(autouse=True)
def _needs_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


def _yes_then_no(claim, step: str) -> str:
    return "yes" if step == "before" else "no"


def _work(study, participant, barrier: threading.Barrier, errors: list, log: list, answer=_yes_then_no) -> None:
    """One simulated worker: start, answer everything (``answer(claim, step)``), submit, again until
    no work is left."""
    try:
        barrier.wait()
        while True:
            try:
                assignment = assignment_start(study=study, participant=participant)
            except (NoWorkAvailable, StudyNotOpen):  # no work left, or a study that stops early closed itself
                return
            claims = list(assignment.claims.select_related("unit__item").order_by("position"))
            log.append((participant.pk, [c.question_key for c in claims]))
            for claim in claims:
                annotation_submit(assignment=assignment, claim=claim, step="before", answer=answer(claim, "before"))
                annotation_submit(assignment=assignment, claim=claim, step="after", answer=answer(claim, "after"))
            assignment_submit(assignment=assignment)
    except Exception as error:  # noqa: BLE001 - reported by the test
        errors.append(repr(error))
    finally:
        connections.close_all()


def test_fifty_workers_fill_every_unit_exactly_to_quota():
    study = make_study(n_items=N_UNITS, n_sources=1, quota=QUOTA, units_per_task=2)
    workers = [ParticipantFactory() for _ in range(N_WORKERS)]
    barrier = threading.Barrier(N_WORKERS)
    errors: list = []
    log: list = []
    threads = [threading.Thread(target=_work, args=(study, w, barrier, errors, log)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert errors == []

    units = list(Unit.objects.filter(study=study))
    assert len(units) == N_UNITS
    for unit in units:
        live = Claim.objects.filter(unit=unit, released=False)
        assert unit.n_claimed == unit.n_completed == QUOTA
        assert live.count() == len(set(live.values_list("participant_id", flat=True))) == QUOTA
    seen = Counter(Claim.objects.filter(study=study).values_list("participant_id", "question_key"))
    assert max(seen.values()) == 1
    assert Annotation.objects.filter(claim__study=study).count() == N_UNITS * QUOTA * 2
    assert not Assignment.objects.filter(study=study, status=Assignment.Status.ACTIVE).exists()
    # Work was spread: many workers got some.
    assert len({pid for pid, keys in log if keys}) >= min(N_WORKERS, N_UNITS * QUOTA // 2) // 2


def test_simultaneous_starts_of_one_worker_give_one_assignment():
    study = make_study(n_items=10, n_sources=2, quota=5, units_per_task=3)
    worker = ParticipantFactory()
    barrier = threading.Barrier(8)
    results: list = []

    def start():
        try:
            barrier.wait()
            results.append(assignment_start(study=study, participant=worker).pk)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 8 and len(set(results)) == 1
    assert Claim.objects.filter(participant=worker, unit__isnull=False).count() == 3
    assert sum(Unit.objects.filter(study=study).values_list("n_claimed", flat=True)) == 3


class _RollBack(Exception):
    pass


@pytest.mark.parametrize("other_outcome", ["commits", "rolls back"])
def test_double_start_as_work_runs_out_gives_the_same_task_or_no_work(other_outcome):
    """Issue 10 item 14: the last unit is held by another worker's in-flight claim while this
    worker double-clicks "start". Before the fix the first click committed an empty task and went
    on retrying; the second click resumed that empty task, which then closed as returned, so the
    worker saw "You left this task". Now both clicks get the same task, or both "no work"."""
    study = make_study(n_items=1, n_sources=1, quota=1, units_per_task=1)
    other, worker = ParticipantFactory(), ParticipantFactory()
    holding, release = threading.Event(), threading.Event()
    results: list = []

    def other_claims():
        try:
            with transaction.atomic():
                assignment_start(study=study, participant=other)  # claims the last unit, not yet committed
                holding.set()
                release.wait(10)
                if other_outcome == "rolls back":
                    raise _RollBack
        except _RollBack:
            pass
        finally:
            connections.close_all()

    def click():
        try:
            results.append(assignment_start(study=study, participant=worker).pk)
        except NoWorkAvailable:
            results.append("no work")
        finally:
            connections.close_all()

    holder = threading.Thread(target=other_claims)
    holder.start()
    assert holding.wait(10)
    clicks = [threading.Thread(target=click) for _ in range(2)]
    clicks[0].start()
    time.sleep(0.2)  # the first click is retrying: the only eligible unit is locked
    clicks[1].start()
    time.sleep(0.2)
    release.set()
    for thread in [holder, *clicks]:
        thread.join(timeout=30)
    mine = Assignment.objects.filter(study=study, participant=worker)
    if other_outcome == "commits":
        assert results == ["no work", "no work"]
        assert not mine.exists()
    else:
        assert len(results) == 2 and results[0] == results[1] != "no work"
        assert mine.get().status == Assignment.Status.ACTIVE
        assert mine.get().claims.filter(unit__isnull=False).count() == 1
    assert not mine.filter(status=Assignment.Status.RETURNED).exists()


def _post_at_once(requests: list[tuple], barrier: threading.Barrier) -> list:
    """POST each (client, url, form) in its own thread, all released together; the responses."""
    responses: list = []

    def post(client, url, form):
        try:
            barrier.wait()
            responses.append(client.post(url, form))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=request) for request in requests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return responses


def test_one_consent_form_sent_four_times_at_once_gives_one_task():
    """Issue 20 item 1: the receipt, the participant and the task are written in one transaction;
    a copy of the form sent meanwhile waits for it and gets the same task (never "in progress
    elsewhere", never a second task)."""
    study = make_study(n_items=6, n_sources=1, units_per_task=2)
    url = entry_url(study)
    browser = Client()
    form = landing_form(browser, url)
    copies = []
    for _ in range(4):  # the same browser (its cookies), four connections
        copy = Client()
        copy.cookies = browser.cookies
        copies.append((copy, url, form))
    responses = _post_at_once(copies, threading.Barrier(4))
    assert [r.status_code for r in responses] == [302] * 4
    assert len({r["Location"] for r in responses}) == 1
    assert Assignment.objects.count() == 1 and ConsentReceipt.objects.get().assignment == Assignment.objects.get()


def test_one_platform_assignment_entered_from_two_browsers_at_once_gives_one_task(mturk):
    """Issue 20 item 2: one platform assignment, one local task, whatever the timing."""
    study = make_study(platform=Platform.MTURK, n_items=6, n_sources=1, units_per_task=2)
    published_as(mturk[1], study, "3HIT")
    url = entry_url(study, assignmentId="3RACEASG", hitId="3HIT", workerId="ARACER",
                    turkSubmitTo="https://workersandbox.mturk.com")
    browsers = [Client() for _ in range(3)]
    requests = [(b, url, landing_form(b, url)) for b in browsers]
    responses = _post_at_once(requests, threading.Barrier(3))
    assert [r.status_code for r in responses] == [302] * 3
    assert len({r["Location"] for r in responses}) == 1
    assert Assignment.objects.filter(platform_assignment_id="3RACEASG").count() == 1


def test_with_early_stopping_no_unit_collects_answers_after_it_is_decided_beyond_the_claims_held_then():
    """Issue 24: thirty workers at once on a study that stops early. Three right answers of five
    decide a yes/no unit; from then on only the claims already held (their tasks were started
    before the decision) may add answers, and the unit's quota is exactly its claims."""
    study = make_study(n_items=N_UNITS, n_sources=1, quota=QUOTA, units_per_task=2, stop_when_decided=True)
    workers = [ParticipantFactory() for _ in range(30)]
    barrier = threading.Barrier(len(workers))
    errors: list = []
    def gold(claim, step: str) -> str:  # every answer right, before and after
        return claim.unit.item.gold_answer

    threads = [threading.Thread(target=_work, args=(study, w, barrier, errors, [], gold)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert errors == []
    for unit in Unit.objects.filter(study=study):
        assert unit.decided_at is not None, unit
        live = Claim.objects.filter(unit=unit, released=False).select_related("assignment")
        assert unit.n_claimed == unit.n_completed == unit.quota == live.count(), unit
        assert 3 <= unit.quota <= QUOTA
        late = [c for c in live if c.assignment.created_at > unit.decided_at]
        assert late == [], f"{unit}: claimed after it was decided"
    saved = QUOTA * N_UNITS - sum(Unit.objects.filter(study=study).values_list("quota", flat=True))
    assert saved > 0
    # every unit decided: the app closes the study, on the deciding answer's commit or, where two
    # units were decided at once and neither saw the other's, at beat's next pass
    close_decided_studies()
    study.refresh_from_db()
    assert study.status == Study.Status.CLOSED
