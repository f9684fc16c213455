"""Each button of the publish page needs the access its service checks, no more and no less
(``PublicationAdmin.publish_view``, ``PUBLISH_ACTION_ACCESS``). Closing a study and withdrawing a
link need CHANGE (``study_close``, ``link_revoke``), as the study admin's "Close" and the links
admin's "Withdraw" do; publishing, syncing, approving, paying and making links need PAY. Regression:
every POST needed PAY, so a researcher with a change share who could close the study from the study
admin got 403 from the page's "Close" button, which the page offered them all the same.

A button refused is neither shown nor done, and the page says why, with the reason the check
gives (``publish_action_refusal``), each reason once: a refused POST comes back to the page with
"Nothing was done: <why>" (``post_action``), as the service's own refusal read before. Regression:
the page printed a fixed "needs the right to pay this study's workers" whatever the reason, so the
owner of a bundle copy (who holds that right) was told to get it, and a refused POST was a blank 403.

Carl holds every model permission (``studies.pay_workers`` included) but only a change share of
Olga's studies; Vic a view share. The state is made as the app makes it (the services, shares)."""
from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from annotations.models import OpenLink, ParticipantLink, PlatformCall, Publication
from annotations.services.platforms.access import study_imported
from annotations.services.platforms.publish import study_publish
from scoring.services.bundle import bundle_import
from studies.models import Study, StudyShare
from studies.services.sharing import study_share
from tests.factories import staff
from tests.scoring.test_bundle import _bundle, _worked_study
from tests.work import open_utility_study

pytestmark = pytest.mark.django_db

PAY_ACTIONS = {
    "publish": {"platform": "prolific", "dry_run": "on"},
    "sync": {},
    "approve_all": {"shown_submitted": ""},
    "bonus": {"amount": "0.50", "reason": "thanks", "kind": "other", "assignment_ids": "1"},
    "make_links": {"count": "2", "label": "x"},
    "open_link": {"completion_code": "", "max_participants": ""},
}
# Each button's form on the page, by the hidden field that names its action.
BUTTON = 'name="action" value="{}"'


def _page(study: Study) -> str:
    return reverse("admin:annotations_publication_publish", args=[study.pk])


def _done() -> tuple:
    return (Publication.objects.count(), PlatformCall.objects.count(), ParticipantLink.objects.count(),
            OpenLink.objects.count())


def _errors(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request) if m.level_tag == "error"]


def _refused_post(client: Client, study: Study, action: str, data: dict | None = None) -> list[str]:
    """POST ``action`` as a refused button: back to the page (302), nothing done; its error messages."""
    before = _done()
    response = client.post(_page(study), {"action": action, **(data or {})})
    assert response.status_code == 302, (study.name, action, response.status_code)
    assert response["Location"] == _page(study)
    assert _done() == before, (study.name, action)
    return _errors(response)


@pytest.fixture
def olga_studies():
    """Olga's open Prolific study and her link study (published: one single-person link per task),
    each shared with Carl at CHANGE and with Vic at VIEW."""
    olga, _ = staff("olga")
    carl, carl_client = staff("carl")
    vic, vic_client = staff("vic")
    prolific = open_utility_study(name="olgas-prolific", n_items=1, n_sources=1, quota=1, owner=olga)
    links = open_utility_study(name="olgas-links", n_items=1, n_sources=1, quota=1, owner=olga, platform="link")
    study_publish(study=links, user=olga, platform_name="link", options={"link_mode": "single"})
    for study in (prolific, links):
        study_share(study=study, user=olga, with_user=carl, level=StudyShare.Level.CHANGE)
        study_share(study=study, user=olga, with_user=vic, level=StudyShare.Level.VIEW)
    return {"prolific": prolific, "links": links, "carl": carl_client, "vic": vic_client}


def test_a_change_share_closes_the_study_from_the_publish_page(olga_studies):
    study, client = olga_studies["prolific"], olga_studies["carl"]
    page = client.get(_page(study)).content.decode()
    response = client.post(_page(study), {"action": "close"})
    assert response.status_code == 302
    study.refresh_from_db()
    assert study.status == Study.Status.CLOSED
    assert BUTTON.format("close") in page  # the page offered it


def test_a_change_share_withdraws_a_link_from_the_publish_page(olga_studies):
    study, client = olga_studies["links"], olga_studies["carl"]
    link = ParticipantLink.objects.filter(study=study, revoked=False).order_by("pk").first()
    page = client.get(_page(study)).content.decode()
    response = client.post(_page(study), {"action": "revoke_link", "link_id": link.pk})
    assert response.status_code == 302
    link.refresh_from_db()
    assert link.revoked
    assert BUTTON.format("revoke_link") in page  # the page offered it


