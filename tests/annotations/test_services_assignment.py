"""The assignment service: policy, no repeats, quotas, expiry, and the answer services."""
from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import F, Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from annotations.models import Annotation, Assignment, Claim, Unit
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.errors import (
    AnswerLocked,
    AssignmentExpired,
    AssignmentIncomplete,
    AssignmentNotActive,
    ForeignClaim,
    InvalidAnswer,
    NoWorkAvailable,
    ParticipantBlocked,
    StepOutOfOrder,
    StudyNotOpen,
)
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.release import assignment_expire_stale, assignment_return
from annotations.tasks.assignments import expire_stale_assignments
from studies.design import study_capacity
from studies.models import Platform, Study
from tests.annotations.factories import AttentionCheckFactory, ParticipantFactory, make_study
from tests.clock import clock_installed

pytestmark = pytest.mark.django_db


def unit_claims(assignment):
    return list(assignment.claims.filter(unit__isnull=False).select_related("unit__item").order_by("position"))


def complete(assignment, answer="yes"):
    """Answer every step of every claim through the service, then submit."""
    for claim in assignment.claims.select_related("unit__item", "attention_check").order_by("position"):
        if claim.attention_check_id:
            annotation_submit(assignment=assignment, claim=claim, step="attention", answer=answer)
            continue
        annotation_submit(assignment=assignment, claim=claim, step="before", answer=answer)
        annotation_submit(assignment=assignment, claim=claim, step="after", answer=answer)
    return assignment_submit(assignment=assignment)


# --- claiming -------------------------------------------------------------------------------

def test_start_claims_units_per_task_with_distinct_questions_and_a_source_mix():
    study = make_study(n_items=6, n_sources=2, units_per_task=4)
    assignment = assignment_start(study=study, participant=ParticipantFactory())
    claims = unit_claims(assignment)
    assert len(claims) == 4
    assert len({c.question_key for c in claims}) == 4
    sources = Counter(c.unit.source_id for c in claims)
    assert sorted(sources.values()) == [2, 2]
    assert sum(Unit.objects.filter(study=study).values_list("n_claimed", flat=True)) == 4


def test_start_prefers_least_filled_units():
    study = make_study(n_items=4, n_sources=1, units_per_task=2, quota=3)
    first = assignment_start(study=study, participant=ParticipantFactory())
    taken = {c.unit_id for c in unit_claims(first)}
    second = assignment_start(study=study, participant=ParticipantFactory())
    assert not taken & {c.unit_id for c in unit_claims(second)}


def test_same_worker_resumes_active_assignment():
    study = make_study()
    worker = ParticipantFactory()
    first = assignment_start(study=study, participant=worker)
    again = assignment_start(study=study, participant=worker, platform_assignment_id="NEW-ASSIGNMENT")
    assert again.pk == first.pk
    assert Assignment.objects.get(pk=first.pk).platform_assignment_id == "NEW-ASSIGNMENT"
    assert Claim.objects.filter(participant=worker).count() == len(unit_claims(first))


def test_worker_never_sees_a_question_twice_across_tasks_and_sources():
    study = make_study(n_items=5, n_sources=3, units_per_task=2, quota=5)
    worker = ParticipantFactory()
    keys = []
    while True:
        try:
            assignment = assignment_start(study=study, participant=worker)
        except NoWorkAvailable:
            break
        keys += [c.question_key for c in unit_claims(assignment)]
        complete(assignment)
    assert sorted(keys) == sorted(f"item:{i}" for i in study.items.values_list("id", flat=True))


def test_the_claim_reads_the_units_without_joining_the_studys_claims():
    """Issue 15: with planner statistics that predate a study, an anti-join of its units with its
    claims was planned as a rescan of every claim of the study per candidate unit. The claim
    reads the worker's own question keys first and excludes them by value."""
    study = make_study(n_items=5, n_sources=2, units_per_task=2, quota=5)
    worker = ParticipantFactory()
    complete(assignment_start(study=study, participant=worker))
    for _ in range(3):
        assignment_start(study=study, participant=ParticipantFactory())
    with CaptureQueriesContext(connection) as queries:
        again = assignment_start(study=study, participant=worker)
    unit_reads = [q["sql"] for q in queries.captured_queries
                  if q["sql"].startswith("SELECT") and 'FROM "annotations_unit"' in q["sql"]]
    assert unit_reads and all("annotations_claim" not in sql for sql in unit_reads), unit_reads
    first = set(Claim.objects.filter(participant=worker).exclude(assignment=again).values_list("question_key", flat=True))
    assert first and not first & {c.question_key for c in unit_claims(again)}


