"""Study bundles: a study built and worked through the services goes out as a bundle, comes back
as a new closed study, and scores to the same results.json numbers; a bundle changed after it was
made, or whose schema is not this installation's, is refused by file and field."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import zipfile
from pathlib import Path

import pytest

from annotations.models import Annotation, Assignment, Participant
from annotations.services.flags import flag_accept
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.platforms.review import assignment_approve, assignment_reject
from annotations.services.withdrawal import participant_withdraw
from lab.pseudonyms import worker_pseudonym
from scoring.models import UnitScore
from scoring.services import study_score
from scoring.services.bundle import BundleError, bundle_import, bundle_stream
from scoring.services.bundle.importing import imported_worker_id
from studies.models import Platform, RationaleSource, Study
from tests.annotations.factories import AttentionCheckFactory, add_qualification, make_study
from tests.cockpit.conftest import staff_client
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db

# Worker n answers "before" with the gold on units whose item number plus n is even, "after" with
# the gold unless n is 4: majorities differ across units, and some answers disagree.


def _answerer(n: int):
    def answer(claim, step):
        gold = claim.unit.item.gold_answer
        other = "no" if gold == "yes" else "yes"
        if step == "before":
            return gold if (claim.unit.item_id + n) % 2 == 0 else other
        return other if n == 4 else gold
    return answer


def _worked_study() -> Study:
    study = make_study(n_items=4, n_sources=2, quota=5, units_per_task=8, name="bundle-origin")
    AttentionCheckFactory(study=study)
    add_qualification(study)
    tasks = [work(study, f"PID{n:04d}", answer=_answerer(n), platform=Platform.LINK, shown_for=3.5,
                  payload=(lambda c, s: {"flag": True, "flag_note": "odd"} if s == "after" and c.position == 0 else None)
                  if n == 0 else None)
             for n in range(6)]
    assignment_approve(user=OPERATOR, study=study, assignment=tasks[0])
    assignment_reject(user=OPERATOR, study=study, assignment=tasks[5], feedback="Failed the checks, sorry.")
    work(study, "PID-late", answer=_answerer(1), platform=Platform.LINK, steps=3, submit=False)  # still at work
    flag_accept(annotation=Annotation.objects.filter(claim__assignment=tasks[0], payload__flag=True).first(), user=OPERATOR)
    study_close(user=OPERATOR, study=study)
    return study


def _bundle(study: Study) -> bytes:
    return b"".join(bundle_stream(study=study, user=None))


def _numbers(results: dict) -> dict:
    """results.json less what names the study (its id and name) and the run (``run``: its id, when it
    finished, the code it ran), and the line by which a copy says it read its borrowed utility from
    the bundle (the tests of borrowed utility check it)."""
    out = json.loads(json.dumps(results))
    out.pop("run", None)
    out["study"].pop("id")
    out["study"].pop("name")
    (out.get("generalization") or {}).get("original_utility_from", {}).pop("read_from", None)
    return out


def test_a_bundle_reimported_scores_to_the_same_results_to_the_last_digit():
    study = _worked_study()
    original = study_score(study=study, similarity=False)
    assert original.status == "done", original.error
    data = _bundle(study)

    copy = bundle_import(file=io.BytesIO(data), name="bundle-copy", filename="study.zip", owner=None)

    assert copy.status == Study.Status.CLOSED and copy.pk != study.pk
    rescored = study_score(study=copy, similarity=False)
    assert rescored.status == "done", rescored.error
    assert _numbers(rescored.results) == _numbers(original.results)
    assert original.results["n_units_scored"] == 8 and original.results["agreement"]
    # the unit scores and every answer came across; the work that did not count still does not
    assert UnitScore.objects.filter(study=copy).count() == UnitScore.objects.filter(study=study).count()
    assert Annotation.objects.filter(claim__study=copy).count() == Annotation.objects.filter(claim__study=study).count()
    statuses = sorted(Assignment.objects.filter(study=copy).values_list("status", flat=True))
    assert statuses == sorted(Assignment.objects.filter(study=study).values_list("status", flat=True))
    assert Annotation.objects.filter(claim__study=copy, payload__flag=True, flag_review__decision="accepted").count() == 1
    # and every answer kept its timings, every task its times
    timing = ("claim__assignment__participant__external_id", "claim__position", "step", "answer", "shown_at",
              "answered_at", "duration_ms")
    worked = {(imported_worker_id(copy.pk, worker_pseudonym(Platform.LINK, w)), *rest)
              for w, *rest in Annotation.objects.filter(claim__study=study).values_list(*timing)}
    assert set(Annotation.objects.filter(claim__study=copy).values_list(*timing)) == worked
    task_times = ("created_at", "consented_at", "submitted_at", "reviewed_at", "expires_at")
    assert sorted(Assignment.objects.filter(study=copy).values_list(*task_times)) == sorted(
        Assignment.objects.filter(study=study).values_list(*task_times))


def test_a_bundle_holds_pseudonyms_never_platform_ids_and_describes_itself():
    study = _worked_study()
    study_score(study=study, similarity=False)
    archive = zipfile.ZipFile(io.BytesIO(_bundle(study)))
    text = b"".join(archive.read(n) for n in archive.namelist()).decode("utf-8")

    assert "PID0001" not in text and "PID-late" not in text
    assert worker_pseudonym(Platform.LINK, "PID0001") in text
    package = json.loads(archive.read("datapackage.json"))
    sums = dict(reversed(line.split("  ")) for line in archive.read("SHA256SUMS").decode().splitlines())
    for resource in package["resources"]:
        content = archive.read(resource["path"])
        assert resource["hash"] == "sha256:" + hashlib.sha256(content).hexdigest() == "sha256:" + sums[resource["path"]]
        if resource.get("schema"):
            header = next(csv.reader(io.StringIO(content.decode())))
            assert header == [f["name"] for f in resource["schema"]["fields"]]
    design = json.loads(archive.read("study.json"))
    assert design["study"]["annotators_per_unit"] == 5 and design["study"]["units_per_task"] == 8
    assert len(design["attention_checks"]) == 1 and len(design["qualification_test"]["questions"]) == 3
    rules = json.loads(archive.read("settings.json"))["rules"]
    assert rules["bootstrap"]["seed"] == 0
    # How an LM output that did not parse counts is named, with where the other reading is.
    assert rules["unparsed_outputs"].startswith("a question whose F^I or F^IR answer did not parse is left out")
    # The run has task accuracy's other reading, and no Gen-U: settings.json points to the one it has.
    assert "results.json gives it under the other reading: task_accuracy_readings)" in rules["unparsed_outputs"]
    assert "gen_u.unparsed_rules" not in rules["unparsed_outputs"]


def test_settings_json_names_the_rules_the_latest_run_recorded_not_todays_defaults():
    """A run scored by an earlier version recorded other readings as its published figures' (how an
    unparsed answer counts, a question given twice, task accuracy) and another counting rule. Before,
    settings.json named today's defaults beside that run's numbers, and contradicted its own
    latest_run.counted_answers; ``majority`` already came from the run."""
    from scoring.models import ScoreRun

    study = _worked_study()
    run = study_score(study=study, similarity=False)
    today = json.loads(zipfile.ZipFile(io.BytesIO(_bundle(study))).read("settings.json"))["rules"]
    results = dict(run.results)
    results["gen_u"] = {**(results.get("gen_u") or {}),
                        "unparsed_rules": {"default": "counted_wrong", "rules": {"counted_wrong": "UNPARSED-AS-WRONG",
                                                                                 "left_out": "UNPARSED-LEFT-OUT"}},
                        "conflicting_answers": {"default": "left_out", "rules": {"left_out": "CONFLICTING-LEFT-OUT",
                                                                                 "first_kept": "FIRST-KEPT"}}}
    results["task_accuracy_readings"] = {"default": "items_counted_wrong",
                                         "rules": {"items_counted_wrong": "NO-RATIONALE-WRONG",
                                                   "items_left_out": "NO-RATIONALE-LEFT-OUT"}}
    results["counted_answers"] = {**(results.get("counted_answers") or {}), "rule": "ONLY-APPROVED-TASKS"}
    ScoreRun.objects.filter(pk=run.pk).update(results=results)  # as that version stored it

    rules = json.loads(zipfile.ZipFile(io.BytesIO(_bundle(study))).read("settings.json"))["rules"]

    assert rules["unparsed_outputs"].startswith("UNPARSED-AS-WRONG; task accuracy: NO-RATIONALE-WRONG (")
    assert rules["conflicting_answers"].startswith("CONFLICTING-LEFT-OUT (")
    assert rules["what_counts"].startswith("ONLY-APPROVED-TASKS (the latest run's")
    # Where the run computed no such figure, today's rule is named as such.
    assert "no such figure" in today["conflicting_answers"] and "this installation's default" in today["conflicting_answers"]
    assert "results.json gives" not in today["conflicting_answers"]  # the run has no such figures
    assert "results.json gives both under the other reading: task_accuracy_readings, gen_u.unparsed_rules" in \
        rules["unparsed_outputs"]
    assert today["what_counts"].startswith(run.results["counted_answers"]["rule"])


def test_a_bundle_whose_checks_offer_a_label_longer_than_the_rule_imports_them_as_recorded():
    """A check saved before labels were held to 50 characters (its workers answered the short
    ones): the copy keeps it as the original recorded it, where the rule would refuse the bundle."""
    from annotations.models import AttentionCheck

    study = _worked_study()
    long = "a distractor written before labels had a limit, so long"
    assert len(long) > 50
    AttentionCheck.objects.filter(study=study).update(choices=["yes", "no", long])  # as stored then
    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="bundle-copy", owner=None)
    assert AttentionCheck.objects.get(study=copy).choices == ["yes", "no", long]


def test_imported_workers_are_keyed_by_their_pseudonym():
    study = _worked_study()
    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="bundle-copy", owner=None)
    pseudonym = worker_pseudonym(Platform.LINK, "PID0002")
    assert Participant.objects.filter(assignments__study=copy, platform=Platform.LINK,
                                      external_id=imported_worker_id(copy.pk, pseudonym)).exists()
    assert not Participant.objects.filter(assignments__study__name="bundle-copy", external_id="PID0002").exists()


def _worker_cells(data: bytes, old: bytes, new: bytes) -> bytes:
    """The bundle with the worker cell ``old`` written as ``new`` in every table that names workers,
    re-signed (SHA256SUMS and datapackage.json's hashes), as someone editing a download would."""
    for path in ("data/tasks.csv", "data/claims.csv", "data/qualification_grants.csv"):
        data = _rewrite(data, path, lambda c: re.sub(rb"(?m)(^|,)" + re.escape(old) + rb"(?=,|\r?$)",
                                                     lambda m: m.group(1) + new, c))
    return _resign(data)


def test_a_worker_cell_holding_a_platform_id_is_refused_and_names_nobody():
    """A bundle whose worker cell is a platform id (here the origin's own link worker PID0002, a
    Prolific PID in the wild) is refused by file, row and field, without repeating the id, and the
    participant that id belongs to gets no task: a bundle cannot attach made-up work to a real worker."""
    study = _worked_study()
    victim = Participant.objects.get(platform=Platform.LINK, external_id="PID0002")
    tasks_before = Assignment.objects.filter(participant=victim).count()
    data = _worker_cells(_bundle(study), worker_pseudonym(Platform.LINK, "PID0002").encode(), b"PID0002")
    studies = Study.objects.count()

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="bundle-copy", owner=None)

    error = refused.value.errors[0]
    assert (error.record, error.field) == ("data/tasks.csv", "worker") and error.line
    assert "w_ followed by 16 lowercase hex digits" in error.reason
    # every row naming it is refused so (the claims and the qualification attempt too), never repeating it
    assert {(e.record, e.field) for e in refused.value.errors} >= {
        ("data/claims.csv", "worker"), ("data/qualification_grants.csv", "worker")}
    assert not any("PID0002" in e.reason for e in refused.value.errors)
    assert Study.objects.count() == studies
    assert Assignment.objects.filter(participant=victim).count() == tasks_before


