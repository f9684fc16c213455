"""Another researcher's question-validation study does not lock a researcher out of judging their own
generalization questions.

Rita owns an open generalization study on her dataset. Xavier, who may design studies on that
dataset (``studies.view_dataset``), creates a draft question-validation study there: it draws the
same items, so it "uses" Rita's questions (``selectors.content_studies``). Before: Rita could no
longer mark her own question valid or invalid ("ContentNotYours generalization question N is used by
a study you may not change"), though a validation study never reads the status (its units include
invalid questions, its verdicts do not depend on it). Now a change of the status alone is judged by
the studies that read it (``content._status_readers``): Rita's own. Xavier still may not change the
status of Rita's question (her generalization study reads it), and an edit of what the question says
is still refused to Rita, as before: Xavier's study shows it."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from studies.models import GeneralizationQuestion, Study
from studies.services.content import ContentNotYours, content_row_save
from studies.services.questions import generalization_questions_set_validation
from studies.services.studies import study_create
from tests.annotations.factories import make_study
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views

pytestmark = pytest.mark.django_db

VALID, INVALID = GeneralizationQuestion.Validation.VALID, GeneralizationQuestion.Validation.INVALID


@pytest.fixture
def locked():
    """Rita's open generalization study with one question; Xavier's draft validation study on her dataset."""
    rita, _ = researcher_without_reference_views("rita")
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=1, n_sources=1, n_genq=1, units_per_task=1,
                       owner=rita, name="ritas-generalization")
    xavier, _ = researcher_without_reference_views("xavier")
    xavier.user_permissions.add(Permission.objects.get(content_type__app_label="studies", codename="view_dataset"))
    xavier = get_user_model().objects.get(pk=xavier.pk)
    validation = study_create(name="xaviers-validation", dataset=study.dataset, kind=Study.Kind.QUESTION_VALIDATION,
                              split="test", sources=[], owner=xavier, user=xavier, consent_text="ok")
    assert validation.status == Study.Status.DRAFT and list(validation.items.all()) == list(study.items.all())
    return rita, xavier, GeneralizationQuestion.objects.get(item__in=study.items.all())


def test_the_owner_still_marks_her_question_valid_or_invalid(locked):
    rita, _, question = locked
    assert generalization_questions_set_validation(questions=[question], status=INVALID, user=rita)
    question.refresh_from_db()
    assert question.validation_status == INVALID
    assert question.metadata["validation"]["previous"] == GeneralizationQuestion.Validation.UNVALIDATED
    generalization_questions_set_validation(questions=[question], status=VALID, user=rita)
    assert GeneralizationQuestion.objects.get(pk=question.pk).validation_status == VALID


def test_the_validation_studys_owner_still_may_not_change_her_questions_status(locked):
    _, xavier, question = locked
    with pytest.raises(ContentNotYours, match="is used by a study you may not change"):
        generalization_questions_set_validation(questions=[question], status=INVALID, user=xavier)
    assert GeneralizationQuestion.objects.get(pk=question.pk).validation_status == \
        GeneralizationQuestion.Validation.UNVALIDATED


def test_an_edit_of_what_the_question_says_is_still_refused_as_before(locked):
    rita, _, question = locked
    question.text = "Rewritten by Rita?"
    with pytest.raises(ContentNotYours, match="is used by a study you may not change"):
        content_row_save(user=rita, obj=question, changed={"text"})
    reanswered = GeneralizationQuestion.objects.get(pk=question.pk)
    reanswered.answer = "no"
    with pytest.raises(ContentNotYours, match="is used by a study you may not change"):  # with the status too
        content_row_save(user=rita, obj=reanswered, changed={"answer", "validation_status"})
    assert GeneralizationQuestion.objects.get(pk=question.pk).text != "Rewritten by Rita?"
