"""A bundle made by hand to hurt the import: a member that unpacks to far more than its upload (a
zip bomb), a datapackage.json of another shape, JSON nested past any use, ids out of range or out
of order, a number that is not finite. Each is refused (``BundleError``, a 400 through the API)
naming the file, row and field, before anything is written; the archive's caps are checked against
its directory before any member is read."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import tracemalloc
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings

from annotations.models import Participant
from scoring.services import study_score
from scoring.services.bundle import BundleError, bundle_import
from studies.models import Item, Study
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.scoring.test_bundle import _bundle, _worked_study
from tests.scoring.test_bundle_answerer_sources import api

pytestmark = pytest.mark.django_db

_ORIGIN: list[bytes] = []


def _origin() -> bytes:
    """A worked, scored study's bundle (made once: its ids are the bundle's own, whichever database
    imports it)."""
    if not _ORIGIN:
        study = _worked_study()
        assert study_score(study=study, similarity=False).status == "done"
        _ORIGIN.append(_bundle(study))
    return _ORIGIN[0]


def _files(data: bytes) -> dict[str, bytes]:
    src = zipfile.ZipFile(io.BytesIO(data))
    return {n: src.read(n) for n in src.namelist()}


def _pack(files: dict[str, bytes]) -> bytes:
    """The files zipped with a SHA256SUMS (and datapackage.json hashes, where it parses) that match
    them: what an attacker writes, so the checksums never stop the bundle."""
    files = dict(files)
    try:
        package = json.loads(files["datapackage.json"])
        for r in package["resources"]:
            r["hash"] = "sha256:" + hashlib.sha256(files[r["path"]]).hexdigest()
        files["datapackage.json"] = json.dumps(package).encode()
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        pass
    files["SHA256SUMS"] = "".join(f"{hashlib.sha256(c).hexdigest()}  {n}\n" for n, c in sorted(files.items())
                                  if n != "SHA256SUMS").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for n, c in files.items():
            dst.writestr(n, c)
    return out.getvalue()


def _edit_csv(files: dict[str, bytes], path: str, change) -> None:
    """``change(header, rows)`` returns the rows to write back under the header."""
    header, *rows = list(csv.reader(io.StringIO(files[path].decode("utf-8"), newline="")))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(header)
    writer.writerows(change(header, rows))
    files[path] = out.getvalue().encode("utf-8")


def _set_cell(field: str, value: str):
    def change(header, rows):
        rows[0][header.index(field)] = value
        return rows
    return change


def _written() -> tuple[int, int, int]:
    return Study.objects.count(), Participant.objects.count(), Item.objects.count()


def _refused(data: bytes) -> list:
    """The import's errors; asserts that nothing was written."""
    before = _written()
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="hostile-copy", owner=None)
    assert _written() == before
    assert not Study.objects.filter(name="hostile-copy").exists()
    return refused.value.errors


