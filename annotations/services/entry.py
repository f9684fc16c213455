"""Entering a study: the consent form's receipt, and which task a worker gets.

The rules (the README's "Security model" says the same):

- A task in progress is opened only by a browser that proves it holds *that task* (the study's
  signed cookie names the task: the server sets it only in a browser it sent to the task), or
  by an entry that carries the platform's own assignment id bound to that task. A worker id, a
  participant identifier, a link or a cookie of an older task never hands out someone's task,
  and an entry that does not hold the task never moves it to other platform references.
- A platform assignment (MTurk assignmentId, Prolific SESSION_ID) has at most one local task:
  entering with it again after that task is finished gets the finished task's (done) page.
- A single-person link's task is its own: the link opens the tasks started through it, never
  another task of its participant (who may hold several links of the study: a browser that
  proves it worked in the study is that participant on the next link it opens,
  ``participants.participant_link_redeem``). A finished link task's done page (its completion
  code) opens only in a browser whose cookie names that task, or a later task of its participant
  that the browser started itself (its consent receipt's key names the browser:
  ``link_task_done_in_browser``), never one handed a task in progress through its link. Nor is
  such a handed browser its participant on the next link it opens: only a task the browser
  started itself proves who it is (``participants.task_started_in_browser``).
- One browser is one participant at a time: a participant identifier typed on a plain or open
  link is refused while the link participant this browser's study cookie proves has a task in
  progress in the study, or failed its qualification test
  (``participants.participant_identified_in_browser``), as a new single-person link is.
- A consent form is taken once: its one-time nonce becomes a ``ConsentReceipt`` in the same
  transaction as the participant it made, and the task it gave is recorded on it, so a retried
  form gets the same task. A form that was refused gets no trust from being sent again. (The
  nonce is bound to the browser that loaded the landing page: ``annotations.views.entry``.)
- A consent of a worker who withdrew from the study (``withdrawal.participant_withdraw``) or is
  blocked in it stores nothing (no receipt, no platform binding) and is refused as their start is
  (``ParticipantBlocked``), also when it races the withdrawal: it locks the worker's row before
  anything else of theirs (``participants.participant_lock``, in the withdrawal's order), so a
  withdrawal either committed before and is seen, or waits and erases what the consent stored.
- A consent form agrees to the text its page showed: it carries that text's SHA-256, which the
  receipt records. A form whose hash is not the study's consent as it reads now is refused
  before anything is made (``ConsentChanged``), unless it is a retry of a form that already gave
  its task. (A study's consent text is fixed once it opens: ``studies.services.studies``.)
- An open link's place is taken in the transaction that starts the task: a refused start (no
  work, not qualified, a task in progress elsewhere) takes no place, and a refused form sent again
  is counted only if it then gets its task.
- On Prolific, a task in progress bound to another session than the entry's, which the entry may
  not resume, is checked with Prolific before the refusal (``impostor.impostor_task_end``): when
  Prolific vouches for the entry's session as this participant's and denies the task's, someone
  else started the task with their id, and it is ended; the entry then goes on as if there were no
  task in progress. The landing page (``annotations.views.entry``) and the consent
  (``consent_take``) ask the same service, so both answer alike. A consent refused because the
  participant failed the qualification test is checked alike (``impostor.impostor_grant_void``):
  a failed test taken in a task bound to another session, which Prolific denies while vouching for
  the entry's, is voided, and the worker takes the test themselves; never when the browser's study
  cookie names the task the test was failed in (that browser failed it), and at most once per
  participant and study (else a worker could fail it under invented sessions and void each attempt
  with their real one). (The landing page refuses no one for a failed test: only the consent starts
  a task.)
- A closed study (or closed link) starts nothing (``assignment_start`` refuses), but what was
  started stays reachable: a task in progress resumes under the rules above, and a finished
  task's done page shows as it does while the study is open.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction

from annotations.models import (
    Assignment,
    ConsentReceipt,
    OpenLink,
    Participant,
    ParticipantLink,
    QualificationGrant,
)
from annotations.selectors import DONE_STATUSES, participant_blocked
from annotations.selectors import entry as selectors_entry
from annotations.services.assignment import assignment_start, platform_assignment_check
from annotations.services.deadlines import assignment_duration
from annotations.services.errors import (
    AnnotationError,
    ConsentChanged,
    NotQualified,
    ParticipantBlocked,
    PlatformAssignmentTaken,
    StudyNotOpen,
    TaskInProgress,
)
from annotations.services.impostor import (
    NO_CLIENT,
    grant_for_retake,
    grant_retake_start,
    impostor_grant_void,
    impostor_task_end,
)
from annotations.services.participants import (
    NOT_AVAILABLE,
    OTHER_TASK_IN_PROGRESS,
    identity_unauthenticated,
    open_link_check,
    open_link_join,
    participant_lock,
    task_started_in_browser,
)
from studies.models import Platform, Study

IN_ANOTHER_BROWSER = (
    "You already have a task in progress in this study, opened in another browser or under another "
    "assignment of your platform. Continue it there; if you cannot, it is given back when its time "
    "runs out ({deadline} UTC) and you can start again."
)

CONSENT_CHANGED = (
    "The consent text of this study is not the one your page showed. Please read it as it stands now "
    "and tick the box again if you agree."
)



@dataclass(frozen=True)
class PlatformRefs:
    """The validated platform references of an entry (see ``handoff.Arrival``)."""

    assignment_id: str = ""
    task_id: str = ""
    return_url: str = ""


def may_resume(*, active: Assignment, refs: PlatformRefs, held_task_id: int | None) -> bool:
    """Whether an entry may open ``active``, the participant's task in progress: a browser whose
    study cookie names this task (``held_task_id``) may, and so may an entry with the platform
    assignment id the task is bound to."""
    if held_task_id is not None and held_task_id == active.pk:
        return True
    return bool(refs.assignment_id) and refs.assignment_id == active.platform_assignment_id


def moves_to_new_platform_assignment(*, active: Assignment, platform_assignment_id: str,
                                     held_task_id: int | None) -> bool:
    """Whether a consent of an entry with ``platform_assignment_id`` from a browser whose study
    cookie names ``held_task_id`` resumes ``active``, the worker's task in progress, and moves it to
    that new platform assignment (the worker returned the place and accepted it again). Such a task
    keeps its deadlines: its landing page states the time left of it (``worker_pages.time_allowed``),
    and the consent's check counts from its start (``moved_task_started_at``)."""
    return (held_task_id is not None and held_task_id == active.pk and bool(platform_assignment_id)
            and platform_assignment_id != active.platform_assignment_id)


