"""The assignment service: who gets which units.

Claims are made here (``n_claimed`` moves up); answers and the submit are in
``annotations.services.answers``, the end of work and giving slots back in
``annotations.services.release`` (which also says what the unit counters mean).

Policy of ``assignment_start``:

1. A worker holds at most one active assignment per study (a database constraint). Coming back
   resumes it; an active one past its deadline is expired first (its units go back).
2. Otherwise up to ``study.units_per_task`` units are claimed: never a ``question_key`` the
   worker has already been given in this study (also a database constraint), never a full unit,
   least-filled units first (so every unit progresses toward its quota together), and within
   that, the units of the questions with the most places still open (all their units together:
   the greedy order that fills the study in the fewest tasks, ``studies.design.tasks_for_places``,
   which is what a platform study publishes; without it the open places piled up on fewer
   questions than a task holds and the last published task came out short), then a source mix
   (each pick takes the source this worker has had least so far, random among ties). The study's
   attention checks the worker has not seen are mixed in (one left unanswered in a returned or
   expired task is given again: ``_add_attention_checks``), at places drawn for each task
   (``attention_slots``), and the task's claims are inserted in their order (their ids grow with
   their places): nothing tells a check from a question before it is answered.
   A task shorter than ``units_per_task`` is given only when the pool runs short for everyone:
   when the units of the worker's own returned or expired tasks (their questions stay seen) would
   have made it full, the start is refused (``_short_by_own_returns``), so returning tasks does not
   shrink the next one.
3. Concurrency (PostgreSQL): candidates are read with ``SELECT ... FOR UPDATE SKIP LOCKED`` ordered
   by fill, so simultaneous workers take different rows instead of waiting; the claim
   transaction is a handful of statements; ``n_claimed`` moves with ``F()`` updates and a check
   constraint refuses over-filling in any case. Equally filled units are taken from a per-claim
   random point of their random keys (drawn when the units were built), wrapping around, so
   that simultaneous workers aim at different rows; the candidates are read from an index in
   that order (``_candidates``), so a claim costs the same whatever the study's size (a window
   that held the units of fewer questions than the task needs is read on past them: ``_claim_pass``). When
   every eligible row was locked by others and nothing was claimed, short follow-up passes retry
   (bounded in time), so "no work" is only reported when there truly is none; a claim that got
   some but fewer units than wanted keeps them (a shorter task rather than a blocked web
   worker). SQLite has no row locks: there, writes are serialised by the database. The retries
   of an empty claim stay inside the transaction that created the assignment (they hold no unit
   lock, only the new assignment row), so a second "start" of the same worker (a double click)
   waits for the first and then gets the same task, or "no work" when the first found none:
   never an empty task that closes under it. A claim locks its study's row ``FOR KEY SHARE`` (claims
   do not wait for each other) before it reads whether the study has a qualification test, so a
   test being added cannot miss the task (``_qualification_pending``), and reads the study's owner
   there, so a handover to a researcher who blocked the worker either ends the task or refuses the
   start (their blocks are read again when the owner changed). Before that it locks the
   worker's row and reads whether they are blocked or withdrew (``participant_blocked``, ``lock``), so a
   withdrawal running meanwhile either refuses this start or erases its task.

Expiry (``release``): an assignment past ``expires_at`` gives back *all* its units (completed or
not; its claims stay, marked ``released``, so the worker still never sees those questions again;
an attention check it held unanswered is given again in the worker's next task), and its answers no
longer count. A new assignment's deadline is the short first-answer window
until the worker answers.
"""
from __future__ import annotations

import math
import random
import secrets
import time
from collections import Counter
from datetime import datetime

from django.db import IntegrityError, connection, transaction
from django.db.models import F, IntegerField, OuterRef, Q, Subquery, Sum
from django.utils import timezone

