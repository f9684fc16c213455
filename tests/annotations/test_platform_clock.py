"""A platform task's clock, and the app's, start when the worker accepted it there (the landing
page's time, signed in its nonce: ``views.entry._nonce``; ``deadlines.task_clock_start``), not at
the consent. Before, the app counted from the consent while MTurk and Prolific count from the
accept (and allow ``PLATFORM_HANDOFF_SECONDS`` more): a worker who read the landing page for 20
minutes of a 30-minute task and submitted at minute 49 was told "submitted" by the app 14 minutes
after the platform had expired the assignment, unpaid. Plain, open and single-person links keep
the app's own clock, from the consent. Through the pages, with the project's clock."""
from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from annotations.models import Assignment, ConsentReceipt
from annotations.services.deadlines import assignment_duration, first_answer_window, platform_time_run_out
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import PLATFORM_HANDOFF_SECONDS, study_publish
from annotations.services.release import assignment_expire_stale
from studies.models import Platform
from tests.annotations.factories import make_study
from tests.annotations.pages import FIELD, answer, complete_task, entry_url, landing_form
from tests.annotations.platforms.mturk_stubs import published_as
from tests.clock import clock_installed

pytestmark = pytest.mark.django_db

MTURK = {"assignmentId": "3ASSIGN1", "hitId": "3HIT", "workerId": "AWORKER1",
         "turkSubmitTo": "https://workersandbox.mturk.com"}
PROLIFIC = {"PROLIFIC_PID": "5a9d64f5f6dfdd0001eaa73d", "SESSION_ID": "5b0d64f5f6dfdd0001eaa73e"}
TASK = {"n_items": 6, "n_sources": 1, "units_per_task": 2, "estimated_minutes_per_task": 6}  # 30 and 10 minutes


@pytest.fixture
def clock(monkeypatch):
    return clock_installed(monkeypatch, timezone.now().replace(hour=12, minute=0, second=30, microsecond=0))


@pytest.fixture(params=["mturk", "prolific"])
def platform_url(request, clock):
    """An open study on a platform with 30-minute tasks (10 for the first answer), and the URL a
    worker arrives by from it."""
    if request.param == "mturk":
        study = make_study(platform=Platform.MTURK, **TASK)
        published_as(request.getfixturevalue("mturk")[1], study, MTURK["hitId"])
        url = entry_url(study, **MTURK)
    else:
        request.getfixturevalue("prolific")
        study = make_study(platform=Platform.PROLIFIC, status="draft", reward=2, **TASK)
        publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
        study.refresh_from_db()
        url = entry_url(study, STUDY_ID=publication.prolific_study_id, **PROLIFIC)
    assert (first_answer_window(study), assignment_duration(study)) == (timedelta(minutes=10), timedelta(minutes=30))
    return url


def test_the_probe_a_late_consent_keeps_the_platforms_deadline_and_a_late_submit_is_refused(platform_url, clock):
    client = Client()
    landed = clock.now
    form = landing_form(client, platform_url)
    clock.advance(20)  # reading the landing page, the platform's clock running
    response = client.post(platform_url, form)
    assert response.status_code == 302
    task = Assignment.objects.get()
    assert task.created_at == landed and task.consented_at == clock.now
    assert task.expires_at == landed + timedelta(minutes=30)  # not the consent's 10 minutes past the 30
    clock.advance(1)
    complete_task(client, response["Location"])
    task.refresh_from_db()
    assert task.expires_at == landed + timedelta(minutes=30)  # the full duration, from the landing

    clock.advance(28)  # minute 49: the platform expired the assignment at minute 35
    client.post(response["Location"] + "submit")

    task.refresh_from_db()
    assert task.status != Assignment.Status.SUBMITTED


def test_the_first_answer_window_counts_from_the_consent_never_past_the_platforms_time(platform_url, clock):
    client = Client()
    landed = clock.now
    form = landing_form(client, platform_url)
    clock.advance(5)
    task_url = client.post(platform_url, form)["Location"]
    task = Assignment.objects.get()
    assert task.expires_at == clock.now + timedelta(minutes=10)  # the window from the consent, within the 30
    clock.advance(4)
    assert answer(client, task_url)[1].status_code == 302
    task.refresh_from_db()
    assert task.expires_at == landed + timedelta(minutes=30)


def test_a_consent_from_a_page_older_than_the_platforms_time_is_refused_and_starts_nothing(platform_url, clock):
    client = Client()
    form = landing_form(client, platform_url)
    clock.advance(minutes=30, seconds=PLATFORM_HANDOFF_SECONDS + 1)  # past the platform's own limit

    response = client.post(platform_url, form)

    page = response.content.decode()
    assert response.status_code == 403
    assert "Your time for this task has run out" in page and "Please return the task on" in page
    assert not Assignment.objects.exists() and not ConsentReceipt.objects.exists()


def test_a_consent_from_a_page_past_the_tasks_time_is_refused_too(platform_url, clock):
    """Past the task's 30 minutes, before the platform's handoff margin: a task started now would
    have no time left."""
    client = Client()
    form = landing_form(client, platform_url)
    clock.advance(minutes=30)

    response = client.post(platform_url, form)

    assert response.status_code == 403 and not Assignment.objects.exists()


