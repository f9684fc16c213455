"""The report page, the plots, "Score now", the management command and the Celery task."""
from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from scoring.models import ScoreRun, UnitScore
from scoring.services import outcomes_import, study_score
from scoring.tasks import score_study_task


@pytest.fixture
def scored_run(imported_study, utility_file):
    outcomes_import(study=imported_study, file=utility_file)
    return study_score(study=imported_study, similarity=False)


def test_score_study_command_writes_results_and_tables_and_prints_shares(scored_run, imported_study, tmp_path):
    out = io.StringIO()
    call_command("score_study", str(imported_study.pk), "--out", str(tmp_path), "--no-similarity", stdout=out)

    text = out.getvalue()
    assert "imported utility check: 0 mismatches of 1374 rows" in text
    assert "gpt3" in text and "t5large" in text
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["utility_shares"]["t53b"]["n"] == 458
    with (tmp_path / "units.csv").open() as fh:
        assert sum(1 for _ in csv.DictReader(fh)) == 1374
    with (tmp_path / "utility_shares.csv").open() as fh:
        rows = {r["source"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"gpt3", "t53b", "t5large", "all"}


@pytest.mark.django_db
def test_score_study_command_unknown_study_is_a_clear_error():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="No study with id 999999"):
        call_command("score_study", "999999")


def test_task_fills_pending_run_and_second_delivery_changes_nothing(imported_study, utility_file):
    outcomes_import(study=imported_study, file=utility_file)
    run = ScoreRun.objects.create(study=imported_study)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("django.conf.settings.RL_SCORING_SIMILARITY", False, raising=False)
        assert score_study_task(imported_study.pk, run.pk) == run.pk
        run.refresh_from_db()
        finished = run.finished_at
        assert run.status == ScoreRun.Status.DONE
        assert score_study_task(imported_study.pk, run.pk) == run.pk

    run.refresh_from_db()
    assert run.finished_at == finished
    assert ScoreRun.objects.filter(study=imported_study).count() == 1
    assert UnitScore.objects.filter(study=imported_study).count() == 1374


def test_report_page_shows_tables_and_plots_render(admin_client, scored_run):
    response = admin_client.get(reverse("admin:scoring_scorerun_report", args=[scored_run.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Utility per source (Table 3)" in html and "t53b" in html
    assert reverse("admin:scoring_scorerun_plot", args=[scored_run.pk, "utility_shares"]) in html

    png = admin_client.get(reverse("admin:scoring_scorerun_plot", args=[scored_run.pk, "utility_shares"]))
    assert png.status_code == 200 and png["Content-Type"] == "image/png"
    assert png.content[:8] == b"\x89PNG\r\n\x1a\n"
    missing = admin_client.get(reverse("admin:scoring_scorerun_plot", args=[scored_run.pk, "generalization"]))
    assert missing.status_code == 404


def test_report_escapes_untrusted_source_names(admin_client, scored_run):
    scored_run.results["utility_shares"]["<script>alert(1)</script>"] = scored_run.results["utility_shares"]["gpt3"]
    scored_run.save()
    html = admin_client.get(reverse("admin:scoring_scorerun_report", args=[scored_run.pk])).content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;" in html


def test_score_now_queues_the_task_and_get_is_refused(admin_client, imported_study, utility_file,
                                                      django_capture_on_commit_callbacks, settings):
    settings.RL_SCORING_SIMILARITY = False
    outcomes_import(study=imported_study, file=utility_file)
    url = reverse("admin:scoring_scorerun_score")
    assert admin_client.get(url).status_code == 405

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(url, {"study": imported_study.pk})

    assert response.status_code == 302
    run = ScoreRun.objects.get(study=imported_study)
    assert run.status == ScoreRun.Status.DONE  # eager Celery in the test settings


def test_report_needs_staff(client, scored_run):
    response = client.get(reverse("admin:scoring_scorerun_report", args=[scored_run.pk]))
    assert response.status_code == 302 and "/login/" in response["Location"]
