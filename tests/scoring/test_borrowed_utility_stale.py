"""A generalization study borrows a lender's unit utility only while the lender's unit scores match
its answers: a unit score the lender's own export calls stale (``selectors.unit_score_stale``,
against ``selectors.unit_counting_changes``) is not lent. Figure 4's by-utility breakdown, the
consistency of an item with its own outcome, the properties model and the bundle's
data/borrowed_utility.csv leave the pair out ('unknown'), name it in ``original_utility_from`` and
warn to score the lender again; once it is, its new utility is lent."""
from __future__ import annotations

import pytest

from annotations.models import Assignment
from annotations.services.release import assignment_release
from scoring.api.export_units import ScoredWith
from scoring.models import ScoreRun, UnitScore
from scoring.reports.sections import generalization_section
from scoring.services import score, study_score
from scoring.services.bundle import export
from scoring.services.bundle.export import borrowed_utility_part
from tests.factories import StudyFactory
from tests.scoring.test_services_score import collect, make_unit
from tests.scoring.test_utility_lender import _generalization_study

pytestmark = pytest.mark.django_db


def _lender_with_rejected_tasks(utility_study):
    """The audit's probe: the lender's unit 3x(no->yes) + 2x(yes->yes), scored useful (1); then two
    of its no->yes tasks rejected through the releasing service the review uses. The generalization
    study of that item and source (one counterfactual, 3 workers) is built and scored after."""
    study, items, good, _ = utility_study
    unit = make_unit(study, items[0], good)
    collect(study, unit, [("no", "yes")] * 3 + [("yes", "yes")] * 2)
    lender_run = study_score(study=study, similarity=False)
    assert lender_run.status == ScoreRun.Status.DONE, lender_run.error
    assert UnitScore.objects.get(study=study, item=items[0], source=good).utility == 1
    gen_study = _generalization_study(study, items, good, None)
    gen_study.sources.add(good)  # its design's source: the bundle's borrowed table lists its pairs
    wrong_first = (Assignment.objects.filter(study=study, claims__unit=unit, claims__annotations__step="before",
                                             claims__annotations__answer="no").distinct().order_by("pk"))
    for task in list(wrong_first)[:2]:
        assignment_release(assignment=task, status=Assignment.Status.REJECTED)
    return study, items, good, gen_study, lender_run


def test_a_stale_lender_unit_is_not_borrowed_and_is_named(utility_study):
    lender, items, good, gen_study, lender_run = _lender_with_rejected_tasks(utility_study)
    # The lender's own export calls its unit score stale (the one rule) ...
    row = UnitScore.objects.get(study=lender, item=items[0], source=good)
    assert ScoredWith(lender.pk, user=None).stale_reason(row.score_run_id, row.item_id, row.source_id,
                                                         row.n_annotators, row.imported)

    run = study_score(study=gen_study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    gen = run.results["generalization"]
    # ... so Figure 4 does not read the out-of-date 'useful': the pair has no utility now.
    assert set(gen["by_utility"]) == {"unknown"}
    source = gen["original_utility_from"]
    assert source["stale_rule"] == score.STALE_LENT
    assert (source["pairs_stale"], source["pairs_stale_left_out"]) == (1, 1)
    assert source["studies"] == [{"id": lender.pk, "name": lender.name, "pairs": 0, "score_run": lender_run.pk,
                                  "pairs_stale": 1, "stale_pairs": [[items[0].pk, good.pk]]}]
    # The item's own outcome is the stale run's too: no bundle with the item is counted.
    assert "item_with_counterfactuals" not in gen["consistency"]
    assert any(f"{lender.name!r} (id {lender.pk}) (1 pairs)" in w and "Score the lending study again" in w
               for w in run.results["warnings"]), run.results["warnings"]
    assert any("1 generalization units appear under 'unknown'" in w and "stale" in w
               for w in run.results["warnings"])
    assert not any("no scored utility study of that item" in w for w in run.results["warnings"])
    # The report prints it under Figure 4.
    notes = " ".join(generalization_section(run.results).notes)
    assert f"{lender.name!r} (0 pairs, 1 stale and not lent)" in notes and "score the lending study again" in notes
    # The bundle export follows the same rule: no row for the stale pair, and it says why.
    rows, section = borrowed_utility_part(gen_study, run.results, user=None)
    assert rows == []  # the lender's row of this pair is stale (the same call lists it once re-scored, below)
    assert section["stale_note"] == export.BORROWED_STALE
    assert section["from"]["pairs_stale"] == 1 and section["same_as_latest_run"] is True

    # The lender scored again gives the utility its answers now give (right, right: unsure), lent.
    rescored = study_score(study=lender, similarity=False)
    assert UnitScore.objects.get(study=lender, item=items[0], source=good).utility == 0
    again = study_score(study=gen_study, similarity=False).results
    assert set(again["generalization"]["by_utility"]) == {"unsure"}
    source = again["generalization"]["original_utility_from"]
    assert (source["pairs_stale"], source["pairs_stale_left_out"]) == (0, 0)
    assert source["studies"] == [{"id": lender.pk, "name": lender.name, "pairs": 1, "score_run": rescored.pk}]
    assert not any("stale" in w for w in again["warnings"])
    rows, section = borrowed_utility_part(gen_study, again, user=None)
    assert [r[:3] for r in rows] == [(items[0].pk, good.name, 0)] and "stale_note" not in section


def test_a_stale_lender_does_not_choose_the_lender_with_its_old_count(utility_study):
    """The lender rule (most counted annotations) counts only lenders whose scores are current: the
    stale lender's old 5 answers no longer outrank another study's 4."""
    lender, items, good, gen_study, _ = _lender_with_rejected_tasks(utility_study)
    other = StudyFactory(annotators_per_unit=4, dataset=lender.dataset, name="other-lender")
    collect(other, make_unit(other, items[0], good, quota=4), [("yes", "no")] * 4, start=50)
    assert study_score(study=other, similarity=False).status == ScoreRun.Status.DONE

    gen = study_score(study=gen_study, similarity=False).results["generalization"]

    assert set(gen["by_utility"]) == {"not_useful"}
    source = gen["original_utility_from"]
    assert [(s["id"], s["pairs"], s.get("pairs_stale")) for s in source["studies"]] == [
        (other.pk, 1, None), (lender.pk, 0, 1)]
    assert (source["pairs_stale"], source["pairs_stale_left_out"], source["pairs_in_several_studies"]) == (1, 0, 0)
    assert source["other_lenders"] == []


def test_a_run_from_before_staleness_was_recorded_is_still_the_bundles(utility_study):
    """A bundle of a run whose provenance predates the stale keys, with no lent pair stale, is not
    called another run's borrowed utility (``same_as_latest_run``)."""
    study, items, good, _ = utility_study
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    study_score(study=study, similarity=False)
    gen_study = _generalization_study(study, items, good, None)
    gen_study.sources.add(good)
    results = study_score(study=gen_study, similarity=False).results
    recorded = results["generalization"]["original_utility_from"]
    older = {**results, "generalization": {**results["generalization"], "original_utility_from": {
        k: v for k, v in recorded.items() if k not in export.STALE_PROVENANCE_KEYS}}}

    _, section = borrowed_utility_part(gen_study, older, user=None)

    assert section["same_as_latest_run"] is True and "note" not in section and "stale_note" not in section
