"""The assignment service: who gets which units, and every answer a worker gives.

This is the only module that changes ``Unit.n_claimed`` / ``n_completed``, claims or answers.

Policy of ``assignment_start``:

1. A worker holds at most one active assignment per study (a database constraint). Coming back
   resumes it; an active one past its deadline is expired first (its units go back).
2. Otherwise up to ``study.units_per_task`` units are claimed: never a ``question_key`` the
   worker has already been given in this study (also a database constraint), never a full unit,
   least-filled units first (so every unit progresses toward its quota together), and within
   that, a source mix (each pick takes the source this worker has had least so far, random among
   ties). The study's attention checks the worker has not seen are mixed in.
3. Concurrency (PostgreSQL): candidates are read with ``SELECT ... FOR UPDATE SKIP LOCKED`` ordered
   by fill, so simultaneous workers take different rows instead of waiting; the claim
   transaction is a handful of statements; ``n_claimed`` moves with ``F()`` updates and a check
   constraint refuses over-filling in any case. Equally filled units are taken in a per-claim
   pseudo-random order so that simultaneous workers aim at different rows. When every eligible
   row was locked by others and nothing was claimed, short follow-up transactions retry (bounded
   in time), so "no work" is only reported when there truly is none; a claim that got some but
   fewer units than wanted keeps them (a shorter task rather than a blocked web worker). SQLite
   has no row locks: there, writes are serialised by the database.

Expiry: an assignment past ``expires_at`` gives back *all* its units (completed or not; its
claims stay, marked ``released``, so the worker still never sees those questions again), and
its answers no longer count. The answer services refuse anything for it.
"""
from __future__ import annotations

import math
import random
import secrets
import time
from collections import Counter
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.db.models import Exists, F, OuterRef
from django.db.models.functions import Mod
from django.utils import timezone

from annotations.models import (
    Annotation,
    Assignment,
    AttentionCheck,
    Claim,
    Participant,
    QualificationGrant,
    Unit,
)
from annotations.selectors import HotQuery
from annotations.services.errors import (
    AnswerLocked,
    AssignmentExpired,
    AssignmentIncomplete,
    AssignmentNotActive,
    ForeignClaim,
    InvalidAnswer,
    NotQualified,
    NoWorkAvailable,
    ParticipantBlocked,
    StepOutOfOrder,
    StudyNotOpen,
)
from annotations.services.steps import clean_answer, genq_choices, normalise_choices, steps_for
from studies.models import Study

# Gap between unit positions, so attention checks slot in between without renumbering.
POSITION_GAP = 100
# How long a claim keeps topping up when rows were skipped because other workers held them.
TOP_UP_SECONDS = 1.0
EXPIRE_BATCH = 200
NO_WORK = (
    "There is no work left for you in this study right now: every question you have not yet seen "
    "has all the answers it needs. Thank you!"
)


def assignment_duration(study: Study) -> timedelta:
    """Time a worker has for one task: ``RL_ASSIGNMENT_MINUTES`` if set, else four times the
    study's estimated minutes, at least 30 minutes."""
    minutes = getattr(settings, "RL_ASSIGNMENT_MINUTES", None)
    if not minutes:
        minutes = max(30.0, 4 * float(study.estimated_minutes_per_task))
    return timedelta(minutes=float(minutes))


# --- claiming -----------------------------------------------------------------------------------

