"""The per-source summary and the unit-score export name the settings their numbers rest on, next to
them: task accuracy says which units it is over (``n_task_known``, the rule in ``TASK_ACCURACY_RULES``'s
words), and ``similarity_model`` names the method as well as the model and layer (baseline rescaling
changes the values a lot)."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse

from annotations.models import Unit
from annotations.services.units import study_units_build
from scoring.api.export_units import SCORE_COLUMNS, SCORED_WITH_COLUMNS, scored_with_run, source_summaries
from scoring.api.serializers import SourceSummarySerializer
from scoring.models import ScoreRun
from scoring.services import study_score
from scoring.services.score import TASK_ACCURACY_COUNTED_WRONG, TASK_ACCURACY_LEFT_OUT, TASK_ACCURACY_RULES
from scoring.similarity import SimilarityModel
from tests.factories import ItemFactory, RationaleFactory, RationaleSourceFactory, StudyFactory
from tests.scoring.test_services_score import collect

pytestmark = pytest.mark.django_db


def _scored_study(*, similarity: bool):
    """Four items; good-lm's predicted answers are all known (and right); imported-lm's rationales
    of items 2 and 3 came without a predicted answer (``prediction_correct`` empty, as the
    rationale importer stores them), so its task accuracy is over 2 of its 4 units. Answered
    through the questionnaire's services and scored with ``study_score``."""
    study = StudyFactory(annotators_per_unit=3)
    good, imported = RationaleSourceFactory(name="good-lm"), RationaleSourceFactory(name="imported-lm")
    items = [ItemFactory(dataset=study.dataset, gold_answer="yes", gold_rationale="The sky is blue.") for _ in range(4)]
    for n, item in enumerate(items):
        RationaleFactory(item=item, source=good, prediction_correct=True, text="The sky is blue indeed.")
        RationaleFactory(item=item, source=imported, prediction_correct=(False if n < 2 else None),
                         text="Blue it is.")
    study.items.set(items)
    study.sources.set([good, imported])
    study_units_build(study=study)
    for unit in Unit.objects.filter(study=study).order_by("id"):
        collect(study, unit, [("no", "yes")] * 3)
    run = study_score(study=study, similarity=similarity)
    assert run.status == ScoreRun.Status.DONE, run.error
    return study, run


def test_summary_gives_the_units_task_accuracy_is_over_and_names_the_rule(admin_client):
    study, run = _scored_study(similarity=False)

    by_name = {row["source_name"]: row for row in source_summaries(study=study, user=None)}
    assert by_name["imported-lm"]["n_units"] == 4
    assert by_name["imported-lm"]["n_task_known"] == 2  # the units with a predicted answer
    assert by_name["imported-lm"]["task_accuracy"] == 0.0  # wrong on both of them; the other two left out
    assert by_name["good-lm"]["n_task_known"] == 4 and by_name["good-lm"]["task_accuracy"] == 1.0
    assert run.results["task_accuracy_n"]["imported-lm"] == 2  # the same count results.json gives

    # The API's summary carries it, beside the figure.
    served = admin_client.get(f"/api/v1/studies/{study.pk}/summary/").json()
    keys = list(served[0])
    assert keys[keys.index("task_accuracy") - 1] == "n_task_known"
    assert {row["source_name"]: row["n_task_known"] for row in served} == {"good-lm": 4, "imported-lm": 2}

    # The help names the rule in its owner's words.
    fields = SourceSummarySerializer().fields
    text = fields["task_accuracy"].help_text
    assert text.startswith("Share of the units with the source's predicted answer (n_task_known) where it was right; "
                           "units without one are left out")
    assert TASK_ACCURACY_RULES[TASK_ACCURACY_LEFT_OUT] in text
    assert f"task_accuracy_readings also gives the other reading: {TASK_ACCURACY_RULES[TASK_ACCURACY_COUNTED_WRONG]}" \
           in text
    assert "task_accuracy_n" in fields["n_task_known"].help_text


def test_the_schema_documents_n_task_known_and_the_task_accuracy_rule(admin_client):
    schema = admin_client.get(reverse("schema"), {"format": "json"}).json()
    summary = schema["components"]["schemas"]["SourceSummary"]["properties"]
    assert "n_task_known" in summary
    assert "(n_task_known)" in summary["task_accuracy"]["description"]
    assert "model, layer and method" in summary["similarity_model"]["description"]


def test_similarity_model_names_the_method_the_run_recorded(admin_client):
    pytest.importorskip("bert_score")
    study, run = _scored_study(similarity=True)

    similarity = run.results["similarity"]
    assert similarity["method"] == SimilarityModel.method == ("BERTScore F1 against the gold rationale, "
                                                              "no baseline rescaling")
    expected = (f"{similarity['name']}, layer {similarity['num_layers']}, files {similarity['fingerprint'][:19]}; "
                f"{similarity['method']}")
    assert scored_with_run(run, user=None)["similarity_model"] == expected
    assert {row["similarity_model"] for row in source_summaries(study=study, user=None)} == {expected}
    served = admin_client.get(f"/api/v1/studies/{study.pk}/export/scores/", {"file_format": "jsonl"})
    assert served.status_code == 200
    rows = [json.loads(line) for line in b"".join(served.streaming_content).decode().splitlines() if line]
    assert rows and {row["similarity_model"] for row in rows} == {expected}


def test_a_run_that_recorded_no_method_keeps_model_and_layer():
    """Runs written before the method was recorded: the value stays as it was, nothing guessed."""
    old = ScoreRun(pk=7, results={"similarity": {"name": "mini", "num_layers": 6}})
    assert scored_with_run(old, user=None)["similarity_model"] == "mini, layer 6"
    assert scored_with_run(ScoreRun(pk=8, results={}), user=None)["similarity_model"] is None


def test_the_column_docs_say_model_layer_and_method():
    assert "model, layer and method" in SCORED_WITH_COLUMNS["similarity_model"].description
    assert "BERTScore model and layer" not in SCORED_WITH_COLUMNS["similarity_model"].description
    similarity = next(c for c in SCORE_COLUMNS if c.name == "similarity")
    assert "model, layer and method" in similarity.description
    assert "model, layer and method" in SourceSummarySerializer().fields["similarity_model"].help_text