from annotations import precompiled
from annotations.models import Assignment, Claim, Participant, Unit
from annotations.models.core import RAND_KEY_SPAN
from annotations.selectors import blocks_covering, participant_blocked
from annotations.selectors import entry as selectors_entry
from annotations.services.deadlines import first_answer_deadline, task_clock_start
from annotations.services.errors import (
    NotQualified,
    NoWorkAvailable,
    ParticipantBlocked,
    PlatformAssignmentDone,
    PlatformAssignmentTaken,
    StudyNotOpen,
    TaskInProgress,
)
from annotations.services.participants import NOT_AVAILABLE
from annotations.services.release import (
    assignments_release,
    first_answer_window_from_consent,
    lock,
    lock_active,
)
from studies.models import Study

POSITION_GAP = selectors_entry.POSITION_GAP
# How long a claim keeps topping up when rows were skipped because other workers held them.
TOP_UP_SECONDS = 1.0
STUDY_NOT_OPEN = "This study is not accepting work at the moment. Thank you for your interest."
NO_WORK = (
    "There is no work left for you in this study right now: every question you have not yet seen "
    "has all the answers it needs. Thank you!"
)
NO_FULL_TASK = (
    "There is not a full task left for you in this study: the questions you have not yet seen are "
    "fewer than a task holds, because tasks you returned or let expire earlier still count as seen "
    "(nobody is given a question twice). Thank you for your interest!"
)


# --- claiming -----------------------------------------------------------------------------------

def _seen_keys(*, study: Study, participant_id: int) -> list[str]:
    """The question keys this worker was given in this study (one index lookup)."""
    return list(
        Claim.objects.filter(study_id=study.pk, participant_id=participant_id)
        .order_by().values_list("question_key", flat=True)
    )


def _claim_pass(*, assignment: Assignment, study: Study, want: int, n_sources: int, seen: list[str],
                rng: random.Random) -> tuple[list[Claim], bool]:
    """Claim up to ``want`` units for ``assignment``, none with a question key in ``seen``: their
    slots are taken (``n_claimed``) and their claims returned, not yet saved (``_claim_task``
    inserts them with the task's attention checks, in the task's order). Call inside
    ``transaction.atomic``.

    The worker's seen keys are read first and excluded by value: an anti-join of the study's
    units with its claims was planned, once the statistics predated the study, as a rescan of
    the study's claims for every candidate unit (about 55 ms per claim at 4,300 claims).
    Without the join the claim reads only the study's units, whatever the statistics.

    Among the candidates (``_candidates``: a range of the lowest fill level) the picks go to the
    questions with the most places open (``_question_open``), read with the candidates in the same
    statement. A window of candidates can hold fewer questions than the task needs although more
    are open (a generalization study's question has a unit per generalization question and source):
    then the claim reads on past the questions it took, one more read each time (usually one), so a
    new worker's task is full while a task's worth of questions is open.

    Returns (claims, maybe_more): ``maybe_more`` is true when fewer were claimed than wanted
    although eligible units were skipped (locked by another worker right now)."""
    limit = candidates_wanted(want=want, n_sources=n_sources)
    pivot = rng.randrange(RAND_KEY_SPAN)
    per_source: Counter = Counter()
    chosen: list[tuple] = []
    taken_keys: set[str] = set()
    while True:
        eligible = eligible_units(study_id=study.pk, seen=seen + sorted(taken_keys))
        rows = _candidates(eligible, limit=limit, pivot=pivot)
        _pick(rows, want=want, chosen=chosen, taken_keys=taken_keys, per_source=per_source)
        # A full window that held fewer questions than the task lacks: read on past the questions
        # taken (from the same point), each read taking at least one more. Only where a question has
        # more units than a window holds per place: a generalization study's question
        # (``item:<id>``) has a unit per generalization question and source, a utility study's one
        # per source, so there the first window always holds a task's worth (``candidates_wanted``).
        if len(chosen) >= want or len(rows) < limit:
            break
    claims = [
        Claim(
            assignment_id=assignment.pk,
            unit_id=unit_id,
            study_id=study.pk,
            participant_id=assignment.participant_id,
            question_key=question_key,
            position=i * POSITION_GAP,
        )
        for i, (unit_id, _source, question_key, _n, _open) in enumerate(chosen)
    ]
    if chosen:
        Unit.objects.filter(id__in=[row[0] for row in chosen]).update(n_claimed=F("n_claimed") + 1)
    maybe_more = len(chosen) < want and connection_has_skip_locked() and _any_eligible(
        eligible, exclude_keys=[row[2] for row in chosen])
    return claims, maybe_more


