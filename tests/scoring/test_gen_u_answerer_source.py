"""Gen-U names its answerers' fine-tuning settings from the source each prediction records as its
answerer (``GenUPrediction.answerer_source``), not from whichever source has the same model path: two
sources may share one (a checkpoint registered again under another name, a copy). Predictions from
before the source was recorded fall back to the model path, and results.json and the report say so.
The study bundle's ``answerer_sources`` follow the same reading."""
from __future__ import annotations

import io
import json
import zipfile

import pytest

from scoring.reports.sections import gen_u_section
from scoring.services import study_score
from scoring.services.bundle import bundle_stream
from studies.models import GenUPrediction
from studies.services.questions import generalization_questions_set_validation
from tests.factories import GeneralizationQuestionFactory, RationaleSourceFactory

from .test_services_score import collect, make_unit

pytestmark = pytest.mark.django_db

PATH = "shared/ckpt"


def _predict(question, source, role, *, answerer=None):
    GenUPrediction.objects.create(generalization_question=question, rationale_source=source, answerer=role,
                                  answerer_source=answerer, answerer_model=PATH, predicted_answer=question.answer,
                                  correct=True)


@pytest.fixture
def shared_path(utility_study):
    """A scored item's valid question, and two fine-tuned sources on one model path: the one that
    answered ("ft-answerer", older) and a newer one that did not ("ft-newer")."""
    study, items, good, _ = utility_study
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    question = GeneralizationQuestionFactory(item=items[0], text="q?", answer="yes")
    generalization_questions_set_validation(questions=[question], status="valid")
    answerer = RationaleSourceFactory(name="ft-answerer", kind="lm", backend="seq2seq", model_name_or_path=PATH,
                                      training={"preset": "ANSWERER-PRESET", "overrides": []})
    RationaleSourceFactory(name="ft-newer", kind="lm", backend="seq2seq", model_name_or_path=PATH,
                           training={"preset": "NEWER-PRESET", "overrides": []})
    return study, good, question, answerer


def test_gen_u_names_the_recorded_answerer_sources_settings_not_the_newest_on_its_path(shared_path):
    study, good, question, answerer = shared_path
    _predict(question, good, "I", answerer=answerer)
    _predict(question, good, "IR", answerer=answerer)

    run = study_score(study=study, similarity=False)

    gen_u = run.results["gen_u"]
    for role in ("F^I", "F^IR"):
        [entry] = gen_u["answerers"][role]
        assert (entry["fine_tuning_preset"], entry["matched_by"]) == ("ANSWERER-PRESET", "answerer source")
    assert "NEWER-PRESET" not in json.dumps(gen_u)
    notes = " ".join(gen_u_section(run.results).notes)
    assert "read by model path" not in notes


def test_predictions_without_a_recorded_source_fall_back_to_the_path_and_the_report_says_so(shared_path):
    study, good, question, answerer = shared_path
    _predict(question, good, "I", answerer=answerer)
    _predict(question, good, "IR")  # an older row: no source recorded

    run = study_score(study=study, similarity=False)

    gen_u = run.results["gen_u"]
    [fi], [fir] = gen_u["answerers"]["F^I"], gen_u["answerers"]["F^IR"]
    assert (fi["fine_tuning_preset"], fi["matched_by"]) == ("ANSWERER-PRESET", "answerer source")
    assert (fir["fine_tuning_preset"], fir["matched_by"]) == ("NEWER-PRESET", "model path")
    notes = " ".join(gen_u_section(run.results).notes)
    assert (f"The Gen-U predictions of F^IR {PATH} do not record which source answered them" in notes
            and "their settings were read by model path" in notes)
    assert f"F^I {PATH} do not" not in notes


def test_the_bundle_carries_the_recorded_answerer_source_not_every_source_on_its_path(shared_path):
    study, good, question, answerer = shared_path
    _predict(question, good, "I", answerer=answerer)
    _predict(question, good, "IR", answerer=answerer)
    study.items.add(question.item)  # the study's drawn item and listed source, whose predictions the bundle carries
    study.sources.add(good)

    data = b"".join(bundle_stream(study=study, user=None))

    design = json.loads(zipfile.ZipFile(io.BytesIO(data)).read("study.json"))
    assert [s["name"] for s in design["answerer_sources"]] == ["ft-answerer"]
