"""A study bundle carries every qualification attempt, the failed ones set aside too.

A failed test under an identity the app cannot authenticate (a typed identifier) is set aside when
the test is taken again from another browser, and kept in ``QualificationGrant.voids``
(``annotations.services.impostor.grant_retake_start``). The audit's probe, through the worker pages:
browser A with the identifier x@lab.org fails 0/3, browser B types the same identifier (A's attempt
is set aside) and passes 3/3. data/qualification_grants.csv gave one row, passed true, score 3: the
retaker read as a first-try pass, and the import made the copy's grant without its voids. Now the
row's ``voids`` cell lists the attempts set aside (answers by question position, tasks by their
data/tasks.csv ids, no worker identifier), the import restores them in the copy, a bundle made
before the column still imports, and a malformed cell is refused by row, naming the field."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import zipfile

import pytest
from django.test import Client

from annotations.models import Assignment, QualificationGrant, QualificationQuestion
from scoring.services.bundle import BundleError, bundle_import, bundle_stream
from studies.models import Study
from tests.annotations.factories import add_qualification, make_study
from tests.annotations.pages import entry_url, start, task_of
from tests.annotations.test_qualification_retakes import enter, fail_test
from tests.scoring.test_bundle import _edited_rows, _resign, _rewrite, _without_column

pytestmark = pytest.mark.django_db

TABLE = "data/qualification_grants.csv"


def _retaken_study() -> tuple[Study, QualificationGrant]:
    """The audit's probe: A fails 0/3 as x@lab.org, B (same identifier) sets it aside and passes 3/3."""
    study = make_study(n_items=8, n_sources=1, units_per_task=2, quota=5)
    add_qualification(study)
    url = entry_url(study)
    a, b = Client(), Client()
    fail_test(a, start(a, url, identifier="x@lab.org"))
    retake = enter(b, url, "x@lab.org")
    assert retake.status_code == 302, retake.content.decode()[:300]
    task = retake["Location"]
    questions = QualificationQuestion.objects.filter(test__study=study).order_by("position")
    assert b.post(task + "qualification", {f"q_{q.pk}": q.correct_answer for q in questions}).status_code == 302
    grant = QualificationGrant.objects.get(participant=task_of(task).participant)
    assert (grant.passed, grant.score, [v["score"] for v in grant.voids]) == (True, 3, [0])
    return study, grant


def _bundle(study: Study) -> bytes:
    return b"".join(bundle_stream(study=study, user=None))


def _rows(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(zipfile.ZipFile(io.BytesIO(data)).read(TABLE).decode())))


def test_the_bundle_gives_the_attempt_set_aside_beside_the_pass_with_no_identifier():
    study, grant = _retaken_study()
    data = _bundle(study)

    (row,) = _rows(data)
    assert (row["passed"], row["score"]) == ("true", "3")
    voids = json.loads(row["voids"])
    assert [(v["score"], sorted(v["answers"])) for v in voids] == [(0, ["0", "1", "2"])]
    void, stored = voids[0], grant.voids[0]
    assert void["answers"] == {str(i): stored["answers"][str(q.pk)] for i, q in enumerate(
        QualificationQuestion.objects.filter(test__study=study).order_by("position", "id"))}
    assert (void["task"], void["retake_task"], void["taken_at"], void["voided_at"]) == (
        stored["task"], stored["retake_task"], stored["taken_at"], stored["voided_at"])
    tasks = list(csv.DictReader(io.StringIO(zipfile.ZipFile(io.BytesIO(data)).read("data/tasks.csv").decode())))
    by_id = {int(t["id"]): t["worker"] for t in tasks}
    assert by_id[void["task"]] == by_id[void["retake_task"]] == row["worker"]  # the row's worker's own tasks
    # no raw identifier anywhere, and the column is declared and covered by the checksums
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert not any(b"x@lab.org" in archive.read(n).lower() for n in archive.namelist())
    resource = next(r for r in json.loads(archive.read("datapackage.json"))["resources"] if r["path"] == TABLE)
    assert {"name": "voids", "type": "array"}.items() <= next(
        f for f in resource["schema"]["fields"] if f["name"] == "voids").items()
    digest = hashlib.sha256(archive.read(TABLE)).hexdigest()
    assert resource["hash"] == f"sha256:{digest}" and f"{digest}  {TABLE}" in archive.read("SHA256SUMS").decode()