def _pick(rows: list[tuple], *, want: int, chosen: list[tuple], taken_keys: set[str], per_source: Counter) -> None:
    """Greedy picks from ``rows`` into ``chosen`` until it holds ``want``: lowest fill first, then
    the question with the most places open, then the source this worker has had least, one unit per
    question (``taken_keys``: the questions of ``chosen``)."""
    remaining = rows
    while len(chosen) < want:
        remaining = [r for r in remaining if r[2] not in taken_keys]
        if not remaining:
            break
        best = min(remaining, key=lambda r: (r[3], -r[4], per_source[r[1]]))
        chosen.append(best)
        taken_keys.add(best[2])
        per_source[best[1]] += 1


_CANDIDATE_FIELDS = ("id", "source_id", "question_key", "n_claimed")


def eligible_units(*, study_id: int, seen: list[str]):
    """The study's units that take workers, less the questions in ``seen``."""
    eligible = Unit.objects.filter(study_id=study_id, n_claimed__lt=F("quota"))
    return eligible.exclude(question_key__in=seen) if seen else eligible


def candidates_wanted(*, want: int, n_sources: int) -> int:
    """How many candidates a claim of ``want`` units reads (enough for its source mix). Where a
    question has at most ``n_sources`` units (utility, rationale properties) they always hold
    ``want`` questions when the eligible units do; a generalization study's question has more, and
    a window short of questions is read on (``_claim_pass``)."""
    return want * max(1, n_sources) + want


def _candidates(eligible, *, limit: int, pivot: int) -> list[tuple]:
    """Up to ``limit`` eligible units, locked (``FOR UPDATE SKIP LOCKED``: rows other workers hold
    are passed over), least filled first and, among equally filled ones, from ``pivot`` onwards in
    the units' random keys, wrapping around. Each read is a range of the index
    ``unit_claim_order`` (study, fill, random key) that stops after ``limit`` rows, so the claim
    costs the same in a study of 100,000 units as in one of 1,000: the study is never sorted.

    In turn, each stopping once ``limit`` rows are in hand (usually after the first): the lowest
    fill level from ``pivot`` up, the same level below ``pivot``, then the fuller levels (from
    their lowest keys: rarely needed, only when the lowest level runs short). The lowest level is
    a subquery (the first entry of the index), read again by each statement."""
    rows: list[tuple] = []
    ids: set[int] = set()
    for read in candidate_reads(eligible, pivot=pivot):
        # The level is read again by each statement: a unit given back meanwhile may lower it,
        # and a unit of this pass may then come again.
        rows.extend(row for row in read[: limit - len(rows)] if row[0] not in ids)
        ids.update(row[0] for row in rows)
        if len(rows) >= limit:
            break
    return rows


def candidate_reads(eligible, *, pivot: int) -> tuple:
    """The reads of ``_candidates`` in turn, unsliced (the claim benchmark explains them:
    ``benchmarks/questionnaire/claim_cost.py``)."""
    level = Subquery(eligible.order_by("n_claimed").values("n_claimed")[:1])
    question_open = _question_open()
    lowest = eligible.filter(n_claimed=level)
    parts = (
        lowest.filter(rand_key__gte=pivot).order_by("rand_key"),
        lowest.filter(rand_key__lt=pivot).order_by("rand_key"),
        eligible.filter(n_claimed__gt=level).order_by("n_claimed", "rand_key"),
    )
    return tuple(part.select_for_update(skip_locked=True, of=("self",)).annotate(question_open=question_open)
                 .values_list(*_CANDIDATE_FIELDS, "question_open") for part in parts)


def _question_open() -> Subquery:
    """The places still open on the candidate's question (all its units, whatever their source),
    read per candidate through the index of the units' item (a question's units share the item).
    The study is an aggregate filter, not a condition an index could serve: where the planner's
    statistics predate the study, a condition on it was served by ``unit_claim_order`` too (the
    study's every unit, bitmap-ANDed for each candidate: 24 ms instead of 0.3 at 9,000 units)."""
    units = (Unit.objects.filter(item_id=OuterRef("item_id"), question_key=OuterRef("question_key"))
             .order_by().values("item_id")
             .annotate(open=Sum(F("quota") - F("n_claimed"), filter=Q(study_id=OuterRef("study_id"))))
             .values("open"))
    return Subquery(units, output_field=IntegerField())