def moved_task(*, participant: Participant | None, held_task_id: int | None,
               platform_assignment_id: str) -> Assignment | None:
    """The task in progress of ``participant`` that a consent would move to the new
    ``platform_assignment_id`` (``moves_to_new_platform_assignment``), with its start and deadline,
    or None: its consent's check counts from its start (``moved_task_started_at``), and its landing
    page, shown again after a refused form, states what is left of its time, as its first showing
    did. ``participant`` was read with the task the browser's study cookie names
    (``selectors.entry.participant_by_platform_id`` with ``held_task_id``): no statement here."""
    if participant is None or participant.pk is None or held_task_id is None or not platform_assignment_id:
        return None
    held = selectors_entry.held_task(participant=participant, held_task_id=held_task_id)
    if held is None or not moves_to_new_platform_assignment(active=held, platform_assignment_id=platform_assignment_id,
                                                            held_task_id=held_task_id):
        return None
    return held


def moved_task_started_at(*, study: Study, task: Assignment | None) -> datetime | None:
    """The start of ``task``, the task in progress a consent moves to a new platform assignment
    (``moved_task``), as the consent's check counts it, or None."""
    if task is None:
        return None
    # Its deadline is its ``expires_at``: the full duration from its start, or earlier while its first
    # answer (or its qualification test) is due. The check counts back from that deadline.
    return min(task.created_at, task.expires_at - assignment_duration(study))


class TaskHeldElsewhere(TaskInProgress):
    """``TaskInProgress`` because the entry may not resume ``active``, the participant's task in
    progress (``may_resume`` said no): ``consent_take`` may still check it with the platform
    (``impostor.impostor_task_end``) once its transaction is over."""

    def __init__(self, message: str, *, active: Assignment):
        super().__init__(message)
        self.active = active


