"""A study bundle's data/units.csv may call a unit decided (``decided_at``) only when its imported
answers decide it, by early stopping's own rule (``annotations.services.stopping.unit_votes_decide``):
a hand-edited, re-signed bundle that turns tied units into decided ones is refused by row and field,
and nothing is written; a genuine bundle of a stopping study, a decided unit with held work
included, still imports decided."""
from __future__ import annotations

import csv
import io
import zipfile

import pytest

from annotations.models import Unit
from annotations.services.answers import assignment_submit
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.platforms.sync import study_sync
from annotations.services.withdrawal import participant_withdraw
from scoring.services import study_score
from scoring.services.bundle import BundleError, bundle_import
from studies.models import Platform, Study
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import (  # noqa: F401
    complete_assignment,
    prolific,
    prolific_server,
    start_assignment,
)
from tests.annotations.test_holds_reopen_decided_units import one_unit_on_prolific
from tests.cockpit.conftest import staff_client
from tests.scoring.test_bundle import _bundle, _edited_rows
from tests.work import work

pytestmark = pytest.mark.django_db

DECIDED_AT = "2026-01-02T03:04:05+00:00"


def _wrong(claim, step):
    return "no" if claim.unit.item.gold_answer == "yes" else "yes"


def _tied_study() -> Study:
    """Two yes/no units of five workers each, stopping on: one worker right, one wrong, so each unit
    is 1-1 and the three answers to come could still change its score."""
    study = make_study(n_items=2, n_sources=1, quota=5, units_per_task=2, name="tied-origin", stop_when_decided=True)
    work(study, "PID-right", platform=Platform.LINK)
    work(study, "PID-wrong", answer=_wrong, platform=Platform.LINK)
    assert not study.units.filter(decided_at__isnull=False).exists()
    study_close(user=OPERATOR, study=study)
    return study


def test_units_edited_into_decided_whose_answers_do_not_decide_them_are_refused_by_row_and_nothing_is_written():
    data = _bundle(_tied_study())
    edited = _edited_rows(data, "data/units.csv", (0, {"quota": "2", "decided_at": DECIDED_AT}),
                          (1, {"quota": "2", "decided_at": DECIDED_AT}))
    studies, units = Study.objects.count(), Unit.objects.count()

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(edited), name="tied-copy", filename="tied.zip", owner=None)

    errors = refused.value.errors
    assert [(e.record, e.line, e.field) for e in errors] == [("data/units.csv", 2, "decided_at"),
                                                            ("data/units.csv", 3, "decided_at")], errors
    assert all("do not decide it" in e.reason for e in errors), errors
    assert Study.objects.count() == studies and Unit.objects.count() == units  # all or nothing


def test_the_tied_study_unedited_imports_with_its_units_open():
    copy = bundle_import(file=io.BytesIO(_bundle(_tied_study())), name="tied-copy", owner=None)
    run = study_score(study=copy, similarity=False)
    assert run.status == "done", run.error
    assert run.results["early_stopping"]["units_decided"] == 0


def test_a_decided_unit_with_held_work_still_imports_decided(prolific):  # noqa: F811
    _platform, server = prolific
    study, prolific_id = one_unit_on_prolific(server)
    rows = [server.add_submission(prolific_id, participant_id=f"p_{n}") for n in range(3)]
    rows.append(server.add_submission(prolific_id, participant_id="p_real"))
    workers = ["p_0", "p_1", "p_2", "p_fabricated"]
    tasks = [start_assignment(study, platform="prolific", worker_id=worker, assignment_id=row["id"],
                              task_id=prolific_id) for worker, row in zip(workers, rows, strict=True)]
    for task in tasks:
        complete_assignment(task)
    study_sync(study=study)
    unit = Unit.objects.get(study=study)
    assert unit.decided_at is not None and unit.quota == 4  # decided by three counting answers; one held
    study_close(user=OPERATOR, study=study)
    data = _bundle(study)
    units_csv = list(csv.DictReader(io.StringIO(zipfile.ZipFile(io.BytesIO(data)).read("data/units.csv").decode())))
    assert units_csv[0]["decided_at"]

    copy = bundle_import(file=io.BytesIO(data), name="held-copy", owner=None)

    assert Unit.objects.get(study=copy).decided_at == unit.decided_at
    run = study_score(study=copy, similarity=False)
    assert run.status == "done", run.error
    assert run.results["early_stopping"]["units_decided"] == 1


def _decided_then_withdrawn(n_workers: int) -> tuple[Study, bytes, object]:
    """Two yes/no units of five workers each, stopping on, answered by ``n_workers`` identical right
    answers (three decide a unit); the bundle is made, then PID-D0 withdraws from the original (its
    claims released)."""
    alice, _ = staff_client("alice")
    study = make_study(n_items=2, n_sources=1, quota=5, units_per_task=2, name="decided-origin",
                       stop_when_decided=True, owner=alice)
    # all start before any submits, so a unit decided by three answers holds every worker's claim
    tasks = [work(study, f"PID-D{n}", platform=Platform.LINK, submit=False) for n in range(n_workers)]
    for task in tasks:
        assignment_submit(assignment=task)
    assert not study.units.filter(decided_at__isnull=True).exists()
    study_close(user=OPERATOR, study=study)
    data = _bundle(study)
    participant_withdraw(user=alice, study=study, worker_id="PID-D0")
    return study, data, alice


def _units(study: Study) -> list[tuple[int, int, bool]]:
    return [(quota, n_claimed, decided_at is not None) for quota, n_claimed, decided_at
            in study.units.order_by("id").values_list("quota", "n_claimed", "decided_at")]


def test_a_bundle_made_before_a_withdrawal_reopens_the_units_the_withdrawal_reopened():
    """A worker who withdrew from the original after its bundle was made is left out of the copy
    (``_Import.withdrew``); the units decided on their answers are checked again on what is left, as
    the withdrawal's release checked them in the original: three right answers of five decided
    each unit, two no longer do, so both are reopened there and here."""
    study, data, alice = _decided_then_withdrawn(3)
    assert _units(study) == [(5, 2, False), (5, 2, False)]  # the original reopened them

    copy = bundle_import(file=io.BytesIO(data), name="decided-copy", owner=alice)

    assert _units(copy) == _units(study)
    run = study_score(study=copy, similarity=False)
    assert run.status == "done", run.error
    early = run.results["early_stopping"]
    assert (early["units_decided"], early["answers_saved"], early["units_neither_decided_nor_full"]) == (0, 0, 2)


def test_a_bundle_made_before_a_withdrawal_keeps_decided_the_units_still_decided():
    """Four right answers of five decided each unit; without the withdrawn worker's, three still do:
    the unit stays decided, its quota following its claims down, in the original and in the copy."""
    study, data, alice = _decided_then_withdrawn(4)
    assert _units(study) == [(3, 3, True), (3, 3, True)]

    copy = bundle_import(file=io.BytesIO(data), name="decided-copy", owner=alice)

    assert _units(copy) == _units(study)
    run = study_score(study=copy, similarity=False)
    assert run.status == "done", run.error
    assert (run.results["early_stopping"]["units_decided"], run.results["early_stopping"]["answers_saved"]) == (2, 4)
