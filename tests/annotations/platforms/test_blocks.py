"""Issue 20, items 8 (blocking half) and 9: a researcher's block covers their own studies, not
another researcher's, and sends nothing to a shared platform account; only a superuser blocks
everywhere (and on the MTurk account). What the audit stores and shows names workers by
pseudonym: researchers without ``studies.view_raw_worker_ids`` find no raw worker id in the
platform-call list, its search or the publish page. Against botocore's Stubber, through the
per-worker page, as staff researchers with ordinary permissions."""
from __future__ import annotations

import json
from decimal import Decimal

import pytest
from botocore.stub import ANY
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from annotations.models import Bonus, PlatformCall, WorkerBlock
from annotations.services.assignment import assignment_start
from annotations.services.errors import ParticipantBlocked
from lab.pseudonyms import worker_pseudonym
from studies.models import Study
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import submitted
from tests.annotations.platforms.mturk_stubs import HIT_A, confirm, published
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db

WORKER = "AVICTIM1"
TASK_ID = "3VICTIMAAAAAAAAAAAAAAAAAAAAAAA"


def _study(owner, name: str) -> Study:
    """An open MTurk study of ``owner``'s (the workers here are MTurk's)."""
    return make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, reward=Decimal("2.00"), owner=owner,
                      name=name, platform="mturk")


def _worker_page(study, work) -> str:
    return f"/admin/studies/study/{study.pk}/workers/{work.participant_id}/"


@pytest.fixture
def alice():
    return staff_client("alice")


@pytest.fixture
def root_client():
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.org", "pw"))
    return client


def test_a_researchers_block_covers_their_own_studies_only(mturk, alice):
    platform, stubber = mturk
    user, client = alice
    bob, _ = staff_client("bob")
    first, second, bobs = _study(user, "alice-1"), _study(user, "alice-2"), _study(bob, "bob-1")
    work = submitted(first, platform="mturk", worker_id=WORKER, assignment_id=TASK_ID)

    page = client.post(_worker_page(first, work), {"action": "block", "reason": "Failed every attention check."},
                       follow=True).content.decode()

    assert "Worker blocked in this study and in the other studies you own" in page
    # Nothing went to MTurk: its block would reach every researcher's HITs on the shared account
    # (the Stubber has no answer queued, so a call would have failed the block).
    stubber.assert_no_pending_responses()
    assert not PlatformCall.objects.exists()
    for study in (first, second):
        with pytest.raises(ParticipantBlocked):
            assignment_start(study=study, participant=work.participant, consented=True)
    assert assignment_start(study=bobs, participant=work.participant, consented=True).study_id == bobs.pk
    assert "blocked)" in client.get(_worker_page(first, work)).content.decode()


def test_only_a_superuser_blocks_everywhere_and_on_the_mturk_account(mturk, alice, root_client):
    platform, stubber = mturk
    user, client = alice
    bob, _ = staff_client("bob")
    mine, bobs = _study(user, "alice-1"), _study(bob, "bob-1")
    work = submitted(mine, platform="mturk", worker_id=WORKER, assignment_id=TASK_ID)
    page = _worker_page(mine, work)

    refused = client.post(page, {"action": "block", "reason": "Spam.", "everywhere": "on"}, follow=True)
    assert "only a superuser blocks a worker in every researcher&#x27;s studies" in refused.content.decode()
    assert not WorkerBlock.objects.exists()

    stubber.add_response("create_worker_block", {}, {"WorkerId": WORKER, "Reason": "Spam."})
    for _ in range(2):  # a double click blocks once
        root_client.post(page, {"action": "block", "reason": "Spam.", "everywhere": "on"})

    stubber.assert_no_pending_responses()
    with pytest.raises(ParticipantBlocked):
        assignment_start(study=bobs, participant=work.participant, consented=True)
    call = PlatformCall.objects.get(operation="block")
    assert call.idempotency_key == f"mturk:block:{worker_pseudonym('mturk', WORKER)}"


def test_raw_worker_ids_stay_out_of_the_audit_a_researcher_reads(mturk, alice, root_client):
    platform, stubber = mturk
    user, client = alice
    study = _study(user, "alice-1")
    published(stubber, study)
    work = submitted(study, platform="mturk", worker_id=WORKER, assignment_id=TASK_ID, task_id=HIT_A)
    confirm(stubber, work)
    stubber.add_response("approve_assignment", {}, {"AssignmentId": TASK_ID})
    confirm(stubber, work)
    stubber.add_response("send_bonus", {}, {"WorkerId": WORKER, "BonusAmount": "0.50", "AssignmentId": TASK_ID,
                                            "Reason": "Careful work.", "UniqueRequestToken": ANY})
    stubber.add_response("create_worker_block", {}, {"WorkerId": WORKER, "Reason": "Spam."})
    page = _worker_page(study, work)

    client.post(page, {"action": "approve", "assignment": work.pk})
    client.post(page, {"action": "bonus", "assignment": work.pk, "amount": "0.50", "kind": "other",
                       "reason": "Careful work."})
    root_client.post(page, {"action": "block", "reason": "Spam.", "everywhere": "on"})

    stubber.assert_no_pending_responses()
    calls = list(PlatformCall.objects.filter(study=study).exclude(operation="create_hit"))
    assert sorted(c.operation for c in calls) == ["approve", "block", "bonus"]
    for call in calls:  # what is stored: keys, summaries and answers name the worker by pseudonym
        stored = call.idempotency_key + json.dumps(call.request_summary) + json.dumps(call.response) + call.error
        assert WORKER not in stored
    listing = client.get("/admin/annotations/platformcall/")
    assert listing.context["cl"].result_count == 5 and WORKER not in listing.content.decode()  # and two HITs
    assert f"mturk:block:{worker_pseudonym('mturk', WORKER)}" in listing.content.decode()
    assert client.get("/admin/annotations/platformcall/", {"q": WORKER}).context["cl"].result_count == 0
    publish = client.get(reverse("admin:annotations_publication_publish", args=[study.pk])).content.decode()
    assert "mturk:block:" in publish and WORKER not in publish


