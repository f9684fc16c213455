"""The reads of Prolific made at the anonymous entry are bounded (``annotations.services.impostor``).

Anyone may enter with a worker's Prolific id and a new invented SESSION_ID each time while a task
of that id is in progress: each entry is a conflict, and each conflict would ask Prolific with the
researcher's token. A definite answer is remembered (``VERDICT_SECONDS``) and the reads are counted
per participant and study (``CHECKS_MAX`` in ``CHECKS_WINDOW_SECONDS``); beyond them nothing is
asked, nothing is vouched for and the entry keeps its refusal. Through the pages, with the local
fake Prolific server."""
from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client

from annotations.models import Assignment
from annotations.platforms import use_platform
from annotations.platforms.prolific import ProlificPlatform
from annotations.services.impostor import CHECKS_MAX
from tests.annotations.test_services_impostor import (
    PID,
    asked,
    assert_ended,
    assert_refused,
    hex24,
    impostor_task,
    published,  # noqa: F401 (a fixture)
    start,
    url,
)


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


def test_beyond_the_limit_the_real_worker_is_refused_without_asking_and_nothing_ends(published):  # noqa: F811
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
