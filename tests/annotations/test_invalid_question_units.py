"""A generalization question marked invalid after its study opened closes its units
(``annotations.services.stopping.units_follow_question_validation``, received from
``studies.signals.generalization_validation_changed``): scoring leaves out the answers to an
invalid question, so the claim must not hand its units out (workers would be paid for answers that
count for nothing, and the valid units would end short of answers on a platform whose places are
fixed). Each unit's quota falls to the claims it holds, which finish and are paid; a release keeps
it closed; marked valid again, its units take the study's workers per unit again. The quote and
publish (``selectors.cost.study_collects``) and the progress page count what the study will collect.

The study: 3 items x 1 generalization question x 2 sources = 6 units (3 distinct questions) x 3
workers = 18 answers, in tasks of 2 units."""
from __future__ import annotations

import pytest
from django.urls import reverse

from annotations.models import Claim, Unit
from annotations.selectors.cost import study_collects
from annotations.selectors.progress import study_progress
from annotations.services.assignment import assignment_start
from annotations.services.errors import NoWorkAvailable
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_reject
from annotations.services.release import assignment_return
from studies.models import GeneralizationQuestion, Study
from studies.services.questions import generalization_questions_set_validation
from tests.annotations.factories import ParticipantFactory, make_study
from tests.annotations.platforms.conftest import complete_assignment

pytestmark = pytest.mark.django_db

VALID = GeneralizationQuestion.Validation.VALID
INVALID = GeneralizationQuestion.Validation.INVALID
CHANGELIST = "admin:studies_generalizationquestion_changelist"
REJECTION = "These answers were given without reading the question, so they cannot be accepted. " * 2


@pytest.fixture
def study():
    return make_study(kind=Study.Kind.GENERALIZATION, n_items=3, n_genq=1, n_sources=2, quota=3, units_per_task=2)


def start(study):
    return assignment_start(study=study, participant=ParticipantFactory())


def claimed_units(assignment) -> set[int]:
    return set(assignment.claims.filter(unit__isnull=False).values_list("unit_id", flat=True))


def claim_until_none_left(study) -> list:
    """New workers start tasks until the claim has nothing left to hand out: their assignments."""
    started = []
    for _ in range(50):
        try:
            started.append(start(study))
        except NoWorkAvailable:
            return started
    raise AssertionError("the claim never ran out of units")


def question_units(question) -> list[Unit]:
    return list(Unit.objects.filter(generalization_question=question).order_by("id"))


def counters(units) -> list[tuple[int, int, int]]:
    out = []
    for unit in units:
        unit.refresh_from_db()
        assert unit.n_completed <= unit.n_claimed <= unit.quota
        out.append((unit.quota, unit.n_claimed, unit.n_completed))
    return out


def test_an_invalid_question_takes_no_new_worker_its_held_claim_finishes_and_valid_again_reopens(study):
    first = start(study)
    held = Unit.objects.get(pk=min(claimed_units(first)))
    question = held.generalization_question
    units = question_units(question)
    assert len(units) == 2  # one per source; the first worker holds one of them

    generalization_questions_set_validation(questions=[question], status=INVALID)

    # Each unit takes no more than it holds: the held claim keeps its slot, the other takes nobody.
    assert sorted(counters(units)) == [(0, 0, 0), (1, 1, 0)]
    others = claim_until_none_left(study)
    assert others, "the valid units still take workers"
    assert not Claim.objects.filter(assignment__in=others, unit__in=units).exists()
    # Every valid unit filled to the study's 3 workers, none past it.
    valid = Unit.objects.filter(study=study).exclude(generalization_question=question)
    assert sorted(valid.values_list("quota", "n_claimed")) == [(3, 3)] * 4

    # The claim held when the question was marked invalid finishes, is paid and counted as before.
    complete_assignment(first)
    assert sorted(counters(units)) == [(0, 0, 0), (1, 1, 1)]

    # What it collects: 4 valid units x 3 workers (12 answers, 2 questions: 6 tasks of 2), and the
    # progress page's answers to collect add the one answer the held claim gave.
    collects = study_collects(study=study)
    assert (collects.answers, collects.tasks) == (12, 6)
    progress = study_progress(study=study)
    assert (progress.answers_to_collect, progress.tasks_planned) == (12 + 1, 6)  # one count of tasks

    generalization_questions_set_validation(questions=[question], status=VALID)

    assert sorted(counters(units)) == [(3, 0, 0), (3, 1, 1)]
    reopened = claim_until_none_left(study)
    assert Claim.objects.filter(assignment__in=reopened, unit__in=units).count() == 5  # 3 + 2 places again
    assert (study_collects(study=study).answers, study_progress(study=study).answers_to_collect) == (18, 18)


def test_a_released_claim_of_an_invalid_question_gives_its_slot_to_nobody(study):
    first = start(study)
    held = Unit.objects.get(pk=min(claimed_units(first)))
    question = held.generalization_question
    generalization_questions_set_validation(questions=[question], status=INVALID)
    assert counters([held]) == [(1, 1, 0)]

    assignment_return(assignment=first)  # the worker gives the task back: its slots are released

    assert counters([held]) == [(0, 0, 0)]
    others = claim_until_none_left(study)
    assert not Claim.objects.filter(assignment__in=others, unit__in=question_units(question)).exists()


