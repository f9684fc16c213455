"""Entering a study: the consent form's receipt, and which task a worker gets.

The rules (the README's "Security model" says the same):

- A task is resumed only by the browser that holds it (the study's signed cookie names the
  participant, or the browser sent the same consent form again), or by an entry that carries
  the platform's own assignment id bound to that task. Presenting a worker id, a participant
  identifier or a link alone never hands out someone's task.
- A consent form is taken once: its one-time nonce becomes a ``ConsentReceipt`` in the same
  transaction as the participant it made, so a retried form gets the same participant and task.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from annotations import selectors_entry
from annotations.models import Assignment, ConsentReceipt, Participant
from annotations.services.assignment import assignment_start
from annotations.services.errors import TaskInProgress
from studies.models import Study

IN_ANOTHER_BROWSER = (
    "You already have a task in progress in this study, opened in another browser or under another "
    "assignment of your platform. Continue it there; if you cannot, it is given back when its time "
    "runs out ({deadline} UTC) and you can start again."
)


@dataclass(frozen=True)
class PlatformRefs:
    """The validated platform references of an entry (see ``handoff.Arrival``)."""

    assignment_id: str = ""
    task_id: str = ""
    return_url: str = ""


def may_resume(*, active: Assignment, refs: PlatformRefs, trusted: bool) -> bool:
    """Whether an entry may open ``active``, the participant's task in progress: a trusted browser
    (the study cookie names this participant, or it sent this consent form before) may, and so
    may an entry with the platform assignment id the task is bound to."""
    if trusted:
        return True
    return bool(refs.assignment_id) and refs.assignment_id == active.platform_assignment_id


def task_in_progress(active: Assignment) -> TaskInProgress:
    return TaskInProgress(IN_ANOTHER_BROWSER.format(deadline=active.expires_at.strftime("%Y-%m-%d %H:%M")))


def consent_receipt_take(*, key: str, study: Study,
                         participant: Callable[[], Participant]) -> tuple[ConsentReceipt, bool]:
    """The receipt of the consent form with nonce ``key``: (receipt, True) the first time, when
    ``participant()`` is called to find or create who consents (in this transaction, so a refusal
    it raises leaves nothing behind); (the same receipt, False) for every retry of that form."""
    existing = ConsentReceipt.objects.select_related("participant").filter(key=key).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            receipt = ConsentReceipt.objects.create(key=key, study=study, participant=participant())
    except IntegrityError:  # the same form, sent twice at once: the first one made the receipt
        return ConsentReceipt.objects.select_related("participant").get(key=key), False
    return receipt, True


def assignment_enter(*, study: Study, participant: Participant, refs: PlatformRefs, trusted: bool,
                     completion_code: str = "", receipt: ConsentReceipt | None = None) -> Assignment:
    """The task of a worker who consented: the one in progress when this entry may resume it
    (``may_resume``), else a new one. Raises ``TaskInProgress`` when a task in progress belongs to
    another browser, and the assignment service's errors (no work, not qualified, ...)."""
    for _attempt in range(2):
        active = selectors_entry.active_assignment(study=study, participant=participant)
        if active is not None:
            if not may_resume(active=active, refs=refs, trusted=trusted):
                raise task_in_progress(active)
            assignment = _refs_update(active, refs)
            break
        try:
            assignment = assignment_start(
                study=study, participant=participant, platform_assignment_id=refs.assignment_id,
                platform_task_id=refs.task_id, return_url=refs.return_url, completion_code=completion_code,
                consented=True, resume=False,
            )
            break
        except TaskInProgress:  # another request of this worker started one meanwhile: decide again
            continue
    else:  # pragma: no cover - a task appeared and vanished between two reads
        raise TaskInProgress("Your task is being set up in another window; reload this page in a moment.")
    if receipt is not None and receipt.assignment_id != assignment.pk:
        ConsentReceipt.objects.filter(pk=receipt.pk).update(assignment=assignment)
        receipt.assignment = assignment
    return assignment


def _refs_update(active: Assignment, refs: PlatformRefs) -> Assignment:
    """A trusted browser re-entered with new platform references (MTurk gives a new assignmentId
    when a worker returns and accepts the HIT again): the hand-back must go to the new one. Its
    id was bound to this worker before (``platform_assignment_bind``)."""
    changes = {name: value for name, value in (("platform_assignment_id", refs.assignment_id),
                                               ("platform_task_id", refs.task_id),
                                               ("return_url", refs.return_url))
               if value and getattr(active, name) != value}
    if changes:
        Assignment.objects.filter(pk=active.pk).update(**changes)
    return Assignment.objects.get(pk=active.pk)