def task_in_progress(active: Assignment) -> TaskHeldElsewhere:
    return TaskHeldElsewhere(IN_ANOTHER_BROWSER.format(deadline=active.expires_at.strftime("%Y-%m-%d %H:%M")),
                             active=active)


def consent_text_sha256(study: Study) -> str:
    """The SHA-256 (64 lowercase hex digits) of ``study``'s consent text as stored, in UTF-8: what
    the landing page's form carries (the text it shows) and a consent receipt records. Computed
    from the study row the page already read."""
    return hashlib.sha256(study.consent_text.encode("utf-8")).hexdigest()


def consent_given(*, key: str, study: Study) -> Assignment | None:
    """The task the consent form with nonce ``key`` already gave in ``study`` (a retry of a form
    whose response was lost), or None: a closed study answers a retried form with it, as an open
    one does (``consent_take``), and refuses any other."""
    receipt = (ConsentReceipt.objects.filter(key=key, study_id=study.pk, assignment__isnull=False)
               .select_related("assignment").first())
    return receipt.assignment if receipt is not None else None


def finished_task_of_browser(*, study: Study, participant_id: int | None, task_id: int | None) -> Assignment | None:
    """The finished (submitted or reviewed) task of ``study`` that this browser's study cookie
    names (``worker_pages.browser_holds``: set only in a browser that was sent to the task), or
    None. Its page is the done page, with the completion code."""
    if participant_id is None or task_id is None:
        return None
    return (Assignment.objects.filter(pk=task_id, study_id=study.pk, participant_id=participant_id,
                                      status__in=DONE_STATUSES).only("token").first())


def link_task_done_in_browser(*, finished: Assignment, held_participant_id: int | None,
                              held_task_id: int | None, browser: str) -> bool:
    """Whether this browser may see the done page (and completion code) of ``finished``, the
    finished task of a single-person link: its study cookie (``held_participant_id``,
    ``held_task_id``: ``worker_pages.browser_holds``) names that task, or a later task of the same
    participant in the study that this browser (digest ``browser``) started itself
    (``participants.task_started_in_browser``: a consent form from a landing page loaded in it
    recorded that task on its receipt). A task in progress handed to any browser through its own
    link (the link is its credential) proves nothing about the link's earlier tasks: the cookie
    such a browser gets names the task, as it does in the browser that started it, so the receipt
    tells them apart. Two reads at most."""
    if held_task_id is None:
        return False
    if held_task_id == finished.pk:
        return True
    if held_participant_id != finished.participant_id or held_task_id < finished.pk:
        return False
    later = (Assignment.objects.filter(pk=held_task_id, study_id=finished.study_id,
                                       participant_id=finished.participant_id)
             .only("pk", "study_id", "participant_link_id", "platform_assignment_id").first())
    return later is not None and task_started_in_browser(task=later, browser=browser)


