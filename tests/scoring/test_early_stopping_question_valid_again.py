"""A generalization question marked invalid while its stopping study was open, then valid again after
the study closed: its unit keeps the quota the invalid mark lowered (``stopping.units_follow_question_validation``
reopens units of open studies only), though early stopping decided nothing there. The places it left
empty are not saved by stopping (the progress page's ``tasks_saved`` and ``money_saved``,
``progress._tasks_by_places``, by ``stopping.units_stopped``), and the scoring reads the unit as
neither decided nor full, short of the study's workers per unit (``score._units_frame``), not full at
its lowered quota.

The study: 2 items x 1 generalization question x 1 source = 2 units x 3 workers, in tasks of one unit,
stopping on."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from annotations.models import Unit
from annotations.selectors.progress import study_progress
from annotations.services.platforms.publish import study_publish
from scoring.services import study_score
from scoring.services.score import EARLY_STOPPING_OPEN_WHY
from studies.models import GeneralizationQuestion, Study
from studies.services.questions import generalization_questions_set_validation
from tests.annotations.factories import make_study
from tests.scoring.test_early_stopping_saved_only_by_stopping import (  # noqa: F401
    decided_beside_an_invalid_question,
    gold_task,
)

VALID = GeneralizationQuestion.Validation.VALID
INVALID = GeneralizationQuestion.Validation.INVALID

pytestmark = pytest.mark.django_db


def test_progress_does_not_count_the_places_of_a_question_valid_again_as_saved(
        decided_beside_an_invalid_question):  # noqa: F811
    study = decided_beside_an_invalid_question
    invalid_unit = Unit.objects.filter(study=study).order_by("id").first()
    generalization_questions_set_validation(questions=[invalid_unit.generalization_question], status=VALID)
    invalid_unit.refresh_from_db()
    assert (invalid_unit.decided_at, invalid_unit.quota) == (None, 0)  # the study is closed: nothing reopens

    early = study_progress(study=study).early_stopping

    assert (early.units_decided, early.answers_saved, early.answers_not_asked_invalid_questions) == (1, 1, 0)
    assert early.tasks_saved == 1  # the valid unit's third worker only, as answers_saved says
    assert early.money_saved == early.cost_per_task


def test_a_unit_of_a_question_valid_again_after_the_close_is_scored_short(django_capture_on_commit_callbacks):
    owner = get_user_model().objects.create_superuser("owner", "owner@example.org", "pw")
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=2, n_sources=1, n_genq=1, quota=3,
                       units_per_task=1, stop_when_decided=True, owner=owner)
    study_publish(study=study, user=owner, platform_name="link")
    first = gold_task(study)
    reopened = first.claims.get().unit
    generalization_questions_set_validation(questions=[reopened.generalization_question], status=INVALID)
    for _ in range(2):  # two right answers of three decide the other unit; the study closes
        with django_capture_on_commit_callbacks(execute=True):
            gold_task(study)
    study.refresh_from_db()
    assert study.status == Study.Status.CLOSED
    generalization_questions_set_validation(questions=[reopened.generalization_question], status=VALID)
    reopened.refresh_from_db()
    assert (reopened.decided_at, reopened.quota, reopened.n_completed) == (None, 1, 1)

    run = study_score(study=study, similarity=False)

    assert run.status == "done", run.error
    early = run.results["early_stopping"]
    assert (early["units_decided"], early["answers_saved"]) == (1, 1)
    assert early["units_neither_decided_nor_full"] == 1  # one answer of three, not full at its quota of 1
    assert EARLY_STOPPING_OPEN_WHY in early["note"], early["note"]
    assert "marked invalid and then valid again after the study closed" in EARLY_STOPPING_OPEN_WHY
    progress = study_progress(study=study).early_stopping
    assert (progress.answers_saved, progress.tasks_saved) == (1, 1)
