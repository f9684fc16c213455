"""The qualification test: graded once per worker and study; passing grants the study's
qualification (and lets the task's answers in: ``Assignment.qualification_pending``, set by
``assignment_start`` and, for the tasks already in progress when a test is added, by
``qualification_test_save``, is what the answer and submit services check), failing ends the
task politely and gives its units back."""
from __future__ import annotations

import datetime

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from annotations import precompiled
from annotations.choices import answer_is_correct
from annotations.models import (
    Annotation,
    Assignment,
    AttentionCheck,
    Claim,
    MTurkQualificationType,
    QualificationGrant,
    QualificationTest,
)
from annotations.services.errors import InvalidAnswer
from annotations.services.release import assignment_release, extend_to_full_duration, lock_active
from studies.choices import as_label, normalise_choices, question_choices_problems
from studies.models import Study
from studies.selectors import CHANGE, study_user_may


def qualification_submit(*, assignment: Assignment, answers: dict[str, str]) -> QualificationGrant:
    """Grade ``answers`` (question id as text -> choice label) against the study's test.

    One attempt per worker and study: a second call returns the first grant unchanged. A failed
    test returns the assignment (status ``returned``) so that its units go back to the pool. The
    grant records the task it was taken in: a failed one taken under a Prolific session someone
    else invented with the worker's id is voided when the worker comes (``impostor.impostor_grant_void``),
    and one taken under an MTurk worker id or a typed identifier refuses only the browser whose study
    cookie names that task: an entry from any other browser sets it aside and gets a task to take the
    test again (``impostor.grant_retake_start``). That task's attempt (``QualificationGrant.retake_task_id``)
    is graded here: it replaces the failed grant's result, whose ``voids`` keep the attempts set aside."""
    test = QualificationTest.objects.filter(study_id=assignment.study_id).first()
    if test is None:
        raise InvalidAnswer("This study has no qualification test.")
    with transaction.atomic():
        existing = QualificationGrant.objects.filter(
            study_id=assignment.study_id, participant_id=assignment.participant_id
        ).first()
        # A grant stands, unless this task is the retake of its failed attempt, set aside: graded below.
        if existing is not None and existing.retake_task_id != assignment.pk:
            if existing.passed:  # passed in this task or an earlier one: nothing stands in the way
                Assignment.objects.filter(pk=assignment.pk, qualification_pending=True).update(
                    qualification_pending=False)
            return existing
        # The study's row first (FOR KEY SHARE, as a claim takes it), then the task, then the test: the
        # order every writer follows (a study page save locks the study, then the test), so a grade
        # and an edit wait for each other and never deadlock (the grant's foreign key would take the
        # study's lock last otherwise).
        precompiled.study_lock_grant(study_id=assignment.study_id, participant_id=assignment.participant_id)
        locked = lock_active(assignment)
        if not locked.qualification_pending:
            # The test is not this task's to take (it started before the test was added, and the task
            # page never shows it; or it passed): a form sent twice gets what its first sending
            # graded, any other grades nothing. Before, a worker could post a guessed form and be
            # graded on a test never shown (a draft, say), which froze it for its researcher and, on
            # a pass, gave the task its full time without an answer.
            graded = QualificationGrant.objects.filter(study_id=assignment.study_id,
                                                       participant_id=assignment.participant_id).first()
            if graded is not None:
                return graded
            raise InvalidAnswer("This task does not ask for the qualification test: please reload the page.")
        # The test's row, locked as qualification_questions_set and qualification_test_save lock it:
        # an edit waits for this grade, or this grade reads the edited questions and pass mark (read
        # again below, after the lock), never a mix of the two.
        test = QualificationTest.objects.select_for_update().filter(pk=test.pk).first()
        if test is None:
            raise InvalidAnswer("This study's qualification test was removed: please reload the page.")
        questions = list(test.questions.all())
        clean: dict[str, str] = {}
        for number, question in enumerate(questions, start=1):
            labels = [c["label"] for c in normalise_choices(question.choices)]
            given = as_label(answers.get(str(question.pk), "") or "")
            if given not in labels:
                raise InvalidAnswer(f"Please answer question {number} of the test.")
            clean[str(question.pk)] = given
        score = sum(1 for q in questions if answer_is_correct(clean[str(q.pk)], q.correct_answer))
        passed = score >= test.pass_mark
        if existing is not None:  # a retake: the attempt set aside stays in the grant's voids
            retaken = QualificationGrant.objects.filter(pk=existing.pk, passed=False,
                                                        assignment_id=existing.assignment_id).update(
                passed=passed, score=score, answers=clean, assignment_id=assignment.pk, created_at=timezone.now())
            grant = QualificationGrant.objects.get(pk=existing.pk)
            if not retaken:  # graded meanwhile (the same form sent twice)
                return grant
        else:
            try:
                with transaction.atomic():
                    grant = QualificationGrant.objects.create(
                        study_id=assignment.study_id,
                        participant_id=assignment.participant_id,
                        assignment_id=assignment.pk,  # the task (so its Prolific session) it was taken in
                        passed=passed,
                        score=score,
                        answers=clean,
                    )
            except IntegrityError:
                return QualificationGrant.objects.get(
                    study_id=assignment.study_id, participant_id=assignment.participant_id
                )
        if passed:
            Assignment.objects.filter(pk=locked.pk).update(qualification_pending=False)
            locked.qualification_pending = assignment.qualification_pending = False
            extend_to_full_duration(locked=locked, study=assignment.study)
        else:
            assignment_release(assignment=assignment, status=Assignment.Status.RETURNED)
        return grant