def test_the_admins_actions_close_and_reopen_an_invalid_questions_units(study, admin_client):
    question = GeneralizationQuestion.objects.filter(item__in=study.items.all()).order_by("pk").first()
    units = question_units(question)

    page = admin_client.post(reverse(CHANGELIST), {"action": "mark_invalid", "_selected_action": [question.pk]},
                             follow=True).content.decode()

    assert "1 question(s) marked invalid" in page
    assert counters(units) == [(0, 0, 0), (0, 0, 0)]
    others = claim_until_none_left(study)
    assert not Claim.objects.filter(assignment__in=others, unit__in=units).exists()

    page = admin_client.post(reverse(CHANGELIST), {"action": "mark_valid", "_selected_action": [question.pk]},
                             follow=True).content.decode()

    assert "1 question(s) marked valid" in page
    assert counters(units) == [(3, 0, 0), (3, 0, 0)]
    assert Claim.objects.filter(assignment=start(study), unit__in=units).exists()


def test_a_decided_unit_of_an_invalid_question_is_not_reopened_when_its_answers_stop_deciding_it(db):
    # One unit, 3 workers, stopping when decided: two answers, wrong before and after (the item's gold
    # "no" against the question's "yes"), decide it.
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=1, n_genq=1, n_sources=1, quota=3, units_per_task=1,
                       stop_when_decided=True)
    unit = Unit.objects.get(study=study)
    first, second = start(study), start(study)
    complete_assignment(first)
    complete_assignment(second)
    assert counters([unit]) == [(2, 2, 2)] and unit.decided_at is not None
    generalization_questions_set_validation(questions=[unit.generalization_question], status=INVALID)

    # A counted answer is rejected: one answer no longer decides the unit, which early stopping
    # would reopen with the study's 3 workers; its question is invalid, so it stays closed.
    assignment_reject(user=OPERATOR, study=study, assignment=second, feedback=REJECTION)

    assert counters([unit]) == [(1, 1, 1)] and unit.decided_at is None
    with pytest.raises(NoWorkAvailable):
        start(study)


def test_a_reimport_that_marks_a_question_invalid_closes_its_units(tmp_path):
    """A generalization file re-imported with ``validation_status`` invalid is the other writer of a
    question's status: it closes the question's units as the service and the admin do."""
    from annotations.services.opening import study_open
    from studies.models import Dataset, RationaleSource
    from studies.services.importers import (
        generalization_questions_import,
        items_import_table,
        rationales_import,
    )
    from studies.services.studies import study_create
    from tests.studies.helpers import write_json

    items = tmp_path / "items.csv"
    items.write_text("id,question,answer,split\nq1,Is ice cold?,yes,test\nq2,Is fire hot?,yes,test\n")
    items_import_table(file=items, dataset_name="Reimported", task_format="yes_no")
    rationales = tmp_path / "lm.csv"
    rationales.write_text("item_id,source,rationale,predicted_answer\nq1,lm,Ice is frozen.,yes\nq2,lm,Fire burns.,yes\n")
    rationales_import(file=rationales, dataset_name="Reimported")
    questions = {"Is ice cold?": [["Is frozen water cold?", "True", "rephrase"]],
                 "Is fire hot?": [["Is a flame hot?", "True", "rephrase"]]}
    path = write_json(tmp_path / "generalisation_final_test.json", questions)
    generalization_questions_import(file=path, dataset_name="Reimported", validation_status="valid")
    study_open(study=study_create(
        name="reimported", kind=Study.Kind.GENERALIZATION, dataset=Dataset.objects.get(name="Reimported"),
        sources=[RationaleSource.objects.get(name="lm")], annotators_per_unit=3, units_per_task=2,
        consent_text="I agree."), user=OPERATOR)
    question = GeneralizationQuestion.objects.get(text="Is frozen water cold?")
    assert counters(question_units(question)) == [(3, 0, 0)]

    write_json(path, {"Is ice cold?": questions["Is ice cold?"]})
    generalization_questions_import(file=path, dataset_name="Reimported", validation_status="invalid")

    assert counters(question_units(question)) == [(0, 0, 0)]


def test_a_question_validation_study_keeps_asking_about_a_question_marked_invalid(db):
    """A question-validation study asks workers to judge questions, invalid ones included: marking
    one invalid neither closes its unit there nor drops it from what the study collects."""
    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=3, n_genq=1, quota=3, units_per_task=1)
    question = GeneralizationQuestion.objects.filter(item__in=study.items.all()).order_by("pk").first()
    before = study_collects(study=study)

    generalization_questions_set_validation(questions=[question], status=INVALID)

    assert {u.quota for u in Unit.objects.filter(study=study)} == {3}
    assert (study_collects(study=study).answers, study_collects(study=study).tasks) == (before.answers, before.tasks)


def test_a_closed_studys_figures_do_not_change_when_a_question_is_judged_invalid_after_it(study):
    """Judging questions after collection is the usual order: a closed study's tasks planned and
    cost stay what it collected (they fell from 9 tasks to 6, below the 9 done)."""
    from annotations.services.platforms.close import study_close

    before = study_collects(study=study)
    study_close(user=OPERATOR, study=study)
    question = GeneralizationQuestion.objects.filter(item__in=study.items.all()).order_by("pk").first()

    generalization_questions_set_validation(questions=[question], status=INVALID)

    study.refresh_from_db()
    after = study_collects(study=study)
    assert (after.answers, after.tasks) == (before.answers, before.tasks) == (18, 9)


def test_an_early_stopping_study_whose_other_units_are_decided_closes_without_the_invalid_question(db):
    """The invalid question's units are closed, never decided: early stopping waited for them for
    ever and the study kept recruiting workers who found no work."""
    from annotations.services.stopping import studies_all_decided

    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=2, n_genq=1, n_sources=1, quota=3, units_per_task=1,
                       stop_when_decided=True)
    invalid, valid = Unit.objects.filter(study=study).order_by("id")
    generalization_questions_set_validation(questions=[invalid.generalization_question], status=INVALID)
    for _ in range(2):
        complete_assignment(start(study))  # two agreeing answers decide the valid unit

    valid.refresh_from_db()
    assert valid.decided_at is not None
    assert studies_all_decided() == [study.pk]
