"""What counts, and the unit counters: one definition (``selectors.claims_that_count``).

State is built only through the services (start, answer, leave, expire, submit, approve, reject
through the releasing service, a participant's withdrawal, sync's hold and its clearing); after every step the stored counters must equal a recount from
the selector. Issue 11 bug 1: expired, returned, still-active and rejected work was scored, and a
unit with a quota of 1 was scored with 2 annotators."""
from __future__ import annotations

import importlib
import random
from collections import Counter
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from annotations.models import Annotation, Assignment, Claim, PlatformSubmission, Unit
from annotations.selectors import claims_that_count
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.errors import NoWorkAvailable, ParticipantBlocked
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from annotations.services.platforms.review import assignment_approve, submission_clear
from annotations.services.platforms.sync import study_sync
from annotations.services.release import assignment_expire_stale, assignment_release, assignment_return
from annotations.services.stopping import _counted_votes, _decided
from annotations.services.withdrawal import participant_withdraw
from lab.transitions import TransitionError
from tests.annotations.factories import AttentionCheckFactory, ParticipantFactory, make_study
from tests.annotations.platforms.conftest import open_study, start_assignment

pytestmark = pytest.mark.django_db


def answer_all(assignment):
    for claim in assignment.claims.select_related("unit__item", "attention_check").order_by("position"):
        if claim.attention_check_id:
            annotation_submit(assignment=assignment, claim=claim, step="attention", answer="no")
        else:
            annotation_submit(assignment=assignment, claim=claim, step="before", answer="yes")
            annotation_submit(assignment=assignment, claim=claim, step="after", answer="no")


def assert_counters_agree(study):
    """Stored counters == a recount from the claims and the selector; quota and no-repeat hold."""
    counting = dict(
        claims_that_count(study=study).values("unit_id").annotate(n=Count("id")).values_list("unit_id", "n")
    )
    held = dict(
        Claim.objects.filter(study=study, released=False, unit__isnull=False)
        .values("unit_id").annotate(n=Count("id")).values_list("unit_id", "n")
    )
    for unit in Unit.objects.filter(study=study):
        assert (unit.n_claimed, unit.n_completed) == (held.get(unit.pk, 0), counting.get(unit.pk, 0)), unit
        assert unit.n_completed <= unit.n_claimed <= unit.quota
        workers = claims_that_count(study=study).filter(unit=unit).values_list("participant_id", flat=True)
        assert len(workers) == len(set(workers)) <= unit.quota
        # Stopping early (annotations.services.stopping): a decided unit takes nobody more and is
        # still decided by the answers that count; any other unit keeps the study's quota.
        if unit.decided_at is None:
            assert unit.quota == study.annotators_per_unit, unit
        else:
            assert study.stop_when_decided and unit.n_claimed == unit.quota, unit
            votes = _counted_votes(study=study, unit_ids=[unit.pk]).get(unit.pk)
            assert _decided(unit, votes, full=study.annotators_per_unit), unit
    repeats = (Claim.objects.filter(study=study).values("participant_id", "question_key")
               .annotate(n=Count("id")).filter(n__gt=1))
    assert not repeats.exists()


def test_selector_states_the_definition():
    doc = claims_that_count.__doc__
    for phrase in ("not an attention check", "not released", "every step", "submitted or approved"):
        assert phrase in doc


def test_only_submitted_or_approved_complete_claims_count():
    study = make_study(n_items=4, n_sources=1, quota=3, units_per_task=2)
    AttentionCheckFactory(study=study)
    active, submitted, approved, rejected, expired, returned = (
        assignment_start(study=study, participant=ParticipantFactory()) for _ in range(6)
    )
    for a in (active, submitted, approved, rejected, expired, returned):
        answer_all(a)
    for a in (submitted, approved, rejected):
        assignment_submit(assignment=a)
    assignment_approve(user=OPERATOR, study=approved.study, assignment=approved)
    assert assignment_release(assignment=rejected, status=Assignment.Status.REJECTED, reviewed_at=timezone.now())
    assignment_return(assignment=returned)
    assignment_expire_stale(now=expired.expires_at + timedelta(days=1))  # also expires `active`
    counted = set(claims_that_count(study=study).values_list("assignment_id", flat=True))
    assert counted == {submitted.pk, approved.pk}
    assert not claims_that_count(study=study).filter(attention_check__isnull=False).exists()
    assert_counters_agree(study)


