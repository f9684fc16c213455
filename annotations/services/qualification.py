"""The qualification test: graded once per worker and study; passing grants the study's
qualification, failing ends the task politely and gives its units back."""
from __future__ import annotations

from django.db import IntegrityError, transaction

from annotations.models import Assignment, QualificationGrant, QualificationTest
from annotations.services.errors import InvalidAnswer
from annotations.services.release import assignment_release, extend_to_full_duration, lock_active
from annotations.services.steps import normalise_choices


def qualification_submit(*, assignment: Assignment, answers: dict[str, str]) -> QualificationGrant:
    """Grade ``answers`` (question id as text -> choice label) against the study's test.

    One attempt per worker and study: a second call returns the first grant unchanged. A failed
    test returns the assignment (status ``returned``) so that its units go back to the pool."""
    test = QualificationTest.objects.filter(study_id=assignment.study_id).prefetch_related("questions").first()
    if test is None:
        raise InvalidAnswer("This study has no qualification test.")
    with transaction.atomic():
        existing = QualificationGrant.objects.filter(
            study_id=assignment.study_id, participant_id=assignment.participant_id
        ).first()
        if existing is not None:
            return existing
        locked = lock_active(assignment)
        questions = list(test.questions.all())
        clean: dict[str, str] = {}
        for number, question in enumerate(questions, start=1):
            labels = [c["label"] for c in normalise_choices(question.choices)]
            given = str(answers.get(str(question.pk), "") or "").strip()
            if given not in labels:
                raise InvalidAnswer(f"Please answer question {number} of the test.")
            clean[str(question.pk)] = given
        score = sum(1 for q in questions if clean[str(q.pk)] == q.correct_answer)
        passed = score >= test.pass_mark
        try:
            with transaction.atomic():
                grant = QualificationGrant.objects.create(
                    study_id=assignment.study_id,
                    participant_id=assignment.participant_id,
                    passed=passed,
                    score=score,
                    answers=clean,
                )
        except IntegrityError:
            return QualificationGrant.objects.get(
                study_id=assignment.study_id, participant_id=assignment.participant_id
            )
        if passed:
            extend_to_full_duration(locked=locked, study=assignment.study)
        else:
            assignment_release(assignment=assignment, status=Assignment.Status.RETURNED)
        return grant