def connection_has_skip_locked() -> bool:
    return connection.features.has_select_for_update_skip_locked


def _any_eligible(eligible, *, exclude_keys: list[str]) -> bool:
    """Whether an eligible unit exists that this pass did not take (a plain read: rows locked
    by other workers are seen here although SKIP LOCKED passed over them)."""
    return eligible.exclude(question_key__in=exclude_keys).exists()


def _add_attention_checks(*, assignment: Assignment, study: Study, n_units: int,
                          rng: random.Random) -> list[Claim]:
    """The claims (not yet saved) of the study's attention checks this worker has not seen
    (``selectors.entry.attention_checks_to_give``, the one owner of which checks a task shows: the
    landing page counts them too), placed among the task's ``n_units`` units at places drawn by
    ``rng`` (the claim's: fresh for each task, so no worker can tell a check by where it stands):
    each after a unit (never first), and while there are fewer checks than units, each after a unit
    of its own but the last (never two in a row, never last); more checks than that share places as
    evenly as they must (``attention_slots``). A check given before (held unanswered by a task that
    ended without counting) keeps its released claim, keyed ``attn:<check>``
    (``claim_worker_sees_question_once``), so its new claim is keyed ``attn:<check>:<assignment>``."""
    fresh, given = selectors_entry.attention_checks_to_give(study=study, participant_id=assignment.participant_id)
    if not fresh:
        return []
    return [
        Claim(
            assignment_id=assignment.pk,
            attention_check_id=check_id,
            study_id=study.pk,
            participant_id=assignment.participant_id,
            question_key=Claim.attention_key(check_id, assignment.pk if check_id in given else None),
            position=(after_unit - 1) * POSITION_GAP + 1 + j,
        )
        for j, (check_id, after_unit) in enumerate(zip(fresh, attention_slots(len(fresh), n_units, rng), strict=True))
    ]


def attention_slots(m: int, n_units: int, rng: random.Random) -> list[int]:
    """Where ``m`` checks go among ``n_units`` units, drawn by ``rng``: for each (in order) the
    number of units before it. Fewer checks than units: distinct places among 1 .. n_units - 1
    (after the first unit, before the last, none next to another); more: among 1 .. n_units, each
    place taken at most ``ceil(m / n_units)`` times. A task of few units has few layouts (one check
    in two units stands after the first)."""
    if m == 0:
        return []
    n_units = max(1, n_units)
    if m < n_units:
        return sorted(rng.sample(range(1, n_units), m))
    return sorted(rng.sample(list(range(1, n_units + 1)) * math.ceil(m / n_units), m))


def _active_assignment(*, study: Study, participant: Participant) -> Assignment | None:
    return (
        Assignment.objects.select_related("study", "participant")
        .filter(study_id=study.pk, participant_id=participant.pk, status=Assignment.Status.ACTIVE)
        .first()
    )


def _refresh_platform_refs(assignment: Assignment, **refs: str) -> None:
    changed = [name for name, value in refs.items() if value and getattr(assignment, name) != value]
    for name in changed:
        setattr(assignment, name, refs[name])
    if changed:
        assignment.save(update_fields=changed)



def platform_assignment_check(*, study: Study, platform_assignment_id: str, own: Assignment | None = None) -> None:
    """Refuse a second local task for one platform assignment (MTurk assignmentId, Prolific
    SESSION_ID): raise ``PlatformAssignmentDone`` (carrying the finished task, whose page is the
    done page) or ``PlatformAssignmentTaken`` when a task other than ``own`` holds it in progress
    or finished. The constraint ``assignment_one_task_per_platform_assignment`` is the last guard."""
    if not platform_assignment_id:
        return
    held = selectors_entry.task_of_platform_assignment(study=study, platform_assignment_id=platform_assignment_id)
    if held is None or (own is not None and held.pk == own.pk):
        return
    if held.status != Assignment.Status.ACTIVE:
        raise PlatformAssignmentDone("This platform assignment was already done: its task is finished.",
                                     assignment=held)
    raise PlatformAssignmentTaken(
        "This platform assignment already has a task in progress. Continue it where you started it; if you "
        "cannot, return the assignment on the platform and accept the study again."
    )


