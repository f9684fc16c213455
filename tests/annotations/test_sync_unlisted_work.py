"""Work answered under a Prolific session that Prolific never listed: anyone who knows a study's
entry URL can invent a PROLIFIC_PID and SESSION_ID of the right format, answer and submit. Prolific
lists a submission from the moment its participant starts, so once the grace period
(``RL_SYNC_UNLISTED_GRACE_MINUTES``) has passed, sync holds the work it does not list
(``PlatformSubmission.Flag.NOT_ON_PLATFORM``): it stops counting (scores, quotas, early stopping)
and cannot be approved until a researcher clears it or Prolific lists it after all."""
from __future__ import annotations

import html
import re
import secrets
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotations.models import Assignment, PlatformCall, PlatformSubmission, Unit
from annotations.selectors import claims_that_count
from annotations.selectors.platforms import assignments_on_hold, study_approve_all_tasks
from annotations.selectors.progress import study_progress
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_approve, study_approve_all, submission_clear
from annotations.services.platforms.sync import study_sync
from tests.annotations.factories import make_study
from tests.annotations.pages import entry_url
from tests.annotations.platforms.conftest import open_study, publish_on, start_assignment
from tests.annotations.test_holds_reopen_decided_units import counters, listed_work, one_unit_on_prolific
from tests.work import work, work_through_pages

pytestmark = pytest.mark.django_db

NOT_ON_PLATFORM = PlatformSubmission.Flag.NOT_ON_PLATFORM


def hex24() -> str:
    return secrets.token_hex(12)  # Prolific ids are 24 hex characters


@pytest.fixture
def published(prolific):
    """A Prolific study published through the app on the fake Prolific server: (study, Prolific
    study id, server)."""
    _platform, server = prolific
    study = make_study(platform="prolific", n_items=2, n_sources=1, quota=3, units_per_task=2, status="draft")
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    study.refresh_from_db()
    return study, publication.prolific_study_id, server


def enter(study, study_id: str, *, pid: str, session: str) -> Assignment:
    """A worker arrives at the study's entry URL with these Prolific ids, answers every question
    in their own browser and submits."""
    url = entry_url(study, PROLIFIC_PID=pid, STUDY_ID=study_id, SESSION_ID=session)
    work_through_pages(url, answer=lambda step, n: "yes", client=Client())
    return Assignment.objects.select_related("participant").get(study=study, platform_assignment_id=session)


def minutes_pass(minutes: float, *tasks: Assignment) -> None:
    """Time moves on: the tasks were started ``minutes`` earlier."""
    Assignment.objects.filter(pk__in=[t.pk for t in tasks]).update(
        created_at=timezone.now() - timedelta(minutes=minutes))


def counted(study, task: Assignment) -> int:
    return claims_that_count(study=study).filter(assignment=task).count()


def n_completed(study) -> int:
    return Unit.objects.filter(study=study).aggregate(n=Sum("n_completed"))["n"] or 0


def test_sync_holds_only_the_work_prolific_never_listed(published, settings):
    study, study_id, server = published
    assert settings.RL_SYNC_UNLISTED_GRACE_MINUTES == 60
    listed = server.add_submission(study_id, participant_id=hex24())
    real = enter(study, study_id, pid=listed["participant_id"], session=listed["id"])
    invented_pid, invented_session = hex24(), hex24()
    invented = enter(study, study_id, pid=invented_pid, session=invented_session)
    assert invented.status == real.status == Assignment.Status.SUBMITTED
    assert counted(study, invented) == counted(study, real) == 2
    assert n_completed(study) == 4
    minutes_pass(61, real, invented)

    report = study_sync(study=study)

    held = PlatformSubmission.objects.get(flag=NOT_ON_PLATFORM)
    assert (held.assignment_id, held.platform_assignment_id, held.worker_id, held.platform_task_id) == (
        invented.pk, invented_session, invented_pid, study_id)
    assert report.flagged == 1 and report.flags == [
        {"platform_assignment_id": invented_session, "worker_id": invented_pid, "flag": "not_on_platform"}]
    assert counted(study, invented) == 0 and counted(study, real) == 2
    assert n_completed(study) == 2  # the unit counters follow in the same transaction
    assert list(assignments_on_hold(study=study)) == [invented]
    with pytest.raises(PlatformServiceError, match="on hold"):
        assignment_approve(user=OPERATOR, study=study, assignment=invented)
    assert PlatformSubmission.objects.get(platform_assignment_id=listed["id"]).flag == ""
    assert assignment_approve(user=OPERATOR, study=study, assignment=real).status == Assignment.Status.APPROVED

    again = study_sync(study=study)  # a second sync holds nothing twice

    assert again.flagged == 1 and PlatformSubmission.objects.filter(flag=NOT_ON_PLATFORM).count() == 1
    assert counted(study, invented) == 0 and n_completed(study) == 2