def test_a_pseudonym_cell_never_resolves_to_a_participant_of_the_questionnaire_or_of_another_import():
    """A pseudonym names a participant of the new study only: not the questionnaire's participant it
    is the pseudonym of, not one whose platform id happens to read as that pseudonym, and not the
    same pseudonym's participant of an earlier import (another researcher's blocks and work stay
    theirs)."""
    study = _worked_study()
    pseudonym = worker_pseudonym(Platform.LINK, "PID0002")
    real = Participant.objects.get(platform=Platform.LINK, external_id="PID0002")
    other = make_study(n_items=2, n_sources=1, quota=1, units_per_task=2, name="other-study")
    lookalike = work(other, pseudonym, platform=Platform.LINK).participant  # a raw id shaped as the pseudonym
    data = _bundle(study)

    first = bundle_import(file=io.BytesIO(data), name="bundle-copy", owner=None)
    second = bundle_import(file=io.BytesIO(data), name="bundle-copy-2", owner=None)

    for copy in (first, second):
        assert not Assignment.objects.filter(study=copy, participant__in=[real, lookalike]).exists()
    mine = Participant.objects.get(assignments__study=first, external_id=imported_worker_id(first.pk, pseudonym))
    assert mine.pk not in (real.pk, lookalike.pk)
    assert not (set(Assignment.objects.filter(study=first).values_list("participant_id", flat=True))
                & set(Assignment.objects.filter(study=second).values_list("participant_id", flat=True)))


