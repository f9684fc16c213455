"""Sharing says what it grants (issue 20, item 8): a study shared through the API, documented as
"may read", let the researcher it was shared with close it. A share now has a level (view, change,
pay) and grants that level only, through the one access selector."""
from __future__ import annotations

import pytest
from django.test import Client

from studies.models import Study
from tests.api.test_write_endpoints import design

pytestmark = pytest.mark.django_db
RESEARCHER = ["studies.add_study", "studies.view_study", "studies.change_study", "studies.pay_workers",
              "studies.view_dataset", "studies.view_rationalesource"]


def _create_shared(client_for, make_user, study_data, **share):
    bob = make_user("bob", staff=True, perms=RESEARCHER)
    alice = make_user("alice", staff=True, perms=RESEARCHER)
    body = design(study_data.study.dataset, study_data.sources, name="bobs-study", shared_with=["alice"], **share)
    response = client_for(bob).post("/api/v1/studies/", body, format="json")
    assert response.status_code == 201, response.json()
    return Study.objects.get(pk=response.json()["id"]), alice, response.json()


def _close_in_the_admin(user, study):
    client = Client()
    client.force_login(user)
    page = client.post("/admin/studies/study/", {"action": "close_studies", "_selected_action": [study.pk]},
                       follow=True)
    study.refresh_from_db()
    return [str(m) for m in page.context["messages"]]


def test_a_study_shared_to_read_cannot_be_closed_by_the_reader(client_for, make_user, study_data):
    study, alice, created = _create_shared(client_for, make_user, study_data)
    said = _close_in_the_admin(alice, study)
    assert study.status == "draft"
    assert any("you may not change this study" in m for m in said), said
    assert created["shares"] == [{"username": "alice", "level": "view"}]
    # Reading is what the share grants.
    assert client_for(alice).get(f"/api/v1/studies/{study.pk}/").status_code == 200


def test_a_study_shared_at_the_pay_level_can_be_closed_by_the_researcher(client_for, make_user, study_data):
    study, alice, created = _create_shared(client_for, make_user, study_data, share_level="pay")
    assert created["shares"] == [{"username": "alice", "level": "pay"}]
    _close_in_the_admin(alice, study)
    assert study.status == "closed"


def test_a_share_level_must_be_one_of_the_three(client_for, make_user, study_data):
    bob = make_user("bob", staff=True, perms=RESEARCHER)
    make_user("alice")
    body = design(study_data.study.dataset, study_data.sources, shared_with=["alice"], share_level="owner")
    response = client_for(bob).post("/api/v1/studies/", body, format="json")
    assert response.status_code == 400 and "share_level" in response.json()
