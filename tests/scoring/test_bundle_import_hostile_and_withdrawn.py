"""Three ways a bundle import went wrong: a JSON cell nested deep enough to crash the parser (a 500),
a zip whose directory lists far more members than a bundle has (read whole into memory before any
cap was checked), and a bundle made before a worker withdrew from its original study here (the
copy brought their answers back and scored them)."""
from __future__ import annotations

import io
import struct
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings

from annotations.models import Annotation, Assignment, Claim, Participant, Withdrawal
from annotations.services.participants import imported_worker_id
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.withdrawal import participant_withdraw
from lab.pseudonyms import worker_pseudonym
from scoring.models import UnitScore
from scoring.services import study_score
from scoring.services.bundle import BundleError, bundle_import, bundle_stream
from studies.models import ImportRecord, Platform, Study
from tests.annotations.test_counting import assert_counters_agree
from tests.cockpit.conftest import staff_client
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.scoring.test_bundle import _bundle, _edited_rows, _worked_study
from tests.scoring.test_bundle_answerer_sources import api
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

DEEP = '{"a":' + "[" * 50_000 + "]" * 50_000 + "}"  # a 100 KB cell


def _refused(data: bytes) -> list:
    studies = Study.objects.count()
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="hostile-copy", owner=None)
    assert Study.objects.count() == studies
    return refused.value.errors


# --- JSON nested past any use, in a cell ----------------------------------------------------------


def test_deep_json_in_an_items_metadata_cell_is_a_row_error_not_a_crash():
    data = _edited_rows(_bundle(_worked_study()), "data/items.csv", (0, {"metadata": DEEP}))

    errors = _refused(data)

    assert (errors[0].record, errors[0].line, errors[0].field, errors[0].reason) == (
        "data/items.csv", 2, "metadata", "JSON nested more than 64 levels deep")
    assert all(e.record != "data/items.csv" for e in errors[1:])  # the rest: rows of the item left out


def test_deep_json_in_an_answer_payload_is_a_row_error_through_the_api():
    dana, _ = researcher_without_reference_views("dana")
    data = _edited_rows(_bundle(_worked_study()), "data/annotations.csv", (0, {"payload": DEEP}))
    studies = Study.objects.count()

    response = api(dana).post("/api/v1/studies/import-bundle/",
                              {"file": SimpleUploadedFile("bundle.zip", data, content_type="application/zip"),
                               "name": "hostile-copy"}, format="multipart")

    assert response.status_code == 400, response.content[:300]
    assert [(e["record"], e["line"], e["field"], e["reason"]) for e in response.json()["errors"]] == [
        ("data/annotations.csv", 2, "payload", "JSON nested more than 64 levels deep")]
    assert Study.objects.count() == studies


# --- how many members the archive lists, and how large it is --------------------------------------


def _members(n: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for i in range(n):
            z.writestr(f"m{i}", b"")
    return out.getvalue()


def _reason(data: bytes) -> str:
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="hostile-copy", owner=None)
    return str(refused.value)


def test_an_archive_listing_more_members_than_the_maximum_is_refused_naming_both():
    data = _members(1_500)
    assert len(data) < 200_000  # the maximum: 1,000 (importing.MAX_MEMBERS)

    assert "the archive lists 1,500 members, over the maximum of 1,000" in _reason(data)


def test_a_directory_whose_record_understates_its_members_is_refused_by_what_it_holds():
    data = bytearray(_members(1_500))
    at = data.rfind(b"PK\x05\x06")
    struct.pack_into("<2H", data, at + 8, 10, 10)  # the record says 10 members; zipfile reads 1,500
    assert len(zipfile.ZipFile(io.BytesIO(bytes(data))).infolist()) == 1_500

    assert "the archive holds 1,500 members, over the maximum of 1,000" in _reason(bytes(data))


