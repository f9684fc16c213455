"""Scoring reads only faithfulness probabilities that still describe the rationale's highlight and
follow the one rule every write follows (``studies.faithfulness_rules``): a rationale whose
highlights were re-imported or edited since its probabilities were computed is left out and named,
a stored value out of [0, 1] (or a boolean) is left out and named instead of failing the run, and a
source whose y_hat rule was assumed on import is listed apart from the SPEC-following ones."""
from __future__ import annotations

import io
import json

import pytest

from scoring.services import study_score
from scoring.services.bundle import bundle_import
from studies.faithfulness_rules import ASSUMPTION
from studies.models import Rationale, RationaleSource, Study
from studies.services.importers import rationales_import
from tests.scoring.test_bundle import _bundle, _worked_study
from tests.scoring.test_services_score import _faithfulness_study, collect, make_unit

pytestmark = pytest.mark.django_db


def _rows_file(tmp_path, items, *, span, probabilities=True, y_hat_from=None, name="hl.jsonl"):
    """A rationales file of the source ``hl`` over ``items``, each highlighting ``span``."""
    lines = []
    for item in items:
        row = {"item_id": item.external_id, "source": "hl", "rationale": "See the question.", "highlights": [span]}
        if probabilities:
            row.update(p_full=0.9, p_highlight=0.8, p_without=0.3)
        if y_hat_from is not None:
            row["y_hat_from"] = y_hat_from
        lines.append(json.dumps(row))
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _highlight_study(utility_study, tmp_path, **kwargs):
    study, items, good = _faithfulness_study(utility_study)
    rationales_import(file=_rows_file(tmp_path, items, span=[0, 2], **kwargs), dataset_name=study.dataset.name)
    study.sources.add(RationaleSource.objects.get(name="hl"))
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    return study, items


# --- 1. probabilities computed on another highlight ----------------------------------------------


def test_reimported_highlights_leave_the_old_probabilities_out_and_say_so(utility_study, tmp_path):
    study, items = _highlight_study(utility_study, tmp_path, y_hat_from="highlight")
    # New highlights for two items, no probabilities: those stored were computed on the old spans.
    rationales_import(file=_rows_file(tmp_path, items[:2], span=[0, 5], probabilities=False, name="new.jsonl"),
                      dataset_name=study.dataset.name)
    assert Rationale.objects.get(source__name="hl", item=items[0]).highlights == [[0, 5]]

    run = study_score(study=study, similarity=False)

    faith = run.results["faithfulness"]
    assert faith["per_source"]["hl"]["n"] == 2
    assert faith["left_out"]["hl"] == {"invalid": 0, "highlights_changed": 2}
    assert any("hl: 2 of its 4 rationales" in w and "differ from those their faithfulness probabilities were "
               "computed on" in w for w in run.results["warnings"])


def test_probabilities_stored_before_spans_were_recorded_are_kept_and_counted(utility_study):
    study, items, good = _faithfulness_study(utility_study)
    for item in items:
        Rationale.objects.filter(item=item, source=good).update(
            highlights=[[0, 2]], faithfulness={"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3, "job_id": 1,
                                               "y_hat_from": "highlight"})
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)

    faith = study_score(study=study, similarity=False).results["faithfulness"]

    assert faith["per_source"]["good-lm"]["n"] == 4 and faith["per_source"]["good-lm"]["spans_not_recorded"] == 4
    assert faith["left_out"] == {} and "spans_not_recorded" in faith["left_out_rule"]


# --- 2. probabilities that are not probabilities -------------------------------------------------


def test_an_out_of_range_or_boolean_probability_is_left_out_and_named_not_failing_the_run(utility_study):
    study, items, good = _faithfulness_study(utility_study)
    values = [{"p_full": 0.9, "p_highlight": 1.5, "p_without": 0.3}, {"p_full": True, "p_highlight": 0.8,
                                                                      "p_without": 0.3},
              {"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3}, {"p_full": 0.7, "p_highlight": 0.8,
                                                                      "p_without": 0.3}]
    for item, value in zip(items, values, strict=True):
        Rationale.objects.filter(item=item, source=good).update(faithfulness=value)  # as stored before the checks
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)

    run = study_score(study=study, similarity=False)

    assert run.status == "done", run.error
    assert run.results["sources"]["good-lm"]  # the study's own figures are kept
    faith = run.results["faithfulness"]
    assert faith["left_out"]["good-lm"] == {"invalid": 2, "highlights_changed": 0}
    assert faith["per_source"]["good-lm"]["n"] == 2
    assert run.results["test_sufficiency"] == pytest.approx((0.1 - 0.1) / 2)
    assert any("good-lm: 2 of its 4 rationales" in w and "not a probability between 0 and 1" in w
               for w in run.results["warnings"])