def test_a_consent_with_less_than_a_tasks_estimate_left_is_refused(platform_url, clock):
    """With 5 of the 30 minutes left and an estimate of 6, a task started now would hold its units
    until it expired, its worker unable to finish in time (a review's probe: consented at 29:55, a
    task expiring 5 s later). With the estimate left it starts."""
    late = Client()
    form = landing_form(late, platform_url)
    clock.advance(minutes=25)
    refused = late.post(platform_url, form)
    assert refused.status_code == 403 and not Assignment.objects.exists()
    assert "too little of it is left" in refused.content.decode()

    in_time = Client()  # the same worker, landing again: 7 minutes left at the consent
    form = landing_form(in_time, platform_url)
    clock.advance(minutes=23)
    assert in_time.post(platform_url, form).status_code == 302


def _first_task_ended(client: Client, url: str, clock, ending: str) -> Assignment:
    """Land and consent at minute 0 and answer nothing; the task then ends: expired by the beat at
    minute 11 (the 10-minute first-answer window over), or returned by the worker at minute 1."""
    task_url = client.post(url, landing_form(client, url))["Location"]
    if ending == "expired":
        clock.advance(11)
        assert assignment_expire_stale(now=clock.now) == 1
    else:
        clock.advance(1)
        assert client.post(task_url + "leave").status_code == 302
    first = Assignment.objects.get()
    assert first.status == (Assignment.Status.EXPIRED if ending == "expired" else Assignment.Status.RETURNED)
    return first


@pytest.mark.parametrize("ending", ["expired", "returned"])
def test_a_reentry_of_the_same_platform_assignment_counts_from_its_first_task(platform_url, clock, ending):
    """The audit's probe: a worker whose first task of a platform assignment expired (or was
    returned) reloads the same URL at minute 25 and consents. The platform's clock did not restart:
    with 5 of its 30 minutes left and an estimate of 6, the consent is refused, as a landing at 0
    would be, and no task is started (before, the new task counted from minute 25, and a submit at
    minute 45 was taken, 10 minutes past the platform's limit)."""
    client = Client()
    landed = clock.now
    first = _first_task_ended(client, platform_url, clock, ending)
    assert first.created_at == landed
    clock.now = landed + timedelta(minutes=25)

    response = client.post(platform_url, landing_form(client, platform_url))

    assert response.status_code == 403 and "too little of it is left" in response.content.decode()
    assert list(Assignment.objects.values_list("pk", flat=True)) == [first.pk]


@pytest.mark.parametrize("ending", ["expired", "returned"])
def test_a_reentry_in_time_keeps_the_first_tasks_deadline(platform_url, clock, ending):
    """Re-entering at minute 15 starts a task, whose clock is the first task's: it must be done by
    minute 30 (the platform's), not 30 minutes after the re-entry."""
    client = Client()
    landed = clock.now
    first = _first_task_ended(client, platform_url, clock, ending)
    clock.now = landed + timedelta(minutes=15)

    response = client.post(platform_url, landing_form(client, platform_url))

    assert response.status_code == 302
    task = Assignment.objects.exclude(pk=first.pk).get()
    assert task.created_at == landed
    assert task.expires_at == landed + timedelta(minutes=25)  # the first-answer window from the consent
    clock.advance(1)
    complete_task(client, response["Location"])
    task.refresh_from_db()
    assert task.expires_at == landed + timedelta(minutes=30)  # the platform's time, from the first landing
    clock.now = landed + timedelta(minutes=45)
    client.post(response["Location"] + "submit")
    task.refresh_from_db()
    assert task.status != Assignment.Status.SUBMITTED


def test_the_landing_page_shown_again_keeps_its_first_time(platform_url, clock):
    client = Client()
    landed = clock.now
    form = landing_form(client, platform_url)
    clock.advance(5)
    again = client.post(platform_url, {**form, "consent": ""})  # the box not ticked: the page again
    assert again.status_code == 400
    clock.advance(5)
    form = {**form, "nonce": html.unescape(FIELD["nonce"].search(again.content.decode()).group(1))}

    assert client.post(platform_url, form).status_code == 302

    assert Assignment.objects.get().created_at == landed


def test_the_landing_page_says_the_time_counts_from_the_accept(platform_url, clock):
    page = Client().get(platform_url).content.decode()

    assert "Your time counts from when you accepted this task on" in page
    assert "you have 30 minutes in all from then to finish" in page
    assert "After you agree you have" not in page


def test_a_plain_links_clock_starts_at_the_consent(clock):
    study = make_study(**TASK)
    client = Client()
    url = entry_url(study)
    form = landing_form(client, url)
    assert "After you agree you have 10 minutes to give your first answer and 30 minutes in all" in (
        client.get(url).content.decode())
    clock.advance(40)  # longer than the task's time: a link's clock is the app's, from the consent

    assert client.post(url, form).status_code == 302

    task = Assignment.objects.get()
    assert task.created_at == clock.now and task.expires_at == clock.now + timedelta(minutes=10)


def test_a_task_time_set_below_the_estimate_still_lets_a_fresh_consent_in(settings):
    """The time left a consent needs is the estimate, but at most half the task's time: with 20
    minutes set for a task estimated at 60, a consent right after landing starts it."""
    settings.RL_ASSIGNMENT_MINUTES = 20
    study = make_study(n_items=2, n_sources=1, units_per_task=1, estimated_minutes_per_task=60)
    landed = timezone.now()
    assert assignment_duration(study) == timedelta(minutes=20)
    assert not platform_time_run_out(study, landed_at=landed, now=landed + timedelta(minutes=9))
    assert platform_time_run_out(study, landed_at=landed, now=landed + timedelta(minutes=10))
