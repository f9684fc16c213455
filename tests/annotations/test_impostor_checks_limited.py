"""The reads of Prolific made at the anonymous entry are bounded (``annotations.services.impostor``).

Anyone may enter with a worker's Prolific id and a new invented SESSION_ID each time while a task
of that id is in progress: each entry is a conflict, and each conflict would ask Prolific with the
researcher's token. A definite answer is remembered (``VERDICT_SECONDS``) and the reads are counted
per participant, study and client address (``CHECKS_MAX`` in ``CHECKS_WINDOW_SECONDS``, the address
as ``lab.clientip.client_ip`` computes it); beyond them nothing is asked from that address, nothing is
vouched for and its entry keeps its refusal. One client never spends another's reads: an impostor
who spends every window's reads from their address does not keep the real worker, from theirs, from
being checked, nor their task or a test they failed on purpose from ending. A caller with no address
(a script) has a budget of its own (``NO_CLIENT``). Through the pages, with the local fake Prolific
server, and the services where the pages cannot say which address asked."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client

from annotations.models import Assignment, QualificationGrant
from annotations.platforms import use_platform
from annotations.platforms.prolific import ProlificPlatform
from annotations.services import impostor as impostor_service
from annotations.services.impostor import CHECKS_MAX, impostor_grant_void, impostor_task_end
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from tests.annotations.factories import add_qualification, make_study
from tests.annotations.pages import landing_form
from tests.annotations.test_services_impostor import (
    PID,
    asked,
    assert_ended,
    assert_refused,
    failed_test,
    hex24,
    impostor_task,
    published,  # noqa: F401 (a fixture)
    start,
    url,
)
from tests.clock import clock_installed

ATTACKER, WORKER = "198.51.100.7", "203.0.113.9"  # two client addresses (documentation ranges)


@pytest.fixture(autouse=True)
def _no_remembered_checks():
    """The remembered answers and the count of reads live in the cache, which outlives a test (each
    study's keys are its own: ``impostor._study_key``; cleared all the same, for the counts)."""
    cache.clear()
    yield
    cache.clear()


def test_entries_with_a_new_invented_session_each_ask_prolific_at_most_the_limit(published):  # noqa: F811
    study, study_id, server = published
    _impostor, _task, task = impostor_task(study, study_id)

    for _ in range(25):
        assert_refused(Client().get(url(study, study_id, hex24())))

    assert len(asked(server)) == CHECKS_MAX
    task.refresh_from_db()
    assert task.status == Assignment.Status.ACTIVE and not task.ended_as_impostor


def test_beyond_the_limit_the_real_worker_from_the_same_address_is_refused_without_asking(published):  # noqa: F811
    """One address is still bounded: the real worker behind the impostor's address (the test
    client's, 127.0.0.1) shares its spent budget."""
    study, study_id, server = published
    _impostor, _task, task = impostor_task(study, study_id)
    for _ in range(CHECKS_MAX):
        assert_refused(Client().get(url(study, study_id, hex24())))
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]

    assert_refused(Client().get(url(study, study_id, real)))

    assert real not in asked(server)
    task.refresh_from_db()
    assert task.status == Assignment.Status.ACTIVE and not task.ended_as_impostor


def test_a_worker_reloading_the_refusal_asks_prolific_once_about_each_session(published):  # noqa: F811
    """They returned the study on Prolific and took it again: the task in progress is theirs, and
    every reload of the refusal gives Prolific's remembered answers again."""
    study, study_id, server = published
    first = server.add_submission(study_id, participant_id=PID, status="RETURNED")["id"]
    second = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    start(Client(), url(study, study_id, first))

    for _ in range(2 * CHECKS_MAX):
        assert_refused(Client().get(url(study, study_id, second)))

    assert asked(server) == [second, first]


def test_the_real_worker_after_a_few_invented_sessions_still_ends_the_impostors_task(published):  # noqa: F811
    study, study_id, server = published
    _impostor, _task, task = impostor_task(study, study_id)
    for _ in range(CHECKS_MAX - 2):
        assert_refused(Client().get(url(study, study_id, hex24())))
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]

    assert Client().get(url(study, study_id, real)).status_code == 200

    assert asked(server)[-2:] == [real, task.platform_assignment_id]
    assert_ended(task)