def test_a_bundle_keeps_a_value_stored_before_the_rule_and_the_copy_leaves_it_out_as_the_original():
    study = _worked_study()
    source = study.sources.order_by("pk").first()
    Study.objects.filter(pk=study.pk).update(faithfulness_enabled=True)
    RationaleSource.objects.filter(pk=source.pk).update(has_highlights=True)
    rationales = list(Rationale.objects.filter(source=source, item__in=study.items.all()).order_by("item_id"))
    for n, rationale in enumerate(rationales):
        value = {"p_full": 0.9, "p_highlight": 0.6 + n / 20, "p_without": 0.3, "y_hat_from": "highlight",
                 "highlights": [[0, 2]]}
        if n == 0:
            value["p_highlight"] = 1.5  # as stored before the rule
        Rationale.objects.filter(pk=rationale.pk).update(highlights=[[0, 2]], faithfulness=value)
    study.refresh_from_db()
    original = study_score(study=study, similarity=False)
    assert original.status == "done", original.error
    assert original.results["faithfulness"]["left_out"][source.name] == {"invalid": 1, "highlights_changed": 0}

    data, faithfulness = _bundle(study), original.results["faithfulness"]
    # Another installation has no original: the copy's rationales are the bundle's alone.
    study.delete()
    Rationale.objects.filter(pk__in=[r.pk for r in rationales]).delete()

    copy = bundle_import(file=io.BytesIO(data), name="faith-copy", owner=None)

    kept = Rationale.objects.get(source__name=source.name, item__external_id=rationales[0].item.external_id)
    assert kept.faithfulness["p_highlight"] == 1.5  # kept as exported
    rescored = study_score(study=copy, similarity=False)
    assert rescored.status == "done", rescored.error
    assert rescored.results["faithfulness"] == faithfulness
    assert rescored.results["test_sufficiency"] == original.results["test_sufficiency"]
    assert rescored.results["test_comprehensiveness"] == original.results["test_comprehensiveness"]


# --- 3. the y_hat rule of imported probabilities -------------------------------------------------


def test_imported_probabilities_without_a_y_hat_rule_are_listed_as_assumed_not_following_spec(utility_study,
                                                                                            tmp_path):
    study, _ = _highlight_study(utility_study, tmp_path)

    run = study_score(study=study, similarity=False)

    faith = run.results["faithfulness"]
    assert faith["per_source"]["hl"]["y_hat_from"] == ["highlight"]
    assert faith["per_source"]["hl"]["y_hat_from_assumed"] == 4
    assert "hl" not in faith["spec_rule"]["sources_following"]
    assert faith["y_hat_from_assumed"] == {"sources": ["hl"], "assumption": ASSUMPTION}
    assert any("hl" in w and "assumed" in w for w in run.results["warnings"])


def test_imported_probabilities_with_a_y_hat_rule_follow_spec_as_given(utility_study, tmp_path):
    study, _ = _highlight_study(utility_study, tmp_path, y_hat_from="highlight")

    faith = study_score(study=study, similarity=False).results["faithfulness"]

    assert faith["per_source"]["hl"]["y_hat_from_assumed"] == 0
    assert faith["spec_rule"]["sources_following"] == ["hl"]
    assert faith["y_hat_from_assumed"]["sources"] == []


# --- 4. what computed them: text scoring groups and sorts ----------------------------------------


