"""A worker is told both deadlines of a task (``worker_pages.time_allowed``, ``task_deadline``):
the landing and consent pages say how long they will have once they agree, and every task page
says by when (in UTC, inside ``<time datetime>``) the task must get its first answer, before it,
or be finished, after it. Before, no page said so, and a worker who read a question for longer
than the first-answer window, or finished after the full duration, lost the task unpaid."""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from annotations.models import Assignment
from annotations.services.assignment import assignment_start
from annotations.services.deadlines import assignment_duration, first_answer_window
from tests.annotations.factories import ParticipantFactory, add_qualification, make_study
from tests.annotations.pages import EVIL, EVIL_ESCAPED, entry_url, form_fields, start
from tests.clock import clock_installed

pytestmark = pytest.mark.django_db
DEADLINE = re.compile(r'<p class="box deadline" id="deadline">(.*?)</p>', re.S)
TIME = re.compile(r'<time datetime="([^"]+)" data-left="(\d+)">([^<]+)</time>')
FIRST = "Please give your first answer by"
FINISH = "Please finish this task by"


@pytest.fixture
def clock(monkeypatch):
    return clock_installed(monkeypatch, timezone.now().replace(hour=12, minute=0, second=30, microsecond=0))


def _study(**fields):
    study = make_study(n_items=2, n_sources=1, quota=1, units_per_task=2, estimated_minutes_per_task=6, **fields)
    assert (first_answer_window(study), assignment_duration(study)) == (timedelta(minutes=10), timedelta(minutes=30))
    return study


def _deadline(page: str) -> tuple[str, datetime, str]:
    """The page's deadline sentence, the instant of its ``<time datetime>`` and the time it shows."""
    sentence = DEADLINE.search(page)
    assert sentence is not None, page[:2000]
    when = TIME.search(sentence.group(1))
    assert when is not None, sentence.group(1)
    return sentence.group(1), datetime.fromisoformat(when.group(1)), when.group(3)


def _assert_tells(page: str, assignment: Assignment, wording: str) -> None:
    """The page tells ``wording`` and the task's deadline as stored (to the second, in UTC)."""
    assignment.refresh_from_db()
    sentence, at, shown = _deadline(page)
    assert sentence.startswith(wording), sentence
    assert at == assignment.expires_at.replace(microsecond=0) and at.tzinfo is not None
    assert shown.partition(" on ")[0] == assignment.expires_at.astimezone(UTC).strftime("%H:%M UTC")


def test_the_landing_page_says_how_long_the_worker_will_have(client):
    page = client.get(entry_url(_study(name=EVIL))).content.decode()

    assert ("After you agree you have 10 minutes to give your first answer and 30 minutes in all to finish."
            in page)
    assert EVIL not in page and EVIL_ESCAPED[0] in page  # the page is escaped as before


def test_the_consent_page_of_a_task_made_earlier_says_what_is_left_of_its_time(client, clock):
    study = _study()
    assignment = assignment_start(study=study, participant=ParticipantFactory())
    clock.advance(9)  # reading its instructions: the full duration runs from the task's start

    page = client.get(f"/w/a/{assignment.token}/").content.decode()

    assert "After you agree you have 10 minutes to give your first answer and 21 minutes in all to finish." in page


def test_before_the_first_answer_the_step_page_gives_the_first_answer_deadline(client, clock):
    study = _study()
    task = start(client, entry_url(study))
    assignment = Assignment.objects.get()
    assert assignment.expires_at == clock.now + timedelta(minutes=10)

    page = client.get(task).content.decode()

    _assert_tells(page, assignment, FIRST)
    assert "12:10 UTC" in page and "Otherwise the task goes back to the pool" in page
    assert 'data-left="600"' in page  # the seconds left when the page was made, for the page's script


def test_after_the_first_answer_the_step_page_gives_the_finish_deadline(client, clock):
    study = _study()
    task = start(client, entry_url(study))
    assignment = Assignment.objects.get()
    clock.advance(4)
    fields = form_fields(client.get(task).content.decode())
    assert client.post(task + "answer", {**fields, "answer": "yes"}).status_code == 302

    page = client.get(task).content.decode()

    _assert_tells(page, assignment, FINISH)
    assert assignment.expires_at == assignment.created_at + timedelta(minutes=30)
    assert "12:30 UTC" in page and FIRST not in page


def test_the_page_an_inline_first_answer_brings_gives_the_new_deadline(client, clock):
    """The next page sent with the answer (the page's script) tells the deadline the answer moved,
    not the one read before it."""
    study = _study()
    task = start(client, entry_url(study))
    assignment = Assignment.objects.get()
    fields = form_fields(client.get(task).content.decode())

    response = client.post(task + "answer", {**fields, "answer": "yes"}, HTTP_X_RL_INLINE="1")

    assert response.status_code == 200 and 'id="rationale"' in response.content.decode()
    _assert_tells(response.content.decode(), assignment, FINISH)


def test_the_finish_page_gives_the_finish_deadline(client):
    study = _study()
    task = start(client, entry_url(study))
    for _ in range(4):
        fields = form_fields(client.get(task).content.decode())
        assert client.post(task + "answer", {**fields, "answer": "yes"}).status_code == 302

    page = client.get(task).content.decode()

    assert 'id="finish"' in page
    _assert_tells(page, Assignment.objects.get(), FINISH)


def test_a_task_whose_test_was_passed_is_told_to_finish_not_to_give_a_first_answer(client):
    """Passing the qualification test moves the deadline to the full duration: a worker with no
    answer yet must then finish by it, and is not told that an answer would give more time."""
    study = _study()
    test = add_qualification(study, pass_mark=2)
    task = start(client, entry_url(study))
    assignment = Assignment.objects.get()
    page = client.get(task).content.decode()
    _assert_tells(page, assignment, "Please send the test by")
    ids = [q.pk for q in test.questions.all()]
    assert client.post(task + "qualification", {f"q_{ids[0]}": "yes", f"q_{ids[1]}": "no",
                                                 f"q_{ids[2]}": "yes"}).status_code == 302

    page = client.get(task).content.decode()

    assert 'name="step" value="before"' in page
    _assert_tells(page, assignment, FINISH)


def test_a_deadline_after_midnight_utc_names_its_day(client, clock):
    clock.now = clock.now.replace(hour=23, minute=55)
    study = _study()
    task = start(client, entry_url(study))
    assignment = Assignment.objects.get()

    page = client.get(task).content.decode()

    _assert_tells(page, assignment, FIRST)
    day = assignment.expires_at.astimezone(UTC)
    assert f"00:05 UTC on {day.day} {day:%B}</time>" in page


def test_pages_without_a_deadline_say_none(client):
    study = _study()
    task = start(client, entry_url(study))
    client.post(task + "leave")

    page = client.get(task).content.decode()

    assert "You left this task" in page
    assert DEADLINE.search(page) is None and TIME.search(page) is None


def test_equal_windows_are_one_deadline_and_the_page_promises_no_more_time(client, settings):
    """The task's deadline is read before its row is inserted, so with both windows equal its
    first-answer deadline is a few milliseconds short of the full one: the page said "after your
    first answer you have more time to finish" for a move of milliseconds. The real clock, not a
    frozen one, as a worker meets it."""
    settings.RL_ASSIGNMENT_MINUTES = 30
    settings.RL_FIRST_ANSWER_MINUTES = 30
    study = make_study(n_items=2, n_sources=1, quota=1, units_per_task=2)
    task = start(client, entry_url(study))
    sentence, _, _ = _deadline(client.get(task).content.decode())
    assert FINISH in sentence and FIRST not in sentence and "more time" not in sentence