def test_work_younger_than_the_grace_period_is_not_held_yet(published, settings):
    study, study_id, _server = published
    invented = enter(study, study_id, pid=hex24(), session=hex24())
    minutes_pass(59, invented)

    report = study_sync(study=study)

    assert report.flagged == 0 and not PlatformSubmission.objects.exists()
    assert counted(study, invented) == 2 and n_completed(study) == 2

    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 30
    study_sync(study=study)

    assert PlatformSubmission.objects.get().flag == NOT_ON_PLATFORM
    assert counted(study, invented) == 0 and n_completed(study) == 0


def test_a_later_listing_of_the_session_makes_the_work_count_again(published, settings):
    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 0
    study, study_id, server = published
    pid, session = hex24(), hex24()
    late = enter(study, study_id, pid=pid, session=session)
    study_sync(study=study)
    assert PlatformSubmission.objects.get().flag == NOT_ON_PLATFORM and counted(study, late) == 0

    server.add_submission(study_id, participant_id=pid, submission_id=session)  # Prolific lists it after all
    report = study_sync(study=study)

    row = PlatformSubmission.objects.get()
    assert row.flag == "" and row.assignment_id == late.pk and report.flagged == 0
    assert counted(study, late) == 2 and n_completed(study) == 2
    assert assignment_approve(user=OPERATOR, study=study, assignment=late).status == Assignment.Status.APPROVED


def test_clearing_the_hold_makes_the_work_count(published, settings):
    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 0
    study, study_id, _server = published
    invented = enter(study, study_id, pid=hex24(), session=hex24())
    study_sync(study=study)
    held = PlatformSubmission.objects.get()
    assert held.flag == NOT_ON_PLATFORM and n_completed(study) == 0

    submission_clear(user=OPERATOR, submission=held)

    held.refresh_from_db()
    assert held.cleared_at is not None and not assignments_on_hold(study=study).exists()
    assert counted(study, invented) == 2 and n_completed(study) == 2
    study_sync(study=study)  # still unlisted, but cleared: it keeps counting
    assert counted(study, invented) == 2 and n_completed(study) == 2


def test_a_link_study_is_never_touched(db, settings):
    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 0
    study = make_study(n_items=2, n_sources=1, quota=3, units_per_task=2, status="draft")
    publish_on(study, "link")
    open_study(study)
    task = work(study, "lab-1", platform="link")
    assert task.status == Assignment.Status.SUBMITTED

    report = study_sync(study=study)

    assert report.flagged == 0 and not PlatformSubmission.objects.exists()
    assert counted(study, task) == 2 and n_completed(study) == 2


def test_the_publish_pages_work_on_hold_link_lists_both_kinds_of_hold(published, settings, admin_client):
    """The publish page's review card links to the study's held work, whichever the reason."""
    settings.RL_SYNC_UNLISTED_GRACE_MINUTES = 0
    study, study_id, _server = published
    session = hex24()
    enter(study, study_id, pid=hex24(), session=session)
    study_sync(study=study)
    page = admin_client.get(f"/admin/annotations/publication/publish/{study.pk}/").content.decode()
    link = html.unescape(re.search(r'<a href="([^"]+)">work on hold</a>', page).group(1))
    listing = admin_client.get(link)
    assert listing.status_code == 200 and session in listing.content.decode()


# --- the mirror: submitted here, timed out or returned on Prolific ------------------------------

ENDED_ON_PLATFORM = PlatformSubmission.Flag.ENDED_ON_PLATFORM


def ended_on_prolific(published, raw_status: str) -> tuple[Assignment, str, str]:
    """A worker Prolific lists from the start answers every question and submits here at minute 2;
    two hours later Prolific lists the session as ``raw_status`` (TIMED-OUT, RETURNED): it does not
    pay the worker. Returns (task, participant id, session id)."""
    study, study_id, server = published
    pid, session = hex24(), hex24()
    server.add_submission(study_id, participant_id=pid, status="ACTIVE", submission_id=session)
    task = enter(study, study_id, pid=pid, session=session)
    minutes_pass(2, task)
    assert study_sync(study=study).flagged == 0  # listed and active: nothing to hold
    server.submissions[session]["status"] = raw_status
    minutes_pass(120, task)
    return task, pid, session


@pytest.mark.parametrize("raw_status", ["TIMED-OUT", "RETURNED"])
def test_work_submitted_here_that_prolific_timed_out_or_returned_is_held(published, raw_status, admin_client):
    study, _study_id, server = published
    task, pid, session = ended_on_prolific(published, raw_status)
    assert task.status == Assignment.Status.SUBMITTED
    assert counted(study, task) == 2 and n_completed(study) == 2

    report = study_sync(study=study)

    row = PlatformSubmission.objects.get(platform_assignment_id=session)
    assert report.flags == [{"platform_assignment_id": session, "worker_id": pid, "flag": "ended_on_platform"}]
    assert (row.flag, row.assignment_id, row.platform_status, row.cleared_at) == (
        ENDED_ON_PLATFORM, task.pk, raw_status, None)
    assert row.flagged_at is not None and "timed out or returned" in row.get_flag_display()
    assert "clear the hold to count them and pay the worker with a bonus" in row.get_flag_display()
    assert counted(study, task) == 0 and n_completed(study) == 0  # its answers stop counting
    assert study_progress(study=study).answers_collected == 0
    assert list(assignments_on_hold(study=study)) == [task]
    outcome = study_approve_all(user=OPERATOR, study=study)
    assert outcome["approved"] == 0 and f"assignment {task.pk} is on hold" in outcome["errors"][0]
    assert not server.calls("POST", rf"/api/v1/submissions/{session}/transition/")
    task.refresh_from_db()
    assert task.status == Assignment.Status.SUBMITTED  # sync changes nothing of the task here
    page = admin_client.get(f"/admin/annotations/publication/publish/{study.pk}/").content.decode()
    link = html.unescape(re.search(r'<a href="([^"]+)">work on hold</a>', page).group(1))
    assert session in admin_client.get(link).content.decode()  # the publish page's work on hold lists it

    again = study_sync(study=study)  # the same hold, kept

    assert again.flagged == 1 and PlatformSubmission.objects.get(pk=row.pk).flagged_at == row.flagged_at
    assert counted(study, task) == 0 and n_completed(study) == 0


