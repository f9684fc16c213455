"""Early stopping on Prolific waits for the platform's listing before it closes the study. Anyone who
knows the entry URL can invent a PROLIFIC_PID and SESSION_ID of the right format; such work counts
until sync holds it (``RL_SYNC_UNLISTED_GRACE_MINUTES``), and a unit it decided is reopened then.
A close cannot be undone (a closed study never reopens), so the app's own close
(``stopping.study_close_when_decided``, and beat's ``close_decided_studies``) waits while counted
work of a decided unit is not listed by Prolific yet (no ``PlatformSubmission`` row names it): a
sync that lists it lets the next beat close the study; one that holds it reopens the unit instead.
Listed as ACTIVE (the worker submitted here but has not reached Prolific's completion page yet) is
not enough: that session may still time out or be returned, which holds the work and reopens the
unit, so the close waits until Prolific lists it settled (awaiting review or later). MTurk (it lists only submitted work) and link studies (no listing) close as before."""
from __future__ import annotations

import pytest
from django.urls import reverse

from annotations.models import Assignment, PlatformCall, PlatformSubmission, Publication, Unit
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import submission_clear
from annotations.services.platforms.sync import study_sync
from annotations.services.stopping import close_waiting_on, studies_all_decided, study_close_when_decided
from annotations.tasks.assignments import close_decided_studies
from studies.models import Study
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import on_platform, open_study, publish_on, submitted
from tests.annotations.platforms.mturk_stubs import HIT_A, published_as, queue_expire
from tests.annotations.test_sync_unlisted_work import enter, hex24, minutes_pass

pytestmark = pytest.mark.django_db


def one_unit(platform: str = "prolific"):
    """A study of one unit (5 workers per unit) that stops when decided, published on ``platform``:
    (study, its publication)."""
    study = make_study(n_items=1, n_sources=1, quota=5, units_per_task=1, status="draft", stop_when_decided=True)
    publication = publish_on(study, platform)  # publishing opens it (its units are built)
    study.refresh_from_db()
    return study, publication


def unit_state(study) -> tuple:
    unit = Unit.objects.get(study=study)
    return unit.decided_at is not None, unit.quota


def is_open(study) -> bool:
    study.refresh_from_db()
    return study.status == Study.Status.OPEN


def stop_calls() -> list:
    return list(PlatformCall.objects.filter(operation="stop_study").values_list("operation", "status"))


def enter_listed_active(server, study, prolific_id: str, n: int, capture) -> tuple[list[dict], list]:
    """``n`` workers whose sessions Prolific lists as ACTIVE enter and submit (they have not reached
    its completion page yet); the close queued at the last decision runs (``capture``: pytest-django's
    ``django_capture_on_commit_callbacks``). Returns (the listed rows, the tasks)."""
    rows = [server.add_submission(prolific_id, participant_id=hex24(), status="ACTIVE") for _ in range(n)]
    with capture(execute=True):
        tasks = [enter(study, prolific_id, pid=row["participant_id"], session=row["id"]) for row in rows]
    return rows, tasks


def test_made_up_sessions_that_decide_the_last_unit_do_not_stop_the_prolific_study(
        prolific, settings, django_capture_on_commit_callbacks):
    _platform, server = prolific
    study, publication = one_unit()
    prolific_id = publication.prolific_study_id
    assert settings.RL_SYNC_UNLISTED_GRACE_MINUTES == 60
    with django_capture_on_commit_callbacks(execute=True) as queued:  # the close queued at the last decision runs
        tasks = [enter(study, prolific_id, pid=hex24(), session=hex24()) for _ in range(3)]
    assert all(t.status == Assignment.Status.SUBMITTED for t in tasks)
    assert unit_state(study) == (True, 3)  # three made-up sessions decide the unit: they count for now
    assert queued  # the close was queued and ran

    assert is_open(study) and stop_calls() == []
    assert not study_close_when_decided(study=study)
    assert studies_all_decided() == [] and close_decided_studies() == 0  # beat waits too
    assert is_open(study) and stop_calls() == []
    assert server.studies[prolific_id]["status"] == "ACTIVE"  # never stopped on Prolific

    minutes_pass(30, *tasks)
    study_sync(study=study)  # inside the grace period: not held, not listed: still no close
    assert not PlatformSubmission.objects.exists()
    assert close_decided_studies() == 0 and is_open(study)

    minutes_pass(61, *tasks)
    study_sync(study=study)  # the grace period is over: held, the unit is reopened

    assert PlatformSubmission.objects.filter(flag=PlatformSubmission.Flag.NOT_ON_PLATFORM).count() == 3
    assert unit_state(study) == (False, 5)
    assert close_decided_studies() == 0
    assert is_open(study) and stop_calls() == []
    publication.refresh_from_db()
    assert publication.status == Publication.Status.PUBLISHED  # still recruiting on Prolific
    assert server.studies[prolific_id]["status"] == "ACTIVE"