def test_a_zip64_record_listing_a_million_members_is_refused_before_the_directory_is_read():
    data = bytearray(_members(3))
    at = data.rfind(b"PK\x05\x06")
    _sig, _disk, _cd_disk, _n, _total, size, offset, _comment = struct.unpack_from("<4s4H2LH", data, at)
    record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 1_280_000, 1_280_000, size, offset)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, size, 0xFFFFFFFF, 0)
    data = bytes(data[:at]) + record + locator + end

    assert "the archive lists 1,280,000 members, over the maximum of 1,000" in _reason(data)



def test_a_record_whose_offset_reads_as_its_signature_is_checked_where_zipfile_reads_it():
    # The record's directory offset (which zipfile does not need: it reads the directory just before
    # the record) set to the signature's own bytes: a search for the last signature lands 16 bytes
    # into the record, too few to hold one, while zipfile takes the file's last 22 bytes as the record
    data = bytearray(_members(1_500))
    at = len(data) - 22
    assert data[at:at + 4] == b"PK\x05\x06"
    struct.pack_into("<L", data, at + 16, 0x06054B50)
    assert data.rfind(b"PK\x05\x06") == at + 16
    assert len(zipfile.ZipFile(io.BytesIO(bytes(data))).infolist()) == 1_500

    # the directory check refuses it, before zipfile reads the directory (not the later count)
    assert "the archive lists 1,500 members, over the maximum of 1,000" in _reason(bytes(data))


def test_a_signature_too_close_to_the_end_to_begin_a_record_is_not_a_zip_archive():
    data = _members(3) + b"PK\x05\x06" + bytes(10)  # the last signature leaves 14 bytes
    with pytest.raises(zipfile.BadZipFile):
        zipfile.ZipFile(io.BytesIO(data))

    assert "not a zip archive" in _reason(data)



def test_a_zip64_record_before_the_searched_tail_is_still_read_where_zipfile_reads_it():
    # The zip64 record and locator as above, then 65,530 bytes after the record (a comment it does not
    # declare): the record lies 6 bytes into the last 64 KiB and 22 bytes, its locator before them
    data = bytearray(_members(3))
    at = data.rfind(b"PK\x05\x06")
    _sig, _disk, _cd_disk, _n, _total, size, offset, _comment = struct.unpack_from("<4s4H2LH", data, at)
    record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 1_280_000, 1_280_000, size, offset)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 3, 3, size, offset, 0)  # 3 here: zipfile reads zip64's
    data = bytes(data[:at]) + record + locator + end + bytes(65_530)
    assert len(data) - (1 << 16) - 22 > len(data) - 65_530 - 22 - 20  # the locator is before the tail
    assert zipfile._EndRecData(io.BytesIO(data))[4] == 1_280_000  # zipfile reads the zip64 record

    assert "the archive lists 1,280,000 members, over the maximum of 1,000" in _reason(data)


@override_settings(RL_MAX_IMPORT_BYTES=10_000)
def test_an_upload_over_the_import_limit_is_refused_before_its_directory_is_read():
    data = _members(300)
    assert len(data) > 10_000

    assert "over the import limit of 10,000 bytes (RL_MAX_IMPORT_BYTES)" in _reason(data)


# --- a bundle made before a worker withdrew from its original here --------------------------------