def _qualification_pending(*, study: Study, participant: Participant) -> bool:
    """Whether a new task of ``participant`` must wait for the study's qualification test. Raises
    ``NotQualified`` when they failed it. Call inside the transaction that creates the task, before
    it does: the study's row stays locked ``FOR KEY SHARE`` until that transaction ends.

    A test added meanwhile (``qualification_test_save``, which locks the study's row ``FOR UPDATE``
    before it creates the test and marks the tasks in progress) either waits for this claim and then
    finds its task, or makes this claim wait here until the test is committed. The test is read by a
    statement of its own, after the lock: a statement reads what was committed when it began, so a
    read in the locking statement that waited for a test being saved would not see that test.
    The same locking statement reads the study's status as committed when the lock is granted, so a
    start that read the study before a close committed (``platforms.close.study_close`` locks the
    row ``FOR UPDATE``) makes no task in the closed study (``StudyNotOpen``); a close that comes
    after the lock waits for this start, whose task then goes on as any task in progress does.
    It reads the study's owner too, as committed when the lock is granted: the worker's blocks were
    read (``participant_blocked``) with the owner of ``study`` as loaded, and a handover
    (``studies.services.studies.study_update``, which locks the row ``FOR UPDATE``) that committed
    since made the study its new owner's, whose blocks cover it. Then one more statement, begun
    after the lock, reads the blocks with that owner (``blocks_covering``, ``owner_id``) and a
    worker they cover is refused (``ParticipantBlocked``); a handover that comes after the lock
    waits for this start, and its end of the blocked workers' tasks
    (``platforms.blocks.blocks_end_tasks_in_study``) ends this task too.
    Two statements (one for a worker who passed), as before the lock. Whether a failed grant
    refuses this arrival in the end is the entry's to ask (``impostor.impostor_grant_void``, on
    ``NotQualified``): under an identity the app cannot authenticate it refuses only the browser
    that took it, so the refusal costs the usual start nothing."""
    status, passed, owner_id = precompiled.study_lock_read(study_id=study.pk, participant_id=participant.pk)
    if status != Study.Status.OPEN:  # closed (or paused) since ``study`` was read: no new task
        raise StudyNotOpen(STUDY_NOT_OPEN)
    if (owner_id is not None and owner_id != study.owner_id
            and blocks_covering(study=study, owner_id=owner_id).filter(participant_id=participant.pk).exists()):
        raise ParticipantBlocked(NOT_AVAILABLE)  # handed to an owner who blocked the worker since ``study`` was read
    if passed is False:
        raise NotQualified(
            "You took this study's qualification test and did not reach the pass mark, so it cannot "
            "offer you tasks. Thank you for your time."
        )
    return passed is None and precompiled.QUALIFICATION_TEST_OF_STUDY.first(study.pk) is not None


def _expire_if_stale(active: Assignment, now: datetime) -> bool:
    """Expire the worker's active assignment if its deadline passed (units go back). Returns
    whether it is gone; an assignment that moved on meanwhile is left as it is."""
    with transaction.atomic():
        locked = lock(active)
        if locked.status != Assignment.Status.ACTIVE:
            return True
        if locked.expires_at > now:
            return False
        assignments_release([(locked.pk, locked.status)], status=Assignment.Status.EXPIRED)
        return True


