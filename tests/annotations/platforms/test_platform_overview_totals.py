"""The publish page's audit totals (``selectors.platforms.study_platform_overview``): what publishing
committed on the platform (a Prolific study's places with the fee) is kept apart from what workers
were paid (approved rewards and bonuses). The finding's probe: one "confirmed total" summed both, so
a Prolific study of 14 tasks at 2.00 (fee 0.3333) read 37.33 with nothing paid, 39.33 after one
approval and 40.83 after three 0.50 bonuses more, and about 65.33 once every task was approved
against 37.33 really spent. The state is built as the app builds it: published on the local
Prolific server, work submitted through the questionnaire's services, approved and bonused through
the platform services."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from annotations.selectors.platforms import study_platform_overview
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.review import assignment_approve
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import PUBLIC_URL, publish_on, submitted


@pytest.fixture
def study(db, settings):
    settings.RL_PUBLIC_URL = PUBLIC_URL
    settings.RL_PROLIFIC_FEE_RATE = "0.3333"
    # 4 items x 2 sources x 5 annotators in tasks of 3 units: 14 tasks at 2.00.
    return make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, status="draft", reward=Decimal("2.00"),
                      estimated_minutes_per_task=Decimal("6.0"))


def _totals(study) -> tuple[Decimal, Decimal, str]:
    overview = study_platform_overview(study=study)
    return overview["committed"], overview["paid_out"], overview["currency"]


def test_committed_on_publishing_and_paid_out_to_workers_are_two_figures(prolific, study, client,
                                                                         django_user_model):
    _, server = prolific
    publication = publish_on(study, "prolific")
    prolific_id = publication.prolific_study_id

    # Published, nothing paid: the 14 places' rewards with the fee are committed, nothing paid out.
    assert _totals(study) == (Decimal("37.33"), Decimal("0.00"), "USD")

    tasks = []
    for n in range(4):
        sub = server.add_submission(prolific_id, participant_id=f"pw{n}")
        tasks.append(submitted(study, platform="prolific", worker_id=f"pw{n}", assignment_id=sub["id"],
                               task_id=prolific_id))
    assert _totals(study) == (Decimal("37.33"), Decimal("0.00"), "USD")  # submitted work is not paid yet

    assignment_approve(user=OPERATOR, study=study, assignment=tasks[0])
    assert _totals(study) == (Decimal("37.33"), Decimal("2.00"), "USD")

    for task in tasks[:3]:
        bonus_pay(user=OPERATOR, study=study, assignment=task, amount=Decimal("0.50"),
                  reason="You flagged a broken question.", kind="other")
    assert len(server.payments) == 3
    assert _totals(study) == (Decimal("37.33"), Decimal("3.50"), "USD")

    for task in tasks[1:]:
        assignment_approve(user=OPERATOR, study=study, assignment=task)
    # Every submitted task approved: 4 rewards and 3 bonuses paid out; the commitment is unchanged
    # (the old single total read 37.33 + 8.00 + 1.50 = 46.83 here).
    assert _totals(study) == (Decimal("37.33"), Decimal("9.50"), "USD")

    client.force_login(django_user_model.objects.create_superuser("dana", "dana@example.org", "pw"))
    html = client.get(reverse("admin:annotations_publication_publish", args=[study.pk])
                      + "?platform=prolific").content.decode()
    assert '<strong id="committed-total">37.33 USD</strong> committed on the platform by' in html
    assert '<strong id="paid-out-total">9.50 USD</strong> paid out to workers' in html
    assert "confirmed total" not in html