def _claim_pass(*, assignment: Assignment, study: Study, want: int, first_position: int,
                n_sources: int, rng: random.Random) -> tuple[int, bool]:
    """Claim up to ``want`` units into ``assignment``. Call inside ``transaction.atomic``.

    Returns (claimed, maybe_more): ``maybe_more`` is true when fewer were claimed than wanted
    although eligible units were seen or skipped (locked by another worker right now)."""
    seen = Claim.objects.filter(
        study_id=study.pk, participant_id=assignment.participant_id, question_key=OuterRef("question_key")
    )
    eligible = Unit.objects.filter(study_id=study.pk, n_claimed__lt=F("quota")).filter(~Exists(seen))
    limit = want * max(1, n_sources) + want
    # Least-filled first; among equally filled units a per-claim pseudo-random order, so that
    # simultaneous workers aim at different rows instead of all queueing for the same head rows.
    salt = rng.randrange(1, 1_000_003)
    rows = list(
        eligible.order_by("n_claimed", Mod(F("id") * 7919 + salt, 1_000_003), "id")
        .select_for_update(skip_locked=True, of=("self",))
        .values_list("id", "source_id", "question_key", "n_claimed")[:limit]
    )
    # Greedy picks: lowest fill first, then the source this worker has had least, one unit per question.
    per_source: Counter = Counter()
    chosen: list[tuple] = []
    taken_keys: set[str] = set()
    remaining = rows
    while len(chosen) < want:
        remaining = [r for r in remaining if r[2] not in taken_keys]
        if not remaining:
            break
        best = min(remaining, key=lambda r: (r[3], per_source[r[1]]))
        chosen.append(best)
        taken_keys.add(best[2])
        per_source[best[1]] += 1
    if chosen:
        Claim.objects.bulk_create(
            [
                Claim(
                    assignment_id=assignment.pk,
                    unit_id=unit_id,
                    study_id=study.pk,
                    participant_id=assignment.participant_id,
                    question_key=question_key,
                    position=(first_position + i) * POSITION_GAP,
                )
                for i, (unit_id, _source, question_key, _n) in enumerate(chosen)
            ]
        )
        Unit.objects.filter(id__in=[row[0] for row in chosen]).update(n_claimed=F("n_claimed") + 1)
    short = len(chosen) < want
    maybe_more = short and (len(rows) == limit or (connection_has_skip_locked() and _any_eligible(
        eligible, exclude_keys=[row[2] for row in chosen])))
    return len(chosen), maybe_more


def connection_has_skip_locked() -> bool:
    from django.db import connection

    return connection.features.has_select_for_update_skip_locked


def _any_eligible(eligible, *, exclude_keys: list[str]) -> bool:
    """Whether an eligible unit exists that this pass did not take (a plain read: rows locked
    by other workers are seen here although SKIP LOCKED passed over them)."""
    return eligible.exclude(question_key__in=exclude_keys).exists()


def _add_attention_checks(*, assignment: Assignment, study: Study, want: int) -> int:
    """Place the study's attention checks this worker has not seen, spread over the task."""
    checks = list(AttentionCheck.objects.filter(study_id=study.pk).order_by("id").values_list("id", flat=True))
    if not checks:
        return 0
    keys = {f"attn:{check_id}" for check_id in checks}
    already = set(
        Claim.objects.filter(
            study_id=study.pk, participant_id=assignment.participant_id, question_key__in=keys
        ).values_list("question_key", flat=True)
    )
    fresh = [check_id for check_id in checks if f"attn:{check_id}" not in already][: POSITION_GAP - 1]
    m = len(fresh)
    claims = []
    for j, check_id in enumerate(fresh):
        after_unit = max(1, math.ceil((j + 1) * want / (m + 1)))
        claims.append(
            Claim(
                assignment_id=assignment.pk,
                attention_check_id=check_id,
                study_id=study.pk,
                participant_id=assignment.participant_id,
                question_key=f"attn:{check_id}",
                position=(after_unit - 1) * POSITION_GAP + 1 + j,
            )
        )
    Claim.objects.bulk_create(claims)
    return m


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