def _rewrite(data: bytes, path: str, change) -> bytes:
    """The bundle with one file changed by ``change`` (bytes -> bytes), other files as they were."""
    src, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            content = src.read(name)
            dst.writestr(name, change(content) if name == path else content)
    return out.getvalue()


def _resign(data: bytes) -> bytes:
    """Recompute SHA256SUMS (and datapackage.json's hashes) after a change, as a careful editor would."""
    src = zipfile.ZipFile(io.BytesIO(data))
    files = {n: src.read(n) for n in src.namelist()}
    package = json.loads(files["datapackage.json"])
    for r in package["resources"]:
        r["hash"] = "sha256:" + hashlib.sha256(files[r["path"]]).hexdigest()
    files["datapackage.json"] = json.dumps(package).encode()
    files["SHA256SUMS"] = "".join(f"{hashlib.sha256(c).hexdigest()}  {n}\n" for n, c in sorted(files.items())
                                  if n != "SHA256SUMS").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for n, c in files.items():
            dst.writestr(n, c)
    return out.getvalue()


def _without_column(data: bytes, path: str, column: str) -> bytes:
    """The bundle as one made before its table ``path`` carried ``column``: no column in the CSV
    file, no field in datapackage.json, signed again."""
    def table(content: bytes) -> bytes:
        rows = list(csv.DictReader(io.StringIO(content.decode())))
        out = io.StringIO()
        writer = csv.DictWriter(out, [k for k in rows[0] if k != column], lineterminator="\r\n",
                                extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue().encode()

    def package(content: bytes) -> bytes:
        loaded = json.loads(content)
        resource = next(r for r in loaded["resources"] if r["path"] == path)
        resource["schema"]["fields"] = [f for f in resource["schema"]["fields"] if f["name"] != column]
        return json.dumps(loaded).encode()

    return _resign(_rewrite(_rewrite(data, path, table), "datapackage.json", package))


def _edited_rows(data: bytes, path: str, *edits: tuple[int, dict]) -> bytes:
    """The bundle with rows of the CSV file ``path`` given new cells (``(row index, cells)``), signed
    again, as someone editing a download would."""
    def edit(content: bytes) -> bytes:
        rows = list(csv.DictReader(io.StringIO(content.decode())))
        for index, cells in edits:
            rows[index].update(cells)
        out = io.StringIO()
        writer = csv.DictWriter(out, list(rows[0]), lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue().encode()
    return _resign(_rewrite(data, path, edit))


def test_a_bundle_with_a_changed_file_is_refused_naming_the_file_and_nothing_is_written():
    study = _worked_study()
    data = _rewrite(_bundle(study), "data/annotations.csv", lambda c: c.replace(b",yes,", b",no,", 1))
    studies = Study.objects.count()

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="bundle-copy", owner=None)

    error = refused.value.errors[0]
    assert error.record == "data/annotations.csv" and error.field == "sha256" and "checksum mismatch" in error.reason
    assert Study.objects.count() == studies


def test_a_bundle_whose_schema_differs_is_refused_naming_the_file_and_the_field():
    study = _worked_study()

    def retype(content: bytes) -> bytes:
        package = json.loads(content)
        table = next(r for r in package["resources"] if r["path"] == "data/claims.csv")
        next(f for f in table["schema"]["fields"] if f["name"] == "position")["type"] = "string"
        return json.dumps(package).encode()

    data = _resign(_rewrite(_bundle(study), "datapackage.json", retype))
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="bundle-copy", owner=None)
    error = refused.value.errors[0]
    assert (error.record, error.field) == ("data/claims.csv", "position") and "schema mismatch" in error.reason
    assert "data/claims.csv" in str(refused.value.errors[0]) or refused.value.errors[0].record


