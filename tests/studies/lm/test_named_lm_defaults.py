"""A default is a claim: what the LM pages, help texts, reports and warnings call a default says
what it is and whose it is, and never calls our reading the paper's (SPEC is the paper's word).

- Quark's task accuracy (greedy outputs, an unparsed output counted wrong) is named, with the
  other reading (unparsed left out, scoring's default) beside it, on the admin's before/after
  table and in ``quark_train``'s printout.
- The faithfulness action says that y_hat from the full input departs from SPEC section 6, and
  offers ``y_hat_from`` as the API does.
- Gen-U on validated questions only is our reading of SPEC section 4, in every place that offers it.
- The Gen-U tie rule says what SPEC section 4 says.
"""
from __future__ import annotations

import json
from io import StringIO

import pandas as pd
import pytest
from django.core.management import call_command, load_command_class
from django.urls import reverse
from django.utils.html import escape

from scoring.services.genu import question_filter
from studies.lm import genu as genu_rule
from studies.models import GeneralizationQuestion, GenerationJob, RationaleSource
from studies.services.generation.faithfulness import Y_HAT_FROM_DEFAULT, Y_HAT_FROM_TEXT
from studies.services.generation.genu import VALIDATED_ONLY_READING
from studies.services.generation.quark_policy import ACCURACY_NOTE, ACCURACY_RULE, ACCURACY_RULE_PARSED_ONLY
from studies.services.importers import rationales_import
from tests.studies.lm.test_faithfulness import demo_items, highlight_file

pytestmark = pytest.mark.django_db


def _words(text: str) -> str:
    """``text`` with its whitespace runs made single spaces (argparse wraps help lines)."""
    return " ".join(text.split())


@pytest.mark.lm
@pytest.mark.usefixtures("fresh_quark_runs")
def test_quark_task_accuracy_is_named_with_the_other_reading_beside_it(lm_models, strategyqa_dataset, splits,
                                                                        tmp_path, admin_client):
    pytest.importorskip("torch")
    RationaleSource.objects.create(name="tiny-t5", kind="lm", backend="seq2seq", model_name_or_path=str(lm_models["t5"]))
    out = StringIO()
    call_command("quark_train", "--policy", "tiny-t5", "--dataset", "strategyqa", "--reward", "marker:the",
                 "--steps", "2", "--checkpoint-every", "2", "--max-accuracy-drop", "1", "--max-new-tokens", "8",
                 "--output-name", "named-accuracy", "--out", str(tmp_path), stdout=out)
    report = json.loads((tmp_path / "report.json").read_text())
    job = GenerationJob.objects.get(pk=report["job_id"])

    # evaluate records both readings from the same greedy outputs.
    for result in (job.params["before"]["validation"], job.params["before"]["heldout"], report["after"]["heldout"]):
        assert result["accuracy"] == result["correct"] / result["items"]
        assert result["accuracy_parsed_only"] == (result["correct"] / result["parsed"] if result["parsed"] else None)
    assert ACCURACY_RULE == "greedy outputs; an output that did not parse counts as wrong"
    assert "is left out" in ACCURACY_RULE_PARSED_ONLY
    assert "the default" in ACCURACY_NOTE and "max_accuracy_drop" in ACCURACY_NOTE
    assert "SPEC section 8 does not say" in ACCURACY_NOTE

    # report.json names the rule and gives the other reading beside each validation figure.
    assert (report["accuracy_rule"], report["accuracy_rule_other"]) == (ACCURACY_RULE, ACCURACY_RULE_PARSED_ONLY)
    validation = job.params["before"]["validation"]
    assert report["validation"]["accuracy_parsed_only_before"] == validation["accuracy_parsed_only"]
    assert "accuracy_parsed_only_after" in report["validation"]

    printed = out.getvalue()
    assert "(unparsed counted wrong; the default)" in printed and "(unparsed left out)" in printed
    assert ACCURACY_NOTE in printed

    html = admin_client.get(reverse("admin:studies_generationjob_change", args=[job.pk])).content.decode()
    table = html[html.index('class="quark-before-after"'):]
    for role in ("held-out", "validation"):
        assert f"{role} task accuracy (unparsed counted wrong; the default)" in table
        assert f"{role} task accuracy (unparsed left out)" in table
    assert escape(ACCURACY_NOTE) in table


def test_the_faithfulness_action_names_the_departure_and_offers_y_hat_from(tmp_path, admin_client):
    items = demo_items()[:3]
    rationales_import(file=highlight_file(tmp_path, items), dataset_name=items[0].dataset.name)
    source = RationaleSource.objects.get(name="highlighter")
    url = reverse("admin:studies_rationalesource_changelist")
    page = admin_client.post(url, {"action": "generate_faithfulness", "_selected_action": [source.pk]}).content.decode()
    assert escape("which departs from SPEC section 6 (y_hat predicted from the highlight)") in page
    for text in (f"the default: {Y_HAT_FROM_DEFAULT}", *Y_HAT_FROM_TEXT.values()):
        assert escape(text) in page, text
    form = {"action": "generate_faithfulness", "_selected_action": [source.pk], "apply": "1",
            "dataset": items[0].dataset.pk, "split": "", "batch_size": 8, "task_model": "/models/task",
            "task_backend": "seq2seq", "y_hat_from": "highlight"}
    assert admin_client.post(url, form).status_code == 302
    # Another task model would get "full" by default; the admin's choice overrides it, as the API's does.
    job = GenerationJob.objects.get(kind="faithfulness")
    assert job.params["y_hat_from"] == "highlight"
    admin_client.post(url, {**form, "y_hat_from": ""})
    assert GenerationJob.objects.filter(kind="faithfulness").latest("pk").params["y_hat_from"] == "full"


def test_validated_questions_only_is_named_as_our_reading_everywhere(admin_client):
    assert VALIDATED_ONLY_READING == ("validated questions only (our reading of SPEC section 4: its released "
                                      "questions are the validated ones)")
    source = RationaleSource.objects.create(name="lm", kind="lm", backend="seq2seq", model_name_or_path="/m")
    page = admin_client.post(reverse("admin:studies_rationalesource_changelist"), {
        "action": "generate_genu_answers", "_selected_action": [source.pk]}).content.decode()
    assert escape(VALIDATED_ONLY_READING) in page and escape("the paper's") not in page

    help_text = _words(load_command_class("studies", "quark_train").create_parser("manage.py", "quark_train")
                       .format_help())
    assert f"(default: {VALIDATED_ONLY_READING})" in help_text and "as in the paper" not in help_text

    _, warnings = question_filter(pd.Series([GeneralizationQuestion.Validation.VALID, GeneralizationQuestion.Validation.UNVALIDATED]),
                                  what="Gen-U", unvalidated_why="asked for")
    assert warnings == [f"Gen-U includes 1 generalization questions nobody validated (the default is "
                        f"{VALIDATED_ONLY_READING})."]


def test_the_tie_rule_text_says_what_spec_section_4_says():
    text = genu_rule.TIE_RULE_TEXT
    assert "as SPEC section 4 says: break ties in the mode toward the lowest score (the conservative reading)" in text
    assert "does not state" not in text and genu_rule.TIE_RULE == "lowest"