def assignment_start(
    *,
    study: Study,
    participant: Participant,
    platform_assignment_id: str = "",
    platform_task_id: str = "",
    return_url: str = "",
    completion_code: str = "",
    consented: bool = False,
    now: datetime | None = None,
) -> Assignment:
    """Resume the worker's active assignment in ``study``, or start one with fresh units.

    Platform references given again (MTurk re-accept gives a new assignmentId) replace the
    stored ones, so the hand-back goes to the assignment the platform knows now.
    Raises ``StudyNotOpen``, ``ParticipantBlocked``, ``NotQualified`` or ``NoWorkAvailable``."""
    if study.status != Study.Status.OPEN:
        raise StudyNotOpen("This study is not accepting work at the moment. Thank you for your interest.")
    if participant.blocked:
        raise ParticipantBlocked("This study is not available to your account.")
    now = now or timezone.now()
    refs = {
        "platform_assignment_id": platform_assignment_id,
        "platform_task_id": platform_task_id,
        "return_url": return_url,
    }
    active = _active_assignment(study=study, participant=participant)
    if active is not None:
        if active.expires_at > now:
            _refresh_platform_refs(active, **refs)
            if consented and active.consented_at is None:
                assignment_consent(assignment=active)
            return active
        _release([active.pk], status=Assignment.Status.EXPIRED)

    if QualificationGrant.objects.filter(study_id=study.pk, participant_id=participant.pk, passed=False).exists():
        raise NotQualified(
            "You took this study's qualification test and did not reach the pass mark, so it cannot "
            "offer you tasks. Thank you for your time."
        )

    want = study.units_per_task
    n_sources = study.sources.count() or 1
    rng = random.Random(secrets.randbits(64))
    with transaction.atomic():
        try:
            with transaction.atomic():
                assignment = Assignment.objects.create(
                    study=study,
                    participant=participant,
                    expires_at=now + assignment_duration(study),
                    completion_code=completion_code or secrets.token_hex(5).upper(),
                    consented_at=now if consented else None,
                    **refs,
                )
        except IntegrityError:
            # The same worker started in parallel (double click, two tabs): resume that one.
            existing = _active_assignment(study=study, participant=participant)
            if existing is None:
                raise
            return existing
        claimed, maybe_more = _claim_pass(
            assignment=assignment, study=study, want=want, first_position=0, n_sources=n_sources, rng=rng
        )
        if claimed == 0 and not maybe_more:
            raise NoWorkAvailable(NO_WORK)  # rolls the new assignment back
        checks_added = False
        if claimed:
            _add_attention_checks(assignment=assignment, study=study, want=want)
            checks_added = True

    deadline = time.monotonic() + TOP_UP_SECONDS
    pause = 0.005
    # Top up only an empty claim: a partial task is better than holding a web worker while others
    # finish their claims (a few milliseconds each).
    while claimed == 0 and maybe_more and time.monotonic() < deadline:
        time.sleep(pause * (0.5 + rng.random()))
        pause = min(pause * 2, 0.1)
        with transaction.atomic():
            got, maybe_more = _claim_pass(
                assignment=assignment, study=study, want=want - claimed, first_position=claimed,
                n_sources=n_sources, rng=rng,
            )
            claimed += got
            if got and not checks_added:
                _add_attention_checks(assignment=assignment, study=study, want=want)
                checks_added = True
    if claimed == 0:
        # Only other workers' in-flight claims were left and they took them: close the empty shell.
        Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.RETURNED)
        raise NoWorkAvailable(NO_WORK)
    assignment.study = study
    assignment.participant = participant
    return assignment


@transaction.atomic
def assignment_consent(*, assignment: Assignment) -> Assignment:
    """Record consent (idempotent: the first time counts)."""
    _lock_active(assignment)
    if assignment.consented_at is None:
        assignment.consented_at = timezone.now()
        Assignment.objects.filter(pk=assignment.pk, consented_at__isnull=True).update(
            consented_at=assignment.consented_at
        )
    return assignment


# --- releasing: expiry and returns --------------------------------------------------------------

def _release(assignment_ids: list[int], *, status: str) -> None:
    """Give back the units of the given assignments and set their status. Call with the
    assignments locked or known active; units are locked in id order (no deadlocks)."""
    claims = list(
        Claim.objects.filter(assignment_id__in=assignment_ids, released=False, unit__isnull=False)
        .values_list("unit_id", "completed_at")
    )
    claimed: Counter = Counter(unit_id for unit_id, _ in claims)
    completed: Counter = Counter(unit_id for unit_id, done in claims if done is not None)
    if claimed:
        list(Unit.objects.select_for_update().filter(id__in=list(claimed)).order_by("id").values_list("id"))
        by_delta: dict[tuple[int, int], list[int]] = {}
        for unit_id, n in claimed.items():
            by_delta.setdefault((n, completed.get(unit_id, 0)), []).append(unit_id)
        for (n, c), unit_ids in by_delta.items():
            Unit.objects.filter(id__in=unit_ids).update(
                n_claimed=F("n_claimed") - n, n_completed=F("n_completed") - c
            )
    Claim.objects.filter(assignment_id__in=assignment_ids, released=False).update(released=True)
    Assignment.objects.filter(id__in=assignment_ids).update(status=status)


def assignment_expire_stale(*, now: datetime | None = None) -> int:
    """Expire active assignments past their deadline and give their units back. Returns how many.

    Idempotent and safe to run concurrently (rows another run holds are skipped)."""
    now = now or timezone.now()
    total = 0
    while True:
        with transaction.atomic():
            ids = list(
                Assignment.objects.select_for_update(skip_locked=True)
                .filter(status=Assignment.Status.ACTIVE, expires_at__lte=now)
                .order_by("id")
                .values_list("id", flat=True)[:EXPIRE_BATCH]
            )
            if not ids:
                return total
            _release(ids, status=Assignment.Status.EXPIRED)
            total += len(ids)