@pytest.mark.parametrize("action", sorted(PAY_ACTIONS))
def test_a_change_share_is_refused_the_pay_buttons_and_not_shown_them(olga_studies, action):
    client = olga_studies["carl"]
    for study in (olga_studies["prolific"], olga_studies["links"]):
        why = f"study {study.pk}: not found or not yours to act on (studies.pay_workers"
        page = client.get(_page(study)).content.decode()
        assert BUTTON.format(action) not in page, (study.name, action)
        assert page.count(why) == 1  # the reason, once for every button it refuses
        errors = _refused_post(client, study, action, PAY_ACTIONS[action])
        assert len(errors) == 1 and errors[0].startswith(f"Nothing was done: {why}"), (study.name, errors)


def test_a_view_share_is_refused_close_and_withdraw_and_not_shown_them(olga_studies):
    client = olga_studies["vic"]
    study, links = olga_studies["prolific"], olga_studies["links"]
    why = "not found or not yours to act on (studies.change_study"
    page = client.get(_page(links)).content.decode()
    for action in ("close", "revoke_link", *PAY_ACTIONS):
        assert BUTTON.format(action) not in page, action
    assert page.count(why) == 1 and page.count("studies.pay_workers") == 1  # each reason once
    assert why in _refused_post(client, study, "close")[0]
    study.refresh_from_db()
    assert study.status == Study.Status.OPEN
    link = ParticipantLink.objects.filter(study=links, revoked=False).order_by("pk").first()
    assert why in _refused_post(client, links, "revoke_link", {"link_id": link.pk})[0]
    link.refresh_from_db()
    assert not link.revoked


def test_without_the_view_share_the_page_and_its_buttons_stay_404(olga_studies):
    _, stranger = staff("sam")
    study = olga_studies["prolific"]
    assert stranger.get(_page(study)).status_code == 404
    assert stranger.post(_page(study), {"action": "close"}).status_code == 404
    study.refresh_from_db()
    assert study.status == Study.Status.OPEN


def test_the_owner_with_the_pay_right_is_offered_every_button(olga_studies):
    olga = Study.objects.get(pk=olga_studies["links"].pk).owner
    client = Client()
    client.force_login(olga)
    page = client.get(_page(olga_studies["links"])).content.decode()
    for action in ("close", "revoke_link", *PAY_ACTIONS):
        assert BUTTON.format(action) in page, action
    assert 'id="refusals"' not in page and "rl-refused" not in page


def test_a_link_studys_audit_says_it_makes_no_platform_calls(olga_studies):
    olga = Study.objects.get(pk=olga_studies["links"].pk).owner
    client = Client()
    client.force_login(olga)
    links = client.get(_page(olga_studies["links"])).content.decode()
    assert "A link study makes no platform calls" in links
    assert "committed on the platform" not in links and 'id="committed-total"' not in links
    prolific = client.get(_page(olga_studies["prolific"])).content.decode()
    assert 'id="committed-total"' in prolific and "A link study makes no platform calls" not in prolific


@pytest.mark.parametrize("superuser", [False, True])
def test_a_bundle_copys_owner_is_told_it_was_imported_not_to_get_the_pay_right(superuser):
    """The owner holds the right to pay (as does a superuser): the buttons that move money are
    refused because the study was run elsewhere (``study_imported``), and the page says that."""
    if superuser:
        owner = get_user_model().objects.create_superuser("imp", "imp@example.org", "pw")
        client = Client()
        client.force_login(owner)
    else:
        owner, client = staff("imp")
    copy = bundle_import(file=io.BytesIO(_bundle(_worked_study())), name="copy", filename="s.zip", owner=owner)
    assert study_imported(copy)
    page = client.get(_page(copy)).content.decode()
    for action in PAY_ACTIONS:
        assert BUTTON.format(action) not in page, action
    assert BUTTON.format("close") in page  # closing moves no money: its owner may
    assert page.count("it was imported from a study bundle") == 1
    assert "studies.pay_workers" not in page and "needs the right to pay" not in page
    errors = _refused_post(client, copy, "sync")
    assert len(errors) == 1 and errors[0].startswith(f"Nothing was done: study {copy.pk}"), errors
    assert "it was imported from a study bundle" in errors[0]
    shown = client.get(_page(copy)).content.decode()  # where the redirect leads: the message on the page
    assert f"Nothing was done: study {copy.pk} (&#x27;copy&#x27;): it was imported from a study bundle" in shown


def test_a_pay_share_without_add_publication_is_told_it_needs_add_publication(olga_studies):
    """Pia holds ``studies.pay_workers`` and a pay share, not ``annotations.add_publication``: the
    page names what she lacks, not the right she holds."""
    pia, client = staff("pia")
    pia.user_permissions.remove(Permission.objects.get(codename="add_publication"))
    study = olga_studies["prolific"]
    olga = Study.objects.get(pk=study.pk).owner
    study_share(study=study, user=olga, with_user=pia, level=StudyShare.Level.PAY)
    why = "publishing, reviewing and paying need annotations.add_publication"
    page = client.get(_page(study)).content.decode()
    for action in PAY_ACTIONS:
        assert BUTTON.format(action) not in page, action
    assert BUTTON.format("close") in page
    assert page.count(why) == 1
    assert "studies.pay_workers" not in page
    assert _refused_post(client, study, "approve_all", PAY_ACTIONS["approve_all"]) == [f"Nothing was done: {why}"]