class QualificationSetupError(Exception):
    """The test's questions or pass mark cannot change (a worker has taken it)."""


def qualification_questions(test: QualificationTest) -> list[dict]:
    """The test's questions in order, as ``{"question", "choices", "correct_answer"}``."""
    return [{"question": q.question, "choices": list(q.choices or []), "correct_answer": q.correct_answer}
            for q in test.questions.order_by("position", "id")]


class AttentionCheckRefused(Exception):
    """An attention check may not be written by this user, or no longer changes."""


def _attention_study_locked(*, study_id: int, user, verb: str) -> None:
    """Refuse (``AttentionCheckRefused``) unless ``user`` (None: the operator) may change the study
    ``study_id``; then lock the study's row ``FOR UPDATE`` (call inside the write's transaction): a
    task being started draws its checks under a ``FOR KEY SHARE`` lock of that row, so none is given
    one between the ``attention_checks_fixed`` answer below and the write."""
    if user is not None and not study_user_may(user=user, study=Study(pk=study_id), access=CHANGE):
        raise AttentionCheckRefused(f"study {study_id}: not found or not yours to change (its attention checks need "
                                    f"change rights on the study): the check was not {verb}.")
    Study.objects.select_for_update().filter(pk=study_id).values_list("pk", flat=True).first()


def attention_check_save(*, check: AttentionCheck, user) -> AttentionCheck:
    """Save ``check``, new or edited, for ``user`` (None: the operator), who must be allowed to change
    its study (CHANGE, ``studies.selectors.study_user_may``): the one way an attention check is written,
    on the study page and on the checks' own admin page, which so get one answer. An edited check
    keeps its study, and is refused once the study's checks are fixed (``attention_checks_fixed``);
    new ones may always be added. ``AttentionCheckRefused`` before anything is written otherwise."""
    with transaction.atomic():
        if check.pk is not None:
            stored = AttentionCheck.objects.filter(pk=check.pk).values_list("study_id", flat=True).first()
            if stored is not None and stored != check.study_id:
                raise AttentionCheckRefused(f"attention check {check.pk}: its study never changes.")
        _attention_study_locked(study_id=check.study_id, user=user, verb="saved")
        if check.pk is not None and attention_checks_fixed(Study(pk=check.study_id)):
            raise AttentionCheckRefused(f"attention check {check.pk}: workers have been given this study's checks, "
                                        "so they no longer change (their answers are graded against them); add a "
                                        "new one instead.")
        check.full_clean(exclude=["choices"])  # empty choices (blank to the model) mean yes / no
        check.save()
    return check