@transaction.atomic
def assignment_return(*, assignment: Assignment, status: str = Assignment.Status.RETURNED) -> Assignment:
    """The worker leaves (or failed the qualification test): the units go back to the pool."""
    locked = _lock(assignment)
    if locked.status == Assignment.Status.ACTIVE:
        _release([assignment.pk], status=status)
        assignment.status = status
    return assignment


# --- answers ------------------------------------------------------------------------------------

# The answer path runs per request: its queries are precompiled (see ``selectors.HotQuery``).
_LOCK = HotQuery(Assignment, {"": ("status", "expires_at")}, where="id", for_update=True)
_ANSWERS = HotQuery(Annotation, {"": "__all__"}, where="claim_id")
_INSERT_FIELDS = ("claim", "step", "answer", "payload", "shown_at", "answered_at", "duration_ms")
_WRITE_SQL: dict[str, tuple[str, str, str]] = {}


def _lock(assignment: Assignment) -> Assignment:
    """``Assignment.objects.select_for_update().only("id", "status", "expires_at").get(pk=...)``."""
    locked = _LOCK.first(assignment.pk)
    if locked is None:
        raise Assignment.DoesNotExist("Assignment matching query does not exist.")
    return locked


def _write_sql(connection) -> tuple[str, str, str]:
    """(insert an answer, mark a claim completed, count a unit completed) for this database."""
    if connection.vendor not in _WRITE_SQL:
        qn = connection.ops.quote_name
        ann, claim, unit = Annotation._meta, Claim._meta, Unit._meta
        insert = (
            f"INSERT INTO {qn(ann.db_table)} ({', '.join(qn(ann.get_field(n).column) for n in _INSERT_FIELDS)}) "
            f"VALUES ({', '.join(['%s'] * len(_INSERT_FIELDS))})"
        )
        if connection.features.can_return_columns_from_insert:
            insert += f" RETURNING {qn(ann.pk.column)}"
        completed = qn(claim.get_field("completed_at").column)
        n_completed = qn(unit.get_field("n_completed").column)
        _WRITE_SQL[connection.vendor] = (
            insert,
            f"UPDATE {qn(claim.db_table)} SET {completed} = %s WHERE {qn(claim.pk.column)} = %s",
            f"UPDATE {qn(unit.db_table)} SET {n_completed} = {n_completed} + 1 WHERE {qn(unit.pk.column)} = %s",
        )
    return _WRITE_SQL[connection.vendor]


def _answer_insert(*, claim_id: int, step: str, answer: str, payload: dict, shown_at: datetime | None,
                   duration_ms: int | None) -> Annotation:
    """``Annotation.objects.create(...)`` without compiling a query (no signals are connected
    to ``Annotation``); values are prepared by the fields as the ORM prepares them."""
    connection = connections[DEFAULT_DB_ALIAS]
    annotation = Annotation(claim_id=claim_id, step=step, answer=answer, payload=payload, shown_at=shown_at,
                            answered_at=timezone.now(), duration_ms=duration_ms)
    opts = Annotation._meta
    params = [opts.get_field(name).get_db_prep_save(getattr(annotation, opts.get_field(name).attname), connection)
              for name in _INSERT_FIELDS]
    insert, _, _ = _write_sql(connection)
    with connection.cursor() as cursor:
        cursor.execute(insert, params)
        annotation.pk = (cursor.fetchone()[0] if connection.features.can_return_columns_from_insert
                         else connection.ops.last_insert_id(cursor, opts.db_table, opts.pk.column))
    annotation._state.adding = False
    annotation._state.db = DEFAULT_DB_ALIAS
    return annotation


def _claim_completed(*, claim_id: int, unit_id: int | None, at: datetime) -> None:
    """Set the claim's ``completed_at`` and count its unit completed (``F()`` update)."""
    connection = connections[DEFAULT_DB_ALIAS]
    _, completed, counted = _write_sql(connection)
    with connection.cursor() as cursor:
        cursor.execute(completed, [Claim._meta.get_field("completed_at").get_db_prep_save(at, connection),
                                   claim_id])
        if unit_id:
            cursor.execute(counted, [unit_id])


