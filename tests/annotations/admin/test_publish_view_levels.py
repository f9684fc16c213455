"""Each button of the publish page needs the access its service checks, no more and no less
(``PublicationAdmin.publish_view``, ``PUBLISH_ACTION_ACCESS``). Closing a study and withdrawing a
link need CHANGE (``study_close``, ``link_revoke``), as the study admin's "Close" and the links
admin's "Withdraw" do; publishing, syncing, approving, paying and making links need PAY. Regression:
every POST needed PAY, so a researcher with a change share who could close the study from the study
admin got 403 from the page's "Close" button, which the page offered them all the same.

Carl holds every model permission (``studies.pay_workers`` included) but only a change share of
Olga's studies; Vic a view share. The state is made as the app makes it (the services, shares)."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotations.models import OpenLink, ParticipantLink, PlatformCall, Publication
from annotations.services.platforms.publish import study_publish
from studies.models import Study, StudyShare
from studies.services.sharing import study_share
from tests.factories import staff
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
        before = (Publication.objects.count(), PlatformCall.objects.count(), ParticipantLink.objects.count(),
                  OpenLink.objects.count())
        response = client.post(_page(study), {"action": action, **PAY_ACTIONS[action]})
        assert response.status_code == 403, (study.name, action)
        assert (Publication.objects.count(), PlatformCall.objects.count(), ParticipantLink.objects.count(),
                OpenLink.objects.count()) == before
        page = client.get(_page(study)).content.decode()
        assert BUTTON.format(action) not in page, (study.name, action)
        assert "needs the right to pay this study's workers" in page


def test_a_view_share_is_refused_close_and_withdraw_and_not_shown_them(olga_studies):
    client = olga_studies["vic"]
    study, links = olga_studies["prolific"], olga_studies["links"]
    assert client.post(_page(study), {"action": "close"}).status_code == 403
    study.refresh_from_db()
    assert study.status == Study.Status.OPEN
    link = ParticipantLink.objects.filter(study=links, revoked=False).order_by("pk").first()
    assert client.post(_page(links), {"action": "revoke_link", "link_id": link.pk}).status_code == 403
    link.refresh_from_db()
    assert not link.revoked
    page = client.get(_page(links)).content.decode()
    for action in ("close", "revoke_link", *PAY_ACTIONS):
        assert BUTTON.format(action) not in page, action
    assert "Closing needs the right to change this study" in page


def test_the_owner_with_the_pay_right_is_offered_every_button(olga_studies):
    olga = Study.objects.get(pk=olga_studies["links"].pk).owner
    client = Client()
    client.force_login(olga)
    page = client.get(_page(olga_studies["links"])).content.decode()
    for action in ("close", "revoke_link", *PAY_ACTIONS):
        assert BUTTON.format(action) in page, action