def test_no_answer_is_not_remembered_and_the_next_entry_asks_again(published):  # noqa: F811
    study, study_id, server = published
    _impostor, _task, task = impostor_task(study, study_id)
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    with use_platform("prolific", ProlificPlatform(base_url="http://127.0.0.1:9/api/v1/")):  # nothing listens
        assert_refused(Client().get(url(study, study_id, real)))

    assert Client().get(url(study, study_id, real)).status_code == 200

    assert asked(server) == [real, task.platform_assignment_id]
    assert_ended(task)


# --- one client never spends another's reads ---------------------------------------------------

@pytest.fixture
def published_larger(prolific, db):
    """``published``, with work for three tasks of one participant (a participant is not given the
    units of their ended tasks again)."""
    _platform, server = prolific
    study = make_study(platform="prolific", n_items=8, n_sources=1, units_per_task=2, status="draft", reward=2)
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    study.refresh_from_db()
    return study, publication.prolific_study_id, server


def test_an_impostor_spending_every_window_from_one_address_leaves_the_real_workers_reads_their_own(
        published_larger, monkeypatch):
    """The review's probe: in each of three windows the impostor starts a task with an invented
    session and spends the window's reads with invented sessions first, from their address; the
    real worker, from theirs, is asked about every time and the impostor's task ends."""
    study, study_id, server = published_larger
    # long enough that one window's requests fit in it on a loaded machine (with 1 s they spilled into
    # the next window under load and were asked about again)
    monkeypatch.setattr(impostor_service, "CHECKS_WINDOW_SECONDS", 4)
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    attacker, worker = Client(REMOTE_ADDR=ATTACKER), Client(REMOTE_ADDR=WORKER)

    for window in range(3):
        if window:
            time.sleep(4.1)  # the next window
        fake = hex24()
        start(attacker, url(study, study_id, fake))
        task = Assignment.objects.get(platform_assignment_id=fake)
        for _ in range(CHECKS_MAX + 1):  # the last one is beyond the address's limit: not asked
            assert_refused(Client(REMOTE_ADDR=ATTACKER).get(url(study, study_id, hex24())))
        before = len(asked(server))

        assert worker.get(url(study, study_id, real)).status_code == 200

        # asked about the impostor's session (and, in the first window, the worker's own, then remembered)
        assert asked(server)[before:] == ([real] if window == 0 else []) + [fake]
        assert_ended(task)
    assert len(asked(server)) == 3 * (CHECKS_MAX + 1) + 1  # the attacker's address: CHECKS_MAX a window


def test_a_forged_forwarded_for_header_does_not_give_one_address_more_reads(published):  # noqa: F811
    """With no trusted proxy (``RL_TRUSTED_PROXIES`` = 0) the address is the connection's: an
    impostor sending a new X-Forwarded-For each time still has one budget."""
    study, study_id, server = published
    impostor_task(study, study_id)

    for n in range(3 * CHECKS_MAX):
        assert_refused(Client(REMOTE_ADDR=ATTACKER, HTTP_X_FORWARDED_FOR=f"192.0.2.{n}").get(
            url(study, study_id, hex24())))

    assert len(asked(server)) == CHECKS_MAX


def test_addresses_of_one_ipv6_network_share_one_budget(published):  # noqa: F811
    """One host holds a whole IPv6 /64: its addresses are counted as one network."""
    study, study_id, server = published
    impostor_task(study, study_id)

    for n in range(1, 3 * CHECKS_MAX):
        assert_refused(Client(REMOTE_ADDR=f"2001:db8:1:2::{n:x}").get(url(study, study_id, hex24())))

    assert len(asked(server)) == CHECKS_MAX


def test_an_impostors_several_networks_do_not_spend_the_real_workers_reads(published):  # noqa: F811
    """No ceiling across networks: five of the impostor's addresses spending their reads leave the
    real worker's entry, from their own, checked, and the impostor's task ends."""
    study, study_id, server = published
    _impostor, _task, task = impostor_task(study, study_id)
    for n in range(5):
        for _ in range(CHECKS_MAX + 1):
            assert_refused(Client(REMOTE_ADDR=f"198.51.100.{n + 1}").get(url(study, study_id, hex24())))
    assert len(asked(server)) == 5 * CHECKS_MAX
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]

    assert Client(REMOTE_ADDR=WORKER).get(url(study, study_id, real)).status_code == 200

    assert asked(server)[-2:] == [real, task.platform_assignment_id]
    assert_ended(task)