def test_a_stored_value_naming_its_model_or_file_by_a_list_or_object_is_left_out_not_failing_the_run(utility_study):
    study, items, good = _faithfulness_study(utility_study)
    probs = {"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3}
    values = [{**probs, "task_model": ["m"]}, {**probs, "imported_from": {"a": 1}},
              {**probs, "task_model": "m", "task_backend": "seq2seq", "method": "m1", "y_hat": "yes"},
              {**probs, "task_model": "m", "y_hat": 3}]
    for item, value in zip(items, values, strict=True):
        Rationale.objects.filter(item=item, source=good).update(faithfulness=value)  # as stored before the checks
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)

    run = study_score(study=study, similarity=False)

    assert run.status == "done", run.error
    faith = run.results["faithfulness"]
    assert faith["left_out"]["good-lm"] == {"invalid": 3, "highlights_changed": 0}
    assert faith["per_source"]["good-lm"]["n"] == 1
    assert faith["per_source"]["good-lm"]["computed_by"] == ["m"]
    assert any("good-lm: 3 of its 4 rationales" in w and "task_model [\"m\"] must be text" in w
               for w in run.results["warnings"])


# --- 5. the report says what was assumed, left out and kept --------------------------------------


def test_the_report_table_marks_an_assumed_rule_and_counts_what_was_left_out_and_kept(utility_study, tmp_path):
    from scoring.reports.download import table_csv
    from scoring.reports.sections import faithfulness_section

    study, items = _highlight_study(utility_study, tmp_path)  # hl: imported without y_hat_from, assumed
    rationales_import(file=_rows_file(tmp_path, items[:1], span=[0, 5], probabilities=False, name="new.jsonl"),
                      dataset_name=study.dataset.name)  # item 0: highlights changed since
    bad = Rationale.objects.get(source__name="hl", item=items[1])
    Rationale.objects.filter(pk=bad.pk).update(faithfulness={**bad.faithfulness, "p_highlight": 1.5})  # stored before
    for item in items:  # good-lm: probabilities from a job, stored before the spans were recorded
        Rationale.objects.filter(item=item, source__name="good-lm").update(
            highlights=[[0, 2]], faithfulness={"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3, "job_id": 1,
                                               "y_hat_from": "highlight", "task_model": "/models/task"})

    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error

    section = faithfulness_section(run.results)
    table = section.tables[0]
    rows = {r["source"]: r for r in table.rows}
    assert rows["hl"]["n"] == 2 and rows["hl"]["y_hat_from"] == "highlight pass (select-then-predict) (assumed)"
    assert (rows["hl"]["left_out_invalid"], rows["hl"]["left_out_highlights_changed"],
            rows["hl"]["spans_not_recorded"]) == (1, 1, 0)
    assert rows["good-lm"]["y_hat_from"] == "highlight pass (select-then-predict)"
    assert (rows["good-lm"]["left_out_invalid"], rows["good-lm"]["left_out_highlights_changed"],
            rows["good-lm"]["spans_not_recorded"]) == (0, 0, 4)
    pooled = rows["test (all sources)"]
    assert pooled["y_hat_from"] == "highlight pass (select-then-predict) (assumed for hl)"
    assert (pooled["left_out_invalid"], pooled["left_out_highlights_changed"], pooled["spans_not_recorded"]) == (1, 1, 4)
    assert any(ASSUMPTION in note for note in section.notes)
    assert any("highlights_changed" in note for note in section.notes)

    lines = table_csv(table).splitlines()
    assert lines[0].split(",")[-3:] == ["left_out_invalid", "left_out_highlights_changed", "spans_not_recorded"]
    hl_line = next(line for line in lines if line.startswith("hl,"))
    assert "(assumed)" in hl_line and hl_line.endswith(",1,1,0")


def test_the_report_table_shows_a_source_whose_probabilities_were_all_left_out(utility_study):
    from scoring.reports.sections import faithfulness_section

    study, items, good = _faithfulness_study(utility_study)
    for item in items:
        Rationale.objects.filter(item=item, source=good).update(
            faithfulness={"p_full": 0.9, "p_highlight": 1.5, "p_without": 0.3})  # as stored before the checks
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)

    rows = {r["source"]: r for r in faithfulness_section(study_score(study=study, similarity=False).results)
            .tables[0].rows}

    assert rows["good-lm"]["n"] == 0 and rows["good-lm"]["sufficiency"] is None
    assert rows["good-lm"]["left_out_invalid"] == 4
    assert rows["test (all sources)"]["left_out_invalid"] == 4