def _zip(members: list[tuple[str, bytes, int]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, content, compression in members:
            z.writestr(zipfile.ZipInfo(name), content, compress_type=compression)
    return out.getvalue()


# --- the archive's declared sizes -----------------------------------------------------------------


def test_a_checksums_file_that_unpacks_to_64_mib_is_refused_before_it_is_read():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("SHA256SUMS", b"a" * (64 << 20))
    data = out.getvalue()
    assert len(data) < 200_000

    tracemalloc.start()
    try:
        errors = _refused(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert errors[0].record == "SHA256SUMS" and "over the limit" in errors[0].reason
    assert peak < 16 << 20, f"a {len(data):,} byte upload took {peak:,} bytes"


def test_a_table_that_unpacks_to_more_than_a_hundred_times_its_size_is_refused_naming_it():
    data = _zip([("data/annotations.csv", b"\0" * (2 << 20), zipfile.ZIP_DEFLATED),
                 ("SHA256SUMS", b"", zipfile.ZIP_STORED)])
    [error] = _refused(data)
    assert error.record == "data/annotations.csv" and "times its packed size" in error.reason


@override_settings(RL_MAX_IMPORT_BYTES=100_000)  # a whole-read member: 10,000 bytes; a table 1 MB; all 2 MB
def test_the_caps_follow_the_import_limit_per_whole_read_file_per_table_and_in_all():
    # deflated: the upload stays under the limit (100,000 bytes) while its members declare more
    errors = _refused(_zip([("study.json", b" " * 10_001 + b"{}", zipfile.ZIP_DEFLATED),
                            ("data/units.csv", b"0" * 1_100_000, zipfile.ZIP_DEFLATED),
                            ("SHA256SUMS", b"", zipfile.ZIP_STORED)]))
    assert {(e.record, "over the limit of 10,000" in e.reason) for e in errors} >= {("study.json", True)}
    assert any(e.record == "data/units.csv" and "over the limit of 1,000,000" in e.reason for e in errors)

    errors = _refused(_zip([(f"data/t{n}.csv", b"0" * 900_000, zipfile.ZIP_DEFLATED) for n in range(3)]
                           + [("SHA256SUMS", b"", zipfile.ZIP_STORED)]))
    [error] = errors
    assert "the archive unpacks to 2,700,000 bytes, over the limit of 2,000,000" in error.reason


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_a_member_in_the_archive_twice_is_refused_naming_it():
    files = _files(_origin())
    data = _pack(files)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, src.read(name))
        dst.writestr("study.json", b"{}")
    errors = _refused(out.getvalue())
    assert any(e.record == "study.json" and "twice" in e.reason for e in errors)


def test_a_real_bundle_is_far_under_the_caps():
    from django.conf import settings

    for info in zipfile.ZipFile(io.BytesIO(_origin())).infolist():
        assert info.file_size < settings.RL_MAX_IMPORT_BYTES // 10 // 100, info


# --- datapackage.json of another shape, deep JSON -------------------------------------------------


def _package(change):
    def edit(files):
        package = json.loads(files["datapackage.json"])
        files["datapackage.json"] = json.dumps(change(package)).encode()
    return edit


def _with_first_resource(key, value):
    def change(package):
        package["resources"][0][key] = value
        return package
    return change


STRUCTURE = {
    "not an object": (lambda f: f.__setitem__("datapackage.json", b"[]"), ""),
    "resources not a list": (_package(lambda p: {**p, "resources": {"a": 1}}), "resources"),
    "a resource not an object": (_package(lambda p: {**p, "resources": p["resources"] + ["x"]}), "resources[*]"),
    "a path not a string": (_package(_with_first_resource("path", ["data/items.csv"])), "resources[0].path"),
    "a schema not an object": (_package(_with_first_resource("schema", "x")), "resources[0].schema"),
    "fields not a list": (_package(_with_first_resource("schema", {"fields": "x"})), "resources[0].schema.fields"),
    "a field name not a string": (_package(_with_first_resource("schema", {"fields": [{"name": ["id"]}]})),
                                  "resources[0].schema.fields[0].name"),
}


@pytest.mark.parametrize("case", list(STRUCTURE))
def test_a_datapackage_of_another_shape_is_refused_naming_the_place(case):
    change, where = STRUCTURE[case]
    files = _files(_origin())
    resources = len(json.loads(files["datapackage.json"])["resources"])
    change(files)
    [error] = _refused(_pack(files))
    assert (error.record, error.field) == ("datapackage.json", where.replace("*", str(resources)))
    assert error.reason.startswith("expected ")


def test_json_nested_past_any_use_is_refused_naming_the_file():
    files = _files(_origin())
    files["datapackage.json"] = b"[" * 100_000 + b"]" * 100_000
    [error] = _refused(_pack(files))
    assert error.record == "datapackage.json" and "nested more than" in error.reason


# --- cells and ids --------------------------------------------------------------------------------


def test_an_id_out_of_a_64_bit_integer_is_a_cell_error():
    files = _files(_origin())
    _edit_csv(files, "data/items.csv", _set_cell("id", "99999999999999999999"))
    errors = _refused(_pack(files))
    assert (errors[0].record, errors[0].line, errors[0].field) == ("data/items.csv", 2, "id")
    assert "out of range" in errors[0].reason


@pytest.mark.parametrize("table", ["items", "units", "tasks"])
def test_ids_out_of_order_are_refused_by_row(table):
    files = _files(_origin())
    path = f"data/{table}.csv"
    _edit_csv(files, path, lambda header, rows: list(reversed(rows)))
    errors = _refused(_pack(files))
    assert any((e.record, e.field) == (path, "id") and "increasing order" in e.reason for e in errors), errors


@pytest.mark.parametrize("value", ["nan", "inf", "-Infinity"])
def test_a_number_that_is_not_finite_is_a_cell_error(value):
    files = _files(_origin())
    _edit_csv(files, "data/unit_scores.csv", _set_cell("similarity", value))
    [error] = _refused(_pack(files))
    assert (error.record, error.line, error.field) == ("data/unit_scores.csv", 2, "similarity")
    assert "not a finite number" in error.reason


# --- through the API ------------------------------------------------------------------------------


def _post(user, data: bytes):
    return api(user).post("/api/v1/studies/import-bundle/",
                          {"file": SimpleUploadedFile("bundle.zip", data, content_type="application/zip"),
                           "name": "hostile-copy"}, format="multipart")


def test_the_api_answers_a_hostile_bundle_with_a_400_naming_the_file_and_field():
    dana, _ = researcher_without_reference_views("dana")
    files = _files(_origin())
    files["datapackage.json"] = b"[]"
    before = _written()

    response = _post(dana, _pack(files))

    assert response.status_code == 400, response.content[:300]
    assert response.json()["errors"][0]["record"] == "datapackage.json"
    _edit_csv(files := _files(_origin()), "data/units.csv", lambda header, rows: list(reversed(rows)))
    response = _post(dana, _pack(files))
    assert response.status_code == 400, response.content[:300]
    assert any((e["record"], e["field"]) == ("data/units.csv", "id") for e in response.json()["errors"])
    assert _written() == before


# --- the unit counters: read from the claims, never from data/units.csv ---------------------------


def _short_unit(header: list[str], rows: list[list[str]]) -> int:
    """The index of a units.csv row whose unit is not full (its counted answers below its quota)."""
    return next(i for i, r in enumerate(rows)
                if int(r[header.index("n_completed")]) < int(r[header.index("quota")]))


def test_a_units_file_claiming_more_answers_than_its_claims_hold_is_recounted_from_the_claims():
    """A hand-edited bundle (or one from an older installation) says a unit holds 5 counted
    answers; its claims say fewer. The copy counts its claims, so the API's and the unit admin's
    complete units agree with the progress page."""
    from django.contrib import admin

    from annotations.admin.core import UnitAdmin
    from annotations.models import Unit
    from annotations.selectors.progress import study_progress

    dana, _ = researcher_without_reference_views("dana")
    files = _files(_origin())

    def fill(header, rows):
        i = _short_unit(header, rows)
        rows[i][header.index("n_completed")] = rows[i][header.index("n_claimed")] = "5"
        return rows

    _edit_csv(files, "data/units.csv", fill)

    response = _post(dana, _pack(files))

    assert response.status_code == 201, response.content[:500]
    copy = Study.objects.get(name="hostile-copy")
    progress = study_progress(study=copy)
    unit_admin = UnitAdmin(Unit, admin.site)
    filled = sum(unit_admin.filled(u) for u in Unit.objects.filter(study=copy))
    listed = api(dana).get(f"/api/v1/studies/{copy.pk}/").json()["n_units_complete"]
    assert listed == filled == progress.units_complete
    assert progress.units_complete < copy.units.count()  # the edited unit is not complete


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("quota", "4", "is not the study's workers per unit (5"),
    ("quota", "1", "below the unit's"),
    ("decided_at", "2026-01-01T00:00:00+00:00", "a unit is decided only in a study that stops when decided"),
])
def test_a_units_file_whose_quota_or_decision_the_design_does_not_give_is_refused_naming_the_row(field, value, reason):
    files = _files(_origin())

    def change(header, rows):
        rows[0][header.index(field)] = value
        return rows

    _edit_csv(files, "data/units.csv", change)

    errors = _refused(_pack(files))

    assert [(e.record, e.line, e.field) for e in errors] == [("data/units.csv", 2, field)]
    assert reason in errors[0].reason
