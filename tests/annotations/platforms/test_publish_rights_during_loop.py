"""A researcher's right to publish or move money is read again where each call takes effect, not
once when long work starts: a share revoked (through the sharing service) or the permission
removed while a publish makes its HITs, a Prolific study or links, while assignments are added,
or while an approve or bonus batch runs, stops the work before the next call
(``publish._publishing_goes_on``, ``study_add_assignments``, ``common.each_assignment``, each
through ``common.access_study_now``). Against botocore's Stubber and the local fake Prolific
server; the researchers are staff users with ordinary permissions."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission

from annotations.models import OpenLink, ParticipantLink, PlatformCall, Publication
from annotations.services.platforms import publish as publish_module
from annotations.services.platforms.access import OPERATOR, PlatformAccessDenied
from annotations.services.platforms.bonus import study_bonuses_pay
from annotations.services.platforms.publish import study_add_assignments, study_publish
from annotations.services.platforms.review import study_approve_all
from studies.models import StudyShare
from studies.services.sharing import study_share, study_unshare
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import submitted
from tests.annotations.platforms.mturk_stubs import HIT_A, HIT_B, hit, hit_params, published
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db
REASON = "Careful work throughout."
REFUSED = "not found or not yours to act on (studies.pay_workers on a study you own or that is shared with you)"


@pytest.fixture
def alice():
    return staff_client("alice")[0]


@pytest.fixture
def bob():
    return staff_client("bob")[0]


def _study(owner, platform: str, **fields):
    """14 tasks (two MTurk HITs: 9 and 5), owned by ``owner``, on ``platform``."""
    return make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, reward=Decimal("2.00"), owner=owner,
                      estimated_minutes_per_task=Decimal("6.0"), platform=platform, **fields)


def _shared(study, owner, user):
    study_share(study=study, user=owner, with_user=user, level=StudyShare.Level.PAY)
    return study


def _then_revoke(patch, obj, name: str, *, study, owner, user, on_call: int = 1) -> list:
    """``obj.name`` does its work; on its ``on_call``-th call the study's owner then revokes
    ``user``'s share, as another request would while the work waits for the platform. Returns the
    list of calls made."""
    real, calls = getattr(obj, name), []

    def wrapped(*args, **kwargs):
        result = real(*args, **kwargs)
        calls.append(kwargs)
        if len(calls) == on_call:
            study_unshare(study=study, user=owner, with_user=user)
        return result

    patch.setattr(obj, name, wrapped)
    return calls


def test_a_share_revoked_after_the_first_hit_makes_no_second_hit(mturk, alice, bob, monkeypatch):
    platform, stubber = mturk
    study = _shared(_study(alice, "mturk", status="draft"), alice, bob)
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_A, 9), hit_params(study, index=0, size=9))
    made = _then_revoke(monkeypatch, platform, "publish", study=study, owner=alice, user=bob)

    with pytest.raises(PlatformAccessDenied) as refused:
        study_publish(user=bob, study=study, platform_name="mturk")

    stubber.assert_no_pending_responses()
    assert len(made) == 1 and PlatformCall.objects.filter(operation="create_hit").count() == 1
    publication = Publication.objects.get()
    message = (f"publishing batch 1 of study {study.pk} stopped before HIT 2 of 2: study {study.pk}: {REFUSED}. "
               f"Nothing more was sent; what it made before ({HIT_A}) stays on the batch: someone who may publish "
               "the study resumes it by publishing again, or closes the study to stop it")
    assert refused.value.message == message
    # Recorded on the publication; what bob made while he had the right stays, for the owner to resume.
    assert (publication.status, publication.hit_ids, publication.error) == (
        Publication.Status.PUBLISHING, [HIT_A], message)

    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_B, 5), hit_params(study, index=1, size=5))
    resumed = study_publish(user=alice, study=study, platform_name="mturk")
    stubber.assert_no_pending_responses()
    assert (resumed.pk, resumed.status, resumed.hit_ids) == (publication.pk, Publication.Status.PUBLISHED,
                                                             [HIT_A, HIT_B])


def test_the_permission_removed_after_the_first_hit_is_seen_though_the_user_object_cached_it(mturk, alice, bob,
                                                                                             monkeypatch):
    platform, stubber = mturk
    study = _shared(_study(alice, "mturk", status="draft"), alice, bob)
    stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response("create_hit", hit(HIT_A, 9), hit_params(study, index=0, size=9))
    real = platform.publish

    def publish_then_remove(**kwargs):
        result = real(**kwargs)
        bob.user_permissions.remove(Permission.objects.get(codename="pay_workers"))  # bob's instance cached it
        return result

    monkeypatch.setattr(platform, "publish", publish_then_remove)
    with pytest.raises(PlatformAccessDenied, match="stopped before HIT 2 of 2"):
        study_publish(user=bob, study=study, platform_name="mturk")
    stubber.assert_no_pending_responses()
    assert Publication.objects.get().hit_ids == [HIT_A]


def test_a_share_revoked_after_the_prolific_draft_never_publishes_it(prolific, alice, bob, monkeypatch):
    platform, server = prolific
    study = _shared(_study(alice, "prolific", status="draft"), alice, bob)
    _then_revoke(monkeypatch, platform, "create_study", study=study, owner=alice, user=bob)

    with pytest.raises(PlatformAccessDenied, match="stopped before publishing Prolific study"):
        study_publish(user=bob, study=study, platform_name="prolific")

    assert len(server.calls("POST", r"/api/v1/studies/$")) == 1  # the draft: it recruits no one
    assert server.calls("POST", r"/api/v1/studies/\w+/transition/") == []
    publication = Publication.objects.get()
    assert publication.status == Publication.Status.PUBLISHING and publication.prolific_study_id
    assert "stopped before publishing Prolific study" in publication.error


def test_a_share_revoked_while_the_study_opens_makes_no_links(alice, bob, monkeypatch):
    study = _shared(_study(alice, "link", status="draft"), alice, bob)
    _then_revoke(monkeypatch, publish_module, "study_open", study=study, owner=alice, user=bob)

    with pytest.raises(PlatformAccessDenied, match="stopped before its links"):
        study_publish(user=bob, study=study, platform_name="link")

    assert not ParticipantLink.objects.exists() and not OpenLink.objects.exists()
    publication = Publication.objects.get()  # nothing made: failed, reused by the next publish
    assert publication.status == Publication.Status.FAILED and "stopped before its links" in publication.error


def test_a_share_revoked_after_the_first_extra_assignments_adds_no_more(mturk, alice, bob, monkeypatch):
    platform, stubber = mturk
    study = _study(alice, "mturk", status="draft")
    publication = published(stubber, study)  # HIT_A and HIT_B, by the operator
    _shared(study, alice, bob)
    for hit_id in (HIT_A, HIT_B):  # 14 tasks needed, none available: each HIT may grow by 4 (below 10)
        stubber.add_response("get_hit", {"HIT": {"HITId": hit_id, "MaxAssignments": 5,
                                                 "NumberOfAssignmentsAvailable": 0}}, {"HITId": hit_id})
    stubber.add_response("create_additional_assignments_for_hit", {}, {
        "HITId": HIT_A, "NumberOfAdditionalAssignments": 4, "UniqueRequestToken": f"{publication.request_token}-x0-9"})
    added = _then_revoke(monkeypatch, platform, "add_assignments", study=study, owner=alice, user=bob)

    with pytest.raises(PlatformAccessDenied) as refused:
        study_add_assignments(user=bob, study=study)

    stubber.assert_no_pending_responses()
    assert [call["hit_id"] for call in added] == [HIT_A]
    assert PlatformCall.objects.filter(operation="add_assignments").count() == 1
    assert refused.value.message == (
        f"adding assignments to study {study.pk} stopped before HIT {HIT_B}: study {study.pk}: {REFUSED}. Nothing "
        f"more was sent; added before: [{{'hit_id': '{HIT_A}', 'added': 4}}]")


@pytest.fixture
def two_works(prolific, alice, bob):
    """Alice's Prolific study, shared with bob at PAY, with two submitted tasks."""
    _, server = prolific
    study = _shared(_study(alice, "prolific"), alice, bob)
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    works = []
    for worker in ("pw0rker1", "pw0rker2"):
        sub = server.add_submission(publication.prolific_study_id, participant_id=worker)
        works.append(submitted(study, platform="prolific", worker_id=worker, assignment_id=sub["id"],
                               task_id=publication.prolific_study_id))
    return study, works