def test_an_active_task_prolific_timed_out_is_not_held(published):
    """The task was never submitted here: nothing of it counts, the platform ending it is the
    expiry path, not a hold."""
    study, study_id, server = published
    pid, session = hex24(), hex24()
    server.add_submission(study_id, participant_id=pid, status="TIMED-OUT", submission_id=session)
    task = start_assignment(study, platform="prolific", worker_id=pid, assignment_id=session, task_id=study_id)
    minutes_pass(120, task)

    report = study_sync(study=study)

    assert report.flagged == 0 and PlatformSubmission.objects.get(platform_assignment_id=session).flag == ""
    assert not assignments_on_hold(study=study).exists()


@pytest.mark.parametrize("raw_status", ["TIMED-OUT", "RETURNED"])
def test_clearing_the_timed_out_hold_makes_the_work_count_again(published, raw_status):
    study, _study_id, _server = published
    task, _pid, session = ended_on_prolific(published, raw_status)
    study_sync(study=study)
    held = PlatformSubmission.objects.get(platform_assignment_id=session)
    assert held.flag == ENDED_ON_PLATFORM and counted(study, task) == 0

    submission_clear(user=OPERATOR, submission=held)

    held.refresh_from_db()
    assert held.cleared_at is not None and not assignments_on_hold(study=study).exists()
    assert counted(study, task) == 2 and n_completed(study) == 2
    study_sync(study=study)  # still timed out on Prolific, but cleared: it keeps counting
    held.refresh_from_db()
    assert held.flag == ENDED_ON_PLATFORM and held.cleared_at is not None
    assert counted(study, task) == 2 and n_completed(study) == 2
    # Prolific pays nothing for the session and may refuse its approval: "Approve all" leaves it out
    # even cleared, naming it (the researcher approves it on its own, or pays a bonus)
    result = study_approve_all(user=OPERATOR, study=study)
    assert result["approved"] == 0 and "never approved in a batch" in " ".join(result["errors"])
    task.refresh_from_db()
    assert task.status == Assignment.Status.SUBMITTED
    assert not PlatformCall.objects.filter(assignment=task, operation="approve").exists()


def test_the_publish_page_lists_a_cleared_timed_out_session_apart_and_prices_it_not(published, admin_client):
    # Before, the page listed, counted and priced it, and its click then refused it ("never approved in
    # a batch"): the researcher read a count and a total the click would not pay.
    study, _study_id, _server = published
    task, _pid, session = ended_on_prolific(published, "RETURNED")
    study_sync(study=study)
    submission_clear(user=OPERATOR, submission=PlatformSubmission.objects.get(platform_assignment_id=session))

    text = html.unescape(admin_client.get(
        reverse("admin:annotations_publication_publish", args=[study.pk])).content.decode())

    assert '"Approve all" approves the 0 submitted assignment(s)' in text
    tasks = study_approve_all_tasks(study=study)
    assert (tasks.ids, tasks.ended, tasks.payable) == ([], [task.pk], 0)
    apart = text[text.index('id="approve-all-ended"'):]
    assert f"task(s)\n      {task.pk}." in apart[:apart.index("</p>")]


def test_a_timed_out_session_reopens_the_unit_its_answer_decided(prolific):
    """Early stopping: a unit decided on three answers, one of them submitted here under a session
    Prolific then times out. Held, it stops counting: the unit is reopened (its claim keeps its
    slot); cleared, it counts again and decides the unit again."""
    _platform, server = prolific
    study, prolific_id = one_unit_on_prolific(server)
    listed_work(study, server, prolific_id, "p_honest_0")
    listed_work(study, server, prolific_id, "p_honest_1")
    late = listed_work(study, server, prolific_id, "p_late")
    server.submissions[late.platform_assignment_id]["status"] = "TIMED-OUT"
    unit = Unit.objects.get(study=study)
    assert counters(unit) == (True, 3, 3, 3)

    study_sync(study=study)

    held = PlatformSubmission.objects.get(assignment=late)
    assert held.flag == ENDED_ON_PLATFORM
    assert counters(unit) == (False, 5, 3, 2)  # two counting answers of five no longer decide it

    submission_clear(user=OPERATOR, submission=held)
    assert counters(unit) == (True, 3, 3, 3)