def attention_check_delete_check(*, check: AttentionCheck, user) -> None:
    """Refuse (``AttentionCheckRefused``) to delete ``check`` for ``user`` (None: the operator) by
    the rule of ``attention_check_save``: change rights on its study, and only while the study's
    checks are not fixed. It locks the study's row as ``attention_check_save`` does: called inside the
    delete's transaction, no worker is given the check between this answer and the delete. The study
    page asks it when its form is checked, inside the page's transaction, to show the reason beside
    the check; the delete itself is ``attention_check_delete``'s."""
    with transaction.atomic():
        _attention_study_locked(study_id=check.study_id, user=user, verb="deleted")
        if attention_checks_fixed(Study(pk=check.study_id)):
            raise AttentionCheckRefused(f"attention check {check.pk}: workers have been given this study's checks, "
                                        "so it is not deleted (their answers are graded against it).")


def attention_check_delete(*, check: AttentionCheck, user) -> None:
    """Delete ``check`` for ``user`` (None: the operator), refused before anything is deleted by
    ``attention_check_delete_check``, asked in the delete's transaction."""
    with transaction.atomic():
        attention_check_delete_check(check=check, user=user)
        AttentionCheck.objects.filter(pk=check.pk).delete()


def attention_checks_fixed(study) -> bool:
    """Whether ``study``'s attention checks are fixed: once a worker has been given one of them,
    the review grades the answers against the check's correct answer when it is read, so changing
    or deleting a check would silently change who failed. New checks may still be added (later
    tasks carry them). Every page that edits them asks this."""
    return study is not None and study.pk is not None and Claim.objects.filter(
        study_id=study.pk, attention_check__isnull=False).exists()


def qualification_test_sent_to_mturk(test: QualificationTest) -> MTurkQualificationType | None:
    """The MTurk graded-test qualification type made from ``test`` (the first, any endpoint), or None.
    MTurk grades the workers who take it there with the questions, answer key, pass mark and
    instructions sent when it was made (``platforms.qualification.mturk_qualification_ensure``, which
    reuses it for every later batch); their grades leave no ``QualificationGrant`` here."""
    return (MTurkQualificationType.objects.filter(study_id=test.study_id, kind=MTurkQualificationType.Kind.GRADED_TEST)
            .order_by("created_at", "pk").first())


def qualification_test_fixed_reason(test: QualificationTest) -> str | None:
    """Why ``test`` no longer changes (a sentence to put before ": its ... can no longer change"), or
    None while it may: it was sent to MTurk as a graded test (``qualification_test_sent_to_mturk``), or
    a worker has taken it here."""
    sent = qualification_test_sent_to_mturk(test)
    if sent is not None:
        when = sent.created_at.astimezone(datetime.UTC)
        return (f"Qualification test {test.pk} of study {test.study_id} was sent to MTurk on {when:%Y-%m-%d %H:%M} UTC "
                f"as the graded qualification type {sent.qualification_type_id} ({sent.endpoint}), which grades "
                "the workers there with its questions, answer key, pass mark and instructions as they were then "
                "and is reused for every later batch")
    if QualificationGrant.objects.filter(study_id=test.study_id).exists():
        return "Workers have already taken this qualification test"
    return None


def qualification_test_taken(test: QualificationTest) -> bool:
    """Whether a worker has taken ``test``, here or on MTurk (it was sent there as a graded test):
    from then on its questions, pass mark and study are fixed, and it is not deleted (the graded
    answers refer to them), wherever they would be edited (``qualification_test_fixed_reason`` says
    why). A test sent to MTurk keeps its instructions too (they are part of the test there)."""
    return qualification_test_fixed_reason(test) is not None


def qualification_test_problem(*, pass_mark: int | None, question_count: int) -> tuple[str, str] | None:
    """What makes a test no worker can pass (or one everyone passes), as ``(field, message)`` with
    ``field`` "questions" or "pass_mark"; None when it is sound: at least one question, and a pass
    mark between 1 and the number of questions (``pass_mark`` None: not given, only the questions are
    judged). The one rule: ``qualification_test_save`` refuses such a test, and the pages that edit
    one (the study page's form, the test's admin page) ask it for their message."""
    if question_count < 1:
        return "questions", "Write at least one question."
    if pass_mark is not None and pass_mark < 1:
        return "pass_mark", "The pass mark is at least 1 (a test everyone passes is no test)."
    if pass_mark is not None and pass_mark > question_count:
        return "pass_mark", f"The pass mark is higher than the number of questions ({question_count})."
    return None


