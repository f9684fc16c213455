"""A study bundle carries which workers of its tasks were blocked in the study when it was made
(data/worker_blocks.csv, pseudonyms only), since a blocked worker's submitted and approved work
counts and the results say so (``counted_answers.tasks_of_blocked_workers``, a warning,
``other_readings.without_blocked_workers``): the import blocks them in the copy alone, so the
copy re-scores to the original's results.json to the last digit. A bundle made before bundles
carried the table still imports, and the copy's results say its workers' blocks are not known. A
worker who withdrew is not named. Built through the services: workers answer through the
questionnaire (``tests.work``), a superuser blocks (``worker_block``), the owner withdraws a worker
(``participant_withdraw``)."""
from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest
from django.contrib.auth import get_user_model

from annotations.models import Assignment, Participant, WorkerBlock
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.blocks import worker_block
from annotations.services.withdrawal import participant_withdraw
from lab.pseudonyms import worker_pseudonym
from scoring.services import study_score
from scoring.services.bundle import BundleError, bundle_import, bundle_stream, importing
from studies.models import ImportRecord, Platform, Study
from tests.scoring.test_bundle import _edited_rows, _numbers, _resign, _worked_study

pytestmark = pytest.mark.django_db

TABLE = "data/worker_blocks.csv"


def _bundle(study: Study) -> bytes:
    return b"".join(bundle_stream(study=study, user=None))


def _score(study: Study):
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    return run


def _blocked_study() -> tuple[Study, list[Participant]]:
    """``_worked_study`` with the workers of two submitted tasks blocked by a superuser: one in
    every study (``Participant.blocked``), one in this study."""
    study = _worked_study()
    root = get_user_model().objects.create_superuser("root", "root@example.org", "pw-root-123")
    workers = [Assignment.objects.get(study=study, participant__external_id=pid).participant
               for pid in ("PID0002", "PID0003")]
    worker_block(user=root, study=study, participant=workers[0], reason="Copied answers.", everywhere=True)
    worker_block(user=root, study=study, participant=workers[1], reason="Copied answers.")
    return study, workers


def _table(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(zipfile.ZipFile(io.BytesIO(data)).read(TABLE).decode())))


def _without_blocks_table(data: bytes) -> bytes:
    """The bundle as one made before bundles carried blocks: no table, no resource for it in
    datapackage.json (checksums recomputed)."""
    src, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            content = src.read(name)
            if name == TABLE:
                continue
            if name == "datapackage.json":
                package = json.loads(content)
                package["resources"] = [r for r in package["resources"] if r["path"] != TABLE]
                content = json.dumps(package).encode()
            dst.writestr(name, content)
    return _resign(out.getvalue())


def test_a_copy_of_a_study_with_blocked_workers_re_scores_to_the_same_results():
    study, workers = _blocked_study()
    original = _score(study)
    counted = original.results["counted_answers"]
    assert counted["tasks_of_blocked_workers"] == 2 and counted["answers_of_blocked_workers"] > 0
    assert counted["other_readings"]["without_blocked_workers"]["identical_to"] is None
    data = _bundle(study)

    copy = bundle_import(file=io.BytesIO(data), name="blocked-copy", filename="study.zip", owner=None)
    rescored = _score(copy)

    assert _numbers(rescored.results) == _numbers(original.results)
    assert any("workers blocked in this study" in w for w in rescored.results["warnings"])
    assert "blocked_workers_not_carried" not in rescored.results["counted_answers"]
    # the bundle names the workers by pseudonym, never by platform id
    rows = _table(data)
    assert sorted((r["worker"], r["platform"]) for r in rows) == sorted(
        (worker_pseudonym(w.platform, w.external_id), w.platform) for w in workers)
    assert b"PID0002" not in zipfile.ZipFile(io.BytesIO(data)).read(TABLE)
    # the copy's own blocks, on its own participants and covering it alone
    blocks = WorkerBlock.objects.filter(participant__assignments__study=copy).distinct()
    assert blocks.count() == 2
    assert {(b.study_id, b.researcher_id, b.everywhere, b.reason) for b in blocks} == {
        (copy.pk, None, False, importing.BLOCKED_AT_ORIGIN)}
    assert not Participant.objects.filter(assignments__study=copy, blocked=True).exists()
    assert ImportRecord.objects.get(kind="bundle", summary__study=copy.pk).summary["worker_blocks"] == 2
    # and a copy of the copy carries them again
    second = bundle_import(file=io.BytesIO(_bundle(copy)), name="blocked-copy-2", filename="s.zip", owner=None)
    assert _numbers(_score(second).results) == _numbers(original.results)


