"""``annotations.services.release``: the expiry sweep and a study run elsewhere.

A study copied from a bundle keeps each task's status and deadline as exported, so a copy of a
study that had a worker mid-task holds an active task whose deadline passes here. The copy ran
elsewhere (``access.study_imported``): its statuses and unit counters stay those its results were
scored from, so the beat's sweep (``assignment_expire_stale``) leaves its tasks alone."""
from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.db.models import Max

from annotations.models import Assignment
from annotations.services.platforms.access import study_imported
from annotations.services.release import assignment_expire_stale
from scoring.services.bundle import bundle_import
from tests.scoring.test_bundle import _bundle, _worked_study

pytestmark = pytest.mark.django_db


def test_the_expiry_sweep_leaves_the_task_a_bundle_copy_holds_mid_work_and_its_units_as_imported():
    # Given a study whose worker was still at work when its bundle was made, and the bundle's copy
    origin = _worked_study()
    copy = bundle_import(file=io.BytesIO(_bundle(origin)), name="bundle-copy", owner=None)
    assert study_imported(copy)
    at_work = Assignment.objects.get(study=copy, status=Assignment.Status.ACTIVE)
    units = list(copy.units.order_by("id").values_list("id", "n_claimed", "n_completed", "quota"))
    origin_at_work = Assignment.objects.get(study=origin, status=Assignment.Status.ACTIVE)
    later = Assignment.objects.aggregate(last=Max("expires_at"))["last"] + timedelta(days=1)

    # When the beat's sweep runs past every deadline, twice
    first = assignment_expire_stale(now=later)
    second = assignment_expire_stale(now=later)

    # Then the copy's task is still at work as exported and its units' counters did not move,
    at_work.refresh_from_db()
    assert at_work.status == Assignment.Status.ACTIVE
    assert list(copy.units.order_by("id").values_list("id", "n_claimed", "n_completed", "quota")) == units
    assert not at_work.claims.filter(released=True, unit__isnull=False).exists()
    # while the origin's overdue task (run here) expired, once
    origin_at_work.refresh_from_db()
    assert origin_at_work.status == Assignment.Status.EXPIRED
    assert (first, second) == (1, 0)
