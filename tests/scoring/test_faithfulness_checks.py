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
from scoring.services.bundle import BundleError, bundle_import
from studies.faithfulness_rules import ASSUMPTION
from studies.models import Rationale, RationaleSource, Study
from studies.services.importers import rationales_import
from tests.scoring.test_bundle import _bundle, _edited_rows, _worked_study
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


def test_a_bundle_rationale_with_an_out_of_range_probability_is_refused_by_row_and_field():
    study = _worked_study()
    data = _bundle(study)
    edited = _edited_rows(data, "data/rationales.csv",
                          (0, {"faithfulness": json.dumps({"p_full": 0.9, "p_highlight": 1.5, "p_without": 0.3})}))
    studies = Study.objects.count()
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(edited), name="faith-copy", owner=None)
    assert Study.objects.count() == studies
    errors = [(e.record, e.field, e.reason) for e in refused.value.errors]
    assert any(record == "data/rationales.csv" and field == "faithfulness" and "p_highlight 1.5 " in reason
               and "between 0 and 1" in reason for record, field, reason in errors), errors


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