@pytest.mark.parametrize("how", ["expire", "return", "active", "reject"])
def test_a_unit_with_a_quota_of_one_never_counts_two_annotators(how):
    """Bug 1: the first worker's complete answers stop counting when the slot is given back (or do
    not count yet while active), so only one worker's answers count for a quota-1 unit."""
    study = make_study(n_items=1, n_sources=1, quota=1, units_per_task=1)
    first = assignment_start(study=study, participant=ParticipantFactory())
    answer_all(first)
    if how == "expire":
        assignment_expire_stale(now=first.expires_at + timedelta(days=1))
    elif how == "return":
        assignment_return(assignment=first)
    elif how == "reject":
        assignment_submit(assignment=first)
        assignment_release(assignment=first, status=Assignment.Status.REJECTED)
    if how == "active":
        with pytest.raises(NoWorkAvailable):  # the slot is held: nobody else gets the unit
            assignment_start(study=study, participant=ParticipantFactory())
        assert claims_that_count(study=study).count() == 0
        assignment_submit(assignment=first)
        assert claims_that_count(study=study).count() == 1
    else:
        second = assignment_start(study=study, participant=ParticipantFactory())
        answer_all(second)
        assignment_submit(assignment=second)
        assert list(claims_that_count(study=study).values_list("assignment_id", flat=True)) == [second.pk]
    # Both workers answered every step; the answers that count come from one of them only.
    assert Annotation.objects.filter(claim__study=study).values("claim__participant").distinct().count() == (
        1 if how == "active" else 2)
    counted_answers = Annotation.objects.filter(claim__in=claims_that_count(study=study))
    assert counted_answers.values("claim__participant").distinct().count() == 1
    assert_counters_agree(study)


def test_release_is_idempotent_and_follows_the_machine():
    study = make_study(n_items=2, n_sources=1, quota=2, units_per_task=2)
    a = assignment_start(study=study, participant=ParticipantFactory())
    with pytest.raises(TransitionError, match="'active' to 'rejected'"):
        assignment_release(assignment=a, status=Assignment.Status.REJECTED)
    answer_all(a)
    assignment_submit(assignment=a)
    assert assignment_release(assignment=a, status=Assignment.Status.REJECTED) is True
    assert assignment_release(assignment=a, status=Assignment.Status.REJECTED) is False
    assert a.status == Assignment.Status.REJECTED
    assert list(Unit.objects.filter(study=study).values_list("n_claimed", "n_completed").distinct()) == [(0, 0)]
    # Rejected work gave its slots back while the study is open: another worker takes them.
    b = assignment_start(study=study, participant=ParticipantFactory())
    assert b.claims.filter(unit__isnull=False).count() == 2
    assert_counters_agree(study)