def test_listed_work_that_decides_the_last_unit_closes_at_beat_once_sync_lists_it(
        prolific, django_capture_on_commit_callbacks):
    _platform, server = prolific
    study, publication = one_unit()
    prolific_id = publication.prolific_study_id
    with django_capture_on_commit_callbacks(execute=False) as queued:  # the queued close is lost (broker down)
        for _ in range(3):
            row = server.add_submission(prolific_id, participant_id=hex24())
            enter(study, prolific_id, pid=row["participant_id"], session=row["id"])
    assert queued
    assert unit_state(study) == (True, 3)
    assert is_open(study)  # Prolific lists the sessions, but no sync has read the listing yet
    assert not study_close_when_decided(study=study) and close_decided_studies() == 0

    study_sync(study=study)  # beat's sync lists the three sessions
    assert PlatformSubmission.objects.filter(flag="").count() == 3

    assert studies_all_decided() == [study.pk]
    assert close_decided_studies() == 1  # beat's fallback closes it
    assert not is_open(study)
    assert stop_calls() == [("stop_study", "confirmed")]
    assert server.studies[prolific_id]["status"] == "AWAITING REVIEW"


def test_the_close_queued_at_the_last_decision_syncs_and_closes_at_once_when_prolific_lists_the_work(
        prolific, django_capture_on_commit_callbacks):
    _platform, server = prolific
    study, publication = one_unit()
    prolific_id = publication.prolific_study_id
    rows = [server.add_submission(prolific_id, participant_id=hex24()) for _ in range(3)]
    with django_capture_on_commit_callbacks(execute=True) as queued:  # the close queued at the last decision runs
        for row in rows:
            enter(study, prolific_id, pid=row["participant_id"], session=row["id"])
    assert queued
    # the queued close synced first: Prolific lists the three sessions, so it closed now, not at beat
    # after the next sync
    assert PlatformSubmission.objects.filter(flag="").count() == 3
    assert not is_open(study)
    assert stop_calls() == [("stop_study", "confirmed")]
    assert server.studies[prolific_id]["status"] == "AWAITING REVIEW"


def test_made_up_work_a_researcher_cleared_lets_the_study_close(prolific, settings):
    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 0
    _platform, _server = prolific
    study, publication = one_unit()
    tasks = [enter(study, publication.prolific_study_id, pid=hex24(), session=hex24()) for _ in range(3)]
    study_sync(study=study)
    assert unit_state(study) == (False, 5)
    for held in PlatformSubmission.objects.order_by("id"):
        submission_clear(user=OPERATOR, submission=held)  # the researcher accepts the work: it counts again
    assert unit_state(study) == (True, 3) and len(tasks) == 3

    assert study_close_when_decided(study=study)
    assert not is_open(study) and stop_calls() == [("stop_study", "confirmed")]


def test_held_work_a_researcher_cleared_that_prolific_lists_active_since_waits_again(prolific, settings):
    """The clear stands for the hold it answered: once sync finds the sessions listed (the hold
    gone, the clear's date kept on the row), they are judged by their listing, ACTIVE included."""
    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 0
    _platform, server = prolific
    study, publication = one_unit()
    prolific_id = publication.prolific_study_id
    pids = [(hex24(), hex24()) for _ in range(3)]
    for pid, session in pids:
        enter(study, prolific_id, pid=pid, session=session)
    study_sync(study=study)  # none listed: held
    for held in PlatformSubmission.objects.order_by("id"):
        submission_clear(user=OPERATOR, submission=held)
    for pid, session in pids:  # Prolific lists them after all, still active
        server.add_submission(prolific_id, participant_id=pid, status="ACTIVE", submission_id=session)
    study_sync(study=study)
    rows = PlatformSubmission.objects.values_list("platform_status", "flag", "cleared_at")
    assert [(status, flag) for status, flag, _ in rows] == [("ACTIVE", "")] * 3
    assert all(cleared is not None for *_, cleared in rows)
    assert unit_state(study) == (True, 3)

    assert not study_close_when_decided(study=study) and is_open(study) and stop_calls() == []


def test_one_unlisted_session_beside_listed_ones_holds_the_close(prolific):
    _platform, server = prolific
    study, publication = one_unit()
    prolific_id = publication.prolific_study_id
    for _ in range(2):
        row = server.add_submission(prolific_id, participant_id=hex24())
        enter(study, prolific_id, pid=row["participant_id"], session=row["id"])
    invented = enter(study, prolific_id, pid=hex24(), session=hex24())
    study_sync(study=study)  # lists the two real ones; the invented one is inside the grace period
    assert unit_state(study) == (True, 3)
    assert not PlatformSubmission.objects.filter(assignment=invented).exists()

    assert not study_close_when_decided(study=study) and is_open(study)