def test_a_bad_row_is_refused_with_its_file_row_field_and_reason_and_nothing_is_written():
    study = _worked_study()
    data = _resign(_rewrite(_bundle(study), "data/tasks.csv",
                            lambda c: c.replace(b",submitted,", b",finished,", 1)))
    studies, people = Study.objects.count(), Participant.objects.count()

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="bundle-copy", owner=None)

    error = refused.value.errors[0]
    assert (error.record, error.field) == ("data/tasks.csv", "status") and error.line >= 2
    assert "'finished' is not a task status" in error.reason
    assert Study.objects.count() == studies and Participant.objects.count() == people


def test_a_generalization_study_round_trips_to_the_same_results():
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=3, n_sources=1, n_genq=2, quota=3, units_per_task=6,
                       name="bundle-generalization")
    for n in range(4):
        work(study, f"GEN{n}", answer=_answerer(n), platform=Platform.LINK)
    original = study_score(study=study, similarity=False)
    assert original.status == "done", original.error

    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="bundle-generalization-copy", owner=None)

    rescored = study_score(study=copy, similarity=False)
    assert rescored.status == "done", rescored.error
    assert _numbers(rescored.results) == _numbers(original.results)
    assert original.results["generalization"]["by_type"]


def test_a_study_of_imported_outcomes_round_trips_to_the_same_results(imported_study, utility_file):
    from scoring.services.outcomes import outcomes_import

    outcomes_import(study=imported_study, file=utility_file, user=None)
    original = study_score(study=imported_study, similarity=False)
    assert original.status == "done", original.error

    copy = bundle_import(file=io.BytesIO(_bundle(imported_study)), name="released-copy", owner=None)

    assert copy.is_imported_outcome
    rescored = study_score(study=copy, similarity=False)
    assert _numbers(rescored.results) == _numbers(original.results)
    assert original.results["imported_utility_check"]["compared"] > 100


def test_a_design_without_a_field_the_import_reads_is_refused_naming_it():
    study = _worked_study()

    def drop_quota(content: bytes) -> bytes:
        design = json.loads(content)
        del design["study"]["annotators_per_unit"]
        return json.dumps(design).encode()

    data = _resign(_rewrite(_bundle(study), "study.json", drop_quota))
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="bundle-copy", owner=None)
    error = refused.value.errors[0]
    assert (error.record, error.field, error.reason) == ("study.json", "study.annotators_per_unit", "missing")


def test_the_task_minutes_a_study_fixed_when_it_opened_travel_with_it():
    study = _worked_study()
    opened = Study.objects.get(pk=study.pk)
    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="bundle-copy", owner=None)
    assert (copy.assignment_minutes, copy.first_answer_minutes) == (
        opened.assignment_minutes, opened.first_answer_minutes)
    assert opened.assignment_minutes is not None


@pytest.mark.parametrize("value", ["40", -5, 0, 1e9, True])
def test_a_task_minutes_value_that_is_not_minutes_is_refused_naming_it(value):
    study = _worked_study()

    def bad_minutes(content: bytes) -> bytes:
        design = json.loads(content)
        design["study"]["assignment_minutes"] = value
        return json.dumps(design).encode()

    data = _resign(_rewrite(_bundle(study), "study.json", bad_minutes))
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="bundle-copy", owner=None)
    assert [(e.record, e.field) for e in refused.value.errors] == [("study.json", "study.assignment_minutes")]
    assert not Study.objects.filter(name="bundle-copy").exists()


def test_the_command_writes_a_bundle_and_imports_it(tmp_path):
    from django.core.management import call_command

    study = _worked_study()
    path = tmp_path / "bundle.zip"
    call_command("study_bundle", "export", str(study.pk), str(path), stdout=io.StringIO())
    out = io.StringIO()
    call_command("study_bundle", "import", str(path), "--name", "from the command", stdout=out)
    copy = Study.objects.get(name="from the command")
    assert f"id={copy.pk}" in out.getvalue()
    assert Annotation.objects.filter(claim__study=copy).count() == Annotation.objects.filter(claim__study=study).count()


