"""When work ends, and giving its unit slots back.

An assignment is *active* until it is submitted, returned by the worker, or expired; submitted work
is approved or rejected (``Assignment.STATUS``). Work that ends without counting (expired,
returned, rejected) gives its slots back: its claims are marked ``released`` (they stay, so the
worker never sees those units again; an attention check left unanswered there is given again in
their next task: ``assignment._add_attention_checks``) and the unit counters move. This module is the only
place that gives slots back; the other writers of the counters are the claim
(``assignment.assignment_start``: ``n_claimed`` up) and the submit (``answers.assignment_submit``:
``n_completed`` up). A study copied from a bundle, whose claims are written in bulk, gets both
counters from them (``units_recount``, by ``unit_counts``).

The two counters of a ``Unit`` read the one definition of "this answer counts"
(``annotations.selectors.claims_that_count``):

- ``n_claimed``: the unit's claims that are not released, i.e. held by active work or by work
  that counts (submitted or approved). The unit takes new workers while ``n_claimed < quota``.
- ``n_completed``: the unit's claims that count (``claims_that_count``), exactly. It moves up when
  an assignment is submitted (not at each answer: an active task's answers do not count yet) and
  down when submitted work is rejected. Work that sync puts on hold (a platform worker id that is
  not the participant's) stops counting: it keeps its slot in ``n_claimed`` but leaves
  ``n_completed`` until a researcher clears it (it counts again) or rejects it (released here).
  Sync and the clearing call ``units_recount_completed`` for the held work's units; the submit
  and the release count the claims ``claims_that_count`` admits, so held work is never counted.

A study that stops early (``Study.stop_when_decided``) lowers a decided unit's ``quota`` to its
``n_claimed`` (``annotations.services.stopping``); a release keeps it closed.

So ``n_completed <= n_claimed <= quota`` (check constraints), a unit is done when
``n_completed == quota``, and scoring, exports, progress and counters agree, held work included.

Deadlines: a new assignment must get its first answer within ``first_answer_window`` of its
worker's consent (a task nobody works on, such as one orphaned by a lost consent response, gives
its slots back early; a task made before its worker consented gets the window again from the
consent, ``first_answer_window_from_consent``); the first answer (or a passed qualification test)
extends it to the full ``assignment_duration``, which publishing sends the platform as its time
limit (``platforms.publish.platform_time_limit``).
Past its deadline an assignment expires (``assignment_expire_stale``, beat).
"""
from __future__ import annotations

from collections import Counter
from datetime import datetime

from django.db import transaction
from django.db.models import Count, F
from django.utils import timezone

from annotations import precompiled
from annotations.models import Assignment, Claim, Unit
from annotations.selectors import claim_counts, claims_that_count_in_any_study
from annotations.services.deadlines import first_answer_deadline, full_deadline
from annotations.services.errors import AssignmentExpired, AssignmentNotActive, TaskEnded
from annotations.services.platforms.access import imported_study_ids
from annotations.services.stopping import units_after_release
from studies.models import Study

EXPIRE_BATCH = 200
TASK_ENDED = ("This task has ended: it was withdrawn from the study, so nothing more can be saved for it. "
              "If you still see it on your platform, please return it there.")


# --- the assignment row lock ----------------------------------------------------------------------

def lock(assignment: Assignment) -> Assignment:
    """``Assignment.objects.select_for_update().only("id", "status", "expires_at", "created_at",
    "qualification_pending").get(pk=...)``: serialises everything that changes one assignment.
    ``TaskEnded`` (an ``AnnotationError`` the worker pages show, and an ``Assignment.DoesNotExist``)
    when the row is gone: the worker's withdrawal erased the task after the caller read it (on
    PostgreSQL, the lock waited for the withdrawal's transaction, then found nothing)."""
    locked = precompiled.ASSIGNMENT_LOCK.first(assignment.pk)
    if locked is None:
        raise TaskEnded(TASK_ENDED)
    return locked


def lock_active(assignment: Assignment, now: datetime | None = None) -> Assignment:
    """Lock the assignment; refuse (``AssignmentExpired`` / ``AssignmentNotActive``) unless it is
    active and within its deadline."""
    return active_or_refuse(lock(assignment), now)