def test_a_round_trip_restores_the_attempts_set_aside_in_the_copy():
    study, grant = _retaken_study()

    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="voids-copy", owner=None)

    mine = QualificationGrant.objects.get(study=copy)
    assert (mine.passed, mine.score, mine.assignment_id) == (True, 3, None)
    (void,) = mine.voids
    stored = grant.voids[0]
    positions = {str(q.pk): q.position for q in QualificationQuestion.objects.filter(test__study=study)}
    copied = {str(q.pk): q.position for q in QualificationQuestion.objects.filter(test__study=copy)}
    assert {copied[k]: v for k, v in void["answers"].items()} == {positions[k]: v for k, v in stored["answers"].items()}
    assert (void["score"], void["taken_at"], void["voided_at"]) == (0, stored["taken_at"], stored["voided_at"])
    taken, retake = Assignment.objects.get(pk=void["task"]), Assignment.objects.get(pk=void["retake_task"])
    assert taken.study_id == retake.study_id == copy.pk and taken.participant_id == retake.participant_id == \
        mine.participant_id
    original = Assignment.objects.get(pk=stored["task"])
    assert (taken.status, taken.created_at) == (original.status, original.created_at)
    assert mine.failed_in(taken.pk) and not mine.set_aside
    # and the copy's bundle gives the same cell
    again = json.loads(_rows(_bundle(copy))[0]["voids"])
    assert [(v["score"], v["answers"], v["taken_at"]) for v in again] == [
        (0, json.loads(_rows(_bundle(study))[0]["voids"])[0]["answers"], stored["taken_at"])]


def _without_voids_column(data: bytes) -> bytes:
    return _without_column(data, TABLE, "voids")


def test_a_bundle_made_before_the_column_imports_without_voids():
    study, _grant = _retaken_study()
    data = _without_voids_column(_bundle(study))
    assert "voids" not in _rows(data)[0]

    copy = bundle_import(file=io.BytesIO(data), name="old-copy", owner=None)

    mine = QualificationGrant.objects.get(study=copy)
    assert (mine.passed, mine.score, mine.voids) == (True, 3, [])


def test_a_column_in_the_header_but_not_in_the_datapackage_is_still_refused():
    study, _grant = _retaken_study()

    def package(content: bytes) -> bytes:
        loaded = json.loads(content)
        resource = next(r for r in loaded["resources"] if r["path"] == TABLE)
        resource["schema"]["fields"] = [f for f in resource["schema"]["fields"] if f["name"] != "voids"]
        return json.dumps(loaded).encode()

    data = _resign(_rewrite(_bundle(study), "datapackage.json", package))
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="bad-copy", owner=None)
    assert [(e.record, e.field) for e in refused.value.errors] == [(TABLE, "voids")]
    assert "schema mismatch" in refused.value.errors[0].reason


def _void(**change) -> dict:
    return {"task": None, "score": 0, "answers": {"0": "no"}, "taken_at": "2026-01-01T00:00:00+00:00",
            "voided_at": "2026-01-01T00:10:00+00:00", "retake_task": None, **change}