def _walk(seed: int, steps: int = 70, *, stop: bool = False) -> Counter:
    rng = random.Random(seed)
    # With early stopping and two workers per unit, one counted wrong answer in both steps decides a unit
    # (the second can at best tie, and a tie counts as wrong); a counted right one does not.
    study = make_study(n_items=4, n_sources=2, quota=2, units_per_task=3, stop_when_decided=stop)
    if seed % 2:
        AttentionCheckFactory(study=study)
    workers = [ParticipantFactory() for _ in range(7)]
    # With early stopping, a crowd that mostly agrees, so that units get decided on the way.
    answers = ["yes"] * 4 + ["no"] if stop else ["yes", "no"]
    # ... whose tasks are mostly finished, so that units collect several answers that count.
    ops = (["start"] * 3 + ["answer"] * 5 + ["submit"] * (5 if stop else 2)
           + ["leave", "expire", "approve", "reject", "withdraw"])
    clock = timezone.now()
    withdrawn: Counter = Counter()  # withdrawn tasks with no payment are deleted: count them on the way
    for _ in range(steps):
        actives = list(Assignment.objects.filter(study=study, status=Assignment.Status.ACTIVE))
        submitted = list(Assignment.objects.filter(study=study, status=Assignment.Status.SUBMITTED))
        op = rng.choice(ops)
        active = rng.choice(actives) if actives else None
        if op == "start":
            try:
                assignment_start(study=study, participant=rng.choice(workers), now=clock)
            except (NoWorkAvailable, ParticipantBlocked):  # blocked: a worker who withdrew
                pass
        elif op == "withdraw":
            # A participant withdraws (issue 24): whatever their tasks' states, their slots go back.
            person = rng.choice(workers)
            if Assignment.objects.filter(study=study, participant=person).exists():
                outcome = participant_withdraw(user=OPERATOR, study=study, worker_id=person.external_id)
                withdrawn[Assignment.Status.WITHDRAWN] += outcome.tasks_ended
        elif op == "answer" and active is not None and active.expires_at > timezone.now():
            # One step, one question, or the rest of the task.
            for claim in (active.claims.filter(completed_at__isnull=True, released=False)
                          .select_related("unit__item", "attention_check").order_by("position")[:rng.choice([1, 9])]):
                steps = ["attention"] if claim.attention_check_id else ["before", "after"]
                taken = steps[: rng.choice([1, 2])]
                for step in taken:
                    if not claim.annotations.filter(step=step).exists():
                        annotation_submit(assignment=active, claim=claim, step=step, answer=rng.choice(answers))
                if len(taken) < len(steps):  # half answered: the task asks no later question yet
                    break
        elif op == "leave" and active is not None:
            assignment_return(assignment=active)
        elif op == "expire":
            clock += timedelta(minutes=rng.choice([2, 12, 45]))
            assignment_expire_stale(now=clock)
        elif op == "submit" and active is not None:
            if not active.claims.filter(completed_at__isnull=True, released=False).exists():
                assignment_submit(assignment=active)
        elif op == "approve" and submitted:
            assignment_approve(user=OPERATOR, study=study, assignment=rng.choice(submitted))
        elif op == "reject" and submitted:
            assignment_release(assignment=rng.choice(submitted), status=Assignment.Status.REJECTED,
                               reviewed_at=timezone.now())
        assert_counters_agree(study)
    return Counter(Assignment.objects.filter(study=study).values_list("status", flat=True)) + withdrawn


@pytest.mark.parametrize("seed", range(12))
def test_random_walks_through_the_services_keep_counters_equal_to_the_selector(seed):
    _walk(seed)


@pytest.mark.parametrize("seed", range(12))
def test_random_walks_with_early_stopping_keep_the_counters_and_decided_units_closed(seed):
    _walk(seed, stop=True)


def test_the_early_stopping_walks_decide_units():
    """The walks above exercise the stopping rules: units do get decided on the way."""
    decided = 0
    for seed in range(12):
        _walk(seed, stop=True)
        decided += Unit.objects.filter(decided_at__isnull=False).count()
    assert decided > 0


def test_the_walks_visit_every_state():
    """The walks reach every assignment state. The assignment service draws units with its own
    randomness, so a given seed does not always walk the same way: walk seeds until every state
    was seen (a handful normally suffice), rather than trusting three chosen ones."""
    seen = Counter()
    for seed in range(40):
        seen += _walk(seed)
        if set(seen) == set(Assignment.Status.values):
            break
    assert set(seen) == set(Assignment.Status.values), seen


def test_the_migration_recount_gives_the_services_counters():
    """The data migration that brought stored counters to this rule recounts exactly what the
    services keep."""
    study = make_study(n_items=3, n_sources=2, quota=2, units_per_task=2)
    a, b, c = (assignment_start(study=study, participant=ParticipantFactory()) for _ in range(3))
    for x in (a, b):
        answer_all(x)
        assignment_submit(assignment=x)
    answer_all(c)
    assignment_release(assignment=b, status=Assignment.Status.REJECTED)
    before = list(Unit.objects.order_by("id").values_list("n_claimed", "n_completed"))
    migration = importlib.import_module("annotations.migrations.0007_claims_that_count")
    migration.recount(apps, SimpleNamespace(connection=connection))
    assert list(Unit.objects.order_by("id").values_list("n_claimed", "n_completed")) == before
    assert_counters_agree(study)