def active_or_refuse(locked: Assignment, now: datetime | None = None) -> Assignment:
    """``locked`` (an assignment row just locked with ``lock``) if it is active and within its
    deadline; else ``AssignmentExpired`` / ``AssignmentNotActive``."""
    now = now or timezone.now()
    if locked.status == Assignment.Status.EXPIRED or (
        locked.status == Assignment.Status.ACTIVE and deadline_passed(locked.expires_at, now)
    ):
        raise AssignmentExpired(
            "This task has expired, so nothing more can be saved for it. If you still see it on your "
            "platform, please return it there."
        )
    if locked.status != Assignment.Status.ACTIVE:
        raise AssignmentNotActive(
            f"This task is already {locked.get_status_display().lower()}: nothing more can be saved for it."
        )
    return locked


def deadline_passed(expires_at: datetime, now: datetime) -> bool:
    """Whether a task due at ``expires_at`` is past its deadline at ``now``: the one rule, which
    refuses its answers (``active_or_refuse``), expires it (``assignment_expire_stale``, the same
    comparison in SQL: ``expires_at__lte``) and ends it as expired when someone ends it
    (``assignments_end_in_progress``)."""
    return expires_at <= now


def extend_to_full_duration(*, locked: Assignment, study: Study) -> None:
    """The worker is at work (first answer, passed test): the deadline becomes the full duration
    from the start (``created_at``: for a platform arrival, its landing, ``deadlines.task_clock_start``). Call with the row locked (``lock_active``); writes only the first time."""
    full = full_deadline(study, started_at=locked.created_at)
    if locked.expires_at < full:
        Assignment.objects.filter(pk=locked.pk).update(expires_at=full)
        locked.expires_at = full


def first_answer_window_from_consent(*, locked: Assignment, study: Study, consented_at: datetime) -> None:
    """The worker consented at ``consented_at``, later than the task was made (its consent page
    shows the instructions and the example): the first-answer window counts from the consent, so
    time spent reading them before consenting never costs the task; never past the full duration
    from the start. Call with the row locked (``lock_active``); only ever moves the deadline later."""
    deadline = first_answer_deadline(study, started_at=locked.created_at, consented_at=consented_at)
    if locked.expires_at < deadline:
        Assignment.objects.filter(pk=locked.pk).update(expires_at=deadline)
        locked.expires_at = deadline


# --- giving slots back --------------------------------------------------------------------------

def assignments_release(rows: list[tuple[int, str]], *, status: str, **fields) -> list[int]:
    """Move the given assignments (``(id, current status)``, rows locked by the caller) to
    ``status`` where the machine allows it, and give their unit slots back. Returns the ids moved.
    Units are locked in id order, so concurrent releases never deadlock."""
    moving = [pk for pk, old in rows if Assignment.STATUS.can(old, status)]
    if not moving:
        return []
    # What each unit loses: its held slots, and of those the ones that count now (the one rule,
    # read before the status moves: held work is not in ``n_completed``, so it is not taken off).
    claims = list(
        Claim.objects.filter(assignment_id__in=moving, released=False, unit__isnull=False)
        .values_list("unit_id", "id")
    )
    claimed: Counter = Counter(unit_id for unit_id, _c in claims)
    counting = set(Claim.objects.filter(claim_counts(), assignment_id__in=moving).values_list("id", flat=True))
    completed: Counter = Counter(unit_id for unit_id, claim_id in claims if claim_id in counting)
    if claimed:
        list(Unit.objects.select_for_update().filter(id__in=list(claimed)).order_by("id").values_list("id"))
        by_delta: dict[tuple[int, int], list[int]] = {}
        for unit_id, n in claimed.items():
            by_delta.setdefault((n, completed.get(unit_id, 0)), []).append(unit_id)
        for (n, c), unit_ids in by_delta.items():
            Unit.objects.filter(id__in=unit_ids).update(
                n_claimed=F("n_claimed") - n, n_completed=F("n_completed") - c
            )
    Claim.objects.filter(assignment_id__in=moving, released=False).update(released=True)
    Assignment.STATUS.move_queryset(Assignment.objects.filter(id__in=moving), status, **fields)
    if claimed:
        units_after_release(unit_ids=list(claimed))  # a decided unit stays closed (stopping), units still locked
    return moving


