"""Faithfulness probabilities follow one rule wherever they are written (``studies.faithfulness_rules``):
numbers in [0, 1], never true or false, refused by the rationales importer with line and field and
by the admin's form beside the field; the importer reads a ``y_hat_from`` column (refusing a rule
scoring does not know) and marks the rule assumed when the file names none; and every write of
probabilities records the highlight spans they were computed on, which an edit of the highlights
(a re-import, the admin) leaves as they were."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse

from studies import demo
from studies.faithfulness_rules import (
    ASSUMED_KEY,
    DIFFER,
    MATCH,
    NOT_RECORDED,
    faithfulness_problems,
    probability_read,
    spans_state,
)
from studies.models import Rationale, RationaleSource
from studies.services.importers import ImportValidationError, rationales_import
from tests.admin_forms import admin_form_data
from tests.studies.lm.test_faithfulness import demo_items, highlight_file

pytestmark = pytest.mark.django_db

PROBS = {"p_full": 0.9, "p_highlight": 0.8, "p_without": 0.3}


def test_the_rule_refuses_booleans_text_and_values_out_of_range():
    assert probability_read("0.25", key="p_full") == (0.25, None)
    assert probability_read(1, key="p_full") == (1.0, None)
    for raw in (True, False, "1.5", -0.1, float("nan"), "x", None, [0.5]):
        value, problem = probability_read(raw, key="p_full")
        assert value is None and problem.startswith("p_full "), raw
    assert faithfulness_problems({}) == {}
    assert set(faithfulness_problems({**PROBS, "p_full": True, "y_hat_from": "input"})) == {"p_full", "y_hat_from"}
    assert spans_state({**PROBS, "highlights": [[3, 5], [0, 2]]}, [[0, 2], [3, 5]]) == MATCH
    assert spans_state({**PROBS, "highlights": [[0, 2]]}, [[0, 5]]) == DIFFER
    assert spans_state(PROBS, [[0, 5]]) == NOT_RECORDED


# --- the importer --------------------------------------------------------------------------------


def test_the_importer_refuses_a_boolean_probability_by_line_and_field(tmp_path):
    items = demo_items()[:2]
    probs = [PROBS, {**PROBS, "p_highlight": True}]
    with pytest.raises(ImportValidationError) as error:
        rationales_import(file=highlight_file(tmp_path, items, probabilities=probs), dataset_name=demo.DATASET_NAME)
    text = "\n".join(error.value.lines())
    assert "line 2" in text and "p_highlight" in text and "p_highlight true is not a number" in text
    assert "line 1" not in text
    assert not RationaleSource.objects.filter(name="highlighter").exists()


def test_the_importer_reads_and_checks_a_y_hat_from_column(tmp_path):
    items = demo_items()[:3]
    probs = [{**PROBS, "y_hat_from": "full"}, {**PROBS, "y_hat_from": "highlight"}, {**PROBS, "y_hat_from": "input"}]
    with pytest.raises(ImportValidationError) as error:
        rationales_import(file=highlight_file(tmp_path, items, probabilities=probs), dataset_name=demo.DATASET_NAME)
    text = "\n".join(error.value.lines())
    assert "line 3" in text and "y_hat_from 'input' is not one of highlight, full" in text
    assert "line 1" not in text and "line 2" not in text

    record = rationales_import(file=highlight_file(tmp_path, items, probabilities=probs[:2] + [PROBS]),
                               dataset_name=demo.DATASET_NAME)
    stored = {r.item_id: r.faithfulness for r in Rationale.objects.filter(source__name="highlighter")}
    assert stored[items[0].pk]["y_hat_from"] == "full" and ASSUMED_KEY not in stored[items[0].pk]
    assert stored[items[1].pk]["y_hat_from"] == "highlight" and ASSUMED_KEY not in stored[items[1].pk]
    # no rule given: the import format's, marked as assumed
    assert stored[items[2].pk]["y_hat_from"] == "highlight" and stored[items[2].pk][ASSUMED_KEY] is True
    assert record.summary["rows_with_y_hat_from_assumed"] == 1
    assert "extra" not in Rationale.objects.get(source__name="highlighter", item=items[0]).generation_info


def test_imported_probabilities_record_their_spans_and_a_reimport_of_new_highlights_does_not_move_them(tmp_path):
    items = demo_items()[:2]
    rationales_import(file=highlight_file(tmp_path, items, probabilities=[PROBS, PROBS]),
                      dataset_name=demo.DATASET_NAME)
    r = Rationale.objects.get(source__name="highlighter", item=items[0])
    assert r.faithfulness["highlights"] == r.highlights and spans_state(r.faithfulness, r.highlights) == MATCH

    # the same rationales, other highlights, no probabilities
    path = tmp_path / "again.jsonl"
    path.write_text("\n".join(json.dumps({"item_id": i.external_id, "source": "highlighter",
                                          "rationale": f"Look at: {i.question[:20]}", "highlight_tokens": [[0, 1]]})
                              for i in items) + "\n")
    rationales_import(file=path, dataset_name=demo.DATASET_NAME)
    r.refresh_from_db()
    assert r.faithfulness["p_full"] == 0.9 and spans_state(r.faithfulness, r.highlights) == DIFFER

    # probabilities in a file without highlights belong to the stored spans
    path.write_text("\n".join(json.dumps({"item_id": i.external_id, "source": "highlighter",
                                          "rationale": f"Look at: {i.question[:20]}", **PROBS}) for i in items) + "\n")
    rationales_import(file=path, dataset_name=demo.DATASET_NAME)
    r.refresh_from_db()
    assert spans_state(r.faithfulness, r.highlights) == MATCH


# --- the admin -----------------------------------------------------------------------------------


def _change_page(admin_client, tmp_path):
    items = demo_items()[:1]
    rationales_import(file=highlight_file(tmp_path, items, probabilities=[PROBS]), dataset_name=demo.DATASET_NAME)
    rationale = Rationale.objects.get(source__name="highlighter")
    url = reverse("admin:studies_rationale_change", args=[rationale.pk])
    return rationale, url, admin_form_data(admin_client.get(url))


@pytest.mark.parametrize(("value", "reason"), [
    ({**PROBS, "p_highlight": 1.5}, "p_highlight 1.5 is not a probability between 0 and 1"),
    ({**PROBS, "p_full": True}, "p_full true is not a number"),
])
def test_the_admin_refuses_a_faithfulness_that_is_not_probabilities_beside_the_field(admin_client, tmp_path,
                                                                                     value, reason):
    rationale, url, form = _change_page(admin_client, tmp_path)
    before = rationale.faithfulness
    page = admin_client.post(url, {**form, "faithfulness": json.dumps(value)})
    assert page.status_code == 200
    assert reason in " ".join(page.context["adminform"].form.errors.get("faithfulness", []))
    rationale.refresh_from_db()
    assert rationale.faithfulness == before


def test_an_admin_edit_of_the_highlights_leaves_the_probabilities_on_their_old_spans(admin_client, tmp_path):
    rationale, url, form = _change_page(admin_client, tmp_path)
    assert admin_client.post(url, {**form, "highlights": "[[0, 2]]"}).status_code == 302
    rationale.refresh_from_db()
    assert rationale.highlights == [[0, 2]] and spans_state(rationale.faithfulness, rationale.highlights) == DIFFER


def test_the_rule_asks_text_of_what_computed_the_probabilities():
    assert faithfulness_problems({**PROBS, "task_model": "m", "task_backend": None, "method": "x", "y_hat": "yes",
                                  "imported_from": "f.csv", "prompt": {"system": "s"}}) == {}
    problems = faithfulness_problems({**PROBS, "task_model": ["m"], "task_backend": 1, "imported_from": {"a": 1},
                                      "method": True, "y_hat": 2, "prompt": 5})
    assert set(problems) == {"task_model", "task_backend", "imported_from", "method", "y_hat", "prompt"}
    assert problems["task_model"] == 'task_model ["m"] must be text'
    assert problems["imported_from"] == 'imported_from {"a": 1} must be text'


def test_the_admin_refuses_a_task_model_that_is_not_text_beside_the_field(admin_client, tmp_path):
    rationale, url, form = _change_page(admin_client, tmp_path)
    before = rationale.faithfulness
    page = admin_client.post(url, {**form, "faithfulness": json.dumps({**PROBS, "task_model": ["m"]})})
    assert page.status_code == 200
    assert 'task_model ["m"] must be text' in " ".join(page.context["adminform"].form.errors.get("faithfulness", []))
    rationale.refresh_from_db()
    assert rationale.faithfulness == before


def test_a_faithfulness_typed_in_the_admin_records_the_highlights_of_the_form(admin_client, tmp_path):
    rationale, url, form = _change_page(admin_client, tmp_path)
    typed = {"p_full": 0.7, "p_highlight": 0.6, "p_without": 0.2}  # no spans typed: the form's are recorded
    assert admin_client.post(url, {**form, "faithfulness": json.dumps(typed)}).status_code == 302
    rationale.refresh_from_db()
    assert rationale.faithfulness == {**typed, "highlights": rationale.highlights}
    assert spans_state(rationale.faithfulness, rationale.highlights) == MATCH

    # typed with new highlights: computed on those
    again = {**typed, "p_full": 0.8, "highlights": [[9, 10]]}
    form = admin_form_data(admin_client.get(url))
    assert admin_client.post(url, {**form, "faithfulness": json.dumps(again),
                                   "highlights": "[[0, 2]]"}).status_code == 302
    rationale.refresh_from_db()
    assert rationale.faithfulness["highlights"] == [[0, 2]] == rationale.highlights
    assert spans_state(rationale.faithfulness, rationale.highlights) == MATCH


def test_the_admin_refuses_highlights_that_cannot_be_recorded_with_typed_probabilities(admin_client, tmp_path):
    rationale, url, form = _change_page(admin_client, tmp_path)
    before = rationale.faithfulness
    page = admin_client.post(url, {**form, "faithfulness": json.dumps({**PROBS, "p_full": 0.5}),
                                   "highlights": "[5]"})
    assert page.status_code == 200
    assert "must be a list of [start, end] character offsets" in " ".join(
        page.context["adminform"].form.errors.get("highlights", []))
    rationale.refresh_from_db()
    assert rationale.faithfulness == before


# --- the service every form's save goes through (``content_row_save``) ---------------------------


def test_a_row_saved_through_the_service_follows_the_rule_without_a_form(tmp_path):
    """The rule sits beside the write, not in the admin's form: a caller of ``content_row_save``
    that no form checked (a script, a later API) is refused the same, and typed probabilities are
    recorded with the row's highlights."""
    from studies.services.content import ContentChangeRefused, content_row_save

    items = demo_items()[:1]
    rationales_import(file=highlight_file(tmp_path, items, probabilities=[PROBS]), dataset_name=demo.DATASET_NAME)
    rationale = Rationale.objects.get(source__name="highlighter")
    before = rationale.faithfulness
    rationale.faithfulness = {**PROBS, "p_highlight": 1.5}
    with pytest.raises(ContentChangeRefused, match="p_highlight 1.5 is not a probability between 0 and 1"):
        content_row_save(user=None, obj=rationale, changed=["faithfulness"])
    rationale.refresh_from_db()
    assert rationale.faithfulness == before

    rationale.faithfulness = {**PROBS, "p_full": 0.5}
    rationale.highlights = [5]
    with pytest.raises(ContentChangeRefused, match=r"must be a list of \[start, end\] character offsets"):
        content_row_save(user=None, obj=rationale, changed=["faithfulness", "highlights"])

    rationale.refresh_from_db()
    typed = {"p_full": 0.7, "p_highlight": 0.6, "p_without": 0.2}
    rationale.faithfulness = typed
    content_row_save(user=None, obj=rationale, changed=["faithfulness"])
    rationale.refresh_from_db()
    assert rationale.faithfulness == {**typed, "highlights": rationale.highlights}
    assert spans_state(rationale.faithfulness, rationale.highlights) == MATCH
