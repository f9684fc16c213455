"""Stopping a unit once its result is decided (``Study.stop_when_decided``, issue 24).

A utility or generalization unit is scored by the majority of its answers before and after the
rationale, a tie counting as wrong (SPEC section 2). Once the answers that count
(``annotations.selectors.claims_that_count``) make the correctness of both majorities the same for
every way the unit's remaining answers could fall, the rest would be paid for and change nothing:
the unit is *decided* (``studies.majority.outcome_decided``, which applies the scoring's own majority
and tie rule to every way the remaining answers can fall).

The rules, kept with the counters' rules of ``annotations.services.release``:

- Decided at each event that makes answers count: a task's submit (``answers.assignment_submit``)
  and a researcher clearing work that sync put on hold (``unit_decide_for_assignment``). A decided
  unit's ``quota`` is lowered to its ``n_claimed`` and ``decided_at`` is set, under the unit's row
  lock, so the claim (``n_claimed < quota``) never offers it again; the claims held then finish
  normally and their answers count. ``n_claimed <= quota`` and ``n_completed <= n_claimed`` hold.
- When sync puts submitted work on hold, its answers stop counting: ``units_after_hold`` checks
  its decided units again as after a release (below); the held claim keeps its slot.
- When a claim of a decided unit is released (expiry, return, rejection: ``release.assignments_release``),
  ``units_after_release`` looks again: still decided, the quota follows ``n_claimed`` down (the
  unit stays closed); no longer decided (a counted answer was rejected), the unit is reopened
  with the study's workers per unit as its quota.
- A study whose units are all decided stops recruiting on its platform through the one close
  service (``platforms.close.study_close``), from a Celery task queued when the last unit is
  decided (``study_close_when_decided``) and from beat as a fallback. The close is the app's own,
  taken at the study's own setting: it acts as ``platforms.access.OPERATOR`` (audit rows record no
  user), whoever owns the study and whatever rights they hold now (it moves no money, it only stops
  recruitment), and the log says the app closed it because every unit was decided.
- A close cannot be undone (a closed study never reopens), so on a platform whose sync holds the work
  it does not list (``UNLISTED_UNTIL_SYNCED``: Prolific) the app's close waits while any answer that
  counts in a decided unit is of work no sync has listed yet (``_unlisted_deciding_work``): a worker
  who invented a ``PROLIFIC_PID`` and ``SESSION_ID`` counts until sync holds the work
  (``RL_SYNC_UNLISTED_GRACE_MINUTES``), and the unit it decided is reopened then. Listed is not
  enough while the session is still ACTIVE (its worker has not reached Prolific's completion page):
  it may yet time out or be returned, which holds the work too. A sync that lists the work settled
  (``prolific.SESSION_SETTLED``: awaiting review or later) lets beat's ``close_decided_studies``
  close the study; one that holds it reopens the unit.

A generalization question marked invalid after its study opened closes its units the same way
(``units_follow_question_validation``, received from ``studies.signals.generalization_validation_changed``
in the transaction that changed the status): scoring leaves out the answers to an invalid question
(``studies.selectors.QUESTION_RULE``), so they would be paid for and count for nothing, and the
places they took would leave the valid units short on a platform whose places are fixed. Each unit
of the question in an open study gets ``quota = n_claimed`` (the claims held then finish and are
paid); its quota follows ``n_claimed`` down at each release and is never raised by a decided unit
reopened (``_quota_follows_claims``); marked valid or unvalidated again, its units that are not
decided take the study's workers per unit again. ``decided_at`` is early stopping's alone: an
invalid question's unit is closed by its quota, not decided. The claim reads nothing more
(``n_claimed < quota`` still says it all).
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from celery import current_app
from django.db import transaction
from django.db.models import Count, Exists, F, OuterRef, Q, Sum
from django.utils import timezone

from annotations.models import Annotation, Claim, PlatformSubmission, Unit
from annotations.platforms.prolific import SESSION_SETTLED
from annotations.selectors import claim_counts, claims_that_count
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from studies.choices import genq_choices, normalise_choices
from studies.majority import outcome_decided
from studies.models import GeneralizationQuestion, Platform, Study

logger = logging.getLogger(__name__)

# The steps whose majorities the score reads (utility and generalization studies).
SCORED_STEPS = (Annotation.Step.BEFORE, Annotation.Step.AFTER)


def _unit_question(unit: Unit) -> tuple[list[str], str]:
    """The choice labels a unit's question offers and its right label, as scoring reads them
    (``scoring.services.score._units_frame``: the item's gold answer, or the generalization
    question's answer)."""
    if unit.generalization_question_id:
        genq = unit.generalization_question
        return [c["label"] for c in genq_choices(genq, unit.item)], genq.answer
    return [c["label"] for c in normalise_choices(unit.item.choices)], unit.item.gold_answer


def _counted_votes(*, study: Study, unit_ids: list[int]) -> dict[int, dict]:
    """Per unit: the number of claims that count and their answers per scored step."""
    rows = Annotation.objects.filter(
        claim__in=claims_that_count(study=study).filter(unit_id__in=unit_ids), step__in=SCORED_STEPS,
    ).values_list("claim__unit_id", "claim_id", "step", "answer")
    out: dict[int, dict] = defaultdict(lambda: {"claims": set(), "answers": defaultdict(list)})
    for unit_id, claim_id, step, answer in rows:
        out[unit_id]["claims"].add(claim_id)
        out[unit_id]["answers"][step].append(answer)
    return out


def _decided(unit: Unit, votes: dict | None, *, full: int) -> bool:
    labels, gold = _unit_question(unit)
    votes = votes or {"claims": (), "answers": {}}
    answers = votes["answers"]
    labels = list(dict.fromkeys([*labels, *(a for step in SCORED_STEPS for a in answers.get(step, ()))]))
    index = {label: i for i, label in enumerate(labels)}
    step_counts = []
    for step in SCORED_STEPS:
        counts = [0] * len(labels)
        for answer in answers.get(step, ()):
            counts[index[answer]] += 1
        step_counts.append(counts)
    remaining = max(0, full - len(votes["claims"]))
    return outcome_decided(step_counts, correct=index.get(gold, -1), remaining=remaining)


def unit_votes_decide(*, study: Study, unit_ids: Iterable[int]) -> dict[int, bool]:
    """Per unit of ``unit_ids`` (of ``study``): whether the answers that count now decide it, by the
    rule ``units_decide`` decides by (``_decided`` on ``_counted_votes``, with the study's workers per
    unit as a full unit), whatever its ``decided_at`` says. Reads only; takes no lock. The study
    bundle import checks with it that a unit its data/units.csv calls decided is one its imported
    answers decide (``scoring.services.bundle.importing``)."""
    units = _units(unit_ids, study_id=study.pk)
    votes = _counted_votes(study=study, unit_ids=[u.pk for u in units])
    return {u.pk: _decided(u, votes.get(u.pk), full=study.annotators_per_unit) for u in units}


def _units(ids: Iterable[int], **filters):
    return list(Unit.objects.filter(id__in=list(ids), **filters).select_related("item", "generalization_question")
                .order_by("id"))


def units_decide(*, study: Study, unit_ids: Iterable[int]) -> list[int]:
    """Decide ``unit_ids`` of ``study`` on the answers that count now: each undecided one whose
    score no remaining answer could change gets ``quota = n_claimed`` and ``decided_at``. Returns
    the ids decided now. Nothing for a study that does not stop early.

    Call inside the transaction that made answers count, holding the units' row locks (taken in id
    order, as every writer of the counters does), so that no claim of them runs in between. When the
    last unit of the study is decided, the study's close is queued for after the commit."""
    if not study.stop_when_decided:
        return []
    units = _units(unit_ids, study_id=study.pk, decided_at__isnull=True)
    if not units:
        return []
    votes = _counted_votes(study=study, unit_ids=[u.pk for u in units])
    decided = [u.pk for u in units if _decided(u, votes.get(u.pk), full=study.annotators_per_unit)]
    if decided:
        Unit.objects.filter(id__in=decided).update(quota=F("n_claimed"), decided_at=timezone.now())
        if not _still_to_decide(Unit.objects.filter(study_id=study.pk)).exists():
            transaction.on_commit(lambda: _queue_close(study.pk))
    return decided


def units_after_release(*, unit_ids: Iterable[int]) -> None:
    """After claims of ``unit_ids`` were released (``release.assignments_release``, units locked): a decided
    unit stays closed (its quota follows ``n_claimed`` down) while the answers that count still
    decide it, and is reopened (quota back to the study's workers per unit, ``decided_at`` cleared)
    when they no longer do (a counted answer was rejected). A unit of a question marked invalid stays
    closed too: its quota follows ``n_claimed`` down (``_quota_follows_claims``). The study bundle
    import calls it on the units holding claims of workers who withdrew from the original, which it
    leaves out (``scoring.services.bundle.importing``): the copy checks them as the original did."""
    _decided_units_recheck(unit_ids)


def _decided_units_recheck(unit_ids: Iterable[int]) -> None:
    """The decided units of ``unit_ids`` (locked by the caller), checked again on the answers that
    count now: still decided, ``quota = n_claimed`` (closed); no longer decided, reopened with the
    study's workers per unit as ``quota`` and ``decided_at`` cleared. Then the units of a question
    marked invalid, decided or not, are closed again (``_invalid_units_close``): a release or a hold
    never gives their places to new workers."""
    unit_ids = list(unit_ids)
    units = _units(unit_ids, decided_at__isnull=False)
    by_study: dict[int, list[Unit]] = defaultdict(list)
    for unit in units:
        by_study[unit.study_id].append(unit)
    for study in Study.objects.filter(pk__in=list(by_study)):
        group = by_study[study.pk]
        votes = _counted_votes(study=study, unit_ids=[u.pk for u in group])
        still = [u.pk for u in group if _decided(u, votes.get(u.pk), full=study.annotators_per_unit)]
        reopened = [u.pk for u in group if u.pk not in still]
        if still:
            Unit.objects.filter(id__in=still).update(quota=F("n_claimed"))
        if reopened:
            Unit.objects.filter(id__in=reopened).update(quota=study.annotators_per_unit, decided_at=None)
    # A unit of a question marked invalid stays closed whatever its answers, decided or not.
    _invalid_units_close(unit_ids)


def unit_decide_for_assignment(*, assignment_id: int) -> list[int]:
    """Work of ``assignment_id`` started to count again (a researcher cleared its hold): decide its
    units, locked in id order."""
    claims = Claim.objects.filter(assignment_id=assignment_id, released=False, unit__isnull=False)
    unit_ids = sorted(set(claims.values_list("unit_id", flat=True)))
    if not unit_ids:
        return []
    with transaction.atomic():
        list(Unit.objects.select_for_update().filter(id__in=unit_ids).order_by("id").values_list("id"))
        study = Study.objects.get(pk=Unit.objects.filter(pk=unit_ids[0]).values_list("study_id", flat=True)[0])
        return units_decide(study=study, unit_ids=unit_ids)


def units_after_hold(*, assignment_id: int) -> None:
    """Sync put submitted work of ``assignment_id`` on hold (``annotations.selectors.HOLDING_FLAGS``):
    its answers stop counting, so each decided unit it holds a claim of is checked again exactly as
    after a release (``units_after_release``): still decided on the answers that count without it,
    it stays closed; no longer decided, it is reopened with the study's workers per unit as its
    quota. The held claim keeps its slot (``n_claimed``, as ``release.units_recount_completed``
    leaves it) until a researcher clears the work (it counts again: ``unit_decide_for_assignment``)
    or rejects it (the release frees the slot), so a reopened unit takes ``quota - n_claimed`` new
    workers and ``n_completed <= n_claimed <= quota`` holds: ``n_claimed`` never passed the study's
    workers per unit, the quota the unit was opened with. Units are locked in id order, as every
    writer of the counters does; call inside the transaction that set the hold, after
    ``n_completed`` was recounted."""
    unit_ids = sorted(set(Claim.objects.filter(assignment_id=assignment_id, released=False, unit__isnull=False)
                          .values_list("unit_id", flat=True)))
    if not unit_ids:
        return
    with transaction.atomic():
        list(Unit.objects.select_for_update().filter(id__in=unit_ids).order_by("id").values_list("id"))
        _decided_units_recheck(unit_ids)


# --- the units of a generalization question marked invalid -----------------------------------------

def _quota_follows_claims() -> Q:
    """The units whose quota is their claims whatever their answers: those of a generalization
    study whose question is marked invalid, which take nobody more (a question-validation study's
    units ask workers to judge such questions: they stay open)."""
    return Q(study__kind=Study.Kind.GENERALIZATION,
             generalization_question__validation_status=GeneralizationQuestion.Validation.INVALID)


def _still_to_decide(units):
    """Of ``units``, those early stopping still waits for: undecided, and not closed because their
    question was marked invalid (they will never be decided; the study is done without them)."""
    return units.filter(decided_at__isnull=True).exclude(_quota_follows_claims())


def _invalid_units_close(unit_ids: list[int]) -> None:
    """``quota = n_claimed`` for the units of ``unit_ids`` (locked by the caller) whose question is
    marked invalid: they take nobody more, and the claims they hold finish."""
    Unit.objects.filter(_quota_follows_claims(), id__in=unit_ids).exclude(quota=F("n_claimed")).update(
        quota=F("n_claimed"))


def units_follow_question_validation(*, question_ids: Iterable[int]) -> None:
    """The validation status of ``question_ids`` changed (``studies.services.questions``, received
    from ``studies.signals.generalization_validation_changed`` inside that transaction): their
    units in open studies follow it. A question marked invalid: each unit takes nobody more
    (``quota = n_claimed``; the claims held finish, are paid and counted as before), as a decided
    unit does. A question valid or unvalidated: its units not decided take the study's workers per
    unit again (a decided one stays closed: early stopping reopens it only when its answers no
    longer decide it). Reads the status as stored, so a call for a question whose status did not
    move changes nothing. Units are locked in id order, as every writer of the counters does."""
    question_ids = list(question_ids)
    units = Unit.objects.filter(generalization_question_id__in=question_ids, study__status=Study.Status.OPEN,
                                study__kind=Study.Kind.GENERALIZATION)
    unit_ids = list(units.order_by("id").values_list("id", flat=True))
    if not unit_ids:
        return
    with transaction.atomic():
        list(Unit.objects.select_for_update().filter(id__in=unit_ids).order_by("id").values_list("id"))
        _invalid_units_close(unit_ids)
        opening = Unit.objects.filter(id__in=unit_ids, decided_at__isnull=True).exclude(_quota_follows_claims())
        per_study = dict(Study.objects.filter(pk__in=opening.values("study_id")).values_list("pk", "annotators_per_unit"))
        for study_id, per_unit in per_study.items():
            # never below its claims (a unit that held more when the study lowered its workers per unit)
            opening.filter(study_id=study_id, quota__lt=per_unit).update(quota=per_unit)


def question_validation_changed(sender, question_ids, **kwargs) -> None:
    """Receiver of ``studies.signals.generalization_validation_changed`` (``AnnotationsConfig.ready``)."""
    units_follow_question_validation(question_ids=question_ids)


# --- the answers a study did not ask for ------------------------------------------------------------

@dataclass(frozen=True)
class AnswersNotAsked:
    """The answers ``study``'s design asked for that its units will not collect, by why: early stopping
    (``saved_by_stopping``, over ``units_decided``: the units decided with fewer than the design's
    workers) and generalization questions marked invalid (``invalid_questions``: their units take
    nobody more, ``_invalid_units_close``; stopping saved none of these, the question's status did)."""

    units_decided: int
    saved_by_stopping: int
    invalid_questions: int


def units_stopped(units):
    """Of ``units``, those whose lowered quota early stopping saved: decided (``decided_at`` set) and
    not of a question marked invalid (``_quota_follows_claims``: the question's status closes them,
    whatever their answers). An undecided unit whose quota stays lowered (its question was marked
    valid again after the study closed) is not one."""
    return units.filter(decided_at__isnull=False).exclude(_quota_follows_claims())


def study_answers_not_asked(*, study: Study) -> AnswersNotAsked:
    """The one reading of what early stopping saved (the progress page, ``annotations.selectors.progress``,
    and the scoring's ``early_stopping``, ``scoring.services.score``): per unit, the study's workers
    per unit less its quota, summed over the units decided by stopping (``decided_at`` set) whose
    question is not marked invalid; the units of a question marked invalid (decided or not: the
    question's status closes them whatever their answers) are summed apart, as ``invalid_questions``.
    Nothing else that leaves places empty (a close by hand, a study short of workers) is counted."""
    per_unit = study.annotators_per_unit
    lowered = Unit.objects.filter(study_id=study.pk, quota__lt=per_unit)
    stopped = units_stopped(lowered).aggregate(n=Count("id"), quotas=Sum("quota"))
    invalid = lowered.filter(_quota_follows_claims()).aggregate(n=Count("id"), quotas=Sum("quota"))
    return AnswersNotAsked(units_decided=stopped["n"],
                           saved_by_stopping=stopped["n"] * per_unit - (stopped["quotas"] or 0),
                           invalid_questions=invalid["n"] * per_unit - (invalid["quotas"] or 0))


# --- closing a study whose units are all decided ----------------------------------------------------

# The task that closes one (``annotations.tasks.assignments.close_decided_study`` is registered under this name),
# sent by name: the tasks call this module, so it does not import them.
CLOSE_TASK = "annotations.close_decided_study"

def _queue_close(study_id: int) -> None:
    """Queue the close; never fail the worker's submit that decided the last unit (the broker may be
    down: beat's ``close_decided_studies`` closes it later)."""
    try:
        current_app.signature(CLOSE_TASK, args=(study_id,)).apply_async()
    except Exception:  # noqa: BLE001 - the submit is committed; beat retries the close
        logger.warning("could not queue the close of study %s (all units decided); beat will close it", study_id,
                       exc_info=True)


# The platforms whose listing holds every piece of work from the moment its worker starts it
# (Prolific lists a submission as ACTIVE from the start; MTurk lists only submitted assignments), so
# that sync holds the work answered here under a session it does not list
# (``platforms.sync._unlisted_work_hold`` reads this set): there, work that decided a unit may
# stop counting at a later sync, so the close waits for the listing.
UNLISTED_UNTIL_SYNCED = frozenset({Platform.PROLIFIC})


def _unlisted_deciding_work(study_ref):
    """The claims of the study ``study_ref`` names (an id, or ``OuterRef``) whose answers count in a
    decided unit, answered on a platform of ``UNLISTED_UNTIL_SYNCED`` under a platform task and
    session (the ones sync matches: ``selectors.platforms.publication_unlisted_work``), that no sync
    has seen Prolific list as settled: not listed at all, it may be invented and held later; listed
    as ACTIVE or RESERVED (the worker has not reached Prolific's completion page yet), the session
    may still time out or be returned, which holds the work and reopens its unit (``ended_on_platform``)
    in a study the close would have stopped for good. What ends the wait: a row whose listed status is
    one of ``prolific.SESSION_SETTLED`` (awaiting review, approved, and the ends that hold it), or a
    researcher's clear of work still held (held and not cleared, it does not count; cleared and
    listed since, its listed status decides). Read as one EXISTS,
    by the claims' study."""
    # A clear counts while its hold does: a row sync listed since (flag back to OK) keeps its
    # ``cleared_at``, and then its listed status decides.
    cleared = Q(cleared_at__isnull=False) & ~Q(flag=PlatformSubmission.Flag.OK)
    stored = PlatformSubmission.objects.filter(Q(platform_status__in=SESSION_SETTLED) | cleared,
                                               assignment_id=OuterRef("assignment_id"))
    return (Claim.objects.filter(claim_counts(), study_id=study_ref, unit__decided_at__isnull=False,
                                 assignment__participant__platform__in=UNLISTED_UNTIL_SYNCED)
            .exclude(assignment__platform_task_id="").exclude(assignment__platform_assignment_id="")
            .exclude(Exists(stored)))


def close_waits_for_listing(*, study: Study) -> bool:
    """Whether ``study_close_when_decided`` waits for its platform's listing: an open study that stops
    early, every unit decided, with deciding work no sync has seen listed as submitted yet
    (``_unlisted_deciding_work``). A sync now lets the close go ahead when the platform lists that work so."""
    return close_waiting_on(study=study) > 0


def close_waiting_on(*, study: Study) -> int:
    """How many tasks the close of ``study`` waits for (``close_waits_for_listing``): those of the
    deciding work its platform has not listed as submitted yet; 0 when the close does not wait (the
    study is not open, does not stop early, has a unit still to decide, or nothing is unlisted). The
    progress and publish pages say so, so a study that stays open with every unit decided says why."""
    if (study.status != Study.Status.OPEN or not study.stop_when_decided
            or _still_to_decide(study.units.all()).exists()):
        return 0
    return _unlisted_deciding_work(study.pk).values("assignment_id").distinct().count()


def studies_all_decided() -> list[int]:
    """Open studies that stop early and whose units are all decided, with no deciding work the
    platform has not listed as submitted yet (``_unlisted_deciding_work``): nothing more to collect."""
    pending = _still_to_decide(Unit.objects.filter(study_id=OuterRef("pk")))
    return list(
        Study.objects.filter(status=Study.Status.OPEN, stop_when_decided=True, units__isnull=False)
        .exclude(Exists(pending)).exclude(Exists(_unlisted_deciding_work(OuterRef("pk"))))
        .values_list("pk", flat=True).distinct().order_by("pk")
    )


def study_close_when_decided(*, study: Study) -> bool:
    """Close ``study`` (stop recruiting on its platform, through ``platforms.close.study_close``) if
    it stops early, is open and every unit is decided. The app takes this close at the study's own
    setting, so it acts as ``platforms.access.OPERATOR``, not as the owner: an owner who left or
    lost their rights does not keep the study recruiting. It moves no money; the platform calls
    record no user, and the log says the app closed the study because every unit was decided.

    On Prolific it waits while an answer that decided a unit is of work no sync has seen listed as
    submitted yet (``_unlisted_deciding_work``): a close cannot be undone, and invented work, or
    work whose session times out or is returned, stops counting (its unit reopened) when sync holds
    it. Beat (``close_decided_studies``) closes the study once a sync lists the work so. Idempotent: returns whether it closed the study now."""
    study = Study.objects.get(pk=study.pk)
    if (study.status != Study.Status.OPEN or not study.stop_when_decided or not study.units.exists()
            or _still_to_decide(study.units.all()).exists()):
        return False
    if _unlisted_deciding_work(study.pk).exists():
        logger.info("study %s not closed yet (stop_when_decided): every unit is decided, but work that decided "
                    "one is not listed as submitted by its platform yet; beat closes it once a sync lists it so", study.pk)
        return False
    closed = study_close(user=OPERATOR, study=study)
    logger.info("study %s closed by the app (stop_when_decided): every unit is decided; %d publication(s) closed",
                study.pk, len(closed))
    return True