@transaction.atomic
def assignment_release(*, assignment: Assignment, status: str, **fields) -> bool:
    """End ``assignment`` in ``status`` (``expired``, ``returned`` or ``rejected``) through
    ``Assignment.STATUS`` and give its unit slots back, so that while the study is open the
    units take other workers; ``fields`` are set with the status (e.g. ``reviewed_at``).

    The releasing service of the platforms: rejecting submitted work calls it with
    ``status=Assignment.Status.REJECTED`` (its answers stop counting, ``n_completed`` and
    ``n_claimed`` go down). Idempotent: an assignment already in ``status`` is left alone and
    False is returned. A change the machine forbids raises ``TransitionError``."""
    locked = lock(assignment)
    if locked.status == status:
        return False
    Assignment.STATUS.check(locked.status, status, what=f"assignment {assignment.pk}")
    assignments_release([(locked.pk, locked.status)], status=status, **fields)
    assignment.refresh_from_db(fields=["status", *fields])
    return True


def units_recount_completed(*, assignment_ids: list[int]) -> None:
    """Bring ``n_completed`` of the units these assignments hold back to the one rule after their
    hold changed (sync put them on hold, or a researcher cleared them): each unit's counter becomes
    its number of ``claims_that_count``. Units are locked in id order, as every writer of the
    counters does; the slot (``n_claimed``) is not touched: held work keeps it. Call inside the
    transaction that changed the hold."""
    unit_ids = sorted(set(
        Claim.objects.filter(assignment_id__in=assignment_ids, released=False, unit__isnull=False)
        .values_list("unit_id", flat=True)))
    if not unit_ids:
        return
    list(Unit.objects.select_for_update().filter(id__in=unit_ids).order_by("id").values_list("id"))
    counts = _completed_counts(unit_ids)
    by_count: dict[int, list[int]] = {}
    for unit_id in unit_ids:
        by_count.setdefault(counts.get(unit_id, 0), []).append(unit_id)
    for n, ids in by_count.items():
        Unit.objects.filter(id__in=ids).exclude(n_completed=n).update(n_completed=n)


def unit_counts(*, unit_ids: list[int]) -> dict[int, tuple[int, int]]:
    """What the two counters of each of these units must be by the rules above, read from its
    claims: ``(n_claimed, n_completed)``, i.e. its claims that are not released and its
    ``claims_that_count``. A unit without claims is ``(0, 0)``."""
    claimed = dict(Claim.objects.filter(unit_id__in=unit_ids, released=False).order_by()
                   .values("unit_id").annotate(n=Count("id")).values_list("unit_id", "n"))
    completed = _completed_counts(unit_ids)
    return {unit_id: (claimed.get(unit_id, 0), completed.get(unit_id, 0)) for unit_id in unit_ids}


def _completed_counts(unit_ids: list[int]) -> dict[int, int]:
    """Each unit's ``claims_that_count`` (units with none left out): ``n_completed`` by the rule."""
    return dict(claims_that_count_in_any_study().filter(unit_id__in=unit_ids).order_by()
                .values("unit_id").annotate(n=Count("id")).values_list("unit_id", "n"))


def units_recount(*, unit_ids: list[int]) -> None:
    """Set both counters of these units from their claims (``unit_counts``), whatever they held: for
    units whose claims were written in bulk rather than through the claim, submit and release (a
    study copied from a bundle: ``scoring.services.bundle.importing``). Units are locked in id
    order, as every writer of the counters does. The caller checks the quota first: a unit whose
    claims not released pass its ``quota`` breaks ``unit_not_overfilled`` (``IntegrityError``).
    Call inside the transaction that wrote the claims."""
    unit_ids = sorted(set(unit_ids))
    if not unit_ids:
        return
    list(Unit.objects.select_for_update().filter(id__in=unit_ids).order_by("id").values_list("id"))
    by_counts: dict[tuple[int, int], list[int]] = {}
    for unit_id, pair in unit_counts(unit_ids=unit_ids).items():
        by_counts.setdefault(pair, []).append(unit_id)
    for (claimed, completed), ids in by_counts.items():
        (Unit.objects.filter(id__in=ids).exclude(n_claimed=claimed, n_completed=completed)
         .update(n_claimed=claimed, n_completed=completed))


