"""An impostor's Prolific task, ended when the real worker arrives (``annotations.services.impostor``).

Someone who knows a worker's Prolific id enters first with it and an invented SESSION_ID (A);
the real worker then arrives from Prolific with their real one (B). Through the pages (the
landing page's GET and the consent's POST), with the local fake Prolific server: the impostor's
task ends only when Prolific vouches for B as the worker's submission of this study and denies A;
otherwise the refusal stays as it was."""
from __future__ import annotations

import secrets
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.test import Client

from annotations.models import Assignment, Claim, QualificationGrant, Unit
from annotations.platforms import use_platform
from annotations.platforms.prolific import ProlificPlatform
from annotations.services.impostor import impostor_grant_void, impostor_task_end
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from tests.annotations.factories import add_qualification, make_study
from tests.annotations.pages import answer, consent, entry_url, form_fields, landing_form, start
from tests.clock import clock_installed

PID = "5a9d64f5f6dfdd0001eaa73d"
SUBMISSION_PATH = r"/api/v1/submissions/\w+/"


def hex24() -> str:
    return secrets.token_hex(12)


@pytest.fixture
def published(prolific, db):
    """A Prolific study published through the app, its Prolific study id and the fake server."""
    _platform, server = prolific
    study = make_study(platform="prolific", n_items=4, n_sources=1, units_per_task=2, status="draft", reward=2)
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    study.refresh_from_db()
    return study, publication.prolific_study_id, server


def url(study, study_id: str, session: str, *, pid: str = PID) -> str:
    return entry_url(study, PROLIFIC_PID=pid, STUDY_ID=study_id, SESSION_ID=session)


def impostor_task(study, study_id: str) -> tuple[Client, str, Assignment]:
    """The impostor enters first with the worker's id and an invented session, and answers once
    (that answer is stored under the worker's id)."""
    impostor = Client()
    fake = hex24()
    task = start(impostor, url(study, study_id, fake))
    _fields, response = answer(impostor, task)
    assert response.status_code == 302
    return impostor, task, Assignment.objects.get(platform_assignment_id=fake)


def claimed(study) -> int:
    return Unit.objects.filter(study=study).aggregate(n=Sum("n_claimed"))["n"]


def asked(server) -> list[str]:
    return [call["path"].split("/")[-2] for call in server.calls("GET", SUBMISSION_PATH)]


def assert_ended(task: Assignment) -> None:
    task.refresh_from_db()
    assert (task.status, task.ended_as_impostor) == (Assignment.Status.RETURNED, True)
    assert not Claim.objects.filter(assignment=task, released=False).exists()


def assert_refused(response) -> None:
    assert response.status_code == 409
    assert "already have a task in progress" in response.content.decode()


# --- the impostor's task is ended -------------------------------------------------------------

def test_the_real_worker_who_arrives_after_an_impostor_gets_the_landing_page_and_the_impostors_task_ends(published):
    study, study_id, server = published
    _impostor, _task, task = impostor_task(study, study_id)
    assert claimed(study) == 2
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]

    worker = Client()
    page = worker.get(url(study, study_id, real))

    assert page.status_code == 200 and 'name="consent"' in page.content.decode()
    assert_ended(task)
    assert claimed(study) == 0  # the impostor's slots went back to the pool
    assert asked(server) == [real, task.platform_assignment_id]
    mine = start(worker, url(study, study_id, real))
    new = Assignment.objects.get(platform_assignment_id=real, status=Assignment.Status.ACTIVE)
    assert mine.endswith(f"/w/a/{new.token}/") and new.participant_id == task.participant_id
    assert claimed(study) == 2


def test_a_consent_form_loaded_before_the_impostor_started_gets_the_real_worker_their_task(published):
    study, study_id, server = published
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    worker = Client()
    form = landing_form(worker, url(study, study_id, real))  # the landing page, before the impostor came
    _impostor, _task, task = impostor_task(study, study_id)

    response = worker.post(url(study, study_id, real), form)

    assert response.status_code == 302
    new = Assignment.objects.get(platform_assignment_id=real)
    assert response["Location"].endswith(f"/w/a/{new.token}/") and new.status == Assignment.Status.ACTIVE
    assert_ended(task)
    assert claimed(study) == 2  # the impostor's two slots back, the worker's two taken


def test_the_impostors_task_page_takes_no_more_answers_once_ended(published):
    study, study_id, server = published
    impostor, task_url, task = impostor_task(study, study_id)
    fields = form_fields(impostor.get(task_url).content.decode())  # the next question, open in their tab
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    assert Client().get(url(study, study_id, real)).status_code == 200

    response = impostor.post(task_url + "answer", {**fields, "answer": "yes"})

    assert response.status_code == 409
    assert 'name="claim"' not in impostor.get(task_url).content.decode()
    assert task.claims.filter(annotations__isnull=False).distinct().count() == 1  # the one from before


