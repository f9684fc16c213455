"""The link admins' change pages are not a way around the link services' rights. Bob holds a CHANGE
share of Alice's study but not the right to publish it (PAY): the services refuse him making links,
and withdrawing a link needs only CHANGE, so the admin lets him withdraw (through ``link_revoke``)
and relabel, and nothing else: no un-withdrawing, no new completion code, no lifted cap, no link
moved between studies, and no dropdown naming other researchers' publications. The state is made
as the app makes it (the services, a share), and Bob acts through the admin as a staff user with
ordinary permissions."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.forms.models import model_to_dict
from django.test import Client

from annotations.models import OpenLink, ParticipantLink
from annotations.services.links import link_revoke, links_close, links_generate
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from studies.models import StudyShare
from studies.services.sharing import study_share
from tests.annotations.factories import make_study
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db


def _study(owner, name: str):
    return make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, reward=Decimal("2.00"), owner=owner,
                      estimated_minutes_per_task=Decimal("6.0"), name=name)


def _change(model, pk: int) -> str:
    return f"/admin/annotations/{model._meta.model_name}/{pk}/change/"


@pytest.fixture
def shared():
    """Alice's study (two single-person links, one withdrawn, and an open link of a link
    publication, closed), shared with Bob at CHANGE; Bob's own study with a link; Carol's study,
    published as an open link, that Bob may not see."""
    alice, _ = staff_client("alice")
    bob, bob_client = staff_client("bob", pay=False)
    carol, _ = staff_client("carol")
    hers = _study(alice, "alices-study")
    study_share(study=hers, user=alice, with_user=bob, level=StudyShare.Level.CHANGE)
    study_publish(user=alice, study=hers, platform_name="link", options={"link_mode": "open"})
    links_close(study=hers, user=alice)
    withdrawn, kept = links_generate(study=hers, n=2, user=alice, label="Seat")
    link_revoke(link=withdrawn, user=alice)
    his = _study(bob, "bobs-study")
    # Bob may not publish even his own study (no pay right): the operator makes his link
    # (``manage.py make_links``).
    [his_link] = links_generate(study=his, n=1, user=OPERATOR)
    secret = _study(carol, "carols-secret-study")
    carols = study_publish(user=carol, study=secret, platform_name="link", options={"link_mode": "open"})
    return {"bob": bob, "client": bob_client, "hers": hers, "his": his, "withdrawn": withdrawn, "kept": kept,
            "his_link": his_link, "open": OpenLink.objects.get(study=hers), "carols": carols}


def test_a_change_share_cannot_unwithdraw_recode_or_move_a_single_person_link(shared):
    client, hers, his = shared["client"], shared["hers"], shared["his"]
    withdrawn, his_link = shared["withdrawn"], shared["his_link"]
    before = model_to_dict(withdrawn)

    # Un-withdraw Alice's link, give it a code of his choosing, move it into his own study.
    client.post(_change(ParticipantLink, withdrawn.pk),
                {"study": his.pk, "label": "Seat 1 (front row)", "completion_code": "BOBS-CODE", "revoked": ""})
    # Move his link into Alice's study: a link for her study, made without the right to publish it.
    client.post(_change(ParticipantLink, his_link.pk),
                {"study": hers.pk, "label": "", "completion_code": "BOBS-CODE", "revoked": ""})

    withdrawn.refresh_from_db()
    assert model_to_dict(withdrawn) == {**before, "label": "Seat 1 (front row)"}  # the label is harmless
    assert withdrawn.revoked and withdrawn.study_id == hers.pk and withdrawn.completion_code != "BOBS-CODE"
    his_link.refresh_from_db()
    assert his_link.study_id == his.pk and his_link.completion_code != "BOBS-CODE"
    assert not ParticipantLink.objects.filter(completion_code="BOBS-CODE").exists()


def test_a_change_share_cannot_reopen_uncap_recode_or_move_an_open_link(shared):
    client, link = shared["client"], shared["open"]
    before = model_to_dict(link)
    assert not link.active and link.max_participants == 14

    client.post(_change(OpenLink, link.pk),
                {"study": shared["his"].pk, "publication": shared["carols"].pk, "completion_code": "BOBS-CODE",
                 "max_participants": "", "active": "on"})

    link.refresh_from_db()
    assert model_to_dict(link) == before


def test_the_link_pages_name_no_other_researchers_publication(shared):
    client = shared["client"]
    for model, pk in ((OpenLink, shared["open"].pk), (ParticipantLink, shared["kept"].pk)):
        page = client.get(_change(model, pk))
        body = page.content.decode()
        assert page.status_code == 200, model
        assert "carols-secret-study" not in body, model
        assert 'name="publication"' not in body and 'name="study"' not in body, model


def test_withdrawing_is_an_action_that_calls_the_service(shared):
    # The legitimate path: ``link_revoke`` needs CHANGE (closing), which Bob's share grants; a
    # VIEW share does not, and the row stays as it was.
    client, kept = shared["client"], shared["kept"]
    vic, vic_client = staff_client("vic")
    study_share(study=shared["hers"], user=shared["hers"].owner, with_user=vic, level=StudyShare.Level.VIEW)
    changelist = "/admin/annotations/participantlink/"

    vic_client.post(changelist, {"action": "revoke_links", "_selected_action": [kept.pk]})
    kept.refresh_from_db()
    assert not kept.revoked

    response = client.post(changelist, {"action": "revoke_links", "_selected_action": [kept.pk]}, follow=True)
    kept.refresh_from_db()
    assert kept.revoked
    assert "1 link(s) withdrawn" in response.content.decode()


def test_no_link_is_deleted_in_the_admin(shared):
    # Deleting a link would drop its task's tie to it and the record of the code it gave out; a
    # link is withdrawn instead. Neither the delete page nor the bulk action is offered, to Bob or
    # to the study's owner.
    owner_client = Client()
    owner_client.force_login(shared["hers"].owner)
    links = [(ParticipantLink, shared["kept"].pk), (OpenLink, shared["open"].pk)]
    for client in (shared["client"], owner_client):
        for model, pk in links:
            delete = f"/admin/annotations/{model._meta.model_name}/{pk}/delete/"
            assert client.post(delete, {"post": "yes"}).status_code == 403, model
            changelist = f"/admin/annotations/{model._meta.model_name}/"
            client.post(changelist, {"action": "delete_selected", "_selected_action": [pk], "post": "yes"})
            assert model.objects.filter(pk=pk).exists(), model
            assert "delete_selected" not in client.get(changelist).content.decode(), model