def test_behind_a_trusted_proxy_each_forwarded_address_has_its_own_reads(published, settings):  # noqa: F811
    study, study_id, server = published
    settings.RL_TRUSTED_PROXIES = 1
    _impostor, _task, task = impostor_task(study, study_id)
    proxy = "10.0.0.2"  # every request's connection comes from the proxy
    for _ in range(CHECKS_MAX):
        assert_refused(Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=ATTACKER).get(url(study, study_id, hex24())))
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]

    assert Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=WORKER).get(url(study, study_id, real)).status_code == 200

    assert asked(server)[-2:] == [real, task.platform_assignment_id]
    assert_ended(task)


def test_a_test_failed_on_purpose_is_voided_for_the_real_worker_after_the_impostor_spent_their_reads(
        published):  # noqa: F811
    """The qualification test's check spends the same budget, per address: the impostor's reads
    from one address bound that address alone (``impostor_grant_void``, as the consent calls it)."""
    study, study_id, server = published
    task = failed_test(study, study_id, add_qualification(study), hex24())
    participant = task.participant
    for _ in range(CHECKS_MAX):
        assert not impostor_grant_void(study=study, participant=participant, platform_assignment_id=hex24(),
                                       client=ATTACKER)
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    assert not impostor_grant_void(study=study, participant=participant, platform_assignment_id=real,
                                   client=ATTACKER)
    assert real not in asked(server)  # that address is bounded

    assert impostor_grant_void(study=study, participant=participant, platform_assignment_id=real, client=WORKER)

    assert asked(server)[-2:] == [real, task.platform_assignment_id]
    assert not QualificationGrant.objects.filter(study=study).exists()
    task.refresh_from_db()
    assert (task.status, task.ended_as_impostor) == (Assignment.Status.RETURNED, True)


def test_a_caller_with_no_client_address_has_a_budget_of_its_own(published):  # noqa: F811
    study, study_id, server = published
    _impostor, _task, task = impostor_task(study, study_id)
    for _ in range(CHECKS_MAX):
        assert_refused(Client().get(url(study, study_id, hex24())))
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]

    assert impostor_task_end(study=study, participant=task.participant, task=task, platform_assignment_id=real)

    assert asked(server)[-2:] == [real, task.platform_assignment_id]
    assert_ended(task)


# --- the log says how the task ended ----------------------------------------------------------

def test_a_task_ended_expired_at_the_entry_is_logged_as_expired_not_as_an_impostors(
        published, monkeypatch, caplog):  # noqa: F811
    study, study_id, server = published
    _impostor, _task, task = impostor_task(study, study_id)
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    clock = clock_installed(monkeypatch)
    clock.now = task.expires_at + timedelta(seconds=1)

    assert impostor_task_end(study=study, participant=task.participant, task=task, platform_assignment_id=real)

    task.refresh_from_db()
    assert (task.status, task.ended_as_impostor) == (Assignment.Status.EXPIRED, False)
    warning = [r.getMessage() for r in caplog.records if r.name == "annotations.services.impostor"]
    assert warning == [f"study {study.pk}: task {task.pk} ended expired at its participant's entry: its deadline "
                       "had passed when Prolific denied the session it was started with, so it is not marked as "
                       "an impostor's"]


def test_a_task_ended_as_an_impostors_is_logged_so(published, caplog):  # noqa: F811
    study, study_id, server = published
    _impostor, _task, task = impostor_task(study, study_id)
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]

    assert Client(REMOTE_ADDR=WORKER).get(url(study, study_id, real)).status_code == 200

    assert_ended(task)
    warning = [r.getMessage() for r in caplog.records if r.name == "annotations.services.impostor"]
    assert warning == [f"study {study.pk}: task {task.pk} ended at its participant's entry: Prolific denied the "
                       "session it was started with and confirmed the one the participant came with"]


def test_a_test_failed_on_purpose_is_voided_for_the_real_worker_consenting_from_another_address(published):  # noqa: F811
    """The consent form's path (``entry.consent_take``) spends the reads of the form's address too:
    consents with invented sessions from the impostor's address do not keep the real worker's
    consent, from theirs, from voiding the test failed on purpose under their id."""
    study, study_id, server = published
    task = failed_test(study, study_id, add_qualification(study), hex24())
    for _ in range(CHECKS_MAX + 1):
        attacker = Client(REMOTE_ADDR=ATTACKER)
        fake = url(study, study_id, hex24())
        assert attacker.post(fake, landing_form(attacker, fake)).status_code == 403
    assert len(asked(server)) == CHECKS_MAX
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    worker = Client(REMOTE_ADDR=WORKER)
    response = worker.post(url(study, study_id, real), landing_form(worker, url(study, study_id, real)))
    assert response.status_code == 302
    assert asked(server)[-2:] == [real, task.platform_assignment_id]

