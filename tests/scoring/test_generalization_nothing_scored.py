"""A generalization study none of whose units has a completed answer fails to score as a utility
study does (``score.NothingScored``: "no completed answers yet"), rather than finishing "done"
with no Figure 4 while a warning points at figures it does not have and the report calls it no
generalization study."""
from __future__ import annotations

import pytest

from annotations.models import Assignment
from annotations.services.release import assignment_release
from scoring.models import ScoreRun
from scoring.reports import sections
from scoring.reports.sections import consistency_section, generalization_section
from scoring.selectors import score_run_latest
from scoring.services import study_score
from studies.models import GeneralizationQuestion, Study
from tests.factories import GeneralizationQuestionFactory, StudyFactory
from tests.scoring.test_services_score import collect, make_unit

pytestmark = pytest.mark.django_db


def _generalization_study(utility_study):
    study, items, good, _ = utility_study
    gen_study = StudyFactory(kind=Study.Kind.GENERALIZATION, dataset=study.dataset, annotators_per_unit=3,
                             name="gen-nothing")
    gen_study.items.add(items[0])
    cf = GeneralizationQuestionFactory(item=items[0], qtype=GeneralizationQuestion.Type.COUNTERFACTUAL, answer="no")
    return gen_study, make_unit(gen_study, items[0], good, quota=3, gq=cf)


def test_a_generalization_study_with_no_completed_answer_fails_as_a_utility_study_does(utility_study):
    gen_study, unit = _generalization_study(utility_study)
    collect(gen_study, unit, [("yes", None)] * 2)  # first answers only: the tasks are still at work

    run = study_score(study=gen_study, similarity=False)

    assert run.status == ScoreRun.Status.FAILED
    assert run.error == f"Study {gen_study.name!r} has no completed answers yet; nothing to score."
    assert run.results in (None, {}) and score_run_latest(study=gen_study) is None


def test_answers_rejected_after_a_run_fail_the_next_and_keep_the_last_figures(utility_study):
    gen_study, unit = _generalization_study(utility_study)
    collect(gen_study, unit, [("yes", "no")] * 3)
    first = study_score(study=gen_study, similarity=False)
    assert first.status == ScoreRun.Status.DONE, first.error
    assert first.results["generalization"]["all"]["n"] == 1
    for task in Assignment.objects.filter(study=gen_study):
        assignment_release(assignment=task, status=Assignment.Status.REJECTED)

    again = study_score(study=gen_study, similarity=False)

    assert again.status == ScoreRun.Status.FAILED and "no completed answers yet" in again.error
    assert score_run_latest(study=gen_study) == first  # its figures stay the latest, marked stale where read


def test_the_report_of_a_generalization_run_without_figure_4_says_why():
    """A run stored before such a run failed: the sections no longer tell a generalization study that
    Figure 4 needs a generalization study."""
    results = {"study": {"kind": Study.Kind.GENERALIZATION.value}, "n_units": 1, "n_units_scored": 0, "warnings": []}
    for section in (generalization_section(results), consistency_section(results)):
        assert "needs a generalization study" not in section.absent
        assert section.absent == sections.NO_GENERALIZATION_ANSWERS