def test_quota_reached_then_no_work_for_new_workers():
    study = make_study(n_items=2, n_sources=1, units_per_task=2, quota=2)
    for _ in range(2):
        complete(assignment_start(study=study, participant=ParticipantFactory()))
    assert list(Unit.objects.filter(study=study).values_list("n_claimed", "n_completed")) == [(2, 2), (2, 2)]
    with pytest.raises(NoWorkAvailable):
        assignment_start(study=study, participant=ParticipantFactory())
    assert not Assignment.objects.filter(status=Assignment.Status.ACTIVE).exists()


def test_every_unit_reaches_exactly_its_quota_with_many_workers():
    study = make_study(n_items=6, n_sources=3, units_per_task=4, quota=3)
    while True:
        try:
            complete(assignment_start(study=study, participant=ParticipantFactory()))
        except NoWorkAvailable:
            break
    for unit in Unit.objects.filter(study=study):
        workers = Claim.objects.filter(unit=unit, released=False).values_list("participant", flat=True)
        assert unit.n_completed == unit.n_claimed == unit.quota == len(set(workers)) == 3
    per_worker = Counter(Claim.objects.values_list("participant_id", "question_key"))
    assert max(per_worker.values()) == 1


def test_attention_checks_are_mixed_in_once_per_worker():
    study = make_study(n_items=6, n_sources=1, units_per_task=4)
    checks = [AttentionCheckFactory(study=study) for _ in range(2)]
    worker = ParticipantFactory()
    assignment = assignment_start(study=study, participant=worker)
    ordered = list(assignment.claims.order_by("position"))
    assert [c.attention_check_id for c in ordered if c.attention_check_id] == [c.pk for c in checks]
    assert ordered[0].unit_id is not None and ordered[-1].unit_id is not None
    complete(assignment, answer="no")
    assert [a.payload for a in Annotation.objects.filter(step="attention")] == [{"correct": True}] * 2
    second = assignment_start(study=study, participant=worker)
    assert not second.claims.filter(attention_check__isnull=False).exists()


def test_closed_study_and_blocked_worker_are_refused():
    study = make_study(status=Study.Status.DRAFT)
    with pytest.raises(StudyNotOpen):
        assignment_start(study=study, participant=ParticipantFactory())
    study = study_open(study=study, user=OPERATOR)
    with pytest.raises(ParticipantBlocked):
        assignment_start(study=study, participant=ParticipantFactory(blocked=True))
    assert not Assignment.objects.exists()


@pytest.mark.parametrize("kind, n_items, n_sources, quota, units_per_task", [
    (Study.Kind.UTILITY, 20, 3, 5, 10),
    (Study.Kind.UTILITY, 50, 3, 5, 10),
    (Study.Kind.UTILITY, 12, 3, 5, 10),
    (Study.Kind.GENERALIZATION, 6, 2, 3, 5),
    (Study.Kind.GENERALIZATION, 8, 3, 3, 5),
])
def test_the_published_number_of_tasks_takes_every_place(kind, n_items, n_sources, quota, units_per_task):
    """The number of tasks a study publishes (``design_capacity``: the fewest tasks, every task full
    but the last) collects every answer when each task is taken by a worker of its own: the claim
    takes, among the least-filled units, those of the questions with the most places open, so the
    open places never pile up on fewer questions than a task holds."""
    study = make_study(kind=kind, n_items=n_items, n_sources=n_sources, quota=quota, units_per_task=units_per_task,
                       n_genq=2, platform=Platform.PROLIFIC)
    published = study_capacity(study=study).tasks
    sizes = []
    for _ in range(published):
        assignment = assignment_start(study=study, participant=ParticipantFactory())
        sizes.append(assignment.claims.filter(unit__isnull=False).count())
    open_places = Unit.objects.filter(study=study).aggregate(n=Sum(F("quota") - F("n_claimed")))["n"]
    short = [(i, n) for i, n in enumerate(sizes) if n < units_per_task]  # (task, units): only the last may be
    assert (published, short, open_places) == (published, [s for s in short if s[0] == published - 1], 0)


# --- expiry ---------------------------------------------------------------------------------