def _short_by_own_returns(*, study: Study, participant_id: int, n_units: int, want: int) -> bool:
    """Whether a claim of ``n_units`` units (attention checks not counted), fewer than ``want``, is
    short only because of the worker's own returned or expired tasks: their units went back to the
    pool, but their questions stay seen by the worker (``_seen_keys``), so returning tasks would
    otherwise shrink the worker's next task (down to one question, paid as a full one). True when
    the questions of those tasks that still take workers, with the units claimed, make a full task:
    the claim is refused (``NO_FULL_TASK``). When the pool runs out for everyone (those units are
    full too, or there are too few of them), the short last task is given as before. One
    statement, on the short claim only.

    Only tasks the worker gave up count: not one ended as an impostor's (``ended_as_impostor``:
    someone else started it under the worker's id) nor one a block ended (``ended_by_researcher``).
    (``_add_attention_checks`` asks another question, what the worker saw: a check answered in a task
    a block ended was seen.)"""
    returned = Claim.objects.filter(
        study_id=study.pk, participant_id=participant_id, released=True, unit__isnull=False,
        assignment__status__in=(Assignment.Status.RETURNED, Assignment.Status.EXPIRED),
        assignment__ended_as_impostor=False, assignment__ended_by_researcher=False,
    ).values("question_key")
    barred = eligible_units(study_id=study.pk, seen=[]).filter(question_key__in=returned)
    return n_units + barred.order_by().values("question_key").distinct().count() >= want


def _claim_task(*, assignment: Assignment, study: Study, rng: random.Random) -> None:
    """Claim the task's units (and mix in attention checks) inside the caller's transaction.
    Raises ``NoWorkAvailable`` (rolling the new assignment back) when nothing could be claimed, or
    when fewer units than a task holds were claimed although the units of the worker's own returned
    or expired tasks would have made it full (``_short_by_own_returns``).

    An empty first pass that skipped rows locked by other workers' in-flight claims retries for
    up to ``TOP_UP_SECONDS`` in the same transaction: it holds no unit lock then (an empty pass
    locked nothing), only the new assignment row, so a parallel start of the same worker waits
    for this one instead of seeing an empty task."""
    want = study.units_per_task
    n_sources = study.sources.count() or 1
    # Read once: the passes below add nothing to it (a retried pass claimed nothing), and a
    # parallel start of the same worker waits on the new assignment row (one active per study).
    seen = _seen_keys(study=study, participant_id=assignment.participant_id)
    units, maybe_more = _claim_pass(
        assignment=assignment, study=study, want=want, n_sources=n_sources, seen=seen, rng=rng
    )
    deadline = time.monotonic() + TOP_UP_SECONDS
    pause = 0.005
    while not units and maybe_more and time.monotonic() < deadline:
        time.sleep(pause * (0.5 + rng.random()))
        pause = min(pause * 2, 0.1)
        units, maybe_more = _claim_pass(
            assignment=assignment, study=study, want=want, n_sources=n_sources, seen=seen, rng=rng
        )
    if len(units) < want and _short_by_own_returns(study=study, participant_id=assignment.participant_id,
                                                   n_units=len(units), want=want):
        raise NoWorkAvailable(NO_FULL_TASK)
    if not units:
        raise NoWorkAvailable(NO_WORK)
    checks = _add_attention_checks(assignment=assignment, study=study, n_units=len(units), rng=rng)
    # One insert, in the task's order: the claims' ids grow with their places, so an id (which the
    # task's form carries) tells a check from a question no more than its place does.
    Claim.objects.bulk_create(sorted(units + checks, key=lambda claim: claim.position))


