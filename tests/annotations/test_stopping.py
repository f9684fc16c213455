"""Stopping a unit once its result is decided (``Study.stop_when_decided``, issue 24), through the
services as workers use them: answers that count decide a unit, a decided unit is not offered
again, its held claims finish and count, a release keeps it closed, and a study whose units are
all decided closes on its platform."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from annotations.models import Assignment, ParticipantLink, Publication, Unit
from annotations.selectors import claims_that_count
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.errors import NoWorkAvailable
from annotations.services.platforms.publish import study_publish
from annotations.services.release import assignment_release
from annotations.tasks.assignments import close_decided_studies
from studies.models import Study
from studies.services.studies import StudyError, study_update
from tests.annotations.factories import ParticipantFactory, make_study

pytestmark = pytest.mark.django_db


def answer(assignment, before: str, after: str) -> None:
    for claim in assignment.claims.select_related("unit__item").order_by("position"):
        annotation_submit(assignment=assignment, claim=claim, step="before", answer=before)
        annotation_submit(assignment=assignment, claim=claim, step="after", answer=after)


def work(study, before: str, after: str, *, submit: bool = True) -> Assignment:
    assignment = assignment_start(study=study, participant=ParticipantFactory())
    answer(assignment, before, after)
    if submit:
        assignment_submit(assignment=assignment)
    return assignment


def one_unit_study(**fields):
    return make_study(n_items=1, n_sources=1, quota=5, units_per_task=1, stop_when_decided=True, **fields)


def test_three_agreeing_answers_of_five_decide_a_yes_no_unit_and_it_is_offered_no_more():
    study = one_unit_study()
    unit = Unit.objects.get(study=study)
    gold = unit.item.gold_answer
    for _ in range(2):
        work(study, gold, gold)
    unit.refresh_from_db()
    assert unit.decided_at is None and unit.quota == 5
    work(study, gold, gold)
    unit.refresh_from_db()
    assert unit.decided_at is not None
    assert (unit.quota, unit.n_claimed, unit.n_completed) == (3, 3, 3)
    with pytest.raises(NoWorkAvailable):
        assignment_start(study=study, participant=ParticipantFactory())


def test_off_by_default_a_unit_takes_all_its_workers():
    study = make_study(n_items=1, n_sources=1, quota=5, units_per_task=1)
    assert study.stop_when_decided is False
    unit = Unit.objects.get(study=study)
    for _ in range(5):
        work(study, unit.item.gold_answer, unit.item.gold_answer)
    unit.refresh_from_db()
    assert (unit.decided_at, unit.quota, unit.n_completed) == (None, 5, 5)


def test_claims_held_when_a_unit_is_decided_finish_and_count_and_nobody_else_gets_it():
    study = one_unit_study()
    unit = Unit.objects.get(study=study)
    gold = unit.item.gold_answer
    work(study, gold, gold)
    work(study, gold, gold)
    held = assignment_start(study=study, participant=ParticipantFactory())  # claimed, not answered yet
    work(study, gold, gold)  # the third counted answer decides it while `held` holds a claim
    unit.refresh_from_db()
    assert unit.decided_at is not None and (unit.quota, unit.n_claimed, unit.n_completed) == (4, 4, 3)
    with pytest.raises(NoWorkAvailable):
        assignment_start(study=study, participant=ParticipantFactory())
    wrong = "no" if gold == "yes" else "yes"
    answer(held, wrong, wrong)
    assignment_submit(assignment=held)
    unit.refresh_from_db()
    assert (unit.quota, unit.n_claimed, unit.n_completed) == (4, 4, 4)
    assert claims_that_count(study=study).count() == 4


def test_a_released_claim_of_a_decided_unit_keeps_it_closed():
    study = one_unit_study()
    unit = Unit.objects.get(study=study)
    gold = unit.item.gold_answer
    work(study, gold, gold)
    work(study, gold, gold)
    held = assignment_start(study=study, participant=ParticipantFactory())
    work(study, gold, gold)
    assignment_release(assignment=held, status=Assignment.Status.RETURNED)
    unit.refresh_from_db()
    assert unit.decided_at is not None and (unit.quota, unit.n_claimed, unit.n_completed) == (3, 3, 3)
    with pytest.raises(NoWorkAvailable):
        assignment_start(study=study, participant=ParticipantFactory())


def test_rejecting_a_counted_answer_of_a_decided_unit_reopens_it_when_the_rest_no_longer_decide_it():
    study = one_unit_study()
    unit = Unit.objects.get(study=study)
    gold = unit.item.gold_answer
    first, _second, _third = (work(study, gold, gold) for _ in range(3))
    unit.refresh_from_db()
    assert unit.decided_at is not None
    assignment_release(assignment=first, status=Assignment.Status.REJECTED, reviewed_at=timezone.now())
    unit.refresh_from_db()
    assert (unit.decided_at, unit.quota, unit.n_claimed) == (None, 5, 2)
    work(study, gold, gold)  # offered again, and decided again by the new third answer
    unit.refresh_from_db()
    assert unit.decided_at is not None and unit.quota == 3


def test_a_four_choice_unit_is_decided_wrong_once_no_remaining_answers_can_make_the_right_one_win():
    study = one_unit_study()
    unit = Unit.objects.get(study=study)
    item = unit.item
    item.choices = [{"label": c, "text": c} for c in "ABCD"]
    item.gold_answer = "A"
    item.save()
    work(study, "B", "B")
    work(study, "B", "B")
    unit.refresh_from_db()
    assert unit.decided_at is None  # A could still get 3 of 5
    work(study, "C", "C")  # B 2, C 1: A gets at most 2, a tie at best: wrong whatever comes
    unit.refresh_from_db()
    assert unit.decided_at is not None and unit.quota == 3


def test_the_setting_is_fixed_once_the_study_opens_and_needs_a_majority_scored_kind():
    study = one_unit_study()
    with pytest.raises(StudyError, match="whether a unit stops when its result is decided cannot change"):
        study_update(study=study, user=None, stop_when_decided=False)
    with pytest.raises(StudyError, match="no unit can be decided early") as refused:
        make_study(kind=Study.Kind.QUESTION_VALIDATION, n_sources=0, status=Study.Status.DRAFT,
                   stop_when_decided=True)
    assert set(refused.value.problems) == {"stop_when_decided"}


def test_a_study_whose_units_are_all_decided_closes_its_links(django_capture_on_commit_callbacks):
    owner = get_user_model().objects.create_superuser("owner-early", "o@example.org", "pw")
    study = make_study(n_items=2, n_sources=1, quota=5, units_per_task=2, stop_when_decided=True, owner=owner)
    publication = study_publish(study=study, user=owner, platform_name="link")
    assert ParticipantLink.objects.filter(study=study, revoked=False).exists()
    units = list(Unit.objects.filter(study=study))
    for _ in range(2):
        a = assignment_start(study=study, participant=ParticipantFactory())
        for claim in a.claims.select_related("unit__item"):
            gold = claim.unit.item.gold_answer
            annotation_submit(assignment=a, claim=claim, step="before", answer=gold)
            annotation_submit(assignment=a, claim=claim, step="after", answer=gold)
        assignment_submit(assignment=a)
    study.refresh_from_db()
    assert study.status == Study.Status.OPEN
    a = assignment_start(study=study, participant=ParticipantFactory())
    for claim in a.claims.select_related("unit__item"):
        gold = claim.unit.item.gold_answer
        annotation_submit(assignment=a, claim=claim, step="before", answer=gold)
        annotation_submit(assignment=a, claim=claim, step="after", answer=gold)
    with django_capture_on_commit_callbacks(execute=True) as queued:
        assignment_submit(assignment=a)
    assert len(queued) == 1  # the close, queued once the last unit was decided
    assert all(u.decided_at for u in Unit.objects.filter(pk__in=[u.pk for u in units]))
    study.refresh_from_db()
    publication.refresh_from_db()
    assert study.status == Study.Status.CLOSED and publication.status == Publication.Status.CLOSED
    assert not ParticipantLink.objects.filter(study=study, participant__isnull=True, revoked=False).exists()
    assert close_decided_studies() == 0  # beat's fallback: nothing left to close, changes nothing