def test_text_a_spreadsheet_would_run_travels_exactly():
    study = make_study(n_items=2, n_sources=1, question_text="-{i} is below zero?",
                       rationale_text="=HYPERLINK({item}, {source})", name="bundle-formulas")
    archive = zipfile.ZipFile(io.BytesIO(_bundle(study)))
    items = list(csv.DictReader(io.StringIO(archive.read("data/items.csv").decode())))
    rationales = list(csv.DictReader(io.StringIO(archive.read("data/rationales.csv").decode())))
    assert {r["question"] for r in items} == {"-0 is below zero?", "-1 is below zero?"}
    assert all(r["text"].startswith("=HYPERLINK(") for r in rationales)

    bundle_import(file=io.BytesIO(_bundle(study)), name="bundle-formulas-copy", owner=None)  # the same items: no difference


def test_a_study_that_stopped_early_round_trips_with_its_setting_and_decided_units():
    """Issue 24: early stopping travels with the bundle (the setting and when each unit was
    decided), so the copy's results.json says the same about it as the original's."""
    study = make_study(n_items=2, n_sources=1, quota=5, units_per_task=2, name="stops-early-origin",
                       stop_when_decided=True)
    for n in range(3):  # three identical right answers of five decide both yes/no units
        work(study, f"PID-E{n}", platform=Platform.LINK)
    decided = dict(study.units.values_list("question_key", "decided_at"))
    assert all(decided.values())
    study_close(user=OPERATOR, study=study)
    original = study_score(study=study, similarity=False)
    assert original.status == "done", original.error

    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="stops-early-copy", filename="study.zip", owner=None)

    assert copy.stop_when_decided is True
    assert dict(copy.units.values_list("question_key", "decided_at")) == decided
    rescored = study_score(study=copy, similarity=False)
    assert rescored.status == "done", rescored.error
    assert original.results["early_stopping"]["answers_saved"] == 4
    assert _numbers(rescored.results) == _numbers(original.results)


def test_settings_json_says_what_the_scored_run_used_not_what_the_environment_says_at_export(settings):
    """The bundle's settings.json records what the latest run did (similarity off although the
    setting says on; its bootstrap with its number of resamples), and labels the environment's
    similarity settings as read when the bundle was made."""
    study = _worked_study()
    settings.RL_SCORING_SIMILARITY = True
    run = study_score(study=study, similarity=False)  # told --no-similarity, the setting says on
    run.results["bootstrap"]["n_resamples"] = 999  # as an older run with another number of resamples recorded
    run.save(update_fields=["results"])
    settings.RL_SIMILARITY_MODEL = "/models/roberta-large"  # changed after the run

    written = json.loads(zipfile.ZipFile(io.BytesIO(_bundle(study))).read("settings.json"))

    assert written["rules"]["bootstrap"] == {**run.results["bootstrap"], "read_from": "the latest run's results.json"}
    assert written["rules"]["bootstrap"]["n_resamples"] == 999
    latest = written["latest_run"]
    assert (latest["score_run"], latest["similarity_computed"], latest["similarity_model"]) == (run.pk, False, None)
    assert latest["counted_answers"] == run.results["counted_answers"]
    assert "settings" not in written  # the environment's values are not presented as the run's
    environment = written["settings_read_at_export"]
    assert environment["values"]["RL_SCORING_SIMILARITY"] is True
    assert environment["values"]["RL_SIMILARITY_MODEL"] == "/models/roberta-large"
    assert "when the bundle was made" in environment["note"]


def test_settings_json_names_the_rules_the_run_recorded_not_todays(monkeypatch):
    """settings.json ``rules`` states the majority rule, the Gen-U tie rule and the bootstrap of the
    latest run as its results.json records them (``export_units.majority_rule_text``,
    ``genu.gen_u_tie_rule_text``, ``intervals.run_bootstrap``): a run that recorded other rules, or
    none, is never described by today's defaults."""
    study = _worked_study()
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    run.results["majority_readings"]["default"] = "strict_majority"  # as a run scored under another default
    run.results.setdefault("gen_u", {})["tie_rules"] = {"default": "highest"}
    run.save(update_fields=["results"])

    rules = json.loads(zipfile.ZipFile(io.BytesIO(_bundle(study))).read("settings.json"))["rules"]
    assert rules["majority"].startswith("strict_majority (")
    assert rules["gen_u_tie_rule"] == "ties to the highest score"

    for key in ("majority_readings", "bootstrap", "gen_u"):  # a run from before these were recorded
        run.results.pop(key, None)
    run.save(update_fields=["results"])
    monkeypatch.setattr("scoring.metrics.bootstrap.DEFAULT_RESAMPLES", 500)
    rules = json.loads(zipfile.ZipFile(io.BytesIO(_bundle(study))).read("settings.json"))["rules"]
    assert rules["majority"].startswith("not recorded")
    assert (rules["bootstrap"]["n_resamples"], rules["bootstrap"]["seed"]) == (2000, 0)
    assert "not recorded by the latest run" in rules["bootstrap"]["read_from"]