def test_a_bundle_made_before_bundles_carried_blocks_imports_and_its_copy_says_they_are_not_known():
    study, _ = _blocked_study()
    original = _score(study)

    copy = bundle_import(file=io.BytesIO(_without_blocks_table(_bundle(study))), name="old-copy",
                         filename="study.zip", owner=None)
    rescored = _score(copy)

    counted = rescored.results["counted_answers"]
    assert counted["tasks_of_blocked_workers"] == 0
    assert counted["blocked_workers_not_carried"] == importing.NO_WORKER_BLOCKS_TABLE
    assert any(w.startswith("Which workers were blocked where this study was first run is not known here")
               for w in rescored.results["warnings"])
    assert not WorkerBlock.objects.filter(study=copy).exists()
    summary = ImportRecord.objects.get(kind="bundle", summary__study=copy.pk).summary
    assert summary["worker_blocks"] is None and summary["worker_blocks_unknown"] == importing.NO_WORKER_BLOCKS_TABLE
    # the rest re-scores as before
    assert rescored.results["n_units_scored"] == original.results["n_units_scored"]
    # a bundle of the copy leaves the table out, so a copy of it says so too
    again = _bundle(copy)
    assert TABLE not in zipfile.ZipFile(io.BytesIO(again)).namelist()
    second = bundle_import(file=io.BytesIO(again), name="old-copy-2", filename="s.zip", owner=None)
    assert _score(second).results["counted_answers"]["blocked_workers_not_carried"] == importing.NO_WORKER_BLOCKS_TABLE


def test_a_study_without_blocks_writes_an_empty_table_and_its_copy_knows_there_are_none():
    study = _worked_study()
    original = _score(study)
    data = _bundle(study)
    assert _table(data) == [] and TABLE in {r["path"] for r in json.loads(
        zipfile.ZipFile(io.BytesIO(data)).read("datapackage.json"))["resources"]}

    copy = bundle_import(file=io.BytesIO(data), name="unblocked-copy", filename="study.zip", owner=None)

    assert _numbers(_score(copy).results) == _numbers(original.results)


def test_a_blocked_worker_who_withdrew_is_not_named_and_one_who_withdrew_later_is_left_out():
    study, workers = _blocked_study()
    participant_withdraw(user=OPERATOR, study=study, worker_id=workers[1].external_id)

    data = _bundle(study)

    assert [r["worker"] for r in _table(data)] == [worker_pseudonym(Platform.LINK, workers[0].external_id)]
    # the other withdraws after the bundle was made: the import leaves their block out with their work
    participant_withdraw(user=OPERATOR, study=study, worker_id=workers[0].external_id)
    copy = bundle_import(file=io.BytesIO(data), name="withdrawn-copy", filename="study.zip", owner=None)
    assert not WorkerBlock.objects.filter(study=copy).exists()
    assert not Assignment.objects.filter(study=copy, participant__external_id__endswith=_table(data)[0]["worker"])\
        .exists()


@pytest.mark.parametrize(("cell", "reason"), [
    ("w_00000000000000ff", "not a worker of the bundle's tasks"),  # a pseudonym of nobody in data/tasks.csv
    ("PID0002", "not a worker pseudonym"),  # a platform id names nobody
])
def test_a_block_row_naming_no_worker_of_the_bundles_tasks_is_refused_by_row(cell, reason):
    study, _ = _blocked_study()
    data = _edited_rows(_bundle(study), TABLE, (0, {"worker": cell}))

    with pytest.raises(BundleError) as raised:
        bundle_import(file=io.BytesIO(data), name="edited-copy", filename="study.zip", owner=None)

    [error] = raised.value.errors
    assert (error.record, error.line, error.field) == (TABLE, 2, "worker") and reason in error.reason
    assert not Study.objects.filter(name="edited-copy").exists()
