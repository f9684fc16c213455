"""The study page's shares (issue 20, item 8): the owner shares a study at a level; someone it is
shared with cannot raise their own level or share it further, on the page or behind it."""
from __future__ import annotations

import pytest
from django.urls import reverse

from studies.models import StudyShare
from studies.services.sharing import study_share
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_setup import form_data
from tests.work import open_utility_study

pytestmark = pytest.mark.django_db


@pytest.fixture
def bobs_study():
    bob, bob_client = staff_client("bob")
    study = open_utility_study(name="bobs", n_items=2, n_sources=1, quota=1, owner=bob)
    return study, bob, bob_client


def test_the_owner_shares_a_study_at_a_level_on_its_page(bobs_study):
    study, _, bob_client = bobs_study
    alice, _ = staff_client("alice")
    url = reverse("admin:studies_study_change", args=[study.pk])
    data = form_data(bob_client.get(url))
    data.update({"shares-TOTAL_FORMS": "1", "shares-0-user": "alice", "shares-0-level": "change"})
    response = bob_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert list(StudyShare.objects.values_list("user__username", "level")) == [("alice", "change")]
    data = form_data(bob_client.get(url))
    assert data["shares-0-user"] == "alice"  # shown by username
    data.update({"shares-TOTAL_FORMS": "2", "shares-1-user": "nobody", "shares-1-level": "view"})
    refused = bob_client.post(url, data)
    assert refused.status_code == 200 and "Not found or not yours" in refused.content.decode()


def test_a_researcher_with_a_change_share_cannot_raise_it_or_share_further(bobs_study):
    study, bob, _ = bobs_study
    alice, alice_client = staff_client("alice")
    carol, _ = staff_client("carol")
    study_share(study=study, user=bob, with_user=alice, level="change")
    url = reverse("admin:studies_study_change", args=[study.pk])
    page = alice_client.get(url)
    assert page.status_code == 200
    data = form_data(page)
    assert data["shares-0-level"] == "change"
    data.update({"shares-0-level": "pay", "shares-TOTAL_FORMS": "2", "shares-1-user": carol.username,
                 "shares-1-level": "pay"})
    response = alice_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]  # the page saves; the shares stay
    assert list(StudyShare.objects.values_list("user__username", "level")) == [("alice", "change")]


def test_a_researcher_with_a_change_share_cannot_take_the_study_over(bobs_study):
    # Owning it would let them raise their own share.
    study, bob, _ = bobs_study
    alice, alice_client = staff_client("alice")
    study_share(study=study, user=bob, with_user=alice, level="change")
    url = reverse("admin:studies_study_change", args=[study.pk])
    data = {**form_data(alice_client.get(url)), "owner": alice.pk}
    assert alice_client.post(url, data).status_code == 302
    study.refresh_from_db()
    assert study.owner == bob
