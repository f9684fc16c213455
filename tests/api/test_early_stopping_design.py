"""Issue 24: the API's study design carries ``stop_when_decided`` (off by default), and refuses it
for a kind that is not scored by majorities before and after."""
from __future__ import annotations

import pytest

from studies.models import Study
from tests.api.test_write_endpoints import design

pytestmark = pytest.mark.django_db


def test_a_design_that_stops_early_is_created_and_read_back(client_for, researcher, study_data):
    client = client_for(researcher)
    body = design(study_data.study.dataset, study_data.sources, stop_when_decided=True)
    response = client.post("/api/v1/studies/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["stop_when_decided"] is True
    study = Study.objects.get(pk=response.json()["id"])
    assert study.stop_when_decided is True
    assert client.get(f"/api/v1/studies/{study.pk}/").json()["stop_when_decided"] is True
    off = client.post("/api/v1/studies/", design(study_data.study.dataset, study_data.sources, name="off"),
                      format="json")
    assert off.json()["stop_when_decided"] is False


def test_stopping_early_is_refused_for_a_study_not_scored_by_majorities(client_for, researcher, study_data):
    body = design(study_data.study.dataset, study_data.sources, kind="rationale_properties", stop_when_decided=True)
    response = client_for(researcher).post("/api/v1/studies/", body, format="json")
    assert response.status_code == 400
    assert "stop_when_decided" in str(response.json())