# The batches as the publish page and the Celery tasks run them (``review.study_approve_all``,
# ``bonus.study_bonuses_pay``), whose ``each_assignment`` checks the acting user again before each row.

def test_a_share_revoked_during_an_approve_batch_approves_no_further_row(prolific, two_works, alice, bob,
                                                                         monkeypatch):
    platform, server = prolific
    study, works = two_works
    _then_revoke(monkeypatch, platform, "approve", study=study, owner=alice, user=bob)

    result = study_approve_all(user=bob, study=study, assignment_ids=[w.pk for w in works])

    assert (result["approved"], result["unsettled"]) == (1, [])
    assert result["errors"] == [f"assignment {works[1].pk}: nothing was done: the right to act was lost during the "
                                f"batch (study {study.pk}: {REFUSED})"]
    assert len(server.calls("POST", r"/api/v1/submissions/\w+/transition/")) == 1
    assert [w.status for w in type(works[0]).objects.filter(pk__in=[w.pk for w in works]).order_by("pk")] == [
        "approved", "submitted"]


def test_a_share_revoked_during_a_bonus_batch_pays_no_further_row(prolific, two_works, alice, bob, monkeypatch):
    platform, server = prolific
    study, works = two_works
    _then_revoke(monkeypatch, platform, "bonus_pay", study=study, owner=alice, user=bob)

    result = study_bonuses_pay(user=bob, study=study, assignment_ids=[w.pk for w in works], amount="0.50",
                               reason=REASON)

    assert result["paid"] == 1 and len(server.payments) == 1
    assert result["errors"] == [f"assignment {works[1].pk}: nothing was done: the right to act was lost during the "
                                f"batch (study {study.pk}: {REFUSED})"]


def test_a_batch_whose_user_keeps_the_right_does_every_row(prolific, two_works, bob):
    _, server = prolific
    study, works = two_works
    result = study_approve_all(user=bob, study=study, assignment_ids=[w.pk for w in works])
    assert (result["approved"], result["errors"]) == (2, [])
    assert len(server.calls("POST", r"/api/v1/submissions/\w+/transition/")) == 2
