"""The per-source summary (``source_summaries``, ``GET /api/v1/studies/<id>/summary/``) names the
units its run scored short of annotators beside the shares they change: ``n_short`` per source, the
other reading in the run's words (``full_units_rule``) and the shares under it (``full_units_only``),
all read from the run's results.json ``short_units``; a run that recorded none gives null, never 0."""
from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from scoring.api.export_units import source_summaries
from scoring.models import ScoreRun
from scoring.services import study_score
from tests.factories import staff
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def _short_study():
    """Three items x two sources, three annotators asked per unit, one unit per task: sixteen tasks
    of the eighteen the design asks for leave some units short of annotators (scored on the
    answers they have) and the others full."""
    study = open_utility_study(name="short-summary", n_items=3, n_sources=2, quota=3, units_per_task=1,
                               predicts=["yes", "no"])
    for w in range(16):
        work(study, f"PID-short-summary-{w}")
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    return study, run


def test_summary_gives_short_units_their_rule_and_the_full_units_shares():
    study, run = _short_study()
    short = run.results["short_units"]
    assert short["n_short_by_source"]["all"] > 0  # the design asks for more answers than the units have
    assert short["utility_shares_full_units_only"]  # and some units are full: the other reading has shares
    user, _ = staff("short-summary-owner")
    study.owner = user
    study.save(update_fields=["owner"])
    api = APIClient()
    api.force_login(user)

    served = api.get(f"/api/v1/studies/{study.pk}/summary/")
    assert served.status_code == 200
    rows = served.json()
    assert rows
    for row in rows:
        name = row["source_name"]
        assert row["n_short"] == short["n_short_by_source"][name]
        assert row["full_units_rule"] == short["full_units_rule"]
        full = (short["utility_shares_full_units_only"] or {}).get(name)
        assert row["full_units_only"] == full
    assert sum(row["n_short"] for row in rows) == short["n_short_by_source"]["all"]
    assert any(row["full_units_only"] for row in rows)  # the other reading is there to read


def test_a_run_that_recorded_no_short_units_says_null_not_zero():
    study, run = _short_study()
    results = dict(run.results)
    del results["short_units"]  # a run from before short units were recorded
    ScoreRun.objects.filter(pk=run.pk).update(results=results)

    for row in source_summaries(study=study, user=None):
        assert row["n_short"] is None
        assert row["full_units_rule"] is None
        assert row["full_units_only"] is None


def test_the_schema_documents_the_short_unit_fields(admin_client):
    schema = admin_client.get(reverse("schema"), {"format": "json"}).json()
    summary = schema["components"]["schemas"]["SourceSummary"]["properties"]
    assert {"n_short", "full_units_rule", "full_units_only"} <= set(summary)
    assert "short of annotators" in summary["n_short"]["description"]