@pytest.mark.parametrize(("cell", "field", "reason"), [
    ("[{", "voids", "not JSON"),
    ('{"task": 1}', "voids", "expected a JSON array"),
    (json.dumps(["x"]), "voids[0]", "expected a JSON object"),
    (json.dumps([{"score": 0}]), "voids[0]", "missing task, answers, taken_at, voided_at, retake_task"),
    (json.dumps([_void(worker="x@lab.org")]), "voids[0]", "unknown 'worker'"),
    (json.dumps([_void(score=-1)]), "voids[0].score", "is not a score of the qualification test"),
    (json.dumps([_void(score=True)]), "voids[0].score", "is not a score of the qualification test"),
    (json.dumps([_void(answers=["no"])]), "voids[0].answers", "expected a JSON object"),
    (json.dumps([_void(answers={"7": "no"})]), "voids[0].answers", "'7' is not a question position"),
    (json.dumps([_void(taken_at="yesterday")]), "voids[0].taken_at", "is not an ISO 8601 date and time"),
    (json.dumps([_void(voided_at="2026-01-01T00:10:00")]), "voids[0].voided_at", "has no time zone"),
    (json.dumps([_void(voided_at=5)]), "voids[0].voided_at", "expected an ISO 8601 date and time"),
    (json.dumps([_void(), _void(task=99_999_999)]), "voids[1].task", "is not the id of a task of data/tasks.csv"),
    (json.dumps([_void(retake_task="1")]), "voids[0].retake_task", "is not the id of a task of data/tasks.csv"),
])
def test_a_malformed_voids_cell_is_refused_by_row_and_nothing_is_written(cell, field, reason):
    study, _grant = _retaken_study()
    data = _edited_rows(_bundle(study), TABLE, (0, {"voids": cell}))
    studies, grants = Study.objects.count(), QualificationGrant.objects.count()

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="bad-copy", owner=None)

    (error,) = refused.value.errors
    assert (error.record, error.line, error.field) == (TABLE, 2, field) and reason in error.reason, error
    assert (Study.objects.count(), QualificationGrant.objects.count()) == (studies, grants)


def test_a_void_naming_another_workers_task_is_refused():
    study, grant = _retaken_study()
    other = Client()
    start(other, entry_url(study))  # another worker's task, in the bundle
    data = _bundle(study)
    (row,) = _rows(data)
    theirs = next(int(t["id"]) for t in csv.DictReader(io.StringIO(
        zipfile.ZipFile(io.BytesIO(data)).read("data/tasks.csv").decode())) if t["worker"] != row["worker"])
    voids = json.loads(row["voids"])
    voids[0]["task"] = theirs

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(_edited_rows(data, TABLE, (0, {"voids": json.dumps(voids)}))),
                      name="bad-copy", owner=None)
    (error,) = refused.value.errors
    assert (error.record, error.field) == (TABLE, "voids[0].task") and "a task of another worker" in error.reason


def test_a_voids_cell_changed_without_signing_again_is_refused_by_its_checksum():
    study, _grant = _retaken_study()
    data = _bundle(study)
    changed = _rewrite(data, TABLE, lambda c: c.replace(b'""score"":0', b'""score"":3', 1))
    assert _rows(changed)[0]["voids"] != _rows(data)[0]["voids"]

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(changed), name="bad-copy", owner=None)
    error = refused.value.errors[0]
    assert (error.record, error.field) == (TABLE, "sha256") and "checksum mismatch" in error.reason


def test_a_retake_not_graded_yet_gives_the_rows_own_attempt_once():
    """A fails, B (same identifier) fails the retake, C enters: B's attempt is set aside and its
    retake not graded yet. The grant's last void is then the row's own attempt: the row gives it,
    the voids cell gives only the attempts before it (two failed attempts, not three)."""
    study = make_study(n_items=8, n_sources=1, units_per_task=2, quota=5)
    add_qualification(study)
    url = entry_url(study)
    a, b, c = Client(), Client(), Client()
    fail_test(a, start(a, url, identifier="x@lab.org"))
    b_task = enter(b, url, "x@lab.org")["Location"]
    fail_test(b, b_task)
    assert enter(c, url, "x@lab.org").status_code == 302
    grant = QualificationGrant.objects.get(participant=task_of(b_task).participant)
    assert grant.set_aside and len(grant.voids) == 2

    (row,) = _rows(_bundle(study))
    assert (row["passed"], row["score"]) == ("false", "0")
    voids = json.loads(row["voids"])
    assert [v["task"] for v in voids] == [grant.voids[0]["task"]]
