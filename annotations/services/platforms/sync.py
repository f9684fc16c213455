"""Sync: fetch every assignment / submission of a study's publications, match them to the stored
work, take over review outcomes decided on the platform, and reconcile the calls whose outcome
was never recorded."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from annotations.models import (
    WITHDRAWAL_LOCK,
    Annotation,
    Assignment,
    PlatformCall,
    PlatformSubmission,
    Publication,
)
from annotations.models.core import LIVE_OR_FINISHED
from annotations.platforms import get_platform
from annotations.platforms.base import PlatformError
from annotations.selectors import (
    COUNTING_ASSIGNMENT_STATUSES,
    HOLDING_FLAGS,
    participant_withdrawal_digest,
    study_withdrawal_digests,
    worker_withdrawn,
)
from annotations.selectors.platforms import publication_unlisted_work
from annotations.services.payments import platform_call_note_error, platform_call_reconcile
from annotations.services.release import units_recount_completed
from annotations.services.stopping import UNLISTED_UNTIL_SYNCED, unit_decide_for_assignment, units_after_hold
from lab.dblocks import transaction_lock
from studies.models import Platform, Study

from .bonus import bonus_reconciled, bonuses_settle_from_calls
from .calls import RECONCILE_NOTE, reconciler
from .common import OP
from .publish import call_hit_entry, publication_add_external_id
from .review import NOT_SUBMITTED_HERE_STATUSES, assignment_reviewed, reject_not_applied

# The platform statuses (as ``RemoteSubmission.status`` normalises them) of a session that ended
# on the platform without being submitted there: Prolific's TIMED-OUT ("expired"), RETURNED and
# SCREENED OUT ("returned"). The platform pays nothing for it. MTurk lists only submitted work.
ENDED_ON_PLATFORM_STATUSES = ("expired", "returned")

# The holds that sync puts on work that counted until then (submitted here): a new one recounts
# its units and checks its decided units again (``_submission_store``).
HOLDS_COUNTING_WORK = (PlatformSubmission.Flag.WORKER_MISMATCH, PlatformSubmission.Flag.ENDED_ON_PLATFORM)


def platform_calls_reconcile(*, study: Study) -> dict:
    """Reconcile every call of ``study`` that was sent but never recorded (a crash, a timeout).
    A call the platform cannot answer about (a refusal, a bad id) keeps its error on its audit row
    and stays unknown; the other calls are reconciled all the same. Then the bonuses of the study
    left unsettled after their call was settled (``bonuses_settle_from_calls``: a sync that died
    between a call's outcome and its bonus's; no later sync looks at a settled call) are settled by it."""
    counts = {"confirmed": 0, "failed": 0, "unknown": 0}
    for call in PlatformCall.objects.filter(study=study, status=PlatformCall.Status.SENT).order_by("id"):
        platform = get_platform(call.platform)
        try:
            outcome = platform_call_reconcile(call=call, reconcile=reconciler(platform))
        except (PlatformError, KeyError) as exc:  # KeyError: an audit row without what reconciling needs
            platform_call_note_error(call=call, error=f"{RECONCILE_NOTE}{getattr(exc, 'message', None) or exc!r}")
            outcome = None
        counts[{True: "confirmed", False: "failed", None: "unknown"}[outcome]] += 1
        # What follows from the outcome (True applied, False not, None unknown).
        if outcome is not None and call.operation in (OP.BONUS, OP.BONUS_SETUP):
            call.refresh_from_db()
            bonus_reconciled(token=call.idempotency_key.split(":", 2)[-1], call=call, applied=outcome)
        if outcome is True and call.operation in (OP.APPROVE, OP.REJECT) and call.assignment_id:
            assignment_reviewed(call.assignment_id, approved=call.operation == OP.APPROVE)
        if outcome is False and call.operation == OP.REJECT:
            reject_not_applied(call)  # nothing was rejected: the researcher's clear it took comes back
        if outcome is True and call.operation == OP.CREATE_HIT and call.publication_id:
            call.refresh_from_db()
            publication_add_external_id(call.publication, call_hit_entry(call), "hit_id")
    bonuses_settle_from_calls(study=study)
    return counts


def _task_still_holds(task_id: int, platform_assignment_id: str) -> bool:
    """Whether task ``task_id`` still holds ``platform_assignment_id``, read again under the study's
    withdrawal lock: a withdrawal erased (or emptied) the task of a worker who withdrew meanwhile."""
    return Assignment.objects.filter(pk=task_id, platform_assignment_id=platform_assignment_id).exists()


@dataclass
class SyncReport:
    remote: int = 0
    matched: int = 0
    flagged: int = 0
    status_updates: int = 0
    reconciled: dict = field(default_factory=dict)
    flags: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def study_sync(*, study: Study) -> SyncReport:
    """Fetch every assignment / submission of the study's publications, match them to the stored
    assignments (by the platform's assignment / submission id), flag submitted ones that have no
    stored assignment or no stored answers, and those whose platform worker id is not the local
    participant's (held: not scored, approved or paid until a researcher clears it), hold
    likewise the submitted work answered here under one of the publication's platform tasks that
    the platform's listing lacks (``_unlisted_work_hold``: an invented platform id), and the work
    submitted here whose session the platform lists as timed out or returned (``ENDED_ON_PLATFORM``:
    the platform pays nothing for it), take over
    review outcomes decided on the platform (MTurk auto-approval), and reconcile calls left
    unconfirmed by a crash. The rows of a worker who withdrew from the study
    (``annotations.services.withdrawal``) are skipped: nothing of theirs is stored again, and their
    ids list nothing here (a task another participant entered with one is held as unlisted). A
    publication the platform cannot list records its error (shown in the admin) and the others are
    synced; one bad row never stops the sync."""
    report = SyncReport(reconciled=platform_calls_reconcile(study=study))
    withdrawn = study_withdrawal_digests(study=study)
    publications = Publication.objects.filter(study=study, dry_run=False).exclude(platform=Platform.LINK).exclude(
        status__in=[Publication.Status.FAILED])
    for publication in publications:
        platform = get_platform(publication.platform)
        listed_at = timezone.now()  # the listing shows everything started before this
        try:
            remote = platform.sync(external_ids=publication.external_ids)
        except PlatformError as exc:
            Publication.objects.filter(pk=publication.pk).update(error=f"sync: {exc.message}"[:2000])
            report.errors.append(f"{publication}: {exc.message}")
            continue
        listed = _publication_sync(study=study, publication=publication, remote=remote, withdrawn=withdrawn,
                                   report=report)
        # its listing holds every piece of work from the start: work it lacks is unknown to it
        if publication.platform in UNLISTED_UNTIL_SYNCED:
            _unlisted_work_hold(study=study, publication=publication, listed=listed, listed_at=listed_at,
                                report=report)
    return report


@dataclass
class _StoredWork:
    """What is stored here for one publication's remote rows: the assignments they name (by
    platform assignment id), those held (``HOLDING_FLAGS``: a worker mismatch, or not listed by
    the platform before), and those with answers."""

    local: dict
    was_held: set
    answered: set


def _stored_work(*, study: Study, publication: Publication, remote: list) -> _StoredWork:
    ids = [item.platform_assignment_id for item in remote]
    local: dict = {}
    for a in Assignment.objects.filter(study=study, platform_assignment_id__in=ids).select_related(
            "participant").order_by("id"):
        # One platform id names at most one task in progress or finished (``LIVE_OR_FINISHED``)
        # beside any number returned or expired before it: that one is the platform's work.
        kept = local.get(a.platform_assignment_id)
        if kept is None or kept.status not in LIVE_OR_FINISHED or a.status in LIVE_OR_FINISHED:
            local[a.platform_assignment_id] = a
    was_held = set(PlatformSubmission.objects.filter(
        publication=publication, flag__in=HOLDING_FLAGS, assignment__isnull=False)
        .values_list("assignment_id", flat=True))
    answered = set(Annotation.objects.filter(claim__assignment__in=[a.pk for a in local.values()])
                   .values_list("claim__assignment", flat=True).distinct())
    return _StoredWork(local, was_held, answered)


def _publication_sync(*, study: Study, publication: Publication, remote: list, withdrawn,
                      report: SyncReport) -> set[str]:
    """Match one publication's remote rows to the stored work, store each as a
    ``PlatformSubmission`` and count it on ``report``. Returns the platform assignment ids of the
    rows it stored: the listing as far as this study may read it. A withdrawn worker's row is
    skipped, and so is its id: it lists nothing for the tasks here, and a task another participant
    entered with that id (the withdrawn worker's own are erased) is work the listing lacks
    (``_unlisted_work_hold``), not listed work that counts for good."""
    report.remote += len(remote)
    stored = _stored_work(study=study, publication=publication, remote=remote)
    listed: set[str] = set()
    for item in remote:
        if item.worker_id and participant_withdrawal_digest(
                platform=publication.platform, external_id=item.worker_id, study=study) in withdrawn:
            continue  # the worker withdrew from the study: nothing of theirs is stored again
        assignment = stored.local.get(item.platform_assignment_id)
        kept = _submission_store(study=study, publication=publication, item=item, assignment=assignment,
                                 answered=stored.answered, was_held=stored.was_held)
        if kept is None:
            continue  # the worker withdrew while this sync ran
        listed.add(item.platform_assignment_id)
        _submission_report(item=item, assignment=kept[0], flag=kept[1], report=report)
    return listed


def _submission_flag(item, assignment: Assignment | None, answered: set) -> str:
    """Why a submitted remote row is held or needs a look: no stored assignment, another worker
    than the local participant, no stored answers, or answers whose task here is active, returned
    or expired (an impostor's task ended here is returned) while the platform lists the work as
    awaiting review (``NOT_SUBMITTED_HERE``: its auto-approval would pay work the researcher never
    saw); empty when none (or not submitted).

    ``NOT_SUBMITTED_HERE`` stays once the platform decided the work itself while its task here is
    still not submitted: approved (auto-approval, or the platform's own site: it was paid, and the
    hold list, Platform submissions and ``assignments_on_hold``, keeps saying so; it still does not
    count), or rejected
    while the task here is active (a rejection never ends the task here: were the hold lifted, the
    worker finishing it here would count and be offered to "Approve all" until a later sync).

    The mirror of it: work submitted (or approved) here whose session the platform lists as timed
    out or returned (``ENDED_ON_PLATFORM_STATUSES``) is held (``ENDED_ON_PLATFORM``): the platform
    pays the worker nothing, so it counts only once a researcher clears it (and pays by bonus); by
    another worker than the local participant, it is a ``WORKER_MISMATCH``. A task still active
    here is not flagged (the platform ending it is the expiry path)."""
    if item.status in ENDED_ON_PLATFORM_STATUSES:
        if assignment is None or assignment.status not in COUNTING_ASSIGNMENT_STATUSES:
            return ""
        if assignment.participant.external_id != item.worker_id:
            return PlatformSubmission.Flag.WORKER_MISMATCH
        return PlatformSubmission.Flag.ENDED_ON_PLATFORM
    if item.status not in ("submitted", "approved", "rejected"):
        return ""
    if assignment is None:
        return PlatformSubmission.Flag.NO_LOCAL_ASSIGNMENT
    if assignment.participant.external_id != item.worker_id:
        return PlatformSubmission.Flag.WORKER_MISMATCH
    if assignment.pk not in answered:
        return PlatformSubmission.Flag.NO_ANSWERS
    if assignment.status in NOT_SUBMITTED_HERE_STATUSES and (
            item.status in ("submitted", "approved") or assignment.status == Assignment.Status.ACTIVE):
        return PlatformSubmission.Flag.NOT_SUBMITTED_HERE
    return ""


def _withdrawn_meanwhile(*, study: Study, platform: str, worker_id: str) -> bool:
    """Whether the worker ``worker_id`` of ``platform`` has withdrawn from ``study``, read under the
    study's ``WITHDRAWAL_LOCK`` (shared, held until the caller's transaction ends), after the
    withdrawals the sync read at its start: a withdrawal made while the sync ran would otherwise find
    no row of the worker to erase (the one about to be stored) and the row would then keep their raw
    id for good, a later sync skipping it. Call first in the transaction that stores a row naming
    them (or naming none: the lock still orders what the transaction reads next, a task a
    withdrawal may erase). False for no worker."""
    transaction_lock(WITHDRAWAL_LOCK, study.pk, shared=True)
    return bool(worker_id) and worker_withdrawn(platform=platform, external_id=worker_id, study=study)


def _submission_store(*, study: Study, publication: Publication, item, assignment: Assignment | None,
                      answered: set, was_held: set) -> tuple[Assignment | None, str] | None:
    """Store one remote row, flagged by ``_submission_flag``; the (assignment, flag) it stored, or
    None, storing nothing, when its worker has withdrawn from ``study`` (``_withdrawn_meanwhile``).
    The task another participant entered with the row's id (a worker mismatch) is read again under
    that lock: their withdrawal meanwhile erased it, and the row then names no task of this study.
    ``flagged_at`` dates a flag that is new or changed (a row stored with
    no flag, or keeping its flag, leaves it alone); a holding flag that is new or changed holds the
    work again even where a researcher cleared the row's earlier reason (its clear is undone). A hold that begins here stops the work counting:
    ``n_completed`` is recounted and its decided units checked again (``stopping.units_after_hold``)
    in the same transaction; a hold the platform lifts (it lists the work now) lets the work decide
    its units again there (``stopping.unit_decide_for_assignment``), as a researcher's clear does."""
    with transaction.atomic():
        if _withdrawn_meanwhile(study=study, platform=publication.platform, worker_id=item.worker_id):
            return None
        if assignment is not None and assignment.participant.external_id != item.worker_id and not (
                _task_still_holds(assignment.pk, item.platform_assignment_id)):
            assignment = None  # its participant withdrew meanwhile: their task is erased
        flag = _submission_flag(item, assignment, answered)
        key = {"publication": publication, "platform_assignment_id": item.platform_assignment_id}
        before = PlatformSubmission.objects.select_for_update().filter(**key).values_list("flag", flat=True).first()
        defaults = {"platform_task_id": item.platform_task_id[:200], "worker_id": item.worker_id[:200],
                    "platform_status": item.raw_status[:40], "assignment": assignment, "flag": flag,
                    "accepted_at": item.accepted_at, "submitted_at": item.submitted_at}
        if flag != (before if before is not None else ""):
            defaults["flagged_at"] = timezone.now()
            if flag in HOLDING_FLAGS:  # a new reason to hold: a researcher's clear of the old one does not cover it
                defaults.update(cleared_at=None, cleared_by=None)
        PlatformSubmission.objects.update_or_create(**key, defaults=defaults)
        if assignment is not None and (assignment.pk in was_held or flag in HOLDS_COUNTING_WORK):
            # Held work stops counting (and cleared or corrected work counts again):
            # ``n_completed`` follows ``claims_that_count`` in the same transaction.
            units_recount_completed(assignment_ids=[assignment.pk])
            if flag in HOLDS_COUNTING_WORK and before != flag:
                units_after_hold(assignment_id=assignment.pk)  # a decided unit may be decided no more
            elif flag not in HOLDING_FLAGS:
                unit_decide_for_assignment(assignment_id=assignment.pk)  # counts again: it may decide its units
    return assignment, flag


def _submission_report(*, item, assignment: Assignment | None, flag: str, report: SyncReport) -> None:
    """Count the row on ``report``, and take over a review outcome decided on the platform
    (never for work held for a worker mismatch)."""
    if flag:
        report.flagged += 1
        report.flags.append({"platform_assignment_id": item.platform_assignment_id,
                             "worker_id": item.worker_id, "flag": flag})
    if assignment is None:
        return
    report.matched += 1
    if (item.status in ("approved", "rejected") and assignment.status == Assignment.Status.SUBMITTED
            and flag != PlatformSubmission.Flag.WORKER_MISMATCH):
        assignment_reviewed(assignment.pk, approved=item.status == "approved")
        report.status_updates += 1


def _unlisted_work_hold(*, study: Study, publication: Publication, listed: set[str], listed_at: datetime,
                        report: SyncReport) -> None:
    """Hold the submitted or approved work of ``publication``'s platform tasks that the platform's
    complete listing lacks (``listed``: the ids of its rows ``_publication_sync`` stored, a withdrawn
    worker's left out, so a session of theirs someone else entered here is held): a
    ``PlatformSubmission`` flagged ``NOT_ON_PLATFORM``
    names the task (``flagged_at``: now), so it stops counting (``annotations.selectors.on_hold``),
    and its units are recounted and its decided units checked again (``stopping.units_after_hold``)
    in the same transaction. Only work started here more than
    ``RL_SYNC_UNLISTED_GRACE_MINUTES`` before the listing: younger work is not held yet. A task
    whose id the platform listed once keeps that row; a later listing of a held id replaces its
    flag (``_submission_store``) and the work counts again. Withdrawn work is not counting work,
    so it is never touched."""
    started_before = listed_at - timedelta(minutes=settings.RL_SYNC_UNLISTED_GRACE_MINUTES)
    for task in publication_unlisted_work(study=study, publication=publication, listed=listed,
                                          started_before=started_before):
        with transaction.atomic():
            # the task's worker may have withdrawn since it was read: their task is then erased
            if _withdrawn_meanwhile(study=study, platform=task.participant.platform,
                                    worker_id=task.participant.external_id) or not _task_still_holds(
                    task.pk, task.platform_assignment_id):
                continue
            row, created = PlatformSubmission.objects.get_or_create(
                publication=publication, platform_assignment_id=task.platform_assignment_id,
                defaults={"platform_task_id": task.platform_task_id[:200],
                          "worker_id": task.participant.external_id[:200], "platform_status": "",
                          "assignment": task, "flag": PlatformSubmission.Flag.NOT_ON_PLATFORM,
                          "flagged_at": timezone.now()})
            if created:  # held work stops counting: its units follow in the same transaction
                units_recount_completed(assignment_ids=[task.pk])
                units_after_hold(assignment_id=task.pk)
        if row.flag == PlatformSubmission.Flag.NOT_ON_PLATFORM:
            report.flagged += 1
            report.flags.append({"platform_assignment_id": row.platform_assignment_id,
                                 "worker_id": row.worker_id, "flag": row.flag})