def consent_take(*, key: str, study: Study, consent_sha256: str, participant: Callable[[], Participant],
                 refs: PlatformRefs, held_task_id: int | None, completion_code: str = "",
                 link: ParticipantLink | None = None, open_link: OpenLink | None = None,
                 landed_at: datetime | None = None, client: str = NO_CLIENT) -> Assignment:
    """The task of the consent form with nonce ``key`` (already checked to come from this
    browser's landing page), which agreed to the consent text of hash ``consent_sha256`` (64
    lowercase hex digits, checked by the caller). A hash that is not the study's consent as it
    reads now (``consent_text_sha256``) raises ``ConsentChanged`` before anything is made, unless
    the form already gave its task (``consent_given``: a retry, answered as before). Else, the
    first time, its receipt, recording the hash, and the task ``assignment_enter`` decides, recorded
    on it, in the transaction that made the participant (``_consent_first``); a form sent again,
    holding the worker's and then the receipt's row lock, the task it gave before, or the one decided
    now (``_consent_decide``). So a copy of the form sent meanwhile waits and gets the same task,
    and a form that was refused is decided afresh when sent again: it proves no more than the
    cookie it comes with (``held_task_id``). A worker who came through ``open_link`` takes its
    place with the new task, in this transaction (``assignment_enter``). A refusal because the
    participant's task in progress is bound to another platform assignment (``TaskHeldElsewhere``)
    is checked with the platform after that transaction, holding no lock
    (``impostor.impostor_task_end``): a task Prolific shows an impostor started is ended and the
    form decided once more. So is a refusal because the participant failed the qualification test
    (``NotQualified``; ``impostor.impostor_grant_void``): a failed test Prolific shows an impostor
    took, in a task bound to another session, is voided and the form decided once more (never when
    this browser's cookie names that task, ``held_task_id``: it failed the test itself; and once per
    participant and study). Under an MTurk worker id or a typed identifier
    (``participants.identity_unauthenticated``) a failed test refuses only the browser whose cookie
    names the task it was failed in (``impostor.grant_for_retake``): from any other, the form is
    decided once more with the failed attempt set aside in that decision's transaction
    (``impostor.grant_retake_start``), so a refused start sets nothing aside. Raises
    what ``participant()`` and ``assignment_enter`` raise. ``landed_at``: when a platform arrival's
    clock started (its landing time, from its signed nonce, or the start of the first task of its
    platform assignment if that was earlier: ``deadlines.platform_clock_start``); a new task's clock
    starts then (``assignment_start``). ``client``: the form's client address (``lab.clientip.client_ip``),
    whose budget of Prolific reads those checks spend (``impostor.prolific_vouches``)."""
    if consent_sha256 != consent_text_sha256(study):
        given = consent_given(key=key, study=study)
        if given is not None:
            return given
        raise ConsentChanged(CONSENT_CHANGED)
    decide = {"study": study, "refs": refs, "held_task_id": held_task_id, "completion_code": completion_code,
              "link": link, "open_link": open_link, "landed_at": landed_at}
    receipt = ConsentReceipt.objects.select_related("participant").filter(key=key).first()
    first = None if receipt is not None else _consent_first(
        key=key, participant=participant, consent_sha256=consent_sha256, **decide)
    if receipt is None and first is None:  # the same form, sent twice at once: the first one made the receipt
        receipt = ConsentReceipt.objects.select_related("participant").get(key=key)
    try:
        if first is None:
            return _consent_decide(receipt=receipt, **decide)
        receipt, given, refused = first
        if refused is not None:
            raise refused
        return given
    except TaskHeldElsewhere as refusal:  # that transaction is over: no lock is held while Prolific is asked
        if not impostor_task_end(study=study, participant=receipt.participant, task=refusal.active,
                                 platform_assignment_id=refs.assignment_id, client=client):
            raise
    except NotQualified as refusal:  # the same, for a failed qualification test taken in another session's task
        if identity_unauthenticated(receipt.participant):  # or taken in a task another browser holds
            retake = grant_for_retake(study=study, participant=receipt.participant, held_task_id=held_task_id,
                                      refusal=refusal)
            return _consent_decide(receipt=receipt, **decide, retake=retake)
        if not impostor_grant_void(study=study, participant=receipt.participant,
                                   platform_assignment_id=refs.assignment_id, held_task_id=held_task_id,
                                   client=client):
            raise
    return _consent_decide(receipt=receipt, **decide)