@pytest.mark.parametrize("ended", ["TIMED-OUT", "RETURNED"])
def test_the_close_waits_while_prolific_lists_the_deciding_sessions_as_active(
        prolific, django_capture_on_commit_callbacks, ended):
    """The close queued at the last decision syncs first, usually before the workers' browsers reach
    Prolific's completion page: their sessions are listed, but ACTIVE. One of them then times out or
    is returned: its work is held and the unit reopened, in a study that can still recruit for it."""
    _platform, server = prolific
    study, publication = one_unit()
    prolific_id = publication.prolific_study_id
    rows, tasks = enter_listed_active(server, study, prolific_id, 3, django_capture_on_commit_callbacks)
    assert PlatformSubmission.objects.filter(flag="", platform_status="ACTIVE").count() == 3
    assert unit_state(study) == (True, 3)
    assert is_open(study) and stop_calls() == []  # listed, but Prolific may still end a session unpaid
    assert not study_close_when_decided(study=study) and close_decided_studies() == 0

    server.submissions[rows[0]["id"]]["status"] = ended
    for row in rows[1:]:
        server.submissions[row["id"]]["status"] = "AWAITING REVIEW"
    minutes_pass(120, *tasks)
    study_sync(study=study)
    assert PlatformSubmission.objects.get(assignment=tasks[0]).flag == PlatformSubmission.Flag.ENDED_ON_PLATFORM
    assert unit_state(study) == (False, 5)  # reopened, and the study is still open to fill it
    assert is_open(study) and stop_calls() == [] and server.studies[prolific_id]["status"] == "ACTIVE"


def test_the_close_goes_ahead_once_prolific_lists_the_active_sessions_as_submitted(
        prolific, django_capture_on_commit_callbacks):
    _platform, server = prolific
    study, publication = one_unit()
    prolific_id = publication.prolific_study_id
    rows, _tasks = enter_listed_active(server, study, prolific_id, 3, django_capture_on_commit_callbacks)
    assert is_open(study)
    for row in rows:
        server.submissions[row["id"]]["status"] = "AWAITING REVIEW"
    study_sync(study=study)  # beat's sync: the workers reached Prolific's completion page
    assert close_decided_studies() == 1 and not is_open(study)
    assert stop_calls() == [("stop_study", "confirmed")]


def test_the_pages_say_how_many_tasks_the_close_waits_for(prolific, django_capture_on_commit_callbacks, admin_client):
    """A study that stays open with every unit decided says why, on the publish and progress pages."""
    _platform, server = prolific
    study, publication = one_unit()
    prolific_id = publication.prolific_study_id
    rows, _tasks = enter_listed_active(server, study, prolific_id, 2, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        enter(study, prolific_id, pid=hex24(), session=hex24())  # not listed at all
    publish = reverse("admin:annotations_publication_publish", args=[study.pk])
    progress = f"/admin/studies/study/{study.pk}/progress.json"
    assert is_open(study) and close_waiting_on(study=study) == 3
    assert admin_client.get(progress).json()["early_stopping"]["close_waits_on_tasks"] == 3
    html = admin_client.get(f"/admin/studies/study/{study.pk}/progress/").content.decode()
    assert '<td data-k="early_stopping.close_waits_on_tasks">3</td>' in html
    page = admin_client.get(publish).content.decode()
    assert 'id="close-waits"' in page and "(3 tasks not listed so yet)" in page
    assert "held once\n      it is older than the grace period; either reopens its unit" in page

    for row in rows:
        server.submissions[row["id"]]["status"] = "AWAITING REVIEW"
    study_sync(study=study)  # the unlisted one is inside its grace period: the close still waits on it
    assert close_waiting_on(study=study) == 1 and "(1 task not listed so yet)" in admin_client.get(publish).content.decode()


def test_an_mturk_study_closes_on_its_deciding_work_without_a_sync(mturk):
    """MTurk lists only submitted assignments, so sync never holds work for being unlisted: the close
    does not wait for a listing there."""
    _platform, stubber = mturk
    study = make_study(n_items=1, n_sources=1, quota=5, units_per_task=1, status="draft", stop_when_decided=True)
    on_platform(study, "mturk")
    published_as(stubber, study, HIT_A)
    study.refresh_from_db()
    for n in range(3):
        submitted(study, platform="mturk", worker_id=f"A{n}WORKER", assignment_id=f"3ASSIGN{n}", task_id=HIT_A)
    assert unit_state(study) == (True, 3)
    assert studies_all_decided() == [study.pk]
    queue_expire(stubber, HIT_A)

    assert study_close_when_decided(study=study)
    stubber.assert_no_pending_responses()
    assert not is_open(study)


def test_a_link_study_closes_on_its_deciding_work_without_a_sync(db):
    study = make_study(n_items=1, n_sources=1, quota=5, units_per_task=1, status="draft", stop_when_decided=True)
    publish_on(study, "link")
    open_study(study)
    for n in range(3):
        submitted(study, platform="link", worker_id=f"lab-{n}", assignment_id="")
    assert unit_state(study) == (True, 3)

    assert study_close_when_decided(study=study)
    assert not is_open(study)

