"""``/api/v1/assignments/`` never lists a withdrawn participant's tasks (``AssignmentViewSet``:
emptied by the withdrawal, kept only as payment records), yet its ``status`` filter offered
``withdrawn`` (the schema's enum included it), so ``?status=withdrawn`` answered an empty 200 that a
caller read as "no withdrawn tasks". Now ``withdrawn`` is not a choice of the filter: a 400 naming
``status`` and saying why, and neither the schema's enum nor the list's description offers it."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from annotations.models import Assignment
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_approve
from annotations.services.platforms.sync import study_sync
from annotations.services.withdrawal import participant_withdraw
from studies.api.tokens import api_token_create
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import open_study, submitted

pytestmark = pytest.mark.django_db


def test_status_withdrawn_is_a_400_saying_withdrawn_tasks_are_never_listed(prolific):
    """A paid task of a withdrawn worker stays, emptied, as ``withdrawn`` (the payment's record); the
    list leaves it out, and asking for that status says so instead of answering an empty page."""
    cache.clear()
    _platform, server = prolific
    owner = get_user_model().objects.create_user(username="wes", password="pw")
    study = make_study(n_items=3, n_sources=1, quota=2, units_per_task=3, status="draft", reward=Decimal("2.00"),
                       platform="prolific", owner=owner)
    open_study(study)
    pid = study_publish(user=OPERATOR, study=study, platform_name="prolific").prolific_study_id
    mine, theirs = (server.add_submission(pid, participant_id=w) for w in ("p_leaving", "p_staying"))
    leaving = submitted(study, platform="prolific", worker_id="p_leaving", assignment_id=mine["id"], task_id=pid)
    staying = submitted(study, platform="prolific", worker_id="p_staying", assignment_id=theirs["id"], task_id=pid)
    study_sync(study=study)
    assignment_approve(user=OPERATOR, study=study, assignment=leaving)
    bonus_pay(user=OPERATOR, study=study, assignment=leaving, amount=Decimal("0.50"), reason="Thanks.")
    participant_withdraw(user=OPERATOR, study=study, worker_id="p_leaving")
    assert Assignment.objects.get(pk=leaving.pk).status == Assignment.Status.WITHDRAWN
    _, key = api_token_create(user=owner, name="t", read_only=True, by=None)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    response = api.get("/api/v1/assignments/", {"status": "withdrawn"})
    assert response.status_code == 400, response.content[:300]
    (message,) = response.json()["status"]
    assert "'withdrawn' is not a status this list filters by" in message and "payment records" in message
    assert "never listed" in message and "submitted" in message

    # The list and the other statuses leave the withdrawn task out.
    everything = api.get("/api/v1/assignments/", {"page_size": 1000})
    assert everything.status_code == 200
    assert [row["id"] for row in everything.json()["results"]] == [staying.pk]
    assert api.get("/api/v1/assignments/", {"status": "submitted"}).json()["results"][0]["id"] == staying.pk
    bogus = api.get("/api/v1/assignments/", {"status": "bogus"})
    assert bogus.status_code == 400 and "status" in bogus.json()


def test_the_schema_offers_no_withdrawn_status_and_says_why():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operation = schema["paths"]["/api/v1/assignments/"]["get"]
    (status,) = [p for p in operation["parameters"] if p["name"] == "status"]
    assert "withdrawn" not in status["schema"]["enum"] and "submitted" in status["schema"]["enum"]
    assert "never listed" in status["description"]
    assert "never listed" in operation["description"] and "`?status=withdrawn` is a 400" in operation["description"]