def test_settings_json_without_a_run_gives_the_defaults_it_would_use_and_says_so():
    study = _worked_study()
    written = json.loads(zipfile.ZipFile(io.BytesIO(_bundle(study))).read("settings.json"))
    bootstrap = written["rules"]["bootstrap"]
    assert (bootstrap["n_resamples"], bootstrap["seed"]) == (2000, 0) and "no finished score run" in bootstrap["read_from"]
    assert (written["latest_run"]["score_run"], written["latest_run"]["similarity_computed"]) == (None, None)


def _withdrawn_after_scoring():
    """The audit probe: a study of 2 units worked by 3 workers and scored, then one of them
    withdrawn; (owner, their client, the study, the run)."""
    alice, client = staff_client("alice")
    study = open_utility_study(name="orig2", owner=alice, quota=3, n_sources=1)
    for worker in ("PID", "P2", "P3"):
        work(study, worker)
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    participant_withdraw(user=alice, study=study, worker_id="PID")
    return alice, client, study, run


def test_a_bundle_exported_after_a_withdrawal_says_its_scores_are_stale_and_why():
    alice, client, study, run = _withdrawn_after_scoring()

    archive = zipfile.ZipFile(io.BytesIO(b"".join(bundle_stream(study=study, user=alice))))

    scores = list(csv.DictReader(io.StringIO(archive.read("data/unit_scores.csv").decode())))
    assert {row["n_annotators"] for row in scores} == {"3"}  # the run's scores, of answers no longer here
    stale = json.loads(archive.read("settings.json"))["scores_stale"]
    assert stale["stale"] is True and stale["score_run"] == run.pk
    assert (stale["stale_units"], stale["scored_units"]) == (2, 2)
    assert sorted((u["item_id"], u["source"]) for u in stale["units"]) == sorted(
        (int(row["item_id"]), row["source"]) for row in scores)
    assert stale["withdrawn_since_run"] == {"participants": 1, "answers": 4, "counted_answers": 4}
    assert "Score the study again" in stale["note"]
    assert "score the study again" in json.loads(archive.read("datapackage.json"))["description"]
    # the units the bundle calls stale are the ones the API's stale flag marks (one rule)
    response = client.get(f"/api/v1/scores/?study={study.pk}")
    assert response.status_code == 200, response.content[:500]
    api = response.json()
    api_rows = api["results"] if isinstance(api, dict) else api
    assert {(r["item"], r["source_name"]) for r in api_rows if r["stale"]} == {
        (u["item_id"], u["source"]) for u in stale["units"]}


def test_a_stale_bundle_still_imports_and_its_rescore_gives_the_answers_it_holds():
    alice, _, study, run = _withdrawn_after_scoring()
    data = b"".join(bundle_stream(study=study, user=alice))

    copy = bundle_import(file=io.BytesIO(data), name="stale-copy", filename="study.zip", owner=None)

    rescored = study_score(study=copy, similarity=False)
    assert rescored.status == "done", rescored.error
    assert set(UnitScore.objects.filter(study=copy).values_list("n_annotators", flat=True)) == {2}
    assert _numbers(rescored.results) != _numbers(run.results)  # as the bundle said it would not reproduce


def test_a_bundle_without_a_change_since_its_run_has_no_stale_units():
    alice, _ = staff_client("alice")
    study = open_utility_study(name="fresh", owner=alice, quota=3, n_sources=1)
    for worker in ("PID", "P2", "P3"):
        work(study, worker)
    run = study_score(study=study, similarity=False)

    archive = zipfile.ZipFile(io.BytesIO(b"".join(bundle_stream(study=study, user=alice))))

    stale = json.loads(archive.read("settings.json"))["scores_stale"]
    assert (stale["stale"], stale["stale_units"], stale["units"], stale["score_run"]) == (False, 0, [], run.pk)
    assert stale["withdrawn_since_run"] == {"participants": 0, "answers": 0, "counted_answers": 0}
    assert "note" not in stale
    assert "stale" not in json.loads(archive.read("datapackage.json"))["description"]


def test_an_older_bundle_naming_a_checkpoint_by_its_absolute_path_imports_beside_its_stored_source(settings):
    """Bundles written before model folders were stored relative to RL_MODEL_DIR name a registered
    checkpoint by its absolute path; the source here holds ``models:<name>``: the same folder, so the
    copy uses the source (it was refused: "exists here with another model_name_or_path")."""
    study = _worked_study()
    source = study.sources.order_by("pk").first()
    RationaleSource.objects.filter(pk=source.pk).update(model_name_or_path="models:bundle-t5")

    def absolute(content: bytes) -> bytes:
        design = json.loads(content)
        for spec in design["sources"]:
            if spec["name"] == source.name:
                spec["model_name_or_path"] = str(Path(settings.RL_MODEL_DIR) / "bundle-t5")
        return json.dumps(design).encode()

    data = _resign(_rewrite(_bundle(study), "study.json", absolute))
    copy = bundle_import(file=io.BytesIO(data), name="bundle-copy", owner=None)
    assert source.pk in set(copy.sources.values_list("pk", flat=True))


