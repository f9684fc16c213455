"""A question-validation study's verdicts rest on the judges it asks for, and say what a worker's
verdict is. A question judged by fewer workers than the study asks (``annotators_per_unit``) is
counted and named in ``results["question_validation"]["short_questions"]`` and its report section,
and ``question_validation_apply`` leaves it as it is unless short questions are applied explicitly
(``include_short``, the score runs' second action), which the message names: one judge of five is
not the crowd, and a generalization study's Figure 4 keeps the question. A worker's verdict is valid
only when they say yes to all three fields (``steps.clean_answer``): the rule is named, and the
per-field majority reading is given beside it (a question each field of which has a yes majority is
invalid unanimously when each judge says no to another field)."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from scoring.models import ScoreRun
from scoring.reports.sections import report_sections
from scoring.services import study_score
from scoring.services.validation import question_validation_apply
from studies.models import Study
from studies.services.studies import study_create
from tests.annotations.factories import make_study
from tests.scoring.test_services_validation import WRONG_ANSWER, YES, _question, _validate, researcher  # noqa: F401
from tests.work import work

pytestmark = pytest.mark.django_db

NOT_TYPE_CORRECT = {**YES, "type_correct": "no"}
NOT_WELL_FORMED = {**YES, "well_formed": "no"}


def _generalization_study(dataset) -> Study:
    """Generalization study G over the dataset's two items (one question each), three workers, scored."""
    study = study_open(study=study_create(
        name="G", kind=Study.Kind.GENERALIZATION, dataset=dataset, split="test",
        sources=list(Study.objects.filter(dataset=dataset).first().sources.all()), annotators_per_unit=3,
        units_per_task=2, consent_text="I agree."), user=OPERATOR)
    for worker in ("g1", "g2", "g3"):
        work(study, worker, answer=lambda claim, step: "yes")
    return study


def _figure4_n(study: Study) -> int:
    run = study_score(study=study)
    assert (run.status, run.error) == (ScoreRun.Status.DONE, "")
    return run.results["generalization"]["n_questions"]


@pytest.fixture
def one_judge_of_five(settings) -> tuple[Study, Study, ScoreRun]:
    """A validation study asking five judges per question, still open, one of whom judged: question 0
    wrong, question 1 right; and G, scored before on both questions."""
    settings.RL_SCORING_SIMILARITY = False
    validation = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=2, n_genq=1, n_sources=1, quota=5,
                            units_per_task=2)
    generalization = _generalization_study(validation.dataset)
    assert _figure4_n(generalization) == 2
    _validate(validation, 0, verdicts={0: [WRONG_ANSWER], 1: [YES]})
    run = study_score(study=validation)
    assert (run.status, run.error) == (ScoreRun.Status.DONE, "")
    return validation, generalization, run


def test_questions_judged_by_fewer_workers_than_asked_are_counted_and_named(one_judge_of_five):
    validation, _generalization, run = one_judge_of_five
    block = run.results["question_validation"]
    ids = [_question(validation, n).pk for n in range(2)]

    assert block["annotators_per_unit"] == 5
    assert block["short_questions"]["n_short"] == 2
    assert block["short_questions"]["n_short_with_verdict"] == 2
    assert block["short_questions"]["question_ids"] == ids
    assert "fewer verdicts count for it than the study asks" in block["short_questions"]["rule"]
    assert [(q["n_verdicts"], q["n_verdicts_asked"], q["short"]) for q in block["questions"]] == [(1, 5, True)] * 2
    assert any("2 generalization questions were judged by fewer workers than the study asks (5 per question)" in w
               for w in run.warnings)
    (section,) = [s for s in report_sections(run) if s.key == "question_validation"]
    assert any(note.startswith("Questions judged by fewer workers than asked (5 per question): 2, 2 of them with a "
                               f"verdict (questions {ids[0]}, {ids[1]})") for note in section.notes)


def test_one_judges_verdict_is_not_applied_as_the_crowds(one_judge_of_five, researcher):  # noqa: F811
    validation, generalization, run = one_judge_of_five
    client = Client()
    client.force_login(researcher)

    response = client.post(reverse("admin:scoring_scorerun_changelist"),
                           {"action": "apply_question_verdicts", "_selected_action": [run.pk]}, follow=True)

    page = response.content.decode()
    ids = [_question(validation, n).pk for n in range(2)]
    assert "0 generalization questions changed to the crowd&#x27;s verdict" in page
    assert (f"2 questions left as they are: judged by fewer workers than the 5 the study asks per question "
            f"(questions {ids[0]}, {ids[1]})") in page
    assert [_question(validation, n).validation_status for n in range(2)] == ["unvalidated", "unvalidated"]
    assert _figure4_n(generalization) == 2  # Figure 4 keeps the question one judge rejected


