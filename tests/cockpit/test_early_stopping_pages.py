"""Issue 24: what stopping early saved, on the progress page (and its JSON) and the publish page,
with the work done through the questionnaire's services."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from annotations.selectors_cost import study_cost_and_pay
from tests.annotations.factories import make_study
from tests.cockpit.conftest import staff_client
from tests.work import work

pytestmark = pytest.mark.django_db


@pytest.fixture
def dana():
    return staff_client("dana")


def decided_study(owner):
    """Two yes/no units of five workers; three workers answer "no" before and the gold after, which
    decides both units (three identical answers of five in each step): 2 x 2 answers saved."""
    study = make_study(name="stops-early", n_items=2, n_sources=1, quota=5, units_per_task=2, owner=owner,
                       stop_when_decided=True)
    for worker in ("PID-A", "PID-B", "PID-C"):
        work(study, worker)
    return study


def test_the_progress_page_shows_answers_collected_saved_and_the_money_saved(dana):
    user, client = dana
    study = decided_study(user)
    cost = study_cost_and_pay(study=study)
    expected_money = (cost.estimate.total * 4 / 10).quantize(Decimal("0.01"))
    data = client.get(f"/admin/studies/study/{study.pk}/progress.json").json()
    assert (data["answers_collected"], data["answers_to_collect"], data["units_complete"]) == (6, 6, 2)
    early = data["early_stopping"]
    assert (early["units_decided"], early["answers_collected"], early["answers_saved"],
            early["answers_designed"]) == (2, 6, 4, 10)
    assert Decimal(early["money_saved"]) == expected_money > 0
    page = client.get(f"/admin/studies/study/{study.pk}/progress/").content.decode()
    assert "Answers saved by stopping early" in page and f"{expected_money}" in page


def test_the_publish_page_shows_what_stopping_early_saved(dana):
    user, client = dana
    study = decided_study(user)
    page = client.get(reverse("admin:annotations_publication_publish", args=[study.pk])).content.decode()
    assert 'id="early-stopping"' in page
    assert "4\n      of 10 answers saved so far (2 units decided)" in page


def test_a_study_that_does_not_stop_early_shows_nothing_of_it(dana):
    user, client = dana
    study = make_study(name="full", n_items=2, n_sources=1, quota=3, units_per_task=2, owner=user)
    data = client.get(f"/admin/studies/study/{study.pk}/progress.json").json()
    assert "early_stopping" not in data or data["early_stopping"] is None
    page = client.get(f"/admin/studies/study/{study.pk}/progress/").content.decode()
    assert "Answers saved by stopping early" not in page
