"""Each study kind states its good-work measure (``GOOD_WORK_MEASURES``). A utility study holds
the final answers against the gold answers; a question-validation or rationale-properties study
has answers with no right answer (a verdict on a question, marks on an explanation), so good work
is not judged for it: it has no good-work candidates, never because every task counted as 0%
correct, and the publish page says why no list appears. Workers answer through the worker pages;
the researcher reads the publish page."""
from __future__ import annotations

import html

import pytest
from django.test import Client
from django.urls import reverse

import annotations.selectors.platforms as platform_selectors
from annotations.models import Annotation, Assignment, Claim
from annotations.selectors.platforms import study_bonus_candidates
from studies.models import Study
from tests.annotations.factories import AttentionCheckFactory, make_study
from tests.annotations.pages import entry_url, form_fields, start, task_of

pytestmark = pytest.mark.django_db

PROPERTIES = ("grammatical", "factual", "supports_label", "contrast", "novel_info", "leakage", "hallucination",
              "redundant")
# Agreeing with everything a validation page proposes: well formed, of its type, its answer right.
AGREE = {"answer": "", "well_formed": "yes", "type_correct": "yes", "answer_correct": "yes", "corrected_answer": ""}


@pytest.fixture
def researcher(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("dana", "dana@example.org", "pw-not-used"))
    return client


def _work_through_pages(study: Study, answer_for) -> Assignment:
    """One worker takes a task on the pages, answers every question with ``answer_for(page)``
    (the fields the form sends besides its own), and submits."""
    worker = Client()
    task = start(worker, entry_url(study))
    for _ in range(50):
        page = worker.get(task).content.decode()
        if 'name="claim"' not in page:
            break
        response = worker.post(task + "answer", {**form_fields(page), **answer_for(page)})
        assert response.status_code == 302, response.content.decode()[:500]
    assert worker.post(task + "submit").status_code == 302
    assignment = Assignment.objects.get(study=study)
    assert assignment.status == Assignment.Status.SUBMITTED
    return assignment


def _publish_page(researcher: Client, study: Study) -> str:
    response = researcher.get(reverse("admin:annotations_publication_publish", args=[study.pk]))
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def test_utility_study_scores_final_answers_against_gold_and_lists_the_candidate(researcher):
    study = make_study(n_items=1, n_sources=1, units_per_task=1)  # one item, gold "no"
    task = _work_through_pages(study, lambda page: {"answer": "no"})
    assert study_bonus_candidates(study=study)["good_work"] == [task.pk]
    page = _publish_page(researcher, study)
    assert "Consistently good work (1 candidates)" in page
    assert 'id="good-work-not-judged"' not in page


@pytest.mark.parametrize(("kind", "answer_for", "stored", "why"), [
    (Study.Kind.QUESTION_VALIDATION, lambda page: AGREE, {"valid"},
     "question-validation answers are verdicts on a question and have no right answer; "
     "good work is not judged for this kind"),
    (Study.Kind.RATIONALE_PROPERTIES, lambda page: {"answer": "", **dict.fromkeys(PROPERTIES, "no")}, {""},
     "rationale-properties answers are marks on an explanation and have no right answer; "
     "good work is not judged for this kind"),
])
def test_kinds_without_a_right_answer_are_not_judged_and_the_publish_page_says_why(researcher, kind, answer_for,
                                                                                    stored, why):
    study = make_study(kind=kind, n_items=2, n_sources=1, n_genq=1, units_per_task=2)
    task = _work_through_pages(study, answer_for)
    # Two questions answered and stored (a validation's verdict: "valid", agreeing with the page).
    answers = list(Annotation.objects.filter(claim__assignment=task).values_list("answer", flat=True))
    assert len(answers) == 2 and set(answers) == stored
    assert study_bonus_candidates(study=study)["good_work"] == []
    page = _publish_page(researcher, study)
    assert f'<p class="help" id="good-work-not-judged">No list of good-work candidates: {why}.</p>' in page
    assert "Consistently good work (not judged for this kind)" in page
    assert "Consistently good work (0 candidates)" not in page


def test_every_study_kind_states_its_good_work_measure():
    measures = platform_selectors.GOOD_WORK_MEASURES
    assert set(measures) == set(Study.Kind.values)
    for kind, measure in measures.items():
        # Scored against a right answer, or not judged with the reason the page shows: never neither.
        assert (measure.scored_step is None) == bool(measure.not_judged), kind


def _answer_all(worker: Client, task: str, *, checks_right: bool) -> None:
    """Answer every question of the task on its pages, each right (the test reads the right answer
    of the claim a page's form is for: the page itself shows a check as a question); the attention
    checks right only when ``checks_right``."""
    for _ in range(50):
        page = worker.get(task).content.decode()
        if 'name="claim"' not in page:
            return
        fields = form_fields(page)
        claim = Claim.objects.select_related("attention_check", "unit__item").get(pk=fields["claim"])
        if claim.attention_check_id:
            right = claim.attention_check.correct_answer
            label = right if checks_right else next(c["label"] for c in claim.attention_check.choices
                                                    if c["label"] != right)
        else:
            label = claim.unit.item.gold_answer
        assert worker.post(task + "answer", {**fields, "answer": label}).status_code == 302


@pytest.mark.parametrize(("checks_right", "candidate"), [(False, False), (True, True)])
def test_a_task_without_checks_is_judged_by_the_checks_its_worker_answered_in_a_returned_task(
        researcher, checks_right, candidate):
    """Each check is asked once per worker, so a worker who answered both in a task they returned
    gets none in their next one: that task is judged by the worker's checks in the study. Failing
    them in the returned task (which cannot be rejected) no longer makes the next task good work."""
    study = make_study(n_items=8, n_sources=1, units_per_task=4)
    AttentionCheckFactory(study=study)
    AttentionCheckFactory(study=study)
    worker = Client()
    first = start(worker, entry_url(study))
    _answer_all(worker, first, checks_right=checks_right)
    assert worker.post(first + "leave").status_code == 302  # "Return this task"
    assert task_of(first).status == Assignment.Status.RETURNED
    checks = Annotation.objects.filter(claim__assignment=task_of(first), step="attention")
    assert [payload["correct"] for payload in checks.values_list("payload", flat=True)] == [checks_right] * 2

    second = start(worker, entry_url(study))
    second_task = task_of(second)
    assert second_task.participant_id == task_of(first).participant_id
    assert not Claim.objects.filter(assignment=second_task, attention_check__isnull=False).exists()
    _answer_all(worker, second, checks_right=True)  # every question right, and no check to answer
    assert worker.post(second + "submit").status_code == 302

    assert study_bonus_candidates(study=study)["good_work"] == ([second_task.pk] if candidate else [])
    page = _publish_page(researcher, study)
    assert f"Consistently good work ({int(candidate)} candidates)" in page