def _lock_active(assignment: Assignment, now: datetime | None = None) -> Assignment:
    locked = _lock(assignment)
    now = now or timezone.now()
    if locked.status == Assignment.Status.EXPIRED or (
        locked.status == Assignment.Status.ACTIVE and locked.expires_at <= now
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


def claim_labels(claim: Claim, *, kind: str) -> list[str]:
    """Allowed answer labels of the question a claim asks."""
    if claim.attention_check_id:
        return [c["label"] for c in normalise_choices(claim.attention_check.choices)]
    unit = claim.unit
    if unit.generalization_question_id:
        return [c["label"] for c in genq_choices(unit.generalization_question, unit.item)]
    return [c["label"] for c in normalise_choices(unit.item.choices)]


def annotation_submit(
    *,
    assignment: Assignment,
    claim: Claim,
    step: str,
    answer: str,
    payload: dict | None = None,
    shown_at: datetime | None = None,
    duration_ms: int | None = None,
) -> Annotation:
    """Store one step's answer for a claim of ``assignment``.

    Idempotent: the same answer again returns the stored one and changes nothing. A different
    answer for a stored step raises ``AnswerLocked`` (the first answer cannot change after the
    reveal). Steps go in order (``after`` needs ``before``). Expired, finished or foreign
    assignments are refused with ``AssignmentExpired`` / ``AssignmentNotActive`` /
    ``ForeignClaim`` and nothing changes."""
    now = timezone.now()
    with transaction.atomic():
        if claim.assignment_id != assignment.pk:
            raise ForeignClaim("That question is not part of your task.")
        _lock_active(assignment, now)
        if claim.released:
            raise AssignmentExpired("This question was given back to the pool; its answers are no longer saved.")
        kind = assignment.study.kind
        steps = steps_for(kind=kind, is_attention_check=bool(claim.attention_check_id))
        if step not in steps:
            raise InvalidAnswer(f"'{step}' is not a step of this question (its steps: {', '.join(steps)}).")
        clean, clean_payload = clean_answer(
            step=step, answer=answer, payload=payload, labels=claim_labels(claim, kind=kind)
        )
        if step == Annotation.Step.ATTENTION:
            clean_payload = {"correct": clean == claim.attention_check.correct_answer}
        stored = {a.step: a for a in _ANSWERS.all(claim.pk)}
        if step in stored:
            return _same_or_locked(stored[step], clean, clean_payload)
        missing = [s for s in steps[: steps.index(step)] if s not in stored]
        if missing:
            raise StepOutOfOrder("Please answer the question on its own first; then the explanation is shown.")
        if shown_at is not None and duration_ms is None:
            duration_ms = max(0, min(int((now - shown_at).total_seconds() * 1000), 24 * 3600 * 1000))
        # No savepoint needed: the assignment row lock above serialises this worker's submissions,
        # so a duplicate (double click, retry) always finds the stored answer in ``stored``; the
        # unique constraint on (claim, step) stays as the last guard.
        annotation = _answer_insert(
            claim_id=claim.pk, step=step, answer=clean, payload=clean_payload,
            shown_at=shown_at, duration_ms=duration_ms,
        )
        if step == steps[-1]:
            claim.completed_at = now
            _claim_completed(claim_id=claim.pk, unit_id=claim.unit_id, at=now)
        return annotation


def _same_or_locked(existing: Annotation, answer: str, payload: dict) -> Annotation:
    if existing.answer == answer and (existing.payload or {}) == (payload or {}):
        return existing
    if existing.step == Annotation.Step.BEFORE:
        raise AnswerLocked(
            "Your first answer is already recorded and cannot be changed once the explanation was shown."
        )
    raise AnswerLocked("This answer is already recorded and cannot be changed.")


def assignment_submit(*, assignment: Assignment) -> Assignment:
    """Finish the task: every claim must be complete. Returns the assignment with its
    completion code. Idempotent: submitting a submitted assignment returns it unchanged."""
    with transaction.atomic():
        locked = _lock(assignment)
        if locked.status == Assignment.Status.SUBMITTED:
            assignment.refresh_from_db()
            return assignment
        _lock_active(assignment)
        open_claims = Claim.objects.filter(
            assignment_id=assignment.pk, completed_at__isnull=True, released=False
        ).count()
        if open_claims:
            raise AssignmentIncomplete(
                f"{open_claims} question(s) of this task still need an answer before you can finish."
            )
        now = timezone.now()
        update = {"status": Assignment.Status.SUBMITTED, "submitted_at": now}
        if not assignment.completion_code:
            update["completion_code"] = secrets.token_hex(5).upper()
        Assignment.objects.filter(pk=assignment.pk).update(**update)
        for name, value in update.items():
            setattr(assignment, name, value)
        return assignment