def test_a_task_session_that_prolific_files_under_another_participant_is_denied(published):
    study, study_id, server = published
    other = server.add_submission(study_id, participant_id=hex24(), status="ACTIVE")["id"]
    impostor = Client()
    start(impostor, url(study, study_id, other))  # another worker's real session, with this worker's id
    task = Assignment.objects.get(platform_assignment_id=other)
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]

    assert Client().get(url(study, study_id, real)).status_code == 200
    assert_ended(task)


# --- the refusal stays ------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_session_prolific_does_not_know_is_refused_as_before_after_one_question(published, method):
    study, study_id, server = published
    worker = Client()
    invented = hex24()
    form = landing_form(worker, url(study, study_id, invented))
    _impostor, _task, task = impostor_task(study, study_id)

    response = worker.get(url(study, study_id, invented)) if method == "GET" else worker.post(
        url(study, study_id, invented), form)

    assert_refused(response)
    task.refresh_from_db()
    assert task.status == Assignment.Status.ACTIVE and not task.ended_as_impostor
    assert asked(server) == [invented]  # the task's session is not asked about


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_worker_with_two_genuine_sessions_is_refused_as_before(published, method):
    """They returned the study on Prolific and took it again: the task in progress is theirs."""
    study, study_id, server = published
    first = server.add_submission(study_id, participant_id=PID, status="RETURNED")["id"]
    second = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    worker = Client()
    form = landing_form(worker, url(study, study_id, second))
    start(Client(), url(study, study_id, first))
    task = Assignment.objects.get(platform_assignment_id=first)

    response = worker.get(url(study, study_id, second)) if method == "GET" else worker.post(
        url(study, study_id, second), form)

    assert_refused(response)
    task.refresh_from_db()
    assert task.status == Assignment.Status.ACTIVE and not task.ended_as_impostor
    assert asked(server) == [second, first]


def test_prolific_unreachable_keeps_the_refusal(published):
    study, study_id, server = published
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    worker = Client()
    form = landing_form(worker, url(study, study_id, real))
    _impostor, _task, task = impostor_task(study, study_id)

    with use_platform("prolific", ProlificPlatform(base_url="http://127.0.0.1:9/api/v1/")):  # nothing listens
        for response in (worker.get(url(study, study_id, real)), worker.post(url(study, study_id, real), form)):
            assert_refused(response)
    task.refresh_from_db()
    assert task.status == Assignment.Status.ACTIVE and not task.ended_as_impostor


def test_a_server_error_or_no_token_keeps_the_refusal(published, settings, monkeypatch):
    study, study_id, server = published
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    _impostor, _task, task = impostor_task(study, study_id)

    settings.RL_PROLIFIC_TOKEN = ""
    assert_refused(Client().get(url(study, study_id, real)))
    assert asked(server) == []
    settings.RL_PROLIFIC_TOKEN = server.token
    monkeypatch.setattr(server, "_get_submission", lambda **kwargs: (503, {"error": {"detail": "down"}}))
    assert_refused(Client().get(url(study, study_id, real)))
    task.refresh_from_db()
    assert task.status == Assignment.Status.ACTIVE and not task.ended_as_impostor


def test_a_session_of_the_worker_in_another_prolific_study_is_not_theirs_here(published):
    study, study_id, server = published
    _impostor, _task, task = impostor_task(study, study_id)
    elsewhere = server.add_submission(hex24(), participant_id=PID, status="ACTIVE")["id"]

    assert_refused(Client().get(url(study, study_id, elsewhere)))
    task.refresh_from_db()
    assert task.status == Assignment.Status.ACTIVE


def test_the_usual_entry_asks_prolific_nothing(published):
    study, study_id, server = published
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    worker = Client()
    task = start(worker, url(study, study_id, real))
    assert worker.get(url(study, study_id, real))["Location"] == task
    assert Client().get(url(study, study_id, real))["Location"] == task  # the session bound to the task
    assert asked(server) == []


# --- races ------------------------------------------------------------------------------------

def test_a_task_moved_to_another_session_meanwhile_is_not_ended(published):
    """Prolific was asked about the task as it was read; under its row lock the task is bound to
    another session now (its browser re-entered with one): it is left alone."""
    study, study_id, server = published
    impostor, _task, task = impostor_task(study, study_id)
    stale = Assignment.objects.get(pk=task.pk)
    moved = hex24()
    assert impostor.post(url(study, study_id, moved), landing_form(impostor, url(study, study_id, moved))).status_code == 302
    task.refresh_from_db()
    assert task.platform_assignment_id == moved
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]

    assert not impostor_task_end(study=study, participant=task.participant, task=stale, platform_assignment_id=real)
    task.refresh_from_db()
    assert task.status == Assignment.Status.ACTIVE and not task.ended_as_impostor