# --- held work (issue 23 item 4) ------------------------------------------------------------------

def test_held_work_leaves_n_completed_and_keeps_its_slot_until_cleared_or_rejected(prolific):
    """Sync holds work whose platform worker is someone else: its answers stop counting and so
    does ``Unit.n_completed`` (the API's ``n_units_complete`` and the admin's unit list agree with
    the progress page), while the slot stays claimed; clearing counts it again, rejecting gives the
    slot back. Work held before it is submitted is not counted by the submit either."""
    _platform, server = prolific
    study = make_study(n_items=3, n_sources=1, quota=3, units_per_task=3, status="draft", platform="prolific")
    open_study(study)
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    pid = publication.prolific_study_id
    spoofs = [server.add_submission(pid, participant_id=f"p_real_{i}") for i in range(3)]
    held, rejected, early = (
        start_assignment(study, platform="prolific", worker_id=f"p_fake_{i}", assignment_id=spoofs[i]["id"],
                         task_id=pid) for i in range(3))
    for work in (held, rejected):
        answer_all(work)
        assignment_submit(assignment=work)
    answer_all(early)  # answered, not yet submitted here, already submitted on the platform
    assert_counters_agree(study)
    assert set(Unit.objects.filter(study=study).values_list("n_completed", flat=True)) == {2}

    study_sync(study=study)

    assert PlatformSubmission.objects.filter(flag=PlatformSubmission.Flag.WORKER_MISMATCH).count() == 3
    assert set(Unit.objects.filter(study=study).values_list("n_claimed", "n_completed")) == {(3, 0)}
    assert_counters_agree(study)
    assignment_submit(assignment=early)  # held: the submit counts nothing
    assert set(Unit.objects.filter(study=study).values_list("n_completed", flat=True)) == {0}
    assert_counters_agree(study)

    submission_clear(user=OPERATOR, submission=PlatformSubmission.objects.get(assignment=held))
    assert set(Unit.objects.filter(study=study).values_list("n_claimed", "n_completed")) == {(3, 1)}
    assert_counters_agree(study)
    study_sync(study=study)  # a later sync keeps the researcher's decision and the counters
    assert_counters_agree(study)
    assert set(Unit.objects.filter(study=study).values_list("n_completed", flat=True)) == {1}

    assignment_release(assignment=rejected, status=Assignment.Status.REJECTED, reviewed_at=timezone.now())
    assert set(Unit.objects.filter(study=study).values_list("n_claimed", "n_completed")) == {(2, 1)}
    assert_counters_agree(study)


def test_the_held_work_migration_recounts_what_the_services_keep(prolific):
    """Units counted under the old rule (held work inside ``n_completed``) are brought to the new
    one by the data migration, and units without held work are left as they are."""
    _platform, server = prolific
    study = make_study(n_items=3, n_sources=1, quota=3, units_per_task=3, status="draft", platform="prolific")
    open_study(study)
    publication = study_publish(user=OPERATOR, study=study, platform_name="prolific")
    spoof = server.add_submission(publication.prolific_study_id, participant_id="p_real")
    work = start_assignment(study, platform="prolific", worker_id="p_fake", assignment_id=spoof["id"],
                            task_id=publication.prolific_study_id)
    answer_all(work)
    assignment_submit(assignment=work)
    study_sync(study=study)
    kept = list(Unit.objects.order_by("id").values_list("n_claimed", "n_completed"))
    Unit.objects.filter(study=study).update(n_completed=1)  # what the old rule stored
    migration = importlib.import_module("annotations.migrations.0015_withdraw_held_work_recount")
    migration.recount_held(apps, SimpleNamespace(connection=connection))
    assert list(Unit.objects.order_by("id").values_list("n_claimed", "n_completed")) == kept
    assert_counters_agree(study)