def qualification_questions_set(*, test: QualificationTest, questions: list[dict]) -> None:
    """Make ``questions`` (``{"question", "choices", "correct_answer"}``, in order) the test's
    questions. Nothing changes when they are the same; different questions are refused once a
    worker has taken the test (their graded answers refer to the questions)."""
    with transaction.atomic():
        QualificationTest.objects.select_for_update().filter(pk=test.pk).first()
        if qualification_questions(test) == questions:
            return
        reason = qualification_test_fixed_reason(test)
        if reason is not None:
            raise QualificationSetupError(f"{reason}: its questions can no longer change.")
        for number, question in enumerate(questions, start=1):
            for field, problem in question_choices_problems(question.get("choices"),
                                                            question.get("correct_answer")).items():
                raise QualificationSetupError(f"Question {number}, {field.replace('_', ' ')}: {problem}")
        test.questions.all().delete()
        test.questions.model.objects.bulk_create([
            test.questions.model(test=test, position=position, **q) for position, q in enumerate(questions)
        ])


class QualificationTestRefused(Exception):
    """The acting user may not change this study's qualification test; nothing was saved."""


def qualification_test_save(*, test: QualificationTest, user, questions: list[dict] | None = None) -> QualificationTest:
    """Save ``test`` (and, given ``questions``, make them its questions: ``qualification_questions_set``)
    for ``user`` (None: the operator), who must be allowed to change its study (CHANGE,
    ``studies.selectors.study_user_may``; ``QualificationTestRefused`` before anything is written
    otherwise): the one way a qualification test is created or changed, on the study page and on
    the test's own admin page, which so get one answer.
    A new test applies to new tasks and to the study's tasks in progress whose worker has not
    consented yet, in the same transaction (``qualification_tasks_hold``), so the answer and submit
    services refuse them until their worker passed it, as the task page asks; a worker who consented
    before the test existed finishes their task as they were told. A new test first locks its study's row ``FOR
    UPDATE``: a task being started reads the test under a ``FOR KEY SHARE`` lock of that row
    (``assignment._qualification_pending``), so this waits for the starts that found no test (their
    tasks are then marked with the others) and the starts that come meanwhile wait for this
    transaction (and then find the test).
    An edited test's pass mark is fixed once a worker has taken it (``qualification_test_taken``;
    the grades given were against it), and its instructions too once it was sent to MTurk as a
    graded test (``qualification_test_sent_to_mturk``): a changed one is then refused (``QualificationSetupError``),
    under the lock on the test's row that ``qualification_questions_set`` takes, whatever page or
    caller saves it.
    A test that may still change is checked once its questions are written (``qualification_test_problem``:
    at least one question, a pass mark from 1 to their number): ``QualificationSetupError`` with that
    message otherwise, and nothing is saved. A fixed test is not judged again: its pass mark and
    questions no longer change (they are refused above), and its grades were given against them."""
    if user is not None and not study_user_may(user=user, study=Study(pk=test.study_id), access=CHANGE):
        raise QualificationTestRefused(f"study {test.study_id}: not found or not yours to change (its qualification "
                                       "test needs change rights on the study).")
    with transaction.atomic():
        created = test.pk is None
        reason = None
        if created:
            Study.objects.select_for_update().filter(pk=test.study_id).values_list("pk", flat=True).first()
        else:
            stored = QualificationTest.objects.select_for_update().filter(pk=test.pk).first()
            reason = qualification_test_fixed_reason(stored) if stored is not None else None
            if reason is not None and stored.pass_mark != test.pass_mark:
                raise QualificationSetupError(f"{reason}: its pass mark can no longer change (from {stored.pass_mark} "
                                              f"to {test.pass_mark}; the grades given were against it).")
            if (stored is not None and stored.instructions != test.instructions
                    and qualification_test_sent_to_mturk(stored) is not None):
                raise QualificationSetupError(f"{reason}: its instructions can no longer change (MTurk shows "
                                              "the workers the ones sent).")
        test.save()
        if created:
            qualification_tasks_hold(study_id=test.study_id)
        if questions is not None:
            qualification_questions_set(test=test, questions=questions)
        if reason is None:  # beside the write, the questions written: a refusal rolls both back
            problem = qualification_test_problem(pass_mark=test.pass_mark, question_count=test.questions.count())
            if problem is not None:
                raise QualificationSetupError(problem[1])
    return test


