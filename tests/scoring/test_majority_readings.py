"""SPEC section 2 aggregates by "majority vote" and leaves open whether a plurality short of more
than half of the annotators is a majority. The published figures take the plurality (our reading,
named); results.json, the report, the results folder's notes and the bundle's settings.json name it
and give the strict reading (more than half, otherwise no majority answer, counted wrong like a tie)
beside it (``majority_readings``)."""
from __future__ import annotations

import io
import json
import zipfile

import pytest

from annotations.models import Unit
from annotations.services.units import study_units_build
from scoring.models import ScoreRun
from scoring.reports.sections import report_sections
from scoring.services import study_score
from scoring.services.bundle import bundle_stream
from scoring.services.results_folder import utility_note
from tests.factories import (
    ItemFactory,
    MultipleChoiceDatasetFactory,
    RationaleFactory,
    RationaleSourceFactory,
    StudyFactory,
)
from tests.scoring.test_services_score import collect

pytestmark = pytest.mark.django_db

PLURALITY_TEXT = "plurality: the label more annotators gave than any other; our reading of SPEC section 2"


def _section(run, key):
    return next(s for s in report_sections(run) if s.key == key)


def _four_choice_study():
    """A four-option study (OpenBookQA-like, gold "a") with two items and one source. Item 0's unit is
    answered "b" by all five before the rationale and a-a-b-c-d after it (a plurality of 2 of 5 for
    the right answer); item 1's unit is unanimous, wrong then right."""
    dataset = MultipleChoiceDatasetFactory()
    source = RationaleSourceFactory(name="lm")
    choices = [{"label": x, "text": x.upper()} for x in "abcd"]
    items = [ItemFactory(dataset=dataset, gold_answer="a", choices=choices) for _ in range(2)]
    for item in items:
        RationaleFactory(item=item, source=source, prediction_correct=True, predicted_answer="a")
    study = StudyFactory(dataset=dataset, annotators_per_unit=5)
    study.items.set(items)
    study.sources.set([source])
    study_units_build(study=study)
    first, second = Unit.objects.filter(study=study).order_by("item_id")
    collect(study, first, [("b", "a"), ("b", "a"), ("b", "b"), ("b", "c"), ("b", "d")])
    collect(study, second, [("b", "a")] * 5)
    return study


def test_a_plurality_short_of_half_counts_by_default_and_the_strict_reading_is_given_beside_it():
    run = study_score(study=_four_choice_study(), similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    r = run.results
    # The default is unchanged: the 2-1-1-1 unit's plurality "a" is right, so both units are useful.
    assert r["utility_shares"]["all"]["useful"] == 1.0
    assert r["ties"] == {"before": 0, "after": 0, "units_with_tie": 0}
    keys = list(r)
    assert keys[keys.index("ties") + 1] == "majority_readings"
    m = r["majority_readings"]
    assert m["default"] == "plurality"
    assert m["rules"]["plurality"] == PLURALITY_TEXT
    assert m["rules"]["strict_majority"].startswith("strict majority: more than half of the annotators")
    assert "leaves open whether a plurality short of more than half" in m["spec"]
    assert m["coincide"] is False
    assert m["n_units"] == 2 and m["n_units_three_or_more_choices"] == 1
    assert m["n_units_majority_differs"] == {"before": 0, "after": 1, "units": 1}
    assert m["n_units_utility_differs"] == 1
    for name in ("lm", "all"):
        plurality, strict = m["by_source"][name]["plurality"], m["by_source"][name]["strict_majority"]
        assert (plurality["n"], plurality["useful"], plurality["not_useful"]) == (2, 1.0, 0.0)
        assert (plurality["no_majority_before"], plurality["no_majority_after"]) == (0, 0)
        # Strict: the 2-of-5 plurality is no majority answer, so the unit is wrong after: not useful.
        assert (strict["n"], strict["useful"], strict["not_useful"]) == (2, 0.5, 0.5)
        assert (strict["no_majority_before"], strict["no_majority_after"]) == (0, 1)

    # The report names the rule beside the tie rule and prints both readings.
    section = _section(run, "utility")
    assert any(PLURALITY_TEXT in note and "tie counts as wrong" in note for note in section.notes)
    table = next(t for t in section.tables if t.name == "majority_readings")
    rows = {(row["source"], row["reading"]): row for row in table.rows}
    assert rows[("lm", "plurality (default)")]["not_useful"] == 0.0
    assert rows[("lm", "strict majority")]["not_useful"] == 0.5
    assert any("1 of 2 units have a plurality that is no strict majority (0 before, 1 after), changing the utility "
               "of 1" in note for note in section.notes)
    # The results folder's note (utility_shares.csv, units.csv) names it and where the other reading is.
    assert PLURALITY_TEXT in utility_note(r)
    assert "1 units differ under strict_majority: results.json majority_readings" in utility_note(r)


def test_the_readings_coincide_in_a_yes_no_study():
    from tests.annotations.factories import make_study

    study = make_study(n_items=2, n_sources=1, quota=3)
    for unit in Unit.objects.filter(study=study).order_by("id"):
        collect(study, unit, [("no", "yes"), ("no", "yes"), ("yes", "no")])

    run = study_score(study=study, similarity=False)

    assert run.status == ScoreRun.Status.DONE, run.error
    m = run.results["majority_readings"]
    assert m["default"] == "plurality" and m["coincide"] is True
    assert m["n_units_three_or_more_choices"] == 0
    assert m["n_units_majority_differs"] == {"before": 0, "after": 0, "units": 0}
    assert "by_source" not in m
    assert "the readings coincide" in m["note"]
    notes = _section(run, "utility").notes
    assert any(PLURALITY_TEXT in note for note in notes)
    assert any("the readings coincide" in note for note in notes)
    assert not any(t.name == "majority_readings" for t in _section(run, "utility").tables)


def settings_rules(study) -> dict:
    """The ``rules`` of the study bundle's settings.json."""
    archive = zipfile.ZipFile(io.BytesIO(b"".join(bundle_stream(study=study, user=None))))
    return json.loads(archive.read("settings.json"))["rules"]


def test_the_bundle_names_the_majority_rule_beside_the_tie_rule():
    study = _four_choice_study()
    study_score(study=study, similarity=False)

    rules = settings_rules(study)
    # the run's own rule, in the words of every export's majority_rule column (majority_rule_text)
    assert rules["majority"].startswith("plurality (" + PLURALITY_TEXT.removeprefix("plurality: "))
    assert "results.json majority_readings gives strict_majority beside it" in rules["majority"]
    assert rules["majority_tie"] == "a tie counts as wrong (no majority)"