def _consent_first(*, key: str, study: Study, participant: Callable[[], Participant], consent_sha256: str,
                   link: ParticipantLink | None, **decide) -> tuple[ConsentReceipt, Assignment | None,
                                                                    AnnotationError | None] | None:
    """The first sending of the consent form with nonce ``key``: in one transaction, ``participant()``
    finds or creates who consents, their row is locked (``participant_lock``, before anything of theirs
    is read or written: the first lock a withdrawal takes, ``withdrawal.participant_withdraw``; a
    single-person link's participant before the link's row, which the withdrawal updates after it),
    the receipt is made, recording the hash, and the decision (``_consent_enter``) is taken in a
    savepoint: (receipt, task, None), or (receipt, None, the refusal) for a refused start, whose
    receipt stays (the form is decided afresh when sent again). A worker who withdrew from the study
    or is blocked in it keeps nothing: the start refuses them (``assignment_start``, under the same
    lock), and so does any other refusal of theirs (``participant_blocked``, read under the lock),
    with ``ParticipantBlocked``, raised here so that the receipt, the participant and their platform
    binding made by ``participant()`` are not stored. A withdrawal that locked the worker first
    commits before the lock is granted, and every statement after it sees that; one that comes
    after waits for this transaction and erases what it stored. None when the same form, sent at
    the same moment, made the receipt first (nothing of this call is kept)."""
    try:
        with transaction.atomic():
            if link is not None and link.participant_id is not None:  # its participant first, then its row
                participant_lock(link.participant_id)
            person = participant()
            participant_lock(person.pk)
            receipt = ConsentReceipt.objects.create(key=key, study=study, participant=person,
                                                    consent_sha256=consent_sha256)
            try:
                with transaction.atomic():
                    return receipt, _consent_enter(receipt=receipt, study=study, link=link, **decide), None
            except ParticipantBlocked:
                raise
            except AnnotationError as refusal:
                if participant_blocked(participant=person, study=study, lock=True):
                    raise ParticipantBlocked(NOT_AVAILABLE) from refusal
                return receipt, None, refusal
    except IntegrityError:
        if not ConsentReceipt.objects.filter(key=key).exists():
            raise
        return None


def _consent_decide(*, receipt: ConsentReceipt, study: Study, refs: PlatformRefs, held_task_id: int | None,
                    completion_code: str, link: ParticipantLink | None, open_link: OpenLink | None,
                    retake: QualificationGrant | None = None, landed_at: datetime | None = None) -> Assignment:
    """``consent_take``'s decision for a form whose receipt was made before (sent again, or
    decided again after an impostor check), in one transaction holding the worker's row lock
    (``participant_lock``, taken first, as a withdrawal takes it) and then the receipt's: the task
    the form gave before, or the one ``assignment_enter`` decides now, recorded on the receipt
    (``_consent_enter``). A receipt gone when the locks are granted was erased by the worker's
    withdrawal: ``ParticipantBlocked``, the words a start refuses them with. With ``retake`` (a
    failed qualification grant ``impostor.grant_for_retake`` found this browser may set aside),
    the new task is started with that attempt set aside (``impostor.grant_retake_start``), in this
    transaction: a refusal leaves the grant as it was."""
    with transaction.atomic():
        participant_lock(receipt.participant_id)
        # The row alone (a joined row would be read as it was before the wait for the lock).
        locked = ConsentReceipt.objects.select_for_update().only("assignment_id").filter(pk=receipt.pk).first()
        if locked is None:  # erased by a withdrawal that committed while this waited
            raise ParticipantBlocked(NOT_AVAILABLE)
        if locked.assignment_id is not None:
            return Assignment.objects.get(pk=locked.assignment_id)
        return _consent_enter(receipt=receipt, study=study, refs=refs, held_task_id=held_task_id,
                              completion_code=completion_code, link=link, open_link=open_link, retake=retake,
                              landed_at=landed_at)


def _consent_enter(*, receipt: ConsentReceipt, study: Study, refs: PlatformRefs, held_task_id: int | None,
                   completion_code: str, link: ParticipantLink | None, open_link: OpenLink | None,
                   retake: QualificationGrant | None = None, landed_at: datetime | None = None) -> Assignment:
    """The task ``assignment_enter`` decides for the form of ``receipt`` (with ``retake``: started
    with that failed attempt set aside, ``impostor.grant_retake_start``), recorded on the receipt.
    Call in the transaction that holds the worker's row lock (``_consent_first``, ``_consent_decide``)."""

    def enter() -> Assignment:
        return assignment_enter(study=study, participant=receipt.participant, refs=refs,
                                held_task_id=held_task_id, completion_code=completion_code, link=link,
                                open_link=open_link, landed_at=landed_at)

    if retake is None:
        assignment = enter()
    else:
        assignment = grant_retake_start(study=study, participant=receipt.participant, grant=retake, start=enter)
    ConsentReceipt.objects.filter(pk=receipt.pk).update(assignment=assignment)
    return assignment


# A participant link of a study that no longer runs on participant links starts no task.
LINK_ON_ANOTHER_PLATFORM = ("This link no longer starts a task: the study now recruits on another platform. "
                            "Thank you for your interest.")


