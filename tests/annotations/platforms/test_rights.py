"""Issue 20, item 4: a researcher's right to move money is checked where the money moves. Every
platform action (approve, reject, bonus, block, close) takes the acting user and the study, and
checks the user's right and that every assignment is the study's, whatever the path: the publish
page (inline or through the Celery batch), the per-worker page, the tasks themselves. Against the
local fake Prolific server and botocore's Stubber; the researchers are staff users with ordinary
permissions, as on a real instance."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from annotations.models import (
    Assignment,
    Bonus,
    OpenLink,
    ParticipantLink,
    PlatformCall,
    PlatformSubmission,
    Publication,
    WorkerBlock,
)
from annotations.services.links import link_revoke, links_close, links_generate, open_link_create
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR, PlatformAccessDenied
from annotations.services.platforms.blocks import worker_block
from annotations.services.platforms.bonus import bonus_pay, study_bonuses_pay
from annotations.services.platforms.close import study_close
from annotations.services.platforms.publish import study_add_assignments, study_publish
from annotations.services.platforms.review import (
    assignment_approve,
    assignment_reject,
    study_approve_all,
    submission_clear,
)
from annotations.services.platforms.sync import study_sync
from annotations.tasks.platforms import approve_assignments_task, pay_bonuses_task, publish_study_task
from studies.models import Study
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import submitted
from tests.annotations.platforms.mturk_stubs import HIT_A, confirm, published
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db

REASON = "Careful work throughout."


def _study(owner, **fields) -> Study:
    return make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, reward=Decimal("2.00"), owner=owner,
                      estimated_minutes_per_task=Decimal("6.0"), **fields)


@pytest.fixture
def alice():
    return staff_client("alice")


@pytest.fixture
def two_prolific_studies(prolific, alice):
    """Alice's study A and Bob's study B, both live on Prolific; one submitted task in each."""
    _, server = prolific
    bob, _ = staff_client("bob")
    works = {}
    for key, owner, worker in (("a", alice[0], "pa11ce"), ("b", bob, "pv1ct1m")):
        study = _study(owner, name=f"study-{key}", platform="prolific")
        publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
        sub = server.add_submission(publication.prolific_study_id, participant_id=worker)
        works[key] = submitted(study, platform="prolific", worker_id=worker, assignment_id=sub["id"],
                               task_id=publication.prolific_study_id)
    return server, works


def _publish_page(study_id: int) -> str:
    return reverse("admin:annotations_publication_publish", args=[study_id])


def test_the_publish_page_pays_no_bonus_to_another_study_through_the_background_batch(two_prolific_studies, alice):
    # The attack of issue 20: more than INLINE_LIMIT (50) ids go to the Celery task, which looked
    # assignments up by id alone; 50 made-up ids and one of Bob's tasks paid Bob's worker.
    server, works = two_prolific_studies
    _, client = alice
    victim = works["b"]
    ids = " ".join([str(victim.pk)] + [str(900000 + i) for i in range(50)])

    page = client.post(_publish_page(works["a"].study_id),
                       {"action": "bonus", "kind": "other", "amount": "5.00", "reason": REASON,
                        "assignment_ids": ids}, follow=True).content.decode()

    assert server.payments == []
    assert server.calls("POST", r"/api/v1/submissions/bonus-payments/") == []
    assert not Bonus.objects.exists()
    assert f"not found in study {works['a'].study_id}; nothing was done" in page


def test_the_bonus_task_checks_the_user_and_the_study(two_prolific_studies, alice):
    server, works = two_prolific_studies
    user, _ = alice
    victim = works["b"]

    # Alice names Bob's study: she may not pay its workers.
    with pytest.raises(PlatformAccessDenied, match="not found or not yours"):
        pay_bonuses_task.delay(study_id=victim.study_id, user_id=user.pk, assignment_ids=[victim.pk],
                               amount="5.00", reason=REASON).get()
    # Alice names her own study and Bob's task: it is not her study's.
    with pytest.raises(PlatformServiceError, match="not found in study"):
        pay_bonuses_task.delay(study_id=works["a"].study_id, user_id=user.pk, assignment_ids=[victim.pk],
                               amount="5.00", reason=REASON).get()
    # A task without a user acts for nobody.
    with pytest.raises(PlatformAccessDenied, match="nobody is acting"):
        pay_bonuses_task.delay(study_id=victim.study_id, user_id=None, assignment_ids=[victim.pk],
                               amount="5.00", reason=REASON).get()
    assert server.payments == [] and not Bonus.objects.exists()

    # Her own task, through the same task: paid once.
    result = pay_bonuses_task.delay(study_id=works["a"].study_id, user_id=user.pk, assignment_ids=[works["a"].pk],
                                    amount="0.50", reason=REASON).get()
    assert result == {"paid": 1, "errors": [], "unsettled": []}
    assert len(server.payments) == 1
    assert PlatformCall.objects.get(operation="bonus").user == user


def test_the_approve_task_checks_the_user_and_the_study(two_prolific_studies, alice):
    server, works = two_prolific_studies
    user, _ = alice
    victim = works["b"]

    with pytest.raises(PlatformAccessDenied):
        approve_assignments_task.delay(study_id=victim.study_id, user_id=user.pk, assignment_ids=[victim.pk]).get()
    with pytest.raises(PlatformServiceError, match="not found in study"):
        approve_assignments_task.delay(study_id=works["a"].study_id, user_id=user.pk,
                                       assignment_ids=[victim.pk]).get()

    assert server.calls("POST", r"/api/v1/submissions/\w+/transition/") == []
    assert Assignment.objects.get(pk=victim.pk).status == Assignment.Status.SUBMITTED


def test_the_publish_task_acts_as_its_user_and_checks_their_right(alice):
    # A Celery message names a study and a user id: the task publishes only what that user may
    # publish (PAY access), as the publish page does, and a message without a user acts for nobody.
    user, _ = alice
    bob, _ = staff_client("bob")
    theirs, mine = _study(bob, name="bobs-study"), _study(user, name="alices-study")
    status = theirs.status

    with pytest.raises(PlatformAccessDenied, match="not found or not yours"):
        publish_study_task.delay(theirs.pk, user_id=user.pk).get()
    with pytest.raises(PlatformAccessDenied, match="nobody is acting"):
        publish_study_task.delay(theirs.pk).get()
    with pytest.raises(PlatformAccessDenied, match="not found or not yours"):
        publish_study_task.delay(theirs.pk, user_id=user.pk, dry_run=True).get()
    theirs.refresh_from_db()
    assert theirs.status == status
    assert not Publication.objects.filter(study=theirs).exists()

    done = publish_study_task.delay(mine.pk, user_id=user.pk).get()
    assert done["status"] == Publication.Status.PUBLISHED
    assert Publication.objects.get(pk=done["publication"]).created_by == user


def test_every_platform_action_refuses_a_staff_user_without_the_right(two_prolific_studies):
    # Lee sees Bob's study (it is shared with him) but may not pay its workers; Mo has the pay
    # permission but no share of it. Each service refuses both, whoever calls it.
    server, works = two_prolific_studies
    victim = works["b"]
    lee, _ = staff_client("lee", pay=False)
    mo, _ = staff_client("mo")
    victim.study.shared_with.add(lee)
    # A task sync put on hold (Prolific's worker is not the one who answered), to clear.
    real = server.add_submission(victim.platform_task_id, participant_id="pr3al")
    submitted(victim.study, platform="prolific", worker_id="psp00f", assignment_id=real["id"],
              task_id=victim.platform_task_id)
    study_sync(study=victim.study)
    held = PlatformSubmission.objects.get(platform_assignment_id=real["id"], flag="worker_mismatch")
    # A link left on the Prolific study (made before links were refused for a study on another
    # platform: ``links._links_recruit_check``), which a user without the right may not withdraw.
    link = ParticipantLink.objects.create(study=victim.study)
    actions = {
        "approve": lambda user: assignment_approve(user=user, study=victim.study, assignment=victim),
        "reject": lambda user: assignment_reject(user=user, study=victim.study, assignment=victim,
                                                 feedback="x" * 120),
        "approve all": lambda user: study_approve_all(user=user, study=victim.study),
        "bonus": lambda user: bonus_pay(user=user, study=victim.study, assignment=victim, amount="1.00",
                                        reason=REASON),
        "bonuses": lambda user: study_bonuses_pay(user=user, study=victim.study, assignment_ids=[victim.pk],
                                                  amount="1.00", reason=REASON),
        "block": lambda user: worker_block(user=user, study=victim.study, participant=victim.participant,
                                           reason="Spam."),
        "clear hold": lambda user: submission_clear(user=user, submission=held),
        "publish": lambda user: study_publish(user=user, study=victim.study, platform_name="prolific"),
        "publish as links": lambda user: study_publish(user=user, study=victim.study, platform_name="link"),
        "dry run": lambda user: study_publish(user=user, study=victim.study, platform_name="link", dry_run=True),
        "add assignments": lambda user: study_add_assignments(user=user, study=victim.study),
        "make links": lambda user: links_generate(study=victim.study, n=3, user=user),
        "open link": lambda user: open_link_create(study=victim.study, user=user),
        "revoke link": lambda user: link_revoke(link=link, user=user),
        "close links": lambda user: links_close(study=victim.study, user=user),
    }
    for user in (lee, mo):
        for name, action in actions.items():
            with pytest.raises(PlatformAccessDenied):
                action(user)
                pytest.fail(f"{name} as {user.username}: not refused")
    assert server.payments == [] and server.calls("POST", r"/api/v1/submissions/\w+/transition/") == []
    assert not Bonus.objects.exists() and not WorkerBlock.objects.exists()
    assert list(Publication.objects.filter(study=victim.study).values_list("platform", "dry_run")) == [
        ("prolific", False)]
    held.refresh_from_db()
    assert held.cleared_at is None
    assert list(ParticipantLink.objects.filter(study=victim.study).values_list("pk", "revoked")) == [(link.pk, False)]
    assert not OpenLink.objects.filter(study=victim.study).exists()
    assert Assignment.objects.get(pk=victim.pk).status == Assignment.Status.SUBMITTED
    with pytest.raises(PlatformAccessDenied):
        study_close(user=mo, study=victim.study)
    assert Study.objects.get(pk=victim.study_id).status == Study.Status.OPEN


def test_an_assignment_of_another_study_is_refused_even_with_the_right(two_prolific_studies, alice):
    server, works = two_prolific_studies
    user, _ = alice
    mine, theirs = works["a"], works["b"]
    with pytest.raises(PlatformServiceError, match="not found in study"):
        assignment_approve(user=user, study=mine.study, assignment=theirs)
    with pytest.raises(PlatformServiceError, match="not found in study"):
        bonus_pay(user=user, study=mine.study, assignment=theirs, amount="1.00", reason=REASON)
    with pytest.raises(PlatformServiceError, match="not found in study"):
        worker_block(user=user, study=mine.study, participant=theirs.participant, reason="Spam.")
    assert server.payments == [] and not WorkerBlock.objects.exists()


def test_the_approve_task_retries_a_network_error_and_approves(mturk, alice):
    # autoretry_for=(PlatformTransientError, CallOutcomeUnknown) could never fire: the task's loop
    # caught their parent class. Now a batch with a row of unknown outcome runs again.
    platform, stubber = mturk
    user, _ = alice
    study = _study(user, status="draft")
    published(stubber, study)
    work = submitted(study, platform="mturk", worker_id="AW1", assignment_id="3ASG1AAAAAAAAAAAAAAAAAAAAAAAAA",
                     task_id=HIT_A)
    confirm(stubber, work)  # whose work is it (sync has not listed it): the study's HIT's, its worker's
    stubber.add_client_error("approve_assignment", service_error_code="ServiceFault", http_status_code=500,
                             expected_params={"AssignmentId": work.platform_assignment_id})
    # The retry asks again whose it is, then what became of the lost call (still submitted), then
    # sends it again.
    confirm(stubber, work)
    stubber.add_response("get_assignment", {"Assignment": {"AssignmentId": work.platform_assignment_id,
                                                           "AssignmentStatus": "Submitted"}},
                         {"AssignmentId": work.platform_assignment_id})
    stubber.add_response("approve_assignment", {}, {"AssignmentId": work.platform_assignment_id})

    # apply(throw=False): Celery runs the retry eagerly (with the test settings' eager propagation
    # the first run's Retry would surface here instead of being run).
    result = approve_assignments_task.apply(
        kwargs={"study_id": study.pk, "user_id": user.pk, "assignment_ids": [work.pk]}, throw=False).get()

    stubber.assert_no_pending_responses()
    assert result == {"approved": 1, "errors": [], "unsettled": []}
    assert Assignment.objects.get(pk=work.pk).status == Assignment.Status.APPROVED
    call = PlatformCall.objects.get(operation="approve")
    assert call.status == PlatformCall.Status.CONFIRMED and call.attempts == 2


# --- issue 20, item 13: the researcher's pages answer bad input with a message, never a 500 -------
NOT_AMOUNTS = ["NaN", "sNaN", "-NaN", "Infinity", "-Infinity", "1e999999", "-1e999999", "1e30", "0.505", "1_0",
               "\u0661", " ", "0", "-1.00"]


@pytest.fixture
def link_work(alice):
    user, client = alice
    study = _study(user, name="links")
    return client, study, submitted(study, platform="link", worker_id="lab-worker-1", assignment_id="")


@pytest.mark.parametrize("amount", NOT_AMOUNTS)
def test_a_bonus_amount_that_is_not_an_amount_is_refused_on_the_worker_page(link_work, amount):
    client, study, work = link_work
    response = client.post(f"/admin/studies/study/{study.pk}/workers/{work.participant_id}/",
                           {"action": "bonus", "assignment": work.pk, "amount": amount, "kind": "other",
                            "reason": REASON}, follow=True)
    assert response.status_code == 200
    assert "Nothing was done: bonus amount" in response.content.decode()
    assert not Bonus.objects.exists()


@pytest.mark.parametrize("amount", NOT_AMOUNTS)
def test_a_bonus_amount_that_is_not_an_amount_is_refused_on_the_publish_page(link_work, amount):
    client, study, work = link_work
    response = client.post(_publish_page(study.pk), {"action": "bonus", "kind": "other", "amount": amount,
                                                     "reason": REASON, "assignment_ids": str(work.pk)}, follow=True)
    assert response.status_code == 200
    assert "bonus amount" in response.content.decode().lower()
    assert not Bonus.objects.exists()


@pytest.mark.parametrize("assignment", ["abc", "1.5", "-1", "", "\u0661", "9" * 40])
def test_a_task_number_that_is_not_one_is_refused_on_the_worker_page(link_work, assignment):
    client, study, work = link_work
    for action in ("approve", "reject", "bonus"):
        response = client.post(f"/admin/studies/study/{study.pk}/workers/{work.participant_id}/",
                               {"action": action, "assignment": assignment, "amount": "0.50", "reason": REASON,
                                "feedback": REASON}, follow=True)
        assert response.status_code == 200
        assert "Nothing was done: task" in response.content.decode()
    assert Assignment.objects.get(pk=work.pk).status == Assignment.Status.SUBMITTED and not Bonus.objects.exists()


def test_a_good_amount_still_pays_from_the_worker_page(link_work):
    client, study, work = link_work
    client.post(f"/admin/studies/study/{study.pk}/workers/{work.participant_id}/",
                {"action": "bonus", "assignment": work.pk, "amount": " 1.5 ", "kind": "other", "reason": REASON})
    assert Bonus.objects.get().amount == Decimal("1.50")


@pytest.mark.parametrize("action", ["bonus", "no_such_button"])
def test_the_publish_page_and_the_worker_page_answer_a_button_alike(link_work, action):
    """One dispatcher and one bonus form (annotations.admin.actions) behind both pages: the same
    bad task number, or an unknown button, gets the same answer, and nothing is paid."""
    client, study, work = link_work
    pages = {_publish_page(study.pk): "assignment_ids", f"/admin/studies/study/{study.pk}/workers/"
             f"{work.participant_id}/": "assignment"}
    shown = []
    for page, field in pages.items():
        response = client.post(page, {"action": action, field: "12a", "amount": "0.50", "kind": "other",
                                      "reason": REASON}, follow=True)
        assert response.status_code == 200
        shown.append([str(m) for m in response.context["messages"]])
    expected = ("Nothing was done: task '12a' is not a task number" if action == "bonus"
                else "Unknown action 'no_such_button'.")
    assert shown == [[expected], [expected]]
    assert not Bonus.objects.exists()
