"""``score_study --out DIR`` into a folder reused run after run (README: ``score_study 3 --out
results/``): the folder holds only the last run's files, each table naming its run, and files of
other names stay."""
from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import call_command

from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from scoring.models import ScoreRun
from scoring.services import results_folder, score_run_export
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
                     "my-notes.txt"} | ({"generalization.csv"} if results.get("generalization") else set())
    assert written == {str(len(files) - 1)}
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