def assignment_enter(*, study: Study, participant: Participant, refs: PlatformRefs, held_task_id: int | None,
                     completion_code: str = "", link: ParticipantLink | None = None,
                     open_link: OpenLink | None = None, landed_at: datetime | None = None) -> Assignment:
    """The task of a worker who consented: the one in progress when this entry may resume it
    (``may_resume``), else a new one. Raises ``TaskInProgress`` when a task in progress belongs to
    another browser, ``PlatformAssignmentDone`` / ``PlatformAssignmentTaken`` when the platform
    assignment has another local task, and the assignment service's errors (no work, not
    qualified, ...). Through a single-person ``link`` the task in progress is opened only if it
    was started through that link (the link is its credential); another one refuses. Through an
    ``open_link`` a new task takes the participant's place on the link (``open_link_join``, after
    the start, so a refused start takes no place and a full or closed link starts no task; a
    closed or full link refuses before anything is claimed, ``open_link_check``). A link of either
    kind starts no new task in a study whose platform is not participant links (``StudyNotOpen``:
    made while it was a link draft, it changed platform since). Call inside the
    transaction that records the task on the consent's receipt (``consent_take``). A new task's
    clock starts at ``landed_at`` if given (a platform arrival's clock start,
    ``deadlines.platform_clock_start``: ``assignment_start``)."""
    for _attempt in range(2):
        active = selectors_entry.active_assignment(study=study, participant=participant)
        if active is not None and link is not None:
            if active.participant_link_id == link.pk:
                return active
            raise TaskInProgress(OTHER_TASK_IN_PROGRESS)
        if active is not None:
            if not may_resume(active=active, refs=refs, held_task_id=held_task_id):
                raise task_in_progress(active)
            if held_task_id == active.pk:
                return _refs_update(active, refs, study=study)
            return active
        if (link is not None or open_link is not None) and study.platform != Platform.LINK:
            # A link made while the study was a participant-links draft, whose platform changed
            # since: its workers would be paid nowhere (a study recruits only on its own platform).
            raise StudyNotOpen(LINK_ON_ANOTHER_PLATFORM)
        if open_link is not None:
            open_link_check(link=open_link, participant=participant)
        try:
            # A savepoint only for an open link (a refused join takes the task back with it); without
            # one, the start needs none (its statements are pinned: tests/annotations/test_round_trips.py).
            with transaction.atomic() if open_link is not None else nullcontext():
                started = assignment_start(
                    study=study, participant=participant, platform_assignment_id=refs.assignment_id,
                    platform_task_id=refs.task_id, return_url=refs.return_url, completion_code=completion_code,
                    consented=True, resume=False, participant_link=link, landed_at=landed_at,
                )
                if open_link is not None:  # its row lock is held only until this transaction commits
                    open_link_join(link=open_link, participant=participant, task=started)
                return started
        except TaskInProgress:  # another request of this worker started one meanwhile: decide again
            continue
    # Reached only when a task appeared and vanished between two reads.
    raise TaskInProgress("Your task is being set up in another window; reload this page in a moment.")


def _refs_update(active: Assignment, refs: PlatformRefs, *, study: Study) -> Assignment:
    """The browser that holds ``active`` re-entered with new platform references (MTurk gives a
    new assignmentId when a worker returns and accepts the HIT again): the hand-back must go to
    the new one. Its id was bound to this worker before (``platform_assignment_bind``); a
    platform assignment that has another local task is refused (``platform_assignment_check``)."""
    changes = {name: value for name, value in (("platform_assignment_id", refs.assignment_id),
                                               ("platform_task_id", refs.task_id),
                                               ("return_url", refs.return_url))
               if value and getattr(active, name) != value}
    if "platform_assignment_id" in changes:
        platform_assignment_check(study=study, platform_assignment_id=refs.assignment_id, own=active)
    if changes:
        try:
            with transaction.atomic():
                Assignment.objects.filter(pk=active.pk).update(**changes)
        except IntegrityError:  # the same platform assignment started a task at this very moment
            raise PlatformAssignmentTaken("This platform assignment already has a task in progress.") from None
    return Assignment.objects.get(pk=active.pk)