def test_a_copy_from_a_bundle_made_before_a_withdrawal_leaves_the_withdrawn_worker_out_and_says_so():
    # Given a study worked by PID and PID2, closed, scored, and its bundle downloaded by its owner
    alice, _ = staff_client("alice")
    study = open_utility_study(name="orig-late", owner=alice, quota=3, n_sources=1)
    work(study, "PID")
    work(study, "PID2")
    study_close(user=OPERATOR, study=study)
    assert study_score(study=study, similarity=False).status == "done"
    data = b"".join(bundle_stream(study=study, user=alice))
    # and PID withdrawn from the study afterwards
    participant_withdraw(user=alice, study=study, worker_id="PID")

    # When the earlier bundle is imported as a new copy
    copy = bundle_import(file=io.BytesIO(data), name="late-copy", filename="late.zip", owner=alice)

    # Then the copy holds PID2's answers only, and nothing of PID (no participant, task, claim)
    leaving = imported_worker_id(copy.pk, worker_pseudonym(Platform.PROLIFIC, "PID"))
    staying = imported_worker_id(copy.pk, worker_pseudonym(Platform.PROLIFIC, "PID2"))
    assert not Participant.objects.filter(external_id=leaving).exists()
    assert set(Assignment.objects.filter(study=copy).values_list("participant__external_id", flat=True)) == {staying}
    assert set(Claim.objects.filter(study=copy).values_list("participant__external_id", flat=True)) == {staying}
    assert Annotation.objects.filter(claim__assignment__study=copy).count() == 4
    assert_counters_agree(copy)
    # and the import record says one worker was left out, without naming them
    summary = ImportRecord.objects.get(kind="bundle", summary__study=copy.pk).summary
    assert summary["workers_withdrawn_from_original"] == 1
    assert "PID" not in str(summary) and worker_pseudonym(Platform.PROLIFIC, "PID") not in str(summary)
    # and the scores it imported (which count PID's answers) say so where the API says where they came from
    rows = api(alice).get(f"/api/v1/scores/?study={copy.pk}").json()["results"]
    assert rows and all(r["score_run"] is None and r["stale"] for r in rows)
    assert {r["scores_from"].split("; ", 1)[1] for r in rows} == {
        "the bundle said they match its answers; 1 worker who withdrew from the original study was left out of "
        "this copy: its imported scores still count their answers, so score the study again"}
    # and scoring the copy counts PID2's answers alone
    run = study_score(study=copy, similarity=False)
    assert run.status == "done", run.error
    assert set(UnitScore.objects.filter(study=copy, score_run=run).values_list("n_annotators", flat=True)) == {1}
    # and a later run of the withdrawal has nothing left to reach in the copy
    again = participant_withdraw(user=alice, study=study, worker_id="PID")
    assert (again.copies_withdrawn, again.copies_not_changeable) == (0, 0)
    assert not Withdrawal.objects.filter(study=copy).exists()


def test_a_copy_of_a_study_nobody_withdrew_from_keeps_every_worker():
    alice, _ = staff_client("alice")
    study = open_utility_study(name="orig-kept", owner=alice, quota=3, n_sources=1)
    work(study, "PID")
    work(study, "PID2")
    study_close(user=OPERATOR, study=study)

    copy = bundle_import(file=io.BytesIO(b"".join(bundle_stream(study=study, user=alice))), name="kept-copy",
                         owner=alice)

    assert Annotation.objects.filter(claim__assignment__study=copy).count() == 8
    assert ImportRecord.objects.get(kind="bundle", summary__study=copy.pk).summary[
        "workers_withdrawn_from_original"] == 0
    assert_counters_agree(copy)


def test_an_importer_who_may_not_view_the_original_learns_nothing_of_its_withdrawals():
    # Given Alice's study worked by PID and PID2, its bundle, and PID withdrawn from it afterwards
    alice, _ = staff_client("alice")
    bob, _ = staff_client("bob")
    study = open_utility_study(name="orig-private", owner=alice, quota=3, n_sources=1)
    work(study, "PID")
    work(study, "PID2")
    study_close(user=OPERATOR, study=study)
    data = b"".join(bundle_stream(study=study, user=alice))
    participant_withdraw(user=alice, study=study, worker_id="PID")

    # When Bob, who may not view Alice's study, imports the bundle (or one made up naming her study)
    copy = bundle_import(file=io.BytesIO(data), name="bobs-copy", filename="b.zip", owner=bob)

    # Then nothing of Alice's study was read: the count cannot tell him who withdrew from it
    assert ImportRecord.objects.get(kind="bundle", summary__study=copy.pk).summary[
        "workers_withdrawn_from_original"] == 0
    assert Annotation.objects.filter(claim__assignment__study=copy).count() == 8
