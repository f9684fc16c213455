"""Money saved by early stopping is counted in tasks, as the platform pays (a task of one unit pays
the full reward): the places published less the tasks taken, at the cost of a task with its fee
(``study_cost_and_pay``); after the close, the publish page says how many places were released.
Worked through the questionnaire's services on the fake Prolific."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from annotations.models import Assignment, Participant, Unit
from annotations.selectors.cost import study_cost_and_pay
from annotations.selectors.platforms import study_platform_overview
from annotations.selectors.progress import study_early_stopping
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.errors import NoWorkAvailable
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.steps import steps_for
from annotations.services.stopping import study_close_when_decided
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import prolific, prolific_server, publish_on  # noqa: F401
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db


def _work(study, n: int, contested_item_id: int) -> Assignment | None:
    """Worker ``n`` takes a task and answers it: the gold, except on the contested item, where
    workers alternate (it is decided only by its last worker)."""
    worker, _ = Participant.objects.get_or_create(platform="prolific", external_id=f"p_{n}")
    try:
        assignment = assignment_start(study=study, participant=worker, platform_assignment_id=f"s_{n}",
                                      consented=True)
    except NoWorkAvailable:
        return None
    for claim in assignment.claims.select_related("unit__item", "attention_check"):
        for step in steps_for(kind=study.kind, is_attention_check=bool(claim.attention_check_id)):
            if claim.attention_check_id:
                label = claim.attention_check.correct_answer
            else:
                gold = claim.unit.item.gold_answer
                contested = claim.unit.item_id == contested_item_id
                label = gold if not contested or n % 2 else ("no" if gold == "yes" else "yes")
            annotation_submit(assignment=assignment, claim=claim, step=step, answer=label)
    assignment_submit(assignment=assignment)
    return assignment


def test_money_saved_counts_tasks_not_answers_and_the_close_says_places_released(prolific):  # noqa: F811
    study = make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, status="draft", reward=Decimal("2.00"),
                       estimated_minutes_per_task=Decimal("6.0"), stop_when_decided=True)
    publish_on(study, "prolific")
    contested = Unit.objects.filter(study=study).order_by("item_id").values_list("item_id", flat=True).first()
    n = 0
    while _work(study, n, contested) is not None:
        n += 1
    assert study_close_when_decided(study=study)
    study.refresh_from_db()
    cost = study_cost_and_pay(study=study)
    places = study_platform_overview(study=study)["places_published"]
    taken = Assignment.objects.filter(study=study, status__in=[Assignment.Status.SUBMITTED,
                                                               Assignment.Status.APPROVED]).count()
    assert (places, cost.tasks, cost.estimate.total) == (14, 14, Decimal("37.33")) and taken < places
    early = study_early_stopping(study=study)
    assert (early.places_published, early.tasks_taken, early.tasks_saved) == (places, taken, places - taken)
    per_task = cost.estimate.total / cost.tasks
    assert early.money_saved == (per_task * (places - taken)).quantize(Decimal("0.01"))
    assert early.places_released == places - taken
    user, client = staff_client("dana")
    study.owner = user
    study.save(update_fields=["owner"])
    page = client.get(reverse("admin:annotations_publication_publish", args=[study.pk])).content.decode()
    assert f"{places - taken} places released when the study closed" in page
    assert f"{places - taken} of {places} places released when the study" in page


def test_a_close_by_hand_saves_nothing_by_stopping_early(prolific):  # noqa: F811
    """Places a close leaves empty are released (``places_released``), not saved by stopping early:
    with no unit stopped, nothing is saved, however many places were left."""
    study = make_study(n_items=4, n_sources=2, quota=5, units_per_task=3, status="draft", reward=Decimal("2.00"),
                       estimated_minutes_per_task=Decimal("6.0"), stop_when_decided=True)
    publish_on(study, "prolific")
    study_close(user=OPERATOR, study=study)
    study.refresh_from_db()

    stopping = study_early_stopping(study=study)
    assert (stopping.answers_saved, stopping.tasks_saved, stopping.money_saved) == (0, 0, Decimal("0.00"))
    assert stopping.places_released == stopping.places_published > 0
