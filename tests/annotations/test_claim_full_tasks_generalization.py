"""A generalization study's claim gives a full task while enough unseen questions are open.

There a question (``item:<id>``) has a unit per generalization question and source, so the claim's
candidate window (``assignment.candidates_wanted`` rows) can hold the units of fewer questions than
a task holds: the claim then reads on past the questions it took (``assignment._claim_pass``)
instead of giving a short task paid as a full one."""
from __future__ import annotations

import random

import pytest

from annotations.models import Unit
from annotations.services.assignment import assignment_start
from annotations.services.errors import NoWorkAvailable
from studies.design import design_capacity
from studies.models import Study
from tests.annotations.factories import ParticipantFactory, make_study

pytestmark = pytest.mark.django_db


def _open_questions(study: Study) -> set[str]:
    return {key for key, n_claimed, quota in
            Unit.objects.filter(study=study).values_list("question_key", "n_claimed", "quota") if n_claimed < quota}


def _units_of(assignment) -> list[str]:
    return list(assignment.claims.filter(unit__isnull=False).order_by("position")
                .values_list("question_key", flat=True))


def test_seed_20_first_worker_gets_a_full_task():
    """The audited case: three items of ten units each (5 generalization questions x 2 sources), a
    task of three; the first worker's window of nine rows held the units of two items only."""
    random.seed(20)  # the units' random keys come from the global random (models.core.unit_rand_key)
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=3, n_sources=2, n_genq=5, quota=2, units_per_task=3)
    rng = random.Random(random.Random(20).randrange(2**32))
    task = assignment_start(study=study, participant=ParticipantFactory(), rng=rng)
    keys = _units_of(task)
    assert len(keys) == 3 and len(set(keys)) == 3, keys
    assert task.claims.filter(attention_check__isnull=True).values("position").distinct().count() == 3


@pytest.mark.parametrize("seed", range(30))
def test_no_short_task_while_enough_questions_are_open(seed):
    """Small generalization studies filled to the end, new workers only: every task is full while
    a task's worth of questions is open, no worker gets a question twice, and the study fills in
    the tasks its design plans (``design_capacity``)."""
    random.seed(seed)
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=3, n_sources=2, n_genq=5, quota=2, units_per_task=3)
    capacity = design_capacity(question_keys=list(Unit.objects.filter(study=study).values_list("question_key", flat=True)),
                               quota=2, units_per_task=3)
    rng = random.Random(seed)
    tasks = 0
    while True:
        open_questions = _open_questions(study)
        try:
            task = assignment_start(study=study, participant=ParticipantFactory(), rng=random.Random(rng.randrange(2**32)))
        except NoWorkAvailable:
            break
        tasks += 1
        keys = _units_of(task)
        assert len(keys) == len(set(keys)), keys
        assert len(keys) == min(3, len(open_questions)), (seed, tasks, keys, sorted(open_questions))
    assert not _open_questions(study)
    assert tasks == capacity.tasks


def test_only_a_short_window_reads_on(monkeypatch):
    """The window is read past the questions taken only when it came out short (the seed-20 claim:
    one read more); a utility study's window (a unit per source and question) always holds a
    task's worth of questions, so its claim reads once, as before."""
    from annotations.services import assignment as assignment_service

    reads: list[int] = []
    real = assignment_service._candidates

    def counted(eligible, *, limit, pivot):
        rows = real(eligible, limit=limit, pivot=pivot)
        reads.append(len(rows))
        return rows

    monkeypatch.setattr(assignment_service, "_candidates", counted)
    random.seed(20)
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=3, n_sources=2, n_genq=5, quota=2, units_per_task=3)
    assignment_start(study=study, participant=ParticipantFactory(), rng=random.Random(random.Random(20).randrange(2**32)))
    assert reads == [9, 9]  # the first window: two questions; the second, past them: the third
    reads.clear()
    for seed in range(10):
        random.seed(seed)
        utility = make_study(kind=Study.Kind.UTILITY, n_items=6, n_sources=3, quota=2, units_per_task=4)
        task = assignment_start(study=utility, participant=ParticipantFactory(), rng=random.Random(seed))
        assert len(_units_of(task)) == 4
    assert len(reads) == 10
