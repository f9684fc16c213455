"""An account that owns a study, made a platform call or granted a bonus cannot be deleted.

``Study.owner``, ``PlatformCall.user`` and ``Bonus.created_by`` were ``SET_NULL``: a superuser
deleting Alice at the admin's user delete page left her studies owner-less, and an owner-less study
borrows Figure 4's utility from the operator's studies only, so re-scoring changed her generalization
study's by_utility and the operator's; every call and bonus she made lost who made it (the README:
"who and when are kept on the call"). They are ``PROTECT`` now: every path (the delete page, the
changelist's "delete selected", the shell, a service) is refused with Django's protected-objects
message, and the account is kept (deactivate it instead). An account without such rows is deleted
as before; a study made by the operator keeps no owner.

The admin pages list every protected row and say to deactivate: the platform-call and bonus admins
delete nothing, and Django named their types as a permission the superuser lacked instead of the
protected rows (Alice's study went unnamed, nothing said "protected" or "deactivate")."""
from __future__ import annotations

import re
from decimal import Decimal
from html import unescape

import pytest
from django.contrib.auth import get_user_model
from django.db.models import ProtectedError
from django.test import Client

from annotations.models import Bonus, PlatformCall
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.publish import study_publish
from studies.models import Study, StudyShare
from studies.services.sharing import study_share
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import prolific, prolific_server, submitted  # noqa: F401
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db

PROTECTED = "would require deleting the following protected related objects"
LACKING = "doesn't have permission to delete the following types of objects"
DEACTIVATE = "deactivate it instead (untick Active on the account's page)"
USERS = "/admin/auth/user/"


def _superuser_client() -> Client:
    root = get_user_model().objects.create_superuser(username="root", password="pw", email="root@example.org")
    client = Client()
    client.force_login(root)
    return client


def _text(page) -> str:
    """The admin page's content area as text."""
    html = page.content.decode()
    return " ".join(re.sub(r"<[^>]+>", " ", html[html.find('id="content"'):]).split())


def _messages(page) -> str:
    """The messages shown above the admin page's content, as text."""
    html = page.content.decode()
    start = html.find('class="messagelist"')
    return "" if start < 0 else " ".join(unescape(re.sub(r"<[^>]+>", " ", html[start:html.find("</ul>", start)])).split())


def _protected(user) -> set:
    """The rows Django names when ``user.delete()`` is refused."""
    with pytest.raises(ProtectedError) as refused:
        user.delete()
    return set(refused.value.protected_objects)


@pytest.fixture
def paid_by_bob(prolific):  # noqa: F811
    """(alice, who owns a study on Prolific and published it; bob, who owns nothing and paid a
    bonus on her study through a pay share; the study; bob's bonus)."""
    _, server = prolific
    alice, _ = staff_client("alice")
    bob, _ = staff_client("bob")
    study = make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, reward=Decimal("2.00"), owner=alice,
                       estimated_minutes_per_task=Decimal("6.0"), name="alices-study", platform="prolific")
    publication = study_publish(user=alice, study=study, platform_name="prolific")
    sub = server.add_submission(publication.prolific_study_id, participant_id="pworker1")
    task = submitted(study, platform="prolific", worker_id="pworker1", assignment_id=sub["id"],
                     task_id=publication.prolific_study_id)
    study_share(study=study, user=alice, with_user=bob, level=StudyShare.Level.PAY)
    bonus = bonus_pay(user=bob, study=study, assignment=task, amount="0.50", reason="careful work")
    assert bonus.status == Bonus.Status.PAID and bonus.created_by_id == bob.pk
    return alice, bob, study, bonus