def test_a_generalization_study_with_a_question_marked_invalid_while_open_round_trips():
    """Marking a question invalid while the study is open lowers its units' quota to their claims
    (``stopping.units_follow_question_validation``); the copy refused such a unit ("an undecided
    unit's quota is the study's workers per unit")."""
    from studies.models import GeneralizationQuestion
    from studies.services.questions import generalization_questions_set_validation

    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=3, n_sources=1, n_genq=2, quota=3, units_per_task=6,
                       name="bundle-invalid-question")
    work(study, "GEN0", answer=_answerer(0), platform=Platform.LINK)
    question = GeneralizationQuestion.objects.filter(unit__study=study).order_by("pk").first()
    generalization_questions_set_validation(questions=[question], status=GeneralizationQuestion.Validation.INVALID)
    work(study, "GEN1", answer=_answerer(1), platform=Platform.LINK)
    original = study_score(study=study, similarity=False)
    assert original.status == "done", original.error

    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="bundle-invalid-question-copy", owner=None)

    assert sorted(copy.units.values_list("quota", flat=True)) == sorted(study.units.values_list("quota", flat=True))
    rescored = study_score(study=copy, similarity=False)
    assert _numbers(rescored.results) == _numbers(original.results)


def _renamed_dataset(name: str):
    """study.json with the dataset under a name not used here, so every item, rationale, question and
    Gen-U prediction of the bundle is made new (a bundle from another installation)."""
    def rename(content: bytes) -> bytes:
        design = json.loads(content)
        design["dataset"]["name"] = name
        return json.dumps(design).encode()
    return rename


def test_an_older_bundles_gen_u_predictions_keep_their_answerers_model_path_in_its_stored_form(settings):
    """An older bundle names a fine-tuned answerer under RL_MODEL_DIR by its absolute path, in
    study.json's answerer_sources and in each Gen-U prediction's answerer_model. The source is kept as
    ``models:ft-answerer``; the predictions, which record no answerer source and are matched to it by
    that path, are kept in the same form: the copy's bundle still names its answerer (it named none)."""
    from studies.models import GeneralizationQuestion, GenUPrediction

    study = make_study(n_items=2, n_sources=1, quota=1, units_per_task=2, status=Study.Status.CLOSED,
                       name="bundle-genu-path")
    source = study.sources.get()
    RationaleSource.objects.create(name="ft-answerer", kind=RationaleSource.Kind.LM, backend="seq2seq",
                                   model_name_or_path="models:ft-answerer", training={"preset": "FT", "overrides": []})
    for question in GeneralizationQuestion.objects.filter(item__in=study.items.all()):
        GenUPrediction.objects.create(generalization_question=question, rationale_source=source, answerer="I",
                                      answerer_model="models:ft-answerer", predicted_answer="yes", correct=True)
    absolute = str(Path(settings.RL_MODEL_DIR) / "ft-answerer")

    def older(content: bytes) -> bytes:
        design = json.loads(_renamed_dataset("bundle-genu-path-elsewhere")(content))
        [answerer] = design["answerer_sources"]
        answerer["model_name_or_path"] = absolute
        return json.dumps(design).encode()

    data = _rewrite(_bundle(study), "study.json", older)
    data = _resign(_rewrite(data, "data/genu_predictions.csv",
                            lambda c: c.replace(b"models:ft-answerer", absolute.encode())))
    assert absolute.encode() in zipfile.ZipFile(io.BytesIO(data)).read("data/genu_predictions.csv")

    copy = bundle_import(file=io.BytesIO(data), name="bundle-genu-path-copy", owner=None)

    predictions = GenUPrediction.objects.filter(generalization_question__item__in=copy.items.all())
    assert predictions.count() == 4
    assert set(predictions.values_list("answerer_model", flat=True)) == {"models:ft-answerer"}
    design = json.loads(zipfile.ZipFile(io.BytesIO(_bundle(copy))).read("study.json"))
    assert [s["name"] for s in design["answerer_sources"]] == ["ft-answerer"]


@pytest.mark.parametrize(("setting", "value", "field", "reason"), [
    ("template", "explain {qestion}", "sources.template", "{qestion} is not a placeholder"),
    ("decoding", {"do_sample": "false"}, "sources.decoding", "decoding.do_sample must be true or false"),
])
def test_a_new_language_model_source_whose_template_or_decoding_would_fail_every_job_is_refused(
        setting, value, field, reason):
    """A source the import makes is held to the rule a source saved here is (``content_row_save``):
    a template with an unknown placeholder, or decoding settings a job cannot read, is refused by
    study.json's field, naming the source, and nothing is imported."""
    study = _worked_study()
    source = study.sources.order_by("pk").first()
    name = source.name
    data = _bundle(study)
    RationaleSource.objects.filter(pk=source.pk).update(name=f"{name}-here")  # the bundle's source is made new

    def lm_source(content: bytes) -> bytes:
        design = json.loads(content)
        spec = next(s for s in design["sources"] if s["name"] == name)
        spec.update(kind="lm", backend="seq2seq", template="explain {question}", decoding={})
        spec[setting] = value
        return json.dumps(design).encode()

    data = _resign(_rewrite(data, "study.json", lm_source))
    studies, sources = Study.objects.count(), RationaleSource.objects.count()

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="bundle-copy", owner=None)

    [error] = refused.value.errors
    assert (error.record, error.field) == ("study.json", field)
    assert error.reason.startswith(f"source {name!r}: ") and reason in error.reason
    assert Study.objects.count() == studies and RationaleSource.objects.count() == sources


