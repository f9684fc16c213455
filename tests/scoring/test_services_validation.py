"""A question-validation study's verdicts: scored (``score._question_validation``, the part
``results["question_validation"]`` and its report section) and applied to the questions
(``scoring.services.validation.question_validation_apply``, the score runs' admin action), so a
later generalization study leaves out the question the crowd rejected. Workers answer through the
questionnaire's services, four per question: one question rejected (its answer said wrong, a
corrected answer named), one accepted, one tied two to two. A run made stale by later answers
(work rejected since it began reading the answers, also when rejected just before the writer's
locks) is refused, naming the time it compared with, and a question whose status was changed after
the run scored it is left as it is."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from annotations.models import Annotation, Assignment
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.opening import study_open
from annotations.services.participants import participant_get_or_create
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.review import assignment_reject
from scoring.models import ScoreRun
from scoring.reports.sections import report_sections
from scoring.selectors import score_run_read_at
from scoring.services import study_score, validation
from scoring.services.bundle.export import scores_staleness
from scoring.services.validation import VerdictsNotApplicable, question_validation_apply
from studies.models import GeneralizationQuestion, Platform, Study
from studies.services.questions import QuestionError, generalization_questions_set_validation
from studies.services.studies import study_create
from tests.annotations.factories import make_study
from tests.api.conftest import grant
from tests.work import work

pytestmark = pytest.mark.django_db

YES = {"well_formed": "yes", "type_correct": "yes", "answer_correct": "yes", "corrected_answer": ""}
WRONG_ANSWER = {**YES, "answer_correct": "no", "corrected_answer": "no"}
NOT_WELL_FORMED = {**YES, "well_formed": "no"}
# question (by its item's number) -> what each of the four workers says of it
VERDICTS = {
    0: [WRONG_ANSWER, WRONG_ANSWER, WRONG_ANSWER, YES],  # rejected 3 to 1; its answer corrected to "no"
    1: [YES, YES, YES, NOT_WELL_FORMED],  # accepted 3 to 1
    2: [YES, YES, NOT_WELL_FORMED, NOT_WELL_FORMED],  # a tie
}


def _question(study: Study, number: int) -> GeneralizationQuestion:
    return GeneralizationQuestion.objects.get(item__dataset=study.dataset, text=f"Generalization 0 of question {number}?")


def _validate(study: Study, worker: int, *, verdicts: dict = VERDICTS, platform: str = Platform.PROLIFIC) -> None:
    """Worker ``worker`` takes a task, judges every question as ``verdicts`` says, and submits."""
    participant = participant_get_or_create(platform=platform, external_id=f"validator-{worker}")
    assignment = assignment_start(study=study, participant=participant, consented=True)
    for claim in assignment.claims.select_related("unit__generalization_question", "attention_check").order_by("position"):
        if claim.attention_check_id:
            annotation_submit(assignment=assignment, claim=claim, step="attention",
                              answer=claim.attention_check.correct_answer)
            continue
        number = int(claim.unit.generalization_question.text.rsplit(" ", 1)[1].rstrip("?"))
        annotation_submit(assignment=assignment, claim=claim, step=Annotation.Step.VALIDATION, answer="",
                          payload=verdicts[number][worker])
    assignment_submit(assignment=assignment)


@pytest.fixture
def validation_study(settings) -> Study:
    settings.RL_SCORING_SIMILARITY = False
    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=3, n_genq=1, n_sources=1, quota=4,
                       units_per_task=3)
    for worker in range(4):
        _validate(study, worker)
    return study


@pytest.fixture
def researcher():
    return get_user_model().objects.create_superuser("priya", "priya@example.org", "pw-not-used")


def test_a_validation_study_is_scored_with_the_majority_verdict_and_the_other_reading(validation_study):
    run = study_score(study=validation_study)

    assert (run.status, run.error) == (ScoreRun.Status.DONE, "")
    block = run.results["question_validation"]
    assert (block["n_questions"], block["n_valid"], block["n_invalid"], block["n_undecided"], block["n_ties"]) == \
        (3, 1, 1, 1, 1)
    assert block["default"] == "majority_of_verdicts"
    assert block["rules"]["majority_of_verdicts"] == (
        "majority of worker verdicts (a worker's verdict is valid only when they answer yes to all three of "
        "well_formed, type_correct and answer_correct, else invalid); a tie decides nothing (the question stays "
        "unvalidated)")
    assert block["rules"]["answer_corrected"].startswith("answer corrected")
    assert "paper" not in block["rules"]["majority_of_verdicts"] + block["rules"]["answer_corrected"]
    by_question = {q["question_id"]: q for q in block["questions"]}
    rejected = by_question[_question(validation_study, 0).pk]
    assert (rejected["n_verdicts"], rejected["majority_of_verdicts"], rejected["answer_corrected"]) == \
        (4, "invalid", "valid")
    assert rejected["votes"]["answer_correct"] == {"yes": 1, "no": 3}
    assert rejected["suggested_corrected_answer"] == "no"
    assert by_question[_question(validation_study, 1).pk]["majority_of_verdicts"] == "valid"
    assert by_question[_question(validation_study, 2).pk]["majority_of_verdicts"] == "undecided"
    assert block["n_questions_readings_differ"] == 1
    assert block["readings"]["answer_corrected"] == {"n_valid": 2, "n_invalid": 0, "n_undecided": 1}
    assert block["other_readings"]["approved_tasks_only"]["n_answers"] == 0  # none reviewed yet

    (section,) = [s for s in report_sections(run) if s.key == "question_validation"]
    totals = {row["reading"]: row for row in section.tables[0].rows}
    assert totals["majority of worker verdicts (default)"]["n_invalid"] == 1
    assert "1 questions differ" in section.notes[0]


def test_applying_the_verdicts_marks_the_decided_questions_and_leaves_the_tie(validation_study, researcher):
    run = study_score(study=validation_study)
    client = Client()
    client.force_login(researcher)

    response = client.post(reverse("admin:scoring_scorerun_changelist"),
                           {"action": "apply_question_verdicts", "_selected_action": [run.pk]}, follow=True)

    assert response.status_code == 200
    assert "2 generalization questions changed to the crowd&#x27;s verdict" in response.content.decode()
    statuses = [_question(validation_study, n).validation_status for n in range(3)]
    assert statuses == ["invalid", "valid", "unvalidated"]
    assert _question(validation_study, 0).answer == "yes"  # the suggested correction is not applied
    assert _question(validation_study, 0).metadata["validation"]["username"] == "priya"

    again = question_validation_apply(run=run, user=researcher)
    assert (again.changed, again.unchanged, again.left) == (0, 2, 1)


def test_a_user_who_may_not_change_questions_is_refused_and_nothing_changes(validation_study):
    run = study_score(study=validation_study)
    reader = grant(get_user_model().objects.create_user("reader", password="pw", is_staff=True),
                   "scoring.view_scorerun")

    with pytest.raises(QuestionError, match="studies.change_generalizationquestion"):
        question_validation_apply(run=run, user=reader)

    assert {_question(validation_study, n).validation_status for n in range(3)} == {"unvalidated"}


def test_only_the_latest_finished_run_is_applied(validation_study, researcher):
    older = study_score(study=validation_study)
    study_score(study=validation_study)

    with pytest.raises(VerdictsNotApplicable, match="not the latest finished run"):
        question_validation_apply(run=older, user=researcher)


def test_a_later_generalization_study_leaves_out_the_question_the_crowd_rejected(validation_study, researcher):
    question_validation_apply(run=study_score(study=validation_study), user=researcher)
    later = study_open(study=study_create(
        name="later generalization", kind=Study.Kind.GENERALIZATION, dataset=validation_study.dataset, split="test",
        sources=list(validation_study.sources.all()), annotators_per_unit=1, units_per_task=3,
        consent_text="I agree."), user=OPERATOR)
    work(later, "g1", answer=lambda claim, step: "yes")

    run = study_score(study=later)

    assert (run.status, run.error) == (ScoreRun.Status.DONE, "")
    gen = run.results["generalization"]
    assert (gen["n_questions"], gen["n_questions_validated"], gen["n_questions_unvalidated"]) == (2, 1, 1)
    # the tied question is the only one nobody validated now (the crowd's verdicts on the others applied)
    assert any("Figure 4 includes 1 generalization questions nobody validated" in w for w in run.warnings)


REJECTION = "These verdicts were given without reading the questions, so they cannot be accepted. " * 2


def _three_validators(settings) -> tuple[Study, ScoreRun]:
    """Three workers on a link study, scored: question 0 rejected 2 to 1, question 1 accepted 3 to 0."""
    settings.RL_SCORING_SIMILARITY = False
    verdicts = {0: [WRONG_ANSWER, WRONG_ANSWER, YES], 1: [YES, YES, YES]}
    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=2, n_genq=1, n_sources=1, quota=3,
                       units_per_task=2, platform=Platform.LINK)
    for worker in range(3):
        _validate(study, worker, verdicts=verdicts, platform=Platform.LINK)
    run = study_score(study=study)
    assert (run.status, run.error) == (ScoreRun.Status.DONE, "")
    return study, run


def _reject_the_invalid_sayers(study: Study) -> None:
    """The two workers who said question 0 is invalid are rejected: their verdicts no longer count."""
    for task in Assignment.objects.filter(study=study, participant__external_id__in=["validator-0", "validator-1"]):
        assignment_reject(user=OPERATOR, study=study, assignment=task, feedback=REJECTION)


def test_a_stale_run_is_refused_and_says_to_score_again(settings, researcher):
    study, run = _three_validators(settings)
    _reject_the_invalid_sayers(study)  # after the run
    assert scores_staleness(study, run, user=researcher)["stale"] is True

    with pytest.raises(VerdictsNotApplicable, match="Score the study again first") as refused:
        question_validation_apply(run=run, user=researcher)

    # the time the rule compared with: when the run began reading the answers, not when it finished
    read_at = score_run_read_at(run)
    assert read_at != run.finished_at
    assert (f"the answers that count changed after it began reading them ({read_at.isoformat()}: work submitted, "
            "rejected, put on hold or cleared)") in str(refused.value)
    assert "after it finished" not in str(refused.value)

    assert {_question(study, n).validation_status for n in range(2)} == {"unvalidated"}
    fresh = study_score(study=study)
    by_question = {q["question_id"]: q for q in fresh.results["question_validation"]["questions"]}
    assert by_question[_question(study, 0).pk]["majority_of_verdicts"] == "valid"  # what the stale run got wrong
    # one of the three judges counts now: both questions are short, left as they are unless asked for
    assert question_validation_apply(run=fresh, user=researcher).short == tuple(_question(study, n).pk for n in range(2))
    assert question_validation_apply(run=fresh, user=researcher, include_short=True).changed == 2


def test_a_status_changed_after_the_run_is_left_as_it_is_and_named(validation_study, researcher):
    run = study_score(study=validation_study)
    # the researcher decides question 0 (the crowd rejects it) is valid after all, after the run
    generalization_questions_set_validation(questions=[_question(validation_study, 0)], status="valid",
                                            user=researcher)
    client = Client()
    client.force_login(researcher)

    response = client.post(reverse("admin:scoring_scorerun_changelist"),
                           {"action": "apply_question_verdicts", "_selected_action": [run.pk]}, follow=True)

    page = response.content.decode()
    assert "1 generalization questions changed to the crowd&#x27;s verdict" in page
    question = _question(validation_study, 0)
    assert (f"1 questions left as they are: their status was changed after this run (question {question.pk} "
            f"(valid, by priya at ") in page
    assert [_question(validation_study, n).validation_status for n in range(3)] == ["valid", "valid", "unvalidated"]
    assert question.metadata["validation"]["previous"] == "unvalidated"  # the researcher's change, not replaced

    again = question_validation_apply(run=run, user=researcher)
    assert (again.changed, again.unchanged, again.left) == (0, 1, 1)
    assert [kept.question_id for kept in again.kept] == [question.pk]


def test_one_validation_studys_verdicts_do_not_replace_a_later_studys(validation_study, researcher):
    # a second validation study of the same questions accepts question 0, which the first rejects
    second = study_open(study=study_create(
        name="second validation", kind=Study.Kind.QUESTION_VALIDATION, dataset=validation_study.dataset,
        split="test", sources=list(validation_study.sources.all()), annotators_per_unit=4, units_per_task=3,
        consent_text="I agree."), user=OPERATOR)
    for worker in range(4):
        _validate(second, worker, verdicts={**VERDICTS, 0: [YES, YES, YES, WRONG_ANSWER]})
    first_run, second_run = study_score(study=validation_study), study_score(study=second)
    question_validation_apply(run=second_run, user=researcher)

    applied = question_validation_apply(run=first_run, user=researcher)

    assert _question(validation_study, 0).validation_status == "valid"  # the second study's verdict stays
    assert (applied.changed, applied.unchanged) == (0, 1)
    assert [kept.question_id for kept in applied.kept] == [_question(validation_study, 0).pk]


def test_a_stale_run_from_before_the_read_time_was_recorded_says_it_finished(settings, researcher):
    study, run = _three_validators(settings)
    run.results["run"].pop("read_at")  # a run scored before results.json recorded it
    run.save(update_fields=["results"])
    _reject_the_invalid_sayers(study)

    with pytest.raises(VerdictsNotApplicable) as refused:
        question_validation_apply(run=run, user=researcher)

    assert (f"the answers that count changed after it finished ({run.finished_at.isoformat()}, a run from before "
            "the time it began reading was recorded: work submitted, rejected") in str(refused.value)


def test_a_rejection_committed_before_the_writers_locks_is_seen_and_nothing_changes(settings, researcher,
                                                                                     monkeypatch):
    """Staleness is checked under the locks, in the transaction that writes: work rejected after the
    run was found the latest but before the locks were taken refuses the verdicts."""
    study, run = _three_validators(settings)
    lock = validation._lock_as_the_writer

    def rejected_meanwhile(**kwargs):
        _reject_the_invalid_sayers(study)
        lock(**kwargs)

    monkeypatch.setattr(validation, "_lock_as_the_writer", rejected_meanwhile)

    with pytest.raises(VerdictsNotApplicable, match="is stale"):
        question_validation_apply(run=run, user=researcher)

    assert {_question(study, n).validation_status for n in range(2)} == {"unvalidated"}
