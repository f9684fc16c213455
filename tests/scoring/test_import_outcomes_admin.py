"""A study run elsewhere, imported and scored from the admin alone (issue 12, "done when": the
README's first hour without the shell): the same finished study ``manage.py import_outcomes
--score`` makes, refused files listing every bad line, and another researcher's study of the same
name left alone."""
from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from scoring.models import ScoreRun, UnitScore
from scoring.services import outcomes_study_create
from studies.models import Study
from tests.factories import staff

pytestmark = pytest.mark.django_db

URL = "/admin/scoring/scorerun/import-outcomes/"
NAME = "Joshi et al. 2023 (released)"


def upload(path, name="rationale_utility.json") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, path.read_bytes(), content_type="application/json")


def test_a_released_study_is_imported_and_scored_from_the_admin(admin_client, admin_user, strategyqa_test_items,
                                                                utility_file, settings,
                                                                django_capture_on_commit_callbacks):
    settings.RL_SCORING_SIMILARITY = False
    changelist = admin_client.get(reverse("admin:scoring_scorerun_changelist")).content.decode()
    assert URL in changelist  # reached from the score runs page
    page = admin_client.get(URL).content.decode()
    assert 'name="file"' in page and 'name="dataset"' in page and 'name="study"' in page

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(URL, {"file": upload(utility_file), "dataset": strategyqa_test_items.pk,
                                           "split": "test", "study": NAME, "score": "on"})
    study = Study.objects.get(name=NAME)
    run = ScoreRun.objects.get(study=study)
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:scoring_scorerun_state", args=[run.pk])
    assert study.is_imported_outcome and study.status == Study.Status.CLOSED and study.owner == admin_user
    assert UnitScore.objects.filter(study=study, imported=True).count() == 1374
    run.refresh_from_db()
    assert run.status == ScoreRun.Status.DONE, run.error
    assert run.results["n_units_scored"] == 1374
    # The same numbers the command reports: every released utility label reproduced.
    assert run.results["imported_utility_check"] == {"compared": 1374, "mismatches": 0}

    # The same file again changes nothing and, unticked, scores nothing.
    again = admin_client.post(URL, {"file": upload(utility_file), "dataset": strategyqa_test_items.pk,
                                    "split": "test", "study": NAME})
    assert again["Location"] == reverse("admin:studies_study_change", args=[study.pk])
    assert ScoreRun.objects.filter(study=study).count() == 1
    shown = admin_client.get(again["Location"]).content.decode()
    assert "0 outcome(s) created, 0 updated, 1374 unchanged" in shown


def test_a_file_with_bad_lines_imports_nothing_and_lists_them(admin_client, strategyqa_test_items, utility_file,
                                                              tmp_path):
    lines = utility_file.read_text().splitlines()[:3]
    bad = json.loads(lines[1])
    bad["human_predicted_label_after_rationale"] = "maybe"
    lines[1] = json.dumps(bad)
    lines.append('{"question": "No such question in the dataset?", "rationale_source": "t53b"}')
    path = tmp_path / "outcomes.json"
    path.write_text("\n".join(lines) + "\n")

    response = admin_client.post(URL, {"file": upload(path, "outcomes.json"), "dataset": strategyqa_test_items.pk,
                                       "split": "test", "study": NAME, "score": "on"})
    page = response.content.decode()
    assert response.status_code == 400
    assert "Nothing was imported from outcomes.json: 2 problems" in page
    assert "human_predicted_label_after_rationale" in page
    assert not Study.objects.filter(name=NAME).exists() and not UnitScore.objects.exists()
    assert not ScoreRun.objects.exists()


def test_another_researchers_study_of_that_name_is_left_alone(strategyqa_test_items, utility_file, tmp_path):
    olga = get_user_model().objects.create_user(username="olga", password="pw")
    small = tmp_path / "small.json"
    small.write_text("\n".join(utility_file.read_text().splitlines()[:2]) + "\n")
    theirs, _ = outcomes_study_create(name=NAME, dataset=strategyqa_test_items, file=small, owner=olga, user=None)
    _, dana = staff("dana", all_model_perms=False, extra=(  # she may read the dataset (the form offers it)
        "studies.add_study", "studies.change_study", "studies.view_dataset", "scoring.add_scorerun",
        "scoring.view_scorerun"))

    response = dana.post(URL, {"file": upload(utility_file), "dataset": strategyqa_test_items.pk, "split": "test",
                               "study": NAME, "score": "on"})
    assert response.status_code == 200
    assert "A study of this name exists that you may not change" in response.content.decode()
    assert UnitScore.objects.filter(study=theirs).count() == 2 and not ScoreRun.objects.exists()


def test_importing_needs_the_rights_to_add_a_study_and_score(strategyqa_test_items, utility_file):
    _, viewer = staff("vic", all_model_perms=False, extra=("scoring.view_scorerun", "scoring.add_scorerun"))
    assert viewer.get(URL).status_code == 403
    assert URL not in viewer.get(reverse("admin:scoring_scorerun_changelist")).content.decode()
    _, adder = staff("ada", all_model_perms=False, extra=("studies.add_study", "scoring.view_scorerun"))
    assert adder.post(URL, {"file": upload(utility_file), "dataset": strategyqa_test_items.pk, "split": "test",
                            "study": NAME}).status_code == 403
    assert not Study.objects.filter(name=NAME).exists()