def test_a_new_rationale_is_graded_by_the_rule_not_by_the_flag_the_bundle_wrote():
    """``prediction_correct`` of a rationale the import makes is the grading rule's
    (``grading.prediction_correct``: its predicted answer against its item's gold answer), whatever
    the bundle's rationales.csv says."""
    from studies.models import Rationale
    from studies.services.grading import prediction_correct

    study = _worked_study()
    data = _resign(_rewrite(_bundle(study), "study.json", _renamed_dataset("bundle-origin-elsewhere")))
    rows = list(csv.DictReader(io.StringIO(zipfile.ZipFile(io.BytesIO(data)).read("data/rationales.csv").decode())))
    # every flag written the wrong way round
    data = _edited_rows(data, "data/rationales.csv", *(
        (i, {"prediction_correct": "false" if row["prediction_correct"] == "true" else "true"})
        for i, row in enumerate(rows)))

    copy = bundle_import(file=io.BytesIO(data), name="bundle-copy", owner=None)

    made = Rationale.objects.filter(item__in=copy.items.all()).select_related("item")
    assert made.count() == len(rows) == 8
    assert all(r.prediction_correct == prediction_correct(r.predicted_answer, r.item.gold_answer) for r in made)
    assert {r.prediction_correct for r in made} == {True, False}


def test_a_new_rationale_whose_predicted_answer_is_no_choice_label_is_refused():
    """The admin refuses a predicted answer that is not one of the dataset's labels ("Yes" for
    "yes": stored and graded wrong); a bundle's row is held to the same rule, naming its row."""
    study = _worked_study()
    data = _resign(_rewrite(_bundle(study), "study.json", _renamed_dataset("bundle-origin-labels")))
    data = _edited_rows(data, "data/rationales.csv", (0, {"predicted_answer": "Yes"}))

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="bundle-copy", owner=None)
    error = refused.value.errors[0]
    assert (error.record, error.field) == ("data/rationales.csv", "predicted_answer")
    assert "write 'yes'" in error.reason


def test_a_new_gen_u_prediction_is_graded_by_the_rule_not_by_the_flag_the_bundle_wrote():
    """As a new rationale is: a Gen-U prediction's ``correct`` is the rule's (its predicted answer
    against its question's answer), whatever genu_predictions.csv says."""
    from studies.models import GeneralizationQuestion, GenUPrediction
    from studies.services.grading import prediction_correct

    study = make_study(n_items=2, n_sources=1, quota=1, units_per_task=2, status=Study.Status.CLOSED,
                       name="bundle-genu-graded")
    source = study.sources.get()
    for question in GeneralizationQuestion.objects.filter(item__in=study.items.all()):
        right = bool(prediction_correct("yes", question.answer))
        GenUPrediction.objects.create(generalization_question=question, rationale_source=source, answerer="I",
                                      answerer_model="t5-small", predicted_answer="yes", correct=not right)
    data = _resign(_rewrite(_bundle(study), "study.json", _renamed_dataset("bundle-genu-graded-elsewhere")))

    copy = bundle_import(file=io.BytesIO(data), name="bundle-genu-graded-copy", owner=None)

    made = GenUPrediction.objects.filter(generalization_question__item__in=copy.items.all()).select_related(
        "generalization_question")
    assert made.count() == 4
    assert all(p.correct == bool(prediction_correct(p.predicted_answer, p.generalization_question.answer))
               for p in made)


def test_a_generalization_study_whose_question_was_judged_valid_again_after_it_closed_round_trips():
    """Its units kept the quota the invalid question left them (the close froze them): the copy
    refused them as it read the question's status now ("an undecided unit's quota is that")."""
    from studies.models import GeneralizationQuestion
    from studies.services.questions import generalization_questions_set_validation

    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=3, n_sources=1, n_genq=2, quota=3, units_per_task=6,
                       name="bundle-valid-again")
    question = GeneralizationQuestion.objects.filter(unit__study=study).order_by("pk").first()
    generalization_questions_set_validation(questions=[question], status=GeneralizationQuestion.Validation.INVALID)
    work(study, "GEN0", answer=_answerer(0), platform=Platform.LINK)
    study_close(user=OPERATOR, study=study)
    generalization_questions_set_validation(questions=[question], status=GeneralizationQuestion.Validation.VALID)

    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="bundle-valid-again-copy", owner=None)

    assert sorted(copy.units.values_list("quota", flat=True)) == sorted(study.units.values_list("quota", flat=True))


def test_a_generalization_units_quota_lowered_by_hand_is_still_refused():
    """Only a unit whose question is or was marked invalid (its validation record says so) may come
    with its quota lowered to its claims; any other unit of a generalization study is held to the
    study's workers per unit, as other kinds' are (a hand-edited 0 made a unit full with no answers)."""
    study = make_study(kind=Study.Kind.GENERALIZATION, n_items=3, n_sources=1, n_genq=2, quota=3, units_per_task=6,
                       name="bundle-quota-by-hand")
    work(study, "GEN0", answer=_answerer(0), platform=Platform.LINK)
    study_close(user=OPERATOR, study=study)
    data = _bundle(study)
    rows = list(csv.DictReader(io.StringIO(zipfile.ZipFile(io.BytesIO(data)).read("data/units.csv").decode())))
    empty = next(i for i, row in enumerate(rows) if row["n_claimed"] in ("0", ""))
    data = _edited_rows(data, "data/units.csv", (empty, {"quota": "0"}))

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="bundle-quota-by-hand-copy", owner=None)
    assert any(e.record == "data/units.csv" and e.field == "quota" for e in refused.value.errors)
