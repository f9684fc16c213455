"""What an ``all`` figure pools. SPEC section 3 defines the correlation ratio for a generated
rationale against the gold rationale and quotes its over-all figure over the LMs: a gold-kind
source's rationale is the gold one (compared with itself it measures nothing), so it has no
similarity and η's ``all`` pools the other sources; the quoted over-all η stands beside an ``all``
row only when that row pools no gold-kind source. The utility shares and U(utility | task accuracy)
keep their published ``all`` over every source, gold included, and name what it pools with the
reading without the gold source beside it (``all_sources``). Built through the study's services
(``study_score``, ``score_run_export``) with the packaged similarity model."""
from __future__ import annotations

import copy
import csv

import pytest

from scoring.models import ScoreRun, UnitScore
from scoring.reports.sections import similarity_section, utility_section
from scoring.services import score_run_export, study_score
from scoring.services.results_folder import association_rows
from studies.models import RationaleSource
from tests.factories import RationaleFactory, RationaleSourceFactory
from tests.scoring.test_services_score import collect, make_unit

pytestmark = pytest.mark.django_db

ETA = "correlation_ratio_utility_similarity"


@pytest.fixture
def gold_run(utility_study):
    """good-lm, bad-lm and a gold-kind source (its rationales the items' gold ones) on four StrategyQA
    items, scored with similarity: good-lm useful on two items, bad-lm not useful, gold useful."""
    study, items, good, bad = utility_study
    study.dataset.name = "StrategyQA"
    study.dataset.save()
    gold = RationaleSourceFactory(name="gold", kind=RationaleSource.Kind.GOLD)
    for n, item in enumerate(items):
        RationaleFactory(item=item, source=gold, text=item.gold_rationale)
        collect(study, make_unit(study, item, good), [("no", "yes" if n < 2 else "no")] * 3)
        collect(study, make_unit(study, item, bad), [("no", "no")] * 3)
        collect(study, make_unit(study, item, gold), [("no", "yes")] * 3)
    run = study_score(study=study, similarity=True)
    assert run.status == ScoreRun.Status.DONE, run.error
    assert run.results.get(ETA), run.results["warnings"]
    return run


def test_a_gold_source_has_no_similarity_and_eta_all_pools_the_lms(gold_run):
    results = gold_run.results
    assert "gold" not in results[ETA]  # gold against itself measures nothing
    assert not UnitScore.objects.filter(study_id=gold_run.study_id, source__name="gold",
                                        similarity__isnull=False).exists()
    pooled = results["all_sources"]
    assert pooled["gold_sources"] == ["gold"]
    assert pooled["by_measure"][ETA] == ["bad-lm", "good-lm"]
    assert pooled["by_measure"]["utility_shares"] == ["bad-lm", "gold", "good-lm"]
    assert any("Gold-kind source(s) gold" in warning for warning in results["warnings"])

    rows = {row["source"]: row for row in similarity_section(results, None).tables[0].rows}
    assert rows["all"]["paper_eta"] == 0.041  # it pools what SPEC's does
    eta_all = next(r for r in association_rows(results) if r["measure"] == ETA and r["source"] == "all")
    assert "the all row pools bad-lm, good-lm" in eta_all["note"] and "0.041" in eta_all["note"]


def test_the_quoted_eta_is_not_put_beside_an_all_row_that_pools_a_gold_source(gold_run):
    """A run from before gold sources were left out of similarity stored η for one and pooled it
    in ``all``, and recorded no ``all_sources``: its ``all`` row gets no quoted figure."""
    older = copy.deepcopy(gold_run.results)
    older.pop("all_sources", None)
    older[ETA]["gold"] = 0.0
    rows = {row["source"]: row for row in similarity_section(older, None).tables[0].rows}
    assert rows["all"]["paper_eta"] is None
    eta_all = next(r for r in association_rows(older) if r["measure"] == ETA and r["source"] == "all")
    assert "0.041" not in eta_all["note"] and "gold-kind source(s) gold included" in eta_all["note"]


def test_utility_all_names_the_gold_source_it_pools_and_gives_the_lm_only_reading(gold_run, tmp_path):
    results = gold_run.results
    without = results["all_sources"]["other_readings"]["without_gold_sources"]
    assert without["sources"] == ["bad-lm", "good-lm"]
    # the published all is unchanged, 6 of 12 units useful (gold 4, good-lm 2); without gold: 2 of 8
    assert results["utility_shares"]["all"]["n"] == 12
    assert without["utility_shares"]["all"]["useful"] == 0.25
    assert results["utility_shares"]["all"]["useful"] == 0.5

    score_run_export(run=gold_run, out_dir=tmp_path)
    with (tmp_path / "utility_shares.csv").open(encoding="utf-8") as fh:
        shares = {row["source"]: row for row in csv.DictReader(fh)}
    assert "gold-kind source(s) gold included" in shares["all"]["note"]
    assert "useful 0.250" in shares["all"]["note"]
    assert "pools" not in shares["good-lm"]["note"]
    with (tmp_path / "associations.csv").open(encoding="utf-8") as fh:
        assoc = [row for row in csv.DictReader(fh)]
    u_all = next(r for r in assoc if r["measure"] == "theils_u_utility_given_task_accuracy" and r["source"] == "all")
    assert "gold-kind source(s) gold included; without them (bad-lm, good-lm)" in u_all["note"]
    assert any("gold-kind source(s) gold included" in note for note in utility_section(results).notes)