def test_the_owner_of_a_study_is_not_deleted_on_the_admin_page_nor_in_the_shell():
    carol, _ = staff_client("carol")
    study = make_study(owner=carol, name="carols-study")
    client = _superuser_client()

    for page in (client.post(f"{USERS}{carol.pk}/delete/", {"post": "yes"}),
                 client.post(USERS, {"action": "delete_selected", "_selected_action": [carol.pk], "post": "yes"})):
        assert page.status_code == 200
        refusal = _text(page)
        assert PROTECTED in refusal and "Study: carols-study" in refusal, refusal
        assert DEACTIVATE in _messages(page), _messages(page)
    assert get_user_model().objects.filter(pk=carol.pk).exists()

    assert _protected(carol) == {study}
    assert Study.objects.get(pk=study.pk).owner_id == carol.pk  # the study keeps its owner, still open
    assert Study.objects.get(pk=study.pk).status == Study.Status.OPEN


def test_who_made_a_platform_call_or_a_bonus_is_not_deleted(paid_by_bob):
    alice, bob, study, bonus = paid_by_bob
    bobs_calls = set(PlatformCall.objects.filter(user=bob))
    alices_calls = set(PlatformCall.objects.filter(user=alice))
    assert bobs_calls and alices_calls
    client = _superuser_client()

    # The platform-call and bonus admins delete nothing, yet the refusal lists Bob's bonus and calls
    # as the protected rows they are (not their types as a permission the superuser lacks).
    for page in (client.get(f"{USERS}{bob.pk}/delete/"),
                 client.post(f"{USERS}{bob.pk}/delete/", {"post": "yes"}),
                 client.post(USERS, {"action": "delete_selected", "_selected_action": [bob.pk], "post": "yes"})):
        assert page.status_code == 200
        refusal = _text(page)
        assert "Cannot delete user" in refusal or "Cannot delete users" in refusal, refusal
        assert PROTECTED in refusal and LACKING not in refusal, refusal
        assert f"Bonus: {bonus}" in refusal, refusal
        assert all(f"Platform call: {call}" in refusal for call in bobs_calls), refusal
        assert DEACTIVATE in _messages(page), _messages(page)
    assert get_user_model().objects.filter(pk=bob.pk).exists()

    # Alice's page names her study beside her calls, all of them protected.
    for page in (client.get(f"{USERS}{alice.pk}/delete/"),
                 client.post(USERS, {"action": "delete_selected", "_selected_action": [alice.pk, bob.pk],
                                     "post": "yes"})):
        assert page.status_code == 200
        refusal = _text(page)
        assert PROTECTED in refusal and LACKING not in refusal, refusal
        assert "Study: alices-study" in refusal, refusal
        assert all(f"Platform call: {call}" in refusal for call in alices_calls), refusal
        assert DEACTIVATE in _messages(page), _messages(page)
    assert get_user_model().objects.filter(pk=alice.pk).exists()

    # Bob owns nothing: his bonus and his calls alone keep his account.
    assert _protected(bob) == {bonus, *bobs_calls}
    # Alice owns the study and made its publishing calls: each keeps her account.
    assert _protected(alice) == {study, *alices_calls}

    assert Bonus.objects.get(pk=bonus.pk).created_by_id == bob.pk
    assert set(PlatformCall.objects.filter(user=bob)) == bobs_calls
    assert set(PlatformCall.objects.filter(user=alice)) == alices_calls


def test_an_account_without_studies_calls_or_bonuses_is_deleted_and_the_operators_study_stays_ownerless():
    dave, _ = staff_client("dave")
    erin, _ = staff_client("erin")
    operators = make_study(name="operators-study")  # no owner: the operator's
    client = _superuser_client()

    page = client.get(f"{USERS}{dave.pk}/delete/")
    assert page.status_code == 200 and "Are you sure" in _text(page), _text(page)
    assert PROTECTED not in _text(page) and DEACTIVATE not in _messages(page)
    page = client.post(f"{USERS}{dave.pk}/delete/", {"post": "yes"})
    assert page.status_code == 302
    erin.delete()
    assert not get_user_model().objects.filter(username__in=["dave", "erin"]).exists()
    assert Study.objects.get(pk=operators.pk).owner_id is None