def test_expire_stale_releases_units_and_is_idempotent():
    study = make_study(n_items=3, n_sources=1, units_per_task=2, quota=1)
    worker = ParticipantFactory()
    assignment = assignment_start(study=study, participant=worker)
    first = unit_claims(assignment)[0]
    annotation_submit(assignment=assignment, claim=first, step="before", answer="yes")
    annotation_submit(assignment=assignment, claim=first, step="after", answer="no")
    later = timezone.now() + timedelta(days=1)
    assert assignment_expire_stale(now=later) == 1
    assert assignment_expire_stale(now=later) == 0
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.EXPIRED
    assert list(Unit.objects.filter(study=study).values_list("n_claimed", "n_completed").distinct()) == [(0, 0)]
    assert all(c.released for c in assignment.claims.all())
    # The released questions stay "seen": the same worker could get only the third one, a task
    # shorter than their own expired questions would have made it, so the start is refused; the
    # released questions go to another worker.
    with pytest.raises(NoWorkAvailable, match="not a full task"):
        assignment_start(study=study, participant=worker)
    other = assignment_start(study=study, participant=ParticipantFactory())
    assert len(unit_claims(other)) == 2


def test_expire_task_runs_twice_safely():
    study = make_study(n_items=2, n_sources=1, units_per_task=2)
    assignment = assignment_start(study=study, participant=ParticipantFactory())
    Assignment.objects.filter(pk=assignment.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert expire_stale_assignments.delay().get() == 1
    assert expire_stale_assignments.delay().get() == 0
    assert Unit.objects.filter(study=study, n_claimed=0).count() == 2


def test_start_after_own_deadline_expires_the_old_one_first():
    study = make_study(n_items=4, n_sources=1, units_per_task=2)
    worker = ParticipantFactory()
    old = assignment_start(study=study, participant=worker)
    Assignment.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    new = assignment_start(study=study, participant=worker)
    assert new.pk != old.pk
    assert Assignment.objects.get(pk=old.pk).status == Assignment.Status.EXPIRED
    assert Unit.objects.filter(study=study).aggregate(n=Sum("n_claimed"))["n"] == 2


# --- answers --------------------------------------------------------------------------------

@pytest.fixture
def started():
    study = make_study(n_items=3, n_sources=1, units_per_task=2)
    assignment = assignment_start(study=study, participant=ParticipantFactory())
    return assignment, unit_claims(assignment)[0]


def test_same_answer_twice_is_stored_once(started):
    assignment, claim = started
    a1 = annotation_submit(assignment=assignment, claim=claim, step="before", answer="yes")
    a2 = annotation_submit(assignment=assignment, claim=claim, step="before", answer="yes")
    assert a1.pk == a2.pk
    assert Annotation.objects.filter(claim=claim).count() == 1
    annotation_submit(assignment=assignment, claim=claim, step="after", answer="no")
    annotation_submit(assignment=assignment, claim=claim, step="after", answer="no")
    assert Annotation.objects.filter(claim=claim).count() == 2
    assert Claim.objects.get(pk=claim.pk).completed_at is not None
    # The answers count once the task is submitted, not before.
    assert Unit.objects.get(pk=claim.unit_id).n_completed == 0


def test_first_answer_cannot_change_after_reveal(started):
    assignment, claim = started
    annotation_submit(assignment=assignment, claim=claim, step="before", answer="yes")
    with pytest.raises(AnswerLocked, match="first answer"):
        annotation_submit(assignment=assignment, claim=claim, step="before", answer="no")
    annotation_submit(assignment=assignment, claim=claim, step="after", answer="no")
    with pytest.raises(AnswerLocked):
        annotation_submit(assignment=assignment, claim=claim, step="after", answer="yes")
    assert list(Annotation.objects.filter(claim=claim).order_by("id").values_list("step", "answer")) == [
        ("before", "yes"), ("after", "no"),
    ]


def test_after_needs_before(started):
    assignment, claim = started
    with pytest.raises(StepOutOfOrder):
        annotation_submit(assignment=assignment, claim=claim, step="after", answer="yes")
    assert not Annotation.objects.exists()


def test_invalid_answer_and_unknown_step_are_refused(started):
    assignment, claim = started
    with pytest.raises(InvalidAnswer, match="not one of the choices"):
        annotation_submit(assignment=assignment, claim=claim, step="before", answer="maybe")
    with pytest.raises(InvalidAnswer, match="not a step"):
        annotation_submit(assignment=assignment, claim=claim, step="properties", answer="")
    assert not Annotation.objects.exists()


def test_foreign_claim_is_refused(started):
    assignment, _claim = started
    other = assignment_start(study=assignment.study, participant=ParticipantFactory())
    foreign = unit_claims(other)[0]
    with pytest.raises(ForeignClaim):
        annotation_submit(assignment=assignment, claim=foreign, step="before", answer="yes")
    assert not Annotation.objects.exists()


def test_late_answer_for_expired_assignment_is_refused(started):
    assignment, claim = started
    Assignment.objects.filter(pk=assignment.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(AssignmentExpired):
        annotation_submit(assignment=assignment, claim=claim, step="before", answer="yes")
    assignment_expire_stale()
    with pytest.raises(AssignmentExpired):
        annotation_submit(assignment=assignment, claim=claim, step="before", answer="yes")
    assert not Annotation.objects.exists()


def test_answers_after_submit_are_refused_and_submit_is_idempotent():
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    assignment = assignment_start(study=study, participant=ParticipantFactory())
    claim = unit_claims(assignment)[0]
    with pytest.raises(AssignmentIncomplete):
        assignment_submit(assignment=assignment)
    annotation_submit(assignment=assignment, claim=claim, step="before", answer="yes")
    annotation_submit(assignment=assignment, claim=claim, step="after", answer="yes")
    done = assignment_submit(assignment=assignment)
    code = done.completion_code
    assert done.status == Assignment.Status.SUBMITTED and code
    assert assignment_submit(assignment=assignment).completion_code == code
    with pytest.raises(AssignmentNotActive):
        annotation_submit(assignment=assignment, claim=claim, step="after", answer="no")


def test_returned_assignment_gives_units_back():
    study = make_study(n_items=2, n_sources=1, units_per_task=2)
    assignment = assignment_start(study=study, participant=ParticipantFactory())
    assignment_return(assignment=assignment)
    assert Assignment.objects.get(pk=assignment.pk).status == Assignment.Status.RETURNED
    assert set(Unit.objects.filter(study=study).values_list("n_claimed", flat=True)) == {0}


def test_return_after_the_deadline_ends_the_task_expired_not_returned(monkeypatch):
    """A "Return" pressed from a stale page after the deadline: the task had already ended by the
    deadline every answer is refused by, so it counts among the expired tasks, not the returned."""
    study = make_study(n_items=2, n_sources=1, units_per_task=1)
    assignment = assignment_start(study=study, participant=ParticipantFactory())
    claim = unit_claims(assignment)[0]
    annotation_submit(assignment=assignment, claim=claim, step="before", answer="yes")
    annotation_submit(assignment=assignment, claim=claim, step="after", answer="yes")
    clock = clock_installed(monkeypatch)
    clock.now = Assignment.objects.get(pk=assignment.pk).expires_at + timedelta(seconds=1)
    assignment_return(assignment=assignment)
    assert Assignment.objects.get(pk=assignment.pk).status == Assignment.Status.EXPIRED
    assert set(Unit.objects.filter(study=study).values_list("n_claimed", flat=True)) == {0}


def test_validation_and_properties_steps_store_their_payload():
    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=2, n_genq=1, units_per_task=1)
    assignment = assignment_start(study=study, participant=ParticipantFactory())
    claim = unit_claims(assignment)[0]
    with pytest.raises(InvalidAnswer, match="corrected answer"):
        annotation_submit(assignment=assignment, claim=claim, step="validation", answer="",
                          payload={"well_formed": "yes", "type_correct": "yes", "answer_correct": "no"})
    stored = annotation_submit(
        assignment=assignment, claim=claim, step="validation", answer="",
        payload={"well_formed": "yes", "type_correct": "yes", "answer_correct": "no", "corrected_answer": "no"},
    )
    assert stored.answer == "invalid" and stored.payload["corrected_answer"] == "no"

    study = make_study(kind=Study.Kind.RATIONALE_PROPERTIES, n_items=1, n_sources=1, units_per_task=1)
    assignment = assignment_start(study=study, participant=ParticipantFactory())
    claim = unit_claims(assignment)[0]
    props = {name: "yes" for name in ("grammatical", "factual", "supports_label", "contrast", "novel_info",
                                      "leakage", "hallucination")}
    with pytest.raises(InvalidAnswer, match="redundant"):
        annotation_submit(assignment=assignment, claim=claim, step="properties", answer="", payload=props)
    stored = annotation_submit(assignment=assignment, claim=claim, step="properties", answer="",
                               payload={**props, "redundant": "no"})
    assert len(stored.payload) == 8 and Claim.objects.get(pk=claim.pk).completed_at is not None
    assignment_submit(assignment=assignment)
    assert Unit.objects.get(pk=claim.unit_id).n_completed == 1