def test_short_questions_are_applied_only_when_asked_and_the_message_says_so(one_judge_of_five,
                                                                            researcher):  # noqa: F811
    validation, generalization, run = one_judge_of_five
    client = Client()
    client.force_login(researcher)

    response = client.post(reverse("admin:scoring_scorerun_changelist"),
                           {"action": "apply_question_verdicts_with_short", "_selected_action": [run.pk]},
                           follow=True)

    page = response.content.decode()
    ids = [_question(validation, n).pk for n in range(2)]
    assert "2 generalization questions changed to the crowd&#x27;s verdict" in page
    assert (f"Short questions applied on request: 2 of these verdicts rest on fewer judges than the 5 the study "
            f"asks per question (questions {ids[0]}, {ids[1]})") in page
    assert [_question(validation, n).validation_status for n in range(2)] == ["invalid", "valid"]
    assert _figure4_n(generalization) == 1
    again = question_validation_apply(run=run, user=researcher)  # the default leaves short ones: nothing to undo
    assert (again.changed, again.unchanged, again.short) == (0, 0, tuple(ids))


def test_a_complete_question_is_applied_beside_a_short_one(settings, researcher):  # noqa: F811
    settings.RL_SCORING_SIMILARITY = False
    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=2, n_genq=1, n_sources=1, quota=2,
                       units_per_task=1)
    # each task holds one question: two workers judge question 0 or 1, whichever they are given
    for worker in range(3):
        _validate(study, worker, verdicts={0: [WRONG_ANSWER] * 3, 1: [WRONG_ANSWER] * 3})
    run = study_score(study=study)
    by_id = {q["question_id"]: q for q in run.results["question_validation"]["questions"]}
    complete = [pk for pk, q in by_id.items() if not q["short"]]
    short = [pk for pk, q in by_id.items() if q["short"]]
    assert (len(complete), len(short)) == (1, 1)

    applied = question_validation_apply(run=run, user=researcher)

    assert (applied.changed, applied.short) == (1, tuple(short))
    status = {question.pk: question.validation_status for question in (_question(study, n) for n in range(2))}
    assert (status[complete[0]], status[short[0]]) == ("invalid", "unvalidated")


def test_the_worker_verdict_rule_is_named_and_the_per_field_majority_is_another_reading(settings):
    """Three judges, each saying no to another field: every field has a yes majority (2 to 1), yet
    every worker's verdict is invalid, so the question is invalid unanimously by the default."""
    settings.RL_SCORING_SIMILARITY = False
    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=2, n_genq=1, n_sources=1, quota=3,
                       units_per_task=2)
    for worker in range(3):
        _validate(study, worker, verdicts={0: [NOT_WELL_FORMED, NOT_TYPE_CORRECT, WRONG_ANSWER], 1: [YES] * 3})

    run = study_score(study=study)

    block = run.results["question_validation"]
    assert "only when they answer yes to all three of well_formed, type_correct and answer_correct" in \
        block["worker_verdict_rule"]
    assert block["worker_verdict_rule"] in block["rules"]["majority_of_verdicts"]
    assert block["rules"]["majority_per_field"].startswith("majority per field")
    assert block["default"] == "majority_of_verdicts"
    split = {q["question_id"]: q for q in block["questions"]}[_question(study, 0).pk]
    assert (split["verdicts"], split["majority_of_verdicts"], split["majority_per_field"]) == \
        ({"valid": 0, "invalid": 3}, "invalid", "valid")
    assert block["readings"]["majority_per_field"] == {"n_valid": 2, "n_invalid": 0, "n_undecided": 0}
    assert block["n_questions_differ_by_reading"] == {"answer_corrected": 0, "majority_per_field": 1}
    assert block["short_questions"]["n_short"] == 0
    assert any("1 generalization questions have another verdict when each field is decided by its own majority" in w
               for w in run.warnings)
    (section,) = [s for s in report_sections(run) if s.key == "question_validation"]
    assert "Verdict: majority of worker verdicts (a worker's verdict is valid only when they answer yes to all " \
           "three" in section.notes[0]
    assert "Other reading, majority per field: each of well_formed" in section.notes[0]
    assert "1 questions differ" in section.notes[0].split("Other reading, majority per field")[1]
    totals = {row["reading"]: row for row in section.tables[0].rows}
    assert totals["majority per field"]["n_valid"] == 2