def qualification_test_delete_check(*, test: QualificationTest, user) -> QualificationTest | None:
    """Refuse to delete ``test`` unless ``user`` (None: the operator) may change its study (as
    ``qualification_test_save`` asks: ``QualificationTestRefused``) and it is not fixed
    (``qualification_test_fixed_reason``: ``QualificationSetupError`` with that reason); returns the
    stored test, or None when it is already gone. It locks the study's row ``FOR UPDATE``, then the
    test's, the order ``qualification_submit`` takes them in (the study ``FOR KEY SHARE``, then the
    test): called inside the delete's transaction, no worker is graded between this answer and the
    delete (a grade under way finishes first, and is seen here). The study page asks it when its form
    is checked, inside the page's transaction, to show the reason beside the test; the delete itself
    is ``qualification_test_delete``'s."""
    study_id = QualificationTest.objects.filter(pk=test.pk).values_list("study_id", flat=True).first()
    if study_id is None:
        return None
    if user is not None and not study_user_may(user=user, study=Study(pk=study_id), access=CHANGE):
        raise QualificationTestRefused(f"study {study_id}: not found or not yours to change (its qualification "
                                       f"test needs change rights on the study): test {test.pk} was not deleted.")
    with transaction.atomic():
        Study.objects.select_for_update().filter(pk=study_id).values_list("pk", flat=True).first()
        stored = QualificationTest.objects.select_for_update().filter(pk=test.pk).first()
        if stored is None:
            return None
        reason = qualification_test_fixed_reason(stored)
        if reason is not None:
            raise QualificationSetupError(f"{reason}: qualification test {stored.pk} of study {study_id} can no "
                                          "longer be deleted (the grades given refer to its questions and pass "
                                          "mark, and workers refused by it would stay refused by a test that "
                                          "no longer exists).")
        return stored


def qualification_test_delete(*, test: QualificationTest, user) -> None:
    """Delete ``test`` for ``user`` (None: the operator): the one way a qualification test is deleted,
    on the study page and on the test's own admin page. Refused, before anything is deleted, by the
    rule of ``qualification_test_delete_check`` (change rights on the study, and only until a worker
    took the test or it was sent to MTurk), which is asked under the study's and the test's locks,
    in the delete's transaction."""
    with transaction.atomic():
        stored = qualification_test_delete_check(test=test, user=user)
        if stored is not None:
            stored.delete()


def qualification_tasks_hold(*, study_id: int) -> int:
    """Mark the study's tasks in progress that must wait for its (new) qualification test
    (``Assignment.qualification_pending``, which the task page follows: ``selectors.assignment_page``):
    the worker has not passed the test and has not consented to the task yet. A task consented to
    before the test existed goes on without it: its worker agreed to the study as it was then, and
    failing a test sprung on them mid-task would end their work unpaid (a task already answered
    goes on too). Call inside the transaction that creates the test. The tasks are locked first, as
    consent and an answer lock their task, so a consent or an answer stored meanwhile is seen (that
    task goes on) and a later one finds the mark. Returns how many tasks wait."""
    passed = QualificationGrant.objects.filter(study_id=study_id, participant_id=OuterRef("participant_id"),
                                               passed=True)
    with transaction.atomic():
        tasks = list(Assignment.objects.select_for_update().filter(study_id=study_id, status=Assignment.Status.ACTIVE)
                     .exclude(Exists(passed)).order_by("pk").values_list("pk", flat=True))
        if not tasks:
            return 0
        answered = Exists(Annotation.objects.filter(claim__assignment_id=OuterRef("pk")))
        # One already marked but answered (its answers came while the study had no test: a test
        # deleted before anyone took it) goes on too, as its page shows no test.
        Assignment.objects.filter(pk__in=tasks, qualification_pending=True).filter(answered).update(
            qualification_pending=False)
        Assignment.objects.filter(pk__in=tasks, consented_at__isnull=True).exclude(answered).update(
            qualification_pending=True)
        return Assignment.objects.filter(pk__in=tasks, qualification_pending=True).count()