def test_a_lost_mturk_bonus_is_found_by_the_worker_of_its_assignment_and_not_paid_twice(mturk, alice):
    # The audit summary names the worker by pseudonym now; reconciling a bonus whose answer was
    # lost must still ask MTurk about the raw worker id (that of the call's assignment), or it
    # would find nothing and pay again.
    platform, stubber = mturk
    user, client = alice
    study = _study(user, "alice-1")
    published(stubber, study)
    work = submitted(study, platform="mturk", worker_id=WORKER, assignment_id=TASK_ID, task_id=HIT_A)
    real_bonus = platform.bonus

    def pay_then_lose_the_answer(**kwargs):
        real_bonus(**kwargs)  # MTurk paid...
        raise RuntimeError("connection dropped")  # ...and the answer never came back

    confirm(stubber, work)
    stubber.add_response("send_bonus", {}, {"WorkerId": WORKER, "BonusAmount": "0.50", "AssignmentId": TASK_ID,
                                            "Reason": "Careful work.", "UniqueRequestToken": ANY})
    with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
        patch.setattr(platform, "bonus", pay_then_lose_the_answer)
        client.post(_worker_page(study, work), {"action": "bonus", "assignment": work.pk, "amount": "0.50",
                                                "kind": "other", "reason": "Careful work."})
    confirm(stubber, work)
    stubber.add_response("list_bonus_payments", {"BonusPayments": [
        {"WorkerId": WORKER, "BonusAmount": "0.50", "AssignmentId": TASK_ID, "Reason": "Careful work."}],
        "NumResults": 1}, {"AssignmentId": TASK_ID})

    client.post(_worker_page(study, work), {"action": "bonus", "assignment": work.pk, "amount": "0.50",
                                            "kind": "other", "reason": "Careful work."})

    stubber.assert_no_pending_responses()  # asked, found it paid, sent nothing again
    call = PlatformCall.objects.get(operation="bonus")
    assert call.status == PlatformCall.Status.CONFIRMED and call.attempts == 1
    assert WORKER not in str(call.request_summary)


def test_a_platform_error_naming_the_worker_is_stored_and_shown_with_the_pseudonym(mturk, alice):
    platform, stubber = mturk
    user, client = alice
    study = _study(user, "alice-1")
    published(stubber, study)
    work = submitted(study, platform="mturk", worker_id=WORKER, assignment_id=TASK_ID, task_id=HIT_A)
    confirm(stubber, work)
    stubber.add_client_error("send_bonus", service_error_code="RequestError",
                             service_message=f"Worker {WORKER} is not associated with assignment {TASK_ID}.")

    page = client.post(_worker_page(study, work), {"action": "bonus", "assignment": work.pk, "amount": "0.50",
                                                   "kind": "other", "reason": "Careful work."}, follow=True)

    stubber.assert_no_pending_responses()
    pseudonym = worker_pseudonym("mturk", WORKER)
    call = PlatformCall.objects.get(operation="bonus")
    assert call.status == PlatformCall.Status.FAILED and f"Worker {pseudonym} is not associated" in call.error
    bonus = Bonus.objects.get()
    assert WORKER not in bonus.error + json.dumps(call.response) + call.error
    assert WORKER not in page.content.decode() and pseudonym in page.content.decode()
    for listing in ("/admin/annotations/platformcall/", "/admin/annotations/bonus/"):
        assert WORKER not in client.get(listing).content.decode()


def test_the_participant_admin_is_not_a_second_way_to_block_everywhere(alice):
    # Ticking "blocked" on the participant's change page blocked the worker in every study,
    # around worker_block's rule that only a superuser blocks everywhere.
    user, client = alice
    bob, _ = staff_client("bob")
    mine, bobs = _study(user, "alice-1"), _study(bob, "bob-1")
    work = submitted(mine, platform="mturk", worker_id=WORKER, assignment_id=TASK_ID)

    client.post(f"/admin/annotations/participant/{work.participant_id}/change/", {"blocked": "on"})

    work.participant.refresh_from_db()
    assert not work.participant.blocked
    assert assignment_start(study=bobs, participant=work.participant, consented=True).study_id == bobs.pk