def test_a_task_past_its_deadline_once_prolific_answered_ends_expired_not_as_an_impostors(published, monkeypatch):
    """Prolific is asked first; the task's deadline passed meanwhile: it had ended then, so it ends
    expired, as the expiry sweep would, not returned and marked as an impostor's."""
    study, study_id, server = published
    _impostor, _task, task = impostor_task(study, study_id)
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    clock = clock_installed(monkeypatch)
    clock.now = task.expires_at + timedelta(seconds=1)

    assert impostor_task_end(study=study, participant=task.participant, task=task, platform_assignment_id=real)

    task.refresh_from_db()
    assert (task.status, task.ended_as_impostor) == (Assignment.Status.EXPIRED, False)
    assert claimed(study) == 0


def test_a_second_entry_of_the_real_worker_at_the_same_time_ends_nothing_more_and_goes_on(published):
    """Two entries of the real worker read the impostor's task before either ended it: the one
    that locks it second finds it ended, gives nothing back twice, and goes on as the first did."""
    study, study_id, server = published
    _impostor, _task, task = impostor_task(study, study_id)
    stale = Assignment.objects.get(pk=task.pk)
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    assert Client().get(url(study, study_id, real)).status_code == 200
    before = claimed(study)

    assert impostor_task_end(study=study, participant=task.participant, task=stale, platform_assignment_id=real)
    assert claimed(study) == before == 0
    assert Assignment.objects.filter(status=Assignment.Status.RETURNED, ended_as_impostor=True).count() == 1


# --- a qualification test an impostor failed on purpose ------------------------------------------
# The test is graded once per worker and study, and a failed one refuses the worker every task:
# an impostor who fails it with the worker's id and an invented session would shut them out.

WRONG, RIGHT = ("no", "yes", "no"), ("yes", "no", "yes")  # add_qualification's key: yes, no, yes


def take_test(client: Client, task_url: str, test, given: tuple[str, ...]):
    ids = [question.pk for question in test.questions.order_by("position")]
    return client.post(task_url + "qualification", {f"q_{pk}": value for pk, value in zip(ids, given, strict=True)})


def failed_test(study, study_id: str, test, session: str) -> Assignment:
    """Someone enters with the worker's id and ``session`` and fails the test: the task it was
    taken in (returned)."""
    client = Client()
    task_url = start(client, url(study, study_id, session))
    assert take_test(client, task_url, test, WRONG).status_code == 302
    grant = QualificationGrant.objects.get(study=study)
    task = Assignment.objects.get(platform_assignment_id=session)
    assert not grant.passed and grant.assignment_id == task.pk and task.status == Assignment.Status.RETURNED
    return task


def assert_not_qualified(response) -> None:
    assert response.status_code == 403 and "did not reach the pass mark" in response.content.decode()


def assert_grant_stands(task: Assignment) -> None:
    assert QualificationGrant.objects.filter(assignment=task, passed=False).count() == 1
    task.refresh_from_db()
    assert (task.status, task.ended_as_impostor) == (Assignment.Status.RETURNED, False)


def test_a_test_an_impostor_failed_with_the_workers_id_is_voided_and_the_worker_takes_it(published, caplog):
    study, study_id, server = published
    test = add_qualification(study)
    task = failed_test(study, study_id, test, hex24())
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    worker = Client()

    response = worker.post(url(study, study_id, real), landing_form(worker, url(study, study_id, real)))

    assert response.status_code == 302, response.content.decode()[:300]
    new = Assignment.objects.get(platform_assignment_id=real)
    assert response["Location"].endswith(f"/w/a/{new.token}/") and new.status == Assignment.Status.ACTIVE
    assert "Qualification test" in worker.get(response["Location"]).content.decode()
    assert asked(server) == [real, task.platform_assignment_id]
    assert not QualificationGrant.objects.exists()
    task.refresh_from_db()
    assert (task.status, task.ended_as_impostor) == (Assignment.Status.RETURNED, True)
    warning = [r.getMessage() for r in caplog.records if r.name == "annotations.services.impostor"]
    assert warning == [f"study {study.pk}: the failed qualification test taken in task {task.pk} was voided at its "
                       "participant's entry: Prolific denied the session that task was started with and confirmed "
                       "the one the participant came with"]
    assert PID not in warning[0] and real not in warning[0]
    # the worker's own attempt is the study's one attempt, recorded with its task
    assert take_test(worker, response["Location"], test, RIGHT).status_code == 302
    grant = QualificationGrant.objects.get(study=study)
    assert grant.passed and grant.assignment_id == new.pk


