"""Issue 22 (the cockpit, second round), through the pages: numbers that never contradict each
other, review and pay, and the rough edges a new user hits."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from studies.models import Study
from studies.services.studies import StudyError, study_update
from tests.cockpit.test_study_setup import form_data
from tests.work import open_utility_study

pytestmark = pytest.mark.django_db


def test_workers_per_unit_of_an_open_study_is_refused_by_the_page_and_the_service(admin_client):
    study = open_utility_study(name="quota", n_items=2, n_sources=1, quota=3)
    url = reverse("admin:studies_study_change", args=[study.pk])
    data = {**form_data(admin_client.get(url)), "annotators_per_unit": "2"}
    refused = admin_client.post(url, data)
    assert refused.status_code == 200
    assert ("The study is no longer a draft (open): its workers per unit cannot change "
            "(its units, progress and cost were built with 3).") in refused.content.decode()
    study.refresh_from_db()
    assert study.annotators_per_unit == 3
    with pytest.raises(StudyError, match="its workers per unit cannot change"):
        study_update(study=study, annotators_per_unit=2)
    assert Study.objects.get(pk=study.pk).annotators_per_unit == 3
    # Anything else of the design still changes on an open study, and the same value is no change.
    data.update(annotators_per_unit="3", reward="2.50")
    assert admin_client.post(url, data).status_code == 302
    study.refresh_from_db()
    assert (study.annotators_per_unit, str(study.reward)) == (3, "2.50")


def design_rows(html: str) -> dict[str, str]:
    table = re.search(r'<table class="rl-design">(.*?)</table>', html, re.S).group(1)
    return {th: re.sub(r"<[^>]+>", "", td) for th, td in re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", table)}


def test_a_refused_save_leaves_the_design_summary_showing_what_is_saved(admin_client):
    study = open_utility_study(name="unsaved", n_items=4, n_sources=1, quota=2, units_per_task=4)
    url = reverse("admin:studies_study_change", args=[study.pk])
    page = admin_client.get(url)
    saved = design_rows(page.content.decode())
    assert (saved["Units per task"], saved["Tasks"]) == ("4", "2")
    data = {**form_data(page), "units_per_task": "1", "reward": "9.00",
            "attention_checks-TOTAL_FORMS": "1", "attention_checks-0-question": "Choose no.",
            "attention_checks-0-choices": '["yes", "no"]', "attention_checks-0-correct_answer": "maybe"}
    refused = admin_client.post(url, data)
    assert refused.status_code == 200
    html = refused.content.decode()
    assert "is not one of the choices" in html
    assert design_rows(html) == saved  # not 1 unit per task, 8 tasks at 9.00
    assert re.search(r'name="units_per_task" value="1"', html)  # the form keeps what was typed


def test_the_consent_page_counts_the_questions_as_the_task_does(admin_client):
    from django.test import Client

    from tests.annotations.factories import AttentionCheckFactory, make_study
    from tests.annotations.pages import entry_url, start

    study = make_study(platform="link", n_items=4, n_sources=1, quota=2, units_per_task=4)
    AttentionCheckFactory(study=study, question="Attention: choose No.", correct_answer="no")
    worker = Client()
    landing = worker.get(entry_url(study)).content.decode()
    assert "About 6.0 minutes; 5 questions." in landing
    task = worker.get(start(worker, entry_url(study))).content.decode()
    assert "Question 1 of 5" in task
    preview = admin_client.get(reverse("annotations:preview", args=[study.pk])).content.decode()
    assert "5 questions." in preview
