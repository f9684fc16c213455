"""Issue 24: what stopping early saved, on the progress page (and its JSON) and the publish page,
with the work done through the questionnaire's services."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from annotations.selectors.cost import study_cost_and_pay
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
    assert "4\n      of 10 answers saved so far (2 units stopped early)" in page


def test_a_study_that_does_not_stop_early_shows_nothing_of_it(dana):
    user, client = dana
    study = make_study(name="full", n_items=2, n_sources=1, quota=3, units_per_task=2, owner=user)
    data = client.get(f"/admin/studies/study/{study.pk}/progress.json").json()
    assert "early_stopping" not in data or data["early_stopping"] is None
    page = client.get(f"/admin/studies/study/{study.pk}/progress/").content.decode()
    assert "Answers saved by stopping early" not in page


def test_the_study_page_sets_stop_when_decided_on_a_draft_shows_it_and_refuses_it_once_open(admin_client):
    from studies.models import Study
    from tests.cockpit.test_study_setup import form_data

    draft = make_study(name="draft-stop", n_items=2, n_sources=1, quota=5, units_per_task=2,
                       status=Study.Status.DRAFT)
    url = reverse("admin:studies_study_change", args=[draft.pk])
    data = form_data(admin_client.get(url))
    assert "stop_when_decided" not in data or data["stop_when_decided"] in ("", None, False)
    saved = admin_client.post(url, {**data, "stop_when_decided": "on"})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    draft.refresh_from_db()
    assert draft.stop_when_decided is True
    page = admin_client.get(url).content.decode()
    assert "at most: a unit stops when its result is decided" in page  # the design at a glance

    opened = make_study(name="open-stop", n_items=2, n_sources=1, quota=5, units_per_task=2, stop_when_decided=True)
    url = reverse("admin:studies_study_change", args=[opened.pk])
    data = {k: v for k, v in form_data(admin_client.get(url)).items() if k != "stop_when_decided"}
    refused = admin_client.post(url, data)  # the box unticked
    assert refused.status_code == 200
    assert "whether a unit stops when its result is decided cannot change" in refused.content.decode()
    opened.refresh_from_db()
    assert opened.stop_when_decided is True


def test_the_money_saved_names_the_platform_and_fee_rate_it_is_priced_at(dana, settings):
    """The money saved is a task's cost as the fee settings price it now: before, the pages said only
    "rewards and fee", and the figure moved with RL_PROLIFIC_FEE_RATE while the page read the same."""
    from studies.models import Platform

    user, client = dana
    study = make_study(name="stops-early", n_items=2, n_sources=1, quota=5, units_per_task=2, owner=user,
                       stop_when_decided=True, platform=Platform.PROLIFIC)
    for worker in ("5a9d64f5f6dfdd0001eaa7a1", "5a9d64f5f6dfdd0001eaa7a2", "5a9d64f5f6dfdd0001eaa7a3"):
        work(study, worker, platform=Platform.PROLIFIC)
    shown = {}
    for rate in ("0.3333", "0.10"):
        settings.RL_PROLIFIC_FEE_RATE = rate
        early = client.get(f"/admin/studies/study/{study.pk}/progress.json").json()["early_stopping"]
        page = client.get(f"/admin/studies/study/{study.pk}/progress/").content.decode()
        shown[rate] = early["money_saved"]
        estimate = study_cost_and_pay(study=study).estimate  # the fees' share of the rewards in its price
        share = f"{(estimate.total - estimate.rewards) / estimate.rewards:.2%}"
        assert abs(Decimal(share.rstrip("%")) - Decimal(rate) * 100) < 1  # the setting, rounded to cents
        assert f"prolific's fees, {share} of the rewards" in early["priced_as"]
        assert "RL_PROLIFIC_FEE_RATE" in early["priced_as"]
        assert early["priced_as"] in page.replace("&#x27;", "'")
        publish = client.get(reverse("admin:annotations_publication_publish", args=[study.pk])).content.decode()
        assert f"prolific&#x27;s fees, {share} of the rewards" in publish
        quote = client.get(reverse("admin:annotations_publication_publish", args=[study.pk]) + "?platform=link")
        assert f"prolific&#x27;s fees, {share} of the rewards" in quote.content.decode()  # the study's own
    assert shown["0.3333"] != shown["0.10"]