def test_a_worker_whose_test_was_voided_fails_their_own_attempt_for_good(published):
    study, study_id, server = published
    test = add_qualification(study)
    failed_test(study, study_id, test, hex24())
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    worker = Client()
    task_url = start(worker, url(study, study_id, real))
    assert take_test(worker, task_url, test, WRONG).status_code == 302
    later = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]  # returned, took it again

    assert_not_qualified(consent(Client(), url(study, study_id, later)))
    assert_grant_stands(Assignment.objects.get(platform_assignment_id=real))


def test_prolific_unreachable_keeps_the_failed_test(published):
    study, study_id, server = published
    test = add_qualification(study)
    task = failed_test(study, study_id, test, hex24())
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    worker = Client()
    form = landing_form(worker, url(study, study_id, real))

    with use_platform("prolific", ProlificPlatform(base_url="http://127.0.0.1:9/api/v1/")):  # nothing listens
        assert_not_qualified(worker.post(url(study, study_id, real), form))
    assert_grant_stands(task)


def test_a_test_failed_in_the_workers_own_earlier_session_stands(published):
    """They failed it, returned the study on Prolific and took it again: the attempt was theirs."""
    study, study_id, server = published
    test = add_qualification(study)
    first = server.add_submission(study_id, participant_id=PID, status="RETURNED")["id"]
    task = failed_test(study, study_id, test, first)
    second = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]

    assert_not_qualified(consent(Client(), url(study, study_id, second)))
    assert asked(server) == [second, first]
    assert_grant_stands(task)


def test_a_session_prolific_does_not_vouch_for_keeps_the_failed_test(published):
    study, study_id, server = published
    test = add_qualification(study)
    task = failed_test(study, study_id, test, hex24())
    invented = hex24()  # a second impostor's try to void the first attempt

    assert_not_qualified(consent(Client(), url(study, study_id, invented)))
    assert asked(server) == [invented]
    assert_grant_stands(task)


def test_the_worker_who_failed_and_comes_back_with_the_same_session_asks_prolific_nothing(published):
    study, study_id, server = published
    test = add_qualification(study)
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    task = failed_test(study, study_id, test, real)

    assert_not_qualified(consent(Client(), url(study, study_id, real)))
    assert asked(server) == []
    assert_grant_stands(task)


def test_a_failed_grant_that_records_no_task_stands(published):
    """A grant from before the task was recorded on it (the migration left them empty)."""
    study, study_id, server = published
    test = add_qualification(study)
    failed_test(study, study_id, test, hex24())
    QualificationGrant.objects.filter(study=study).update(assignment=None)  # as a grant from before
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]

    assert_not_qualified(consent(Client(), url(study, study_id, real)))
    assert asked(server) == []
    assert QualificationGrant.objects.filter(study=study, passed=False).count() == 1


def test_a_passed_grant_is_never_voided(published):
    """A passed grant refuses no one: the check finds no failed grant in the way, asks Prolific
    nothing and leaves the grant as it is."""
    study, study_id, server = published
    test = add_qualification(study)
    impostor = Client()
    task_url = start(impostor, url(study, study_id, hex24()))
    assert take_test(impostor, task_url, test, RIGHT).status_code == 302
    participant = QualificationGrant.objects.get().participant
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]

    assert impostor_grant_void(study=study, participant=participant, platform_assignment_id=real)
    assert asked(server) == [] and QualificationGrant.objects.get().passed
    assert not Assignment.objects.filter(ended_as_impostor=True).exists()


def test_a_second_entry_of_the_real_worker_finds_the_test_voided_and_goes_on(published):
    """Two consent forms of the real worker were refused before either voided the test: the one
    that checks second finds it gone, asks nothing, and decides its form again (True)."""
    study, study_id, server = published
    test = add_qualification(study)
    task = failed_test(study, study_id, test, hex24())
    real = server.add_submission(study_id, participant_id=PID, status="ACTIVE")["id"]
    worker = Client()
    form = landing_form(worker, url(study, study_id, real))
    assert start(Client(), url(study, study_id, real))  # the first form voided it and got the task
    calls = len(asked(server))

    assert impostor_grant_void(study=study, participant=task.participant, platform_assignment_id=real)
    assert len(asked(server)) == calls
    assert worker.post(url(study, study_id, real), form)["Location"].endswith(  # the task of that session
        "/w/a/" + Assignment.objects.get(platform_assignment_id=real).token + "/")
    task.refresh_from_db()
    assert task.ended_as_impostor and not QualificationGrant.objects.exists()