def assignments_end_in_progress(rows: list[tuple[int, str, datetime]], *, status: str,
                                now: datetime | None = None, **fields) -> list[int]:
    """End the tasks of ``rows`` (``(id, current status, expires_at)``, rows locked by the caller)
    that are still active, as someone ends them (the worker's Return, a block, an impostor's task
    ended at the worker's entry): in ``status`` with ``fields``, their unit slots given back
    (``assignments_release``). A task past its deadline (``deadline_passed``) had ended before
    anyone ended it: it is released as ``expired``, with no ``fields``, as the expiry sweep
    (``assignment_expire_stale``) would, so the progress page, which counted it as expired already,
    and the scores' returned and expired counts do not move. A task no longer active is left alone.
    The one owner of how a task in progress ends; call inside the transaction that locked the rows.
    Returns the ids moved (either way)."""
    now = now or timezone.now()
    active = [(pk, expires_at) for pk, old, expires_at in rows if old == Assignment.Status.ACTIVE]
    overdue = [(pk, Assignment.Status.ACTIVE) for pk, expires_at in active if deadline_passed(expires_at, now)]
    ending = [(pk, Assignment.Status.ACTIVE) for pk, expires_at in active if not deadline_passed(expires_at, now)]
    if overdue and ending:  # two releases: all their units locked first, in id order, as every writer does
        list(Unit.objects.select_for_update().filter(id__in=Claim.objects.filter(
            assignment_id__in=[pk for pk, _e in active], released=False, unit__isnull=False).values("unit_id"))
            .order_by("id").values_list("id"))
    moved = assignments_release(overdue, status=Assignment.Status.EXPIRED) if overdue else []
    if ending:
        moved += assignments_release(ending, status=status, **fields)
    return moved


def assignment_return(*, assignment: Assignment) -> Assignment:
    """The worker leaves: the units go back to the pool. Leaving a task that is no longer active
    changes nothing. A task past its deadline had ended before the worker left it: it is released
    as ``expired`` (``assignments_end_in_progress``), so a "Return" from a stale page does not
    move it among the tasks the worker returned (the progress page and the scores count the two
    apart)."""
    with transaction.atomic():
        locked = lock(assignment)
        if assignments_end_in_progress([(locked.pk, locked.status, locked.expires_at)],
                                       status=Assignment.Status.RETURNED):
            assignment.refresh_from_db(fields=["status"])
    return assignment


def assignment_expire_stale(*, now: datetime | None = None) -> int:
    """Expire active assignments past their deadline (the full one, or the first-answer window
    of a task with no answer) and give their units back. Returns how many.

    The tasks of a study run elsewhere (``access.imported_studies``: a bundle's copy keeps a task
    that was active when the bundle was made, with its deadline) are left as they are: their
    statuses and the copy's unit counters stay those its results were scored from.

    Idempotent and safe to run concurrently (rows another run holds are skipped)."""
    now = now or timezone.now()
    total = 0
    while True:
        with transaction.atomic():
            ids = list(
                Assignment.objects.select_for_update(skip_locked=True)
                .filter(status=Assignment.Status.ACTIVE, expires_at__lte=now)
                .exclude(study_id__in=imported_study_ids())
                .order_by("id")
                .values_list("id", flat=True)[:EXPIRE_BATCH]
            )
            if not ids:
                return total
            total += len(assignments_release([(pk, Assignment.Status.ACTIVE) for pk in ids], status=Assignment.Status.EXPIRED))


# --- a participant's withdrawal -------------------------------------------------------------------

def assignments_withdraw(*, assignment_ids: list[int]) -> list[int]:
    """End these tasks as ``withdrawn`` (their participant withdrew from the study:
    ``annotations.services.withdrawal``) and give their unit slots back by the rules above: a
    claim still held frees its slot (``n_claimed`` down) and one that counted leaves
    ``n_completed``, so while the study is open the units take other workers. Locks the rows in id
    order; call inside the withdrawal's transaction. Returns the ids moved (a task already
    withdrawn is left alone)."""
    rows = list(Assignment.objects.select_for_update().filter(id__in=assignment_ids).order_by("id")
                .values_list("id", "status"))
    return assignments_release(rows, status=Assignment.Status.WITHDRAWN)
