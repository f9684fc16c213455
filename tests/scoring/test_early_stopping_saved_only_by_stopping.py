"""What early stopping saved is counted over the units it decided only
(``annotations.services.stopping.study_answers_not_asked``, read by the progress page and by the
scoring's ``early_stopping``): a generalization question marked invalid also lowers its units'
quotas (``stopping._invalid_units_close``), but stopping saved none of those answers; they are
published apart, as ``answers_not_asked_invalid_questions``.

The study: 2 items x 1 generalization question x 1 source = 2 units x 3 workers = 6 answers, in
tasks of one unit, stopping on; one question marked invalid once the study opened, before any work."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from annotations.models import Unit
from annotations.selectors.progress import study_progress
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.platforms.publish import study_publish
from scoring.reports.sections import report_sections
from scoring.services import study_score
from studies.models import GeneralizationQuestion, Study
from studies.services.questions import generalization_questions_set_validation
from tests.annotations.factories import ParticipantFactory, make_study

pytestmark = pytest.mark.django_db

GEN = Study.Kind.GENERALIZATION


def gold_task(study):
    task = assignment_start(study=study, participant=ParticipantFactory())
    for claim in task.claims.select_related("unit__generalization_question"):
        for step in ("before", "after"):
            annotation_submit(assignment=task, claim=claim, step=step,
                              answer=claim.unit.generalization_question.answer)
    assignment_submit(assignment=task)
    return task


@pytest.fixture
def decided_beside_an_invalid_question(django_capture_on_commit_callbacks):
    owner = get_user_model().objects.create_superuser("owner", "owner@example.org", "pw")
    study = make_study(kind=GEN, n_items=2, n_sources=1, n_genq=1, quota=3, units_per_task=1,
                       stop_when_decided=True, owner=owner)
    study_publish(study=study, user=owner, platform_name="link")
    invalid_unit, valid_unit = Unit.objects.filter(study=study).order_by("id")
    generalization_questions_set_validation(questions=[invalid_unit.generalization_question],
                                            status=GeneralizationQuestion.Validation.INVALID)
    for _ in range(2):  # two right answers of three decide the valid unit
        with django_capture_on_commit_callbacks(execute=True):  # close_decided_study runs on commit
            gold_task(study)
    invalid_unit.refresh_from_db()
    valid_unit.refresh_from_db()
    assert (invalid_unit.decided_at, invalid_unit.quota) == (None, 0)
    assert valid_unit.decided_at is not None and valid_unit.quota == 2
    study.refresh_from_db()
    assert study.status == Study.Status.CLOSED  # nothing left to decide: the invalid unit never will be
    return study


def test_progress_counts_as_saved_only_what_stopping_saved(decided_beside_an_invalid_question):
    early = study_progress(study=decided_beside_an_invalid_question).early_stopping
    assert early.units_decided == 1
    assert (early.answers_saved, early.answers_designed, early.percent_saved) == (1, 6, 16.7)
    assert early.answers_not_asked_invalid_questions == 3
    assert early.as_dict()["answers_not_asked_invalid_questions"] == 3
    assert early.tasks_saved == 1  # one task of one unit: the valid unit's third


def test_the_progress_page_shows_the_invalid_questions_apart(decided_beside_an_invalid_question, client):
    study = decided_beside_an_invalid_question
    client.force_login(study.owner)
    page = client.get(reverse("admin:studies_study_progress", args=[study.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert '<span data-k="early_stopping.answers_saved">1</span>' in html
    assert '<td data-k="early_stopping.answers_not_asked_invalid_questions">3</td>' in html


def test_the_scored_results_and_report_count_as_saved_only_what_stopping_saved(decided_beside_an_invalid_question):
    run = study_score(study=decided_beside_an_invalid_question, similarity=False)
    assert run.status == "done", run.error
    early = run.results["early_stopping"]
    assert (early["units_decided"], early["answers_saved"], early["answers_designed"]) == (1, 1, 6)
    assert early["answers_not_asked_invalid_questions"] == 3
    notes = {s.key: s for s in report_sections(run)}["early_stopping"].notes
    assert ("2 answers collected of 6 designed; 1 saved by stopping early (1 units decided early); 3 not asked "
            "because their generalization question was marked invalid.") in notes, notes
