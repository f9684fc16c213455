"""Every answer a worker gives, and the submit of a finished task.

``annotation_submit`` stores one step's answer under the assignment's row lock; the last step of
a claim marks it completed. ``assignment_submit`` finishes the task: only then do its completed
claims count (``selectors.claims_that_count``) and ``Unit.n_completed`` moves (see
``annotations.services.release`` for what the counters mean).
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from annotations import precompiled
from annotations.choices import answer_is_correct
from annotations.models import Annotation, Assignment, Claim, Unit
from annotations.selectors import DONE_STATUSES, TaskClaims, claim_counts, shown_at_from_token, task_claims
from annotations.services.errors import (
    AnswerLocked,
    AnswerNotTimed,
    AssignmentExpired,
    AssignmentIncomplete,
    ForeignClaim,
    InvalidAnswer,
    QualificationRequired,
    StepOutOfOrder,
)
from annotations.services.release import active_or_refuse, extend_to_full_duration, lock, lock_active
from annotations.services.steps import answer_order, answered_step, clean_answer, steps_for
from annotations.services.stopping import units_decide
from studies.choices import genq_choices, normalise_choices


def claim_labels(claim: Claim, *, kind: str) -> list[str]:
    """Allowed answer labels of the question a claim asks."""
    if claim.attention_check_id:
        return [c["label"] for c in normalise_choices(claim.attention_check.choices)]
    unit = claim.unit
    if unit.generalization_question_id:
        return [c["label"] for c in genq_choices(unit.generalization_question, unit.item)]
    return [c["label"] for c in normalise_choices(unit.item.choices)]


def proposed_answer(claim: Claim, *, step: str) -> str | None:
    """The answer a validation step judges (its unit's generalization question's, read with the
    question ``claim_labels`` reads: no query of its own); None for any other step."""
    if step != Annotation.Step.VALIDATION or claim.attention_check_id or not claim.unit.generalization_question_id:
        return None
    return claim.unit.generalization_question.answer


@dataclass(frozen=True)
class Submitted:
    annotation: Annotation  # the stored answer (the one stored before, for an answer sent again)
    # The task's claims as this answer left them, read under the task's row lock: what the next
    # page needs (``selectors.assignment_page(claims=...)``), without reading them again.
    task: TaskClaims


NOT_TIMED = (
    "Your answer was not saved: the form did not carry the time this question was shown (the page's "
    "'shown' field was missing, altered or another question's). Please reload the page and answer again."
)
NOT_THE_QUESTION_SHOWN = (
    "Your answer was not saved: it is for another question than the one your task asks now (questions "
    "are answered in order). Please reload the page and answer the question it shows."
)


def annotation_submit(*, assignment: Assignment, claim: Claim, step: str, answer: str, payload: dict | None = None,
                      shown_at: datetime | None = None, duration_ms: int | None = None,
                      shown_token: str | None = None) -> Annotation:
    """Store one step's answer for a claim of ``assignment`` and return it: the rules are
    ``annotation_submit_with_task``'s, which also returns the task's claims for the next page."""
    return annotation_submit_with_task(assignment=assignment, claim=claim, step=step, answer=answer, payload=payload,
                                       shown_at=shown_at, duration_ms=duration_ms,
                                       shown_token=shown_token).annotation


def annotation_submit_with_task(
    *,
    assignment: Assignment,
    claim: Claim,
    step: str,
    answer: str,
    payload: dict | None = None,
    shown_at: datetime | None = None,
    duration_ms: int | None = None,
    shown_token: str | None = None,
) -> Submitted:
    """Store one step's answer for a claim of ``assignment``.

    Idempotent: the same answer again returns the stored one and changes nothing. A different
    answer for a stored step raises ``AnswerLocked`` (the first answer cannot change after the
    reveal). A new answer goes in the order the task page asks: only for the task's first claim
    not completed (attention checks are claims, in their places), and ``after`` only once
    ``before`` is stored; another raises ``StepOutOfOrder`` (read from the claims read under the
    lock, no query of its own). An attention check's page shows it as its study's first step and
    sends that step's name: its answer is stored as the check's own step (``steps.answered_step``),
    graded, and without the flag a question's first step may carry (the form has the same box). ``shown_token``: the signed time the page showed this step
    (``selectors.shown_token``), as a worker's form sent it; the answer pages always pass it
    (empty when the form had none), and a new answer without a valid token for this claim and
    step raises ``AnswerNotTimed``, so no answer leaves the timing figures or the speeder check by
    dropping it; its time is the answer's ``shown_at``. Callers that are not a worker's page
    (imports, tests, benchmarks) pass None and their own ``shown_at``, or none. Expired, finished or foreign
    assignments are refused with ``AssignmentExpired`` / ``AssignmentNotActive`` /
    ``ForeignClaim`` and nothing changes. The first answer of a task extends its deadline from
    the first-answer window to the full duration. While the task's qualification test is not
    passed nothing is stored (``QualificationRequired``): the test is the gate, not only the
    page that shows it."""
    now = timezone.now()
    with transaction.atomic():
        if claim.assignment_id != assignment.pk:
            raise ForeignClaim("That question is not part of your task.")
        locked = lock_active(assignment, now)
        refuse_until_qualified(locked, study_id=assignment.study_id)
        if claim.released:
            raise AssignmentExpired("This question was given back to the pool; its answers are no longer saved.")
        kind = assignment.study.kind
        is_check = bool(claim.attention_check_id)
        steps = steps_for(kind=kind, is_attention_check=is_check)
        # A page names only its study's steps, for a check too (``steps.page_step``: a check shows
        # as the first); callers that are not a page (no shown token: imports, tests) may name a
        # check's own step. The same names, the same refusals, whatever the claim.
        named = steps_for(kind=kind, is_attention_check=False)
        if step not in named and (shown_token is not None or step not in steps):
            raise InvalidAnswer(f"'{step}' is not a step of this question (its steps: {', '.join(named)}).")
        step = answered_step(kind=kind, is_attention_check=is_check, step=step)

        def cleaned() -> tuple[str, dict]:
            # Read only for a question the page has shown (below): checked against a later
            # question's choices, an answer would tell a script which of them is a check.
            clean, clean_payload = clean_answer(
                step=step, answer=answer, payload=payload, labels=claim_labels(claim, kind=kind),
                proposed_answer=proposed_answer(claim, step=step),
            )
            if step == Annotation.Step.ATTENTION:
                clean_payload = {"correct": answer_is_correct(clean, claim.attention_check.correct_answer)}
            return clean, clean_payload

        # The task's claims, under the lock: which steps of this claim are stored (and the next
        # page's state). Only an answer sent again reads the stored answer itself, to compare.
        task = task_claims(assignment.pk)
        stored = task.stored_steps(claim.pk, steps)
        if step in stored:
            existing = {a.step: a for a in precompiled.ANSWERS_OF_CLAIM.all(claim.pk)}.get(step)
            if existing is not None:
                return Submitted(_same_or_locked(existing, *cleaned()), task)
        # The question the page asks: the task's first claim not completed (the claims' order).
        if next((pk for pk, completed_at, _check in task.rows if completed_at is None), None) != claim.pk:
            raise StepOutOfOrder(NOT_THE_QUESTION_SHOWN)
        clean, clean_payload = cleaned()
        order = answer_order(kind=kind, is_attention_check=is_check)
        missing = [s for s in order[: order.index(step)] if s not in stored]
        if missing or step not in steps:  # a check's later step: as a question's before its first answer
            raise StepOutOfOrder("Please answer the question on its own first; then the explanation is shown.")
        if shown_token is not None:
            shown_at = shown_at_from_token(shown_token, claim_id=claim.pk, step=step)
            if shown_at is None:
                raise AnswerNotTimed(NOT_TIMED)
        if shown_at is not None and duration_ms is None:
            duration_ms = max(0, min(int((now - shown_at).total_seconds() * 1000), 24 * 3600 * 1000))
        extend_to_full_duration(locked=locked, study=assignment.study)
        assignment.expires_at = locked.expires_at  # the next page (sent with this answer) tells the new deadline
        # No savepoint needed: the assignment row lock above serialises this worker's submissions,
        # so a duplicate (double click, retry) always finds the stored answer in ``stored``; the
        # unique constraint on (claim, step) stays as the last guard.
        annotation = precompiled.answer_insert(
            claim_id=claim.pk, step=step, answer=clean, payload=clean_payload,
            shown_at=shown_at, duration_ms=duration_ms,
        )
        completed = now if step == steps[-1] else None
        if completed is not None:
            claim.completed_at = now
            precompiled.claim_completed(claim_id=claim.pk, at=now)
        task.record(claim_id=claim.pk, step=step, answer=clean, answered_at=annotation.answered_at,
                    completed_at=completed)
        return Submitted(annotation, task)


def refuse_until_qualified(locked: Assignment, *, study_id: int) -> None:
    """Raise ``QualificationRequired`` while the task waits for its qualification test
    (``Assignment.qualification_pending``, read with the row lock: no query of its own unless it
    is set; then the test must still exist, so a task whose study dropped its test is not stuck)."""
    if locked.qualification_pending and precompiled.QUALIFICATION_TEST_OF_STUDY.first(study_id) is not None:
        raise QualificationRequired(
            "This study asks you to take its qualification test first: open your task page again to see it."
        )


def _same_or_locked(existing: Annotation, answer: str, payload: dict) -> Annotation:
    if existing.answer == answer and (existing.payload or {}) == (payload or {}):
        return existing
    if existing.step == Annotation.Step.BEFORE:
        raise AnswerLocked(
            "Your first answer is already recorded and cannot be changed once the explanation was shown."
        )
    raise AnswerLocked("This answer is already recorded and cannot be changed.")


def assignment_submit(*, assignment: Assignment) -> Assignment:
    """Finish the task: every claim must be complete. From now on its answers count
    (``claims_that_count``) and each of its units has one more ``n_completed``. Returns the
    assignment with its completion code. Idempotent: submitting a task handed in already
    (``DONE_STATUSES``: submitted, and approved or rejected since) returns it unchanged, so a Finish
    sent again after a review still gets the done page. Refused (``QualificationRequired``) while
    the qualification test is not passed."""
    with transaction.atomic():
        locked = lock(assignment)
        if locked.status in DONE_STATUSES:
            assignment.refresh_from_db()
            return assignment
        active_or_refuse(locked)  # the row just locked: no second lock
        refuse_until_qualified(locked, study_id=assignment.study_id)
        # The task's claims in one read: the open ones refuse the submit, the others' units move.
        claims = list(Claim.objects.filter(assignment_id=assignment.pk, released=False)
                      .values_list("unit_id", "completed_at"))
        open_claims = sum(1 for _unit_id, completed_at in claims if completed_at is None)
        if open_claims:
            raise AssignmentIncomplete(
                f"{open_claims} question(s) of this task still need an answer before you can finish."
            )
        fields = {"submitted_at": timezone.now()}
        if not assignment.completion_code:
            fields["completion_code"] = secrets.token_hex(5).upper()
        Assignment.STATUS.move(locked, Assignment.Status.SUBMITTED, **fields)
        # A unit is in a task at most once (one claim per question and worker): +1 for each claim
        # that now counts (``claim_counts``: work that sync already put on hold does not), units
        # locked in id order as every other writer of the counters does.
        # Read again through the counting rule (``claim_counts``): a task sync already put on hold
        # adds nothing until the hold is cleared.
        unit_ids = list(
            Claim.objects.filter(claim_counts(), assignment_id=assignment.pk).values_list("unit_id", flat=True)
        )
        if unit_ids:
            list(Unit.objects.select_for_update().filter(id__in=unit_ids).order_by("id").values_list("id"))
            Unit.objects.filter(id__in=unit_ids).update(n_completed=F("n_completed") + 1)
            # Its answers count now: a study that stops early closes the units they decide.
            units_decide(study=assignment.study, unit_ids=unit_ids)
        # The caller's copy gets what the move wrote, without reading the row back.
        Assignment.STATUS.move(assignment, Assignment.Status.SUBMITTED, save=False, **fields)
        return assignment