def assignment_start(
    *,
    study: Study,
    participant: Participant,
    platform_assignment_id: str = "",
    platform_task_id: str = "",
    return_url: str = "",
    completion_code: str = "",
    consented: bool = False,
    resume: bool = True,
    participant_link=None,
    now: datetime | None = None,
    rng: random.Random | None = None,
    landed_at: datetime | None = None,
) -> Assignment:
    """Resume the worker's active assignment in ``study``, or start one with fresh units.

    Platform references given again (MTurk re-accept gives a new assignmentId) replace the
    stored ones, so the hand-back goes to the assignment the platform knows now. Two starts of
    the same worker at once (double click, two tabs) give the same task, or both "no work".
    ``rng`` chooses among equally good units (the preview passes a seeded one; by default a
    fresh random one per claim). ``resume=False`` (the worker entry pages, which decide who may
    open a task in progress: ``annotations.services.entry``) raises ``TaskInProgress`` instead of
    resuming or touching an active assignment.
    Raises ``StudyNotOpen``, ``ParticipantBlocked``, ``NotQualified`` or ``NoWorkAvailable``, and
    for a platform assignment that already has another local task ``PlatformAssignmentDone`` /
    ``PlatformAssignmentTaken`` (``platform_assignment_check``). A task that starts before its
    worker passed the study's qualification test is marked ``qualification_pending``. A task
    started through a single-person link records it (``participant_link``). ``landed_at``, for a
    platform arrival (MTurk, Prolific), is when its clock started (``deadlines.platform_clock_start``:
    its landing page's signed time, or the first task of its platform assignment): a new task's clock starts then (``deadlines.task_clock_start``), as the platform's did
    when the worker accepted, so ``created_at`` is that time and both deadlines count from it."""
    if study.status != Study.Status.OPEN:
        raise StudyNotOpen(STUDY_NOT_OPEN)
    now = now or timezone.now()
    refs = {
        "platform_assignment_id": platform_assignment_id,
        "platform_task_id": platform_task_id,
        "return_url": return_url,
    }
    rng = rng or random.Random(secrets.randbits(64))
    for _attempt in range(3):
        active = _active_assignment(study=study, participant=participant)
        if active is not None and not _expire_if_stale(active, now):
            if participant_blocked(participant=participant, study=study):
                raise ParticipantBlocked(NOT_AVAILABLE)
            if not resume:
                raise TaskInProgress("You already have a task in progress in this study.")
            platform_assignment_check(study=study, platform_assignment_id=platform_assignment_id, own=active)
            _refresh_platform_refs(active, **refs)
            if consented and active.consented_at is None:
                assignment_consent(assignment=active)
            return active

        with transaction.atomic():
            # First, before any other lock of the start: a withdrawal of this worker either
            # committed (and is seen here) or waits for this task, which it then erases.
            if participant_blocked(participant=participant, study=study, lock=True):
                raise ParticipantBlocked(NOT_AVAILABLE)
            try:
                platform_assignment_check(study=study, platform_assignment_id=platform_assignment_id)
            except PlatformAssignmentTaken:
                # This worker's own start of the same platform assignment committed between the read of
                # their active task above and this check (two statements): decide again, which resumes
                # it or refuses as for any task in progress.
                if _active_assignment(study=study, participant=participant) is not None:
                    continue
                raise
            pending = _qualification_pending(study=study, participant=participant)
            try:
                with transaction.atomic():
                    started_at = task_clock_start(now=now, landed_at=landed_at)
                    assignment = Assignment.objects.create(
                        study=study,
                        participant=participant,
                        expires_at=first_answer_deadline(study, started_at=started_at, consented_at=now),
                        completion_code=completion_code or secrets.token_hex(5).upper(),
                        consented_at=now if consented else None,
                        qualification_pending=pending,
                        participant_link=participant_link,
                        **refs,
                    )
            except IntegrityError:
                # The same worker (or the same platform assignment) started in parallel and that
                # start committed a task: decide again (next attempt), which resumes it or refuses.
                # Its claim ran inside the transaction we waited for, so it is final.
                continue
            if landed_at is not None and started_at < assignment.created_at:  # auto_now_add wrote the insert's time
                Assignment.objects.filter(pk=assignment.pk).update(created_at=started_at)
                assignment.created_at = started_at
            _claim_task(assignment=assignment, study=study, rng=rng)
        assignment.study = study
        assignment.participant = participant
        return assignment
    raise NoWorkAvailable(NO_WORK)


@transaction.atomic
def assignment_consent(*, assignment: Assignment) -> Assignment:
    """Record consent (idempotent: the first time counts). The first-answer window then counts
    from the consent (``release.first_answer_window_from_consent``): a worker who read the consent
    page's instructions and example for longer than the window keeps the task."""
    locked = lock_active(assignment)
    if assignment.consented_at is None:
        now = timezone.now()
        recorded = Assignment.objects.filter(pk=assignment.pk, consented_at__isnull=True).update(consented_at=now)
        assignment.consented_at = now
        if recorded:
            first_answer_window_from_consent(locked=locked, study=assignment.study, consented_at=now)
            assignment.expires_at = locked.expires_at
    return assignment
