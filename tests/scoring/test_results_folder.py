"""``score_study --out DIR`` into a folder reused run after run (README: ``score_study 3 --out
results/``): the folder holds only the last run's files, each table naming its run, and files of
other names stay."""
from __future__ import annotations

import csv
import io
import json
import os
import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from scoring.models import ScoreRun
from scoring.services import results_folder, score_run_export, study_score
from studies.models import GeneralizationQuestion, GenUPrediction
from studies.services.questions import generalization_questions_set_validation
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def _study_with_gen_u():
    study = open_utility_study(name="reused-folder", n_items=2, n_sources=1, quota=2)
    for w in range(2):
        work(study, f"PID-reused-folder-{w}")
    study_close(user=OPERATOR, study=study)
    source = study.sources.get()
    for item in study.items.all():
        question = GeneralizationQuestion.objects.create(item=item, qtype="rephrase", text=f"Really, {item.question}",
                                                         answer=item.gold_answer)
        generalization_questions_set_validation(questions=[question], status="valid")
        for answerer, correct in (("I", False), ("IR", True)):
            GenUPrediction.objects.create(generalization_question=question, rationale_source=source,
                                          answerer=answerer, answerer_model=f"t5-base-{answerer}", correct=correct,
                                          predicted_answer=question.answer if correct else "no")
    return study


def _score(study, out) -> str:
    text = io.StringIO()
    call_command("score_study", str(study.pk), "--out", str(out), "--no-similarity", stdout=text)
    return text.getvalue()


def test_a_reused_folder_holds_only_the_last_runs_files(tmp_path):
    study = _study_with_gen_u()
    mine = tmp_path / "my-notes.txt"
    mine.write_text("the user's own file")
    _score(study, tmp_path)
    assert (tmp_path / "gen_u_shares.csv").exists()

    GenUPrediction.objects.filter(rationale_source__in=study.sources.all()).delete()
    printed = _score(study, tmp_path)

    run = ScoreRun.objects.filter(study=study).latest("pk")
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert not results.get("gen_u_shares")
    written = {line.split()[1] for line in printed.splitlines() if line.startswith("Wrote ")}
    files = {p.name for p in tmp_path.iterdir()}
    assert "gen_u_shares.csv" not in files  # run 1's table, no longer beside run 2's results.json
    assert files == {"results.json", "units.csv", "utility_shares.csv", "associations.csv", "agreement.csv",
                     "my-notes.txt", results_folder.LOCK_FILE} | ({"generalization.csv"} if results.get("generalization") else set())
    assert written == {str(len(files) - 2)}
    assert mine.read_text() == "the user's own file"
    for name in ("utility_shares.csv", "associations.csv", "agreement.csv"):
        with (tmp_path / name).open(encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        assert rows and {row["score_run"] for row in rows} == {str(run.pk)}, name


def test_a_run_that_fails_to_write_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    """A stop while the set is written (here: the fourth table) leaves the previous run's files,
    not a new results.json beside old tables."""
    study = _study_with_gen_u()
    _score(study, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    run = ScoreRun.objects.filter(study=study).latest("pk")
    run.results = {**run.results, "n_units_scored": 999}
    run.save(update_fields=["results"])
    write_csv = results_folder._write_csv
    calls = []

    def failing(path, rows, columns=None):
        calls.append(path.name)
        if len(calls) == 4:
            raise OSError(28, "No space left on device")
        write_csv(path, rows, columns)

    monkeypatch.setattr(results_folder, "_write_csv", failing)
    with pytest.raises(OSError, match="No space left"):
        score_run_export(run=run, out_dir=tmp_path)

    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# --- an --out that cannot take the files -------------------------------------------------------------


@pytest.mark.parametrize("where", ["a-file", "a-file/below"])
def test_an_out_that_is_a_file_is_refused_naming_it_before_a_run_is_stored(tmp_path, where):
    study = _study_with_gen_u()
    (tmp_path / "a-file").write_text("the user's file")
    runs = ScoreRun.objects.count()

    with pytest.raises(CommandError, match=f"Cannot write the results to {tmp_path / where}: .*nothing scored"):
        _score(study, tmp_path / where)

    assert ScoreRun.objects.count() == runs
    assert (tmp_path / "a-file").read_text() == "the user's file"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to a folder without write permission")
def test_an_out_without_write_permission_is_refused_naming_it(tmp_path):
    study = _study_with_gen_u()
    locked = tmp_path / "read-only"
    locked.mkdir()
    locked.chmod(0o555)
    runs = ScoreRun.objects.count()
    try:
        with pytest.raises(CommandError, match=f"Cannot write the results to {locked}: Permission denied"):
            _score(study, locked)
    finally:
        locked.chmod(0o755)
    assert ScoreRun.objects.count() == runs


def test_a_default_folder_that_cannot_be_written_is_a_command_error_naming_it(tmp_path, settings):
    """The default folder is named by the run, so it is checked when written: the run is stored and
    the error says where the files could not go (an OSError was a traceback)."""
    study = _study_with_gen_u()
    settings.VAR_DIR = tmp_path
    (tmp_path / "scoring").write_text("not a folder")

    with pytest.raises(CommandError) as refused:
        _score_default(study)

    run = ScoreRun.objects.filter(study=study).latest("pk")
    assert str(refused.value).startswith(
        f"Score run {run.pk} of study {study.pk} is stored, but its files could not be written to "
        f"{tmp_path / 'scoring' / f'study-{study.pk}' / f'run-{run.pk}'}: ")


def _score_default(study) -> str:
    text = io.StringIO()
    call_command("score_study", str(study.pk), "--no-similarity", stdout=text)
    return text.getvalue()


# --- two exports into one folder at once ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_exports_into_one_folder_at_once_leave_one_runs_set(tmp_path, monkeypatch):
    """An export paused mid-swap (its utility_shares.csv moved in, its results.json not yet) while
    another exports into the same folder: the other waits for the folder's lock, so results.json
    and every table are of one run (without it: results.json of run 1 beside run 2's tables)."""
    study = _study_with_gen_u()
    first = ScoreRun.objects.get(pk=call_score(study))
    second = ScoreRun.objects.get(pk=call_score(study))
    second.results = {**second.results, "n_units_scored": 999}
    second.save(update_fields=["results"])
    first_mid_swap, go_on = threading.Event(), threading.Event()
    replace = os.replace

    def pausing(src, dst, *args, **kwargs):
        replace(src, dst, *args, **kwargs)
        if threading.current_thread().name == "first" and os.path.basename(dst) == "utility_shares.csv":
            first_mid_swap.set()
            go_on.wait(timeout=30)

    monkeypatch.setattr(os, "replace", pausing)
    failures = []

    def export(run):
        try:
            score_run_export(run=run, out_dir=tmp_path)
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=export, args=(run,), name=name)
               for run, name in ((first, "first"), (second, "second"))]
    threads[0].start()
    assert first_mid_swap.wait(timeout=30)
    threads[1].start()
    threads[1].join(timeout=2)  # it would have finished its swap by now; it waits for the lock
    go_on.set()
    for thread in threads:
        thread.join(timeout=30)

    assert not failures and not any(thread.is_alive() for thread in threads)
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    run = second if results["n_units_scored"] == 999 else first
    for name in ("utility_shares.csv", "associations.csv", "agreement.csv", "gen_u_shares.csv"):
        with (tmp_path / name).open(encoding="utf-8") as fh:
            assert {row["score_run"] for row in csv.DictReader(fh)} == {str(run.pk)}, name


def call_score(study) -> int:
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE
    return run.pk
