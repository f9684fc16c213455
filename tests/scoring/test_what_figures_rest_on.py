"""What a published figure rests on is named with it: the items task accuracy leaves out (a
source's unparsed outputs have no unit), the bins of U(utility | similarity quintile) with the
other bin counts, and Gen-U's tie rule in units.csv and the unit scores' admin list."""
from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pytest
from django.urls import reverse

from annotations.models import Unit
from annotations.services.units import study_units_build
from scoring import metrics
from scoring.metrics import pipeline
from scoring.models import ScoreRun
from scoring.reports.sections import similarity_section, theils_u_section
from scoring.services import study_score
from scoring.services.results_folder import gen_u_note, score_run_export
from studies.lm import genu as genu_rule
from studies.models import Rationale
from tests.factories import (
    GeneralizationQuestionFactory,
)
from tests.scoring.test_services_score import collect, predict

pytestmark = pytest.mark.django_db


def test_task_accuracy_names_the_items_a_source_has_no_rationale_for(utility_study):
    study, items, good, bad = utility_study
    # bad-lm's output did not parse on items 2 and 3: no rationale, so the design makes no unit.
    Rationale.objects.filter(source=bad, item__in=items[2:]).delete()
    study.items.set(items)
    study.sources.set([good, bad])
    study_units_build(study=study)
    assert Unit.objects.filter(study=study, source=bad).count() == 2
    for unit in Unit.objects.filter(study=study).order_by("id"):
        collect(study, unit, [("no", "yes")] * 5)

    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    r = run.results
    assert r["task_accuracy"] == {"bad-lm": 0.0, "good-lm": 1.0, "all": pytest.approx(4 / 6)}  # as before
    assert r["n_items_without_rationale"] == {"bad-lm": 2, "good-lm": 0}
    keys = list(r)
    assert keys[keys.index("task_accuracy") + 1] == "n_items_without_rationale"  # next to the figures
    assert [w for w in run.warnings if "have no rationale of it" in w] == [
        "Source bad-lm: 2 of the study's 4 items have no rationale of it (its output did not parse, or none was "
        "made), so no unit; its task accuracy and U(utility | task accuracy) are over the items it has a "
        "rationale for and leave these out rather than count them wrong."]
    notes = " ".join(theils_u_section(r, None, both_directions=False).notes)
    assert "left out, not counted wrong, which can raise its task accuracy. Items left out: bad-lm 2." in notes


def test_no_warning_when_every_source_has_every_item(utility_study):
    study, items, good, bad = utility_study
    study.items.set(items[:2])
    study.sources.set([good, bad])
    study_units_build(study=study)
    for unit in Unit.objects.filter(study=study).order_by("id"):
        collect(study, unit, [("no", "yes")] * 5)

    run = study_score(study=study, similarity=False)

    assert run.results["n_items_without_rationale"] == {"bad-lm": 0, "good-lm": 0}
    assert not [w for w in run.warnings if "have no rationale of it" in w]
    assert "every source has a rationale" in " ".join(theils_u_section(run.results, None, both_directions=False).notes)


def _similarity_frame(similarity) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    n = len(similarity)
    return pd.DataFrame({"source": ["a", "b"] * (n // 2), "utility": rng.choice([-1, 0, 1], size=n),
                         "similarity": similarity})


def test_similarity_bins_are_recorded_and_3_and_10_bins_are_given_as_other_readings():
    frame = _similarity_frame(np.linspace(0.0, 1.0, 40))
    out, _ = pipeline.associations(frame)
    binning = out["similarity_binning"]
    assert binning["rule"] == pipeline.SIMILARITY_BINNING_RULE
    assert (binning["bins_asked"], binning["bins_used"]) == (5, 5)
    assert binning["edges"] == pytest.approx(list(np.quantile(frame["similarity"], np.linspace(0, 1, 6))))
    for q in (3, 10):
        other = binning["other_readings"][f"{q}_bins"]
        bins = pd.qcut(frame["similarity"], q=q, labels=False)
        assert (other["bins_asked"], other["bins_used"], len(other["edges"])) == (q, q, q + 1)
        assert other["theils_u"]["all"] == pytest.approx(metrics.theils_u(frame["utility"].to_numpy(), bins.to_numpy()))
    quintiles = pd.qcut(frame["similarity"], q=5, labels=False)
    assert out["theils_u_utility_given_similarity_quintile"] == {  # the published figure is unchanged
        "all": pytest.approx(metrics.theils_u(frame["utility"].to_numpy(), quintiles.to_numpy()))}


def test_tied_similarities_use_fewer_bins_and_the_report_says_how_many():
    frame = _similarity_frame([0.1] * 24 + list(np.linspace(0.2, 0.9, 16)))
    out, _ = pipeline.associations(frame)
    binning = out["similarity_binning"]
    assert binning["bins_asked"] == 5 and binning["bins_used"] < 5
    assert binning["other_readings"]["10_bins"]["bins_used"] < 10
    results = {"similarity": {"name": "tiny", "num_layers": 2, "paper_used": "roberta-large", "paper": None},
               "correlation_ratio_utility_similarity": {"all": 0.1}, **out}
    notes = " ".join(similarity_section(pipeline.clean_json(results), None).notes)
    assert f"{binning['bins_used']} of 5 bins used (edges 0.1000, " in notes
    assert 'SPEC says only "binned similarity"; the other readings, U(utility | similarity bin): ' in notes
    assert "with 3 bins (" in notes and "with 10 bins (" in notes


def _gen_u_run(utility_study):
    study, items, good, _ = utility_study
    unit = Unit.objects.create(study=study, item=items[0], source=good, quota=5, question_key=f"q{items[0].pk}")
    collect(study, unit, [("no", "yes")] * 5)
    for k, (i_ok, ir_ok) in enumerate([(False, True), (True, True)]):  # s = [1, 0]: a tie
        gq = GeneralizationQuestionFactory(item=items[0], text=f"g{k}?")
        predict(gq, good, "I", i_ok)
        predict(gq, good, "IR", ir_ok)
    run = study_score(study=study, similarity=False)
    assert run.status == ScoreRun.Status.DONE, run.error
    return run


def test_units_csv_says_what_gen_u_rests_on_with_its_tie_rule(utility_study, tmp_path):
    run = _gen_u_run(utility_study)
    score_run_export(run=run, out_dir=tmp_path)
    with (tmp_path / "units.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [row["gen_u"] for row in rows] == ["0"]
    assert rows[0]["gen_u_note"] == gen_u_note(run.results)
    assert f"ties to the {genu_rule.TIE_RULE} score" in rows[0]["gen_u_note"]


def test_the_unit_scores_admin_list_names_gen_us_tie_rule(utility_study, admin_client):
    _gen_u_run(utility_study)
    response = admin_client.get(reverse("admin:scoring_unitscore_changelist"))
    assert response.status_code == 200
    text = response.content.decode()
    assert f"Gen-U (a tie to the {genu_rule.TIE_RULE} score)" in text
    assert "goes to the lowest score (-1 before 0 before +1)" in text  # TIE_RULE_TEXT, the column's help
