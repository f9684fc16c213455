"""A study bundle carries what each Gen-U prediction was answered on (data/genu_predictions.csv,
``inputs``: the fingerprints of the question asked and of the rationale F^IR was shown), so that the
copy's scoring leaves out what the original's leaves out (``scoring.services.genu``: a prediction whose
question or rationale changed since). Before, the bundle wrote no inputs: the copy counted every
prediction as not recorded and kept the one the original left out as stale, so its Gen-U differed
(+1 where the original had none). A bundle made before the column still imports (its predictions
record nothing: kept and counted), and a malformed cell is refused by row, naming the field. The
checkpoint and training record the Gen-U job records are not carried (another researcher's training
settings; keyed by this installation's source ids)."""
from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest

from scoring.services import study_score
from scoring.services.bundle import BundleError, bundle_import, bundle_stream
from studies.models import GenUPrediction, Rationale, Study
from studies.services.content import content_row_save
from tests.factories import RationaleSourceFactory
from tests.studies.lm.openai_server import OpenAIServer, completion

from .test_bundle import _edited_rows, _numbers, _renamed_dataset, _resign, _rewrite, _without_column
from .test_genu_inputs_recorded import _run_genu, _study_with_question

pytestmark = pytest.mark.django_db

TABLE = "data/genu_predictions.csv"


def _stale_study(utility_study) -> Study:
    """The Gen-U probe of test_genu_inputs_recorded: F^IR says yes only when shown "BLUE-FACT"; the
    rationale is then edited (content_row_save), so its F^IR prediction is stale and left out."""
    study, items, good = _study_with_question(utility_study)
    study.items.add(*items)  # what the bundle writes: the study's items and sources
    study.sources.add(good)
    rationale = Rationale.objects.get(item=items[0], source=good)
    Rationale.objects.filter(pk=rationale.pk).update(text="BLUE-FACT: the sky is blue.")

    def answer(path, body):
        return 200, completion([" yes" if "BLUE-FACT" in str(body["prompt"]) else " no"]), {}

    with OpenAIServer(answer) as server:
        answerers = [RationaleSourceFactory(name=f"ans-{role}", kind="lm", backend="openai",
                                            model_name_or_path=f"ckpt-{role}", endpoint_url=server.url,
                                            decoding={"backoff_s": 0.01, "concurrency": 1}) for role in ("I", "IR")]
        _run_genu(good, items, *answerers)
    rationale.refresh_from_db()
    rationale.text = "Bananas are yellow."
    content_row_save(user=None, obj=rationale, changed=["text"])
    return study


def _elsewhere(study: Study, name: str) -> bytes:
    """The study's bundle under a dataset name not used here: every item, rationale, question and
    Gen-U prediction is made new, as on another installation."""
    return _resign(_rewrite(b"".join(bundle_stream(study=study, user=None)), "study.json", _renamed_dataset(name)))


def _rows(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(zipfile.ZipFile(io.BytesIO(data)).read(TABLE).decode())))


def _gen_u(results: dict) -> dict:
    """The copy's and the original's Gen-U less the answerer entries, which name this installation's
    answerer sources (ids) and how their jobs answered (a copy runs no job)."""
    gen_u = _numbers(results)["gen_u"]
    gen_u.pop("answerers")
    gen_u.pop("method")
    return gen_u


def test_a_copy_leaves_out_the_stale_gen_u_prediction_the_original_left_out(utility_study):
    study = _stale_study(utility_study)
    original = study_score(study=study, similarity=False)
    assert original.status == "done", original.error
    assert original.results["gen_u"]["inputs"]["by_source"]["good-lm"]["rationale_changed"] == 1
    data = _elsewhere(study, "genu-inputs-elsewhere")

    copy = bundle_import(file=io.BytesIO(data), name="genu-inputs-copy", owner=None)

    made = GenUPrediction.objects.filter(generalization_question__item__in=copy.items.all())
    assert made.count() == 2 and not made.filter(pk__in=GenUPrediction.objects.filter(
        generalization_question__item__in=study.items.all())).exists()
    rescored = study_score(study=copy, similarity=False)
    assert rescored.status == "done", rescored.error
    assert rescored.results["gen_u"]["inputs"]["by_source"]["good-lm"] == {
        "n_predictions": 2, "n_left_out": 1, "question_changed": 0, "rationale_changed": 1,
        "inputs_not_recorded": 0, "checkpoint_replaced": 0}
    assert _gen_u(rescored.results) == _gen_u(original.results)
    assert "good-lm" not in (rescored.results["gen_u"].get("tie_rules") or {}).get("by_source", {})
    assert [w for w in rescored.warnings if "Gen-U" in w] == [w for w in original.warnings if "Gen-U" in w]
    assert {r["answerer"]: sorted(json.loads(r["inputs"])) for r in _rows(data)} == {
        "I": ["question"], "IR": ["question", "rationale"]}  # no checkpoint, no training record


def _without_inputs_column(data: bytes) -> bytes:
    return _without_column(data, TABLE, "inputs")


def test_a_bundle_made_before_the_column_imports_its_predictions_as_not_recorded(utility_study):
    study = _stale_study(utility_study)
    data = _without_inputs_column(_elsewhere(study, "genu-inputs-old"))
    assert "inputs" not in _rows(data)[0]

    copy = bundle_import(file=io.BytesIO(data), name="genu-inputs-old-copy", owner=None)

    made = GenUPrediction.objects.filter(generalization_question__item__in=copy.items.all())
    assert [p.inputs for p in made] == [{}, {}]
    rescored = study_score(study=copy, similarity=False)
    assert rescored.results["gen_u"]["inputs"]["by_source"]["good-lm"]["inputs_not_recorded"] == 2


def _cell(**change) -> dict:
    return {"question": "0123456789ab", "rationale": "ba9876543210", **change}


@pytest.mark.parametrize(("answerer", "cell", "field", "reason"), [
    ("IR", "{", "inputs", "not JSON"),
    ("IR", "[]", "inputs", "expected a JSON object"),
    ("IR", json.dumps({"rationale": "ba9876543210"}), "inputs", "missing question"),
    ("I", json.dumps({"question": "0123456789ab", "checkpoint": {"3": "0123456789ab"}}), "inputs",
     "unknown 'checkpoint'"),
    ("IR", json.dumps(_cell(training={"preset": "x"})), "inputs", "unknown 'training'"),
    ("IR", json.dumps(_cell(question=7)), "inputs.question", "is not a fingerprint"),
    ("IR", json.dumps(_cell(rationale="BA9876543210")), "inputs.rationale", "is not a fingerprint"),
    ("IR", json.dumps(_cell(rationale="ba98765432")), "inputs.rationale", "is not a fingerprint"),
])
def test_a_malformed_inputs_cell_is_refused_by_row_and_nothing_is_written(utility_study, answerer, cell, field,
                                                                          reason):
    study = _stale_study(utility_study)
    data = _elsewhere(study, "genu-inputs-bad")
    index = next(i for i, r in enumerate(_rows(data)) if r["answerer"] == answerer)
    data = _edited_rows(data, TABLE, (index, {"inputs": cell}))
    studies, predictions = Study.objects.count(), GenUPrediction.objects.count()

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="genu-inputs-bad-copy", owner=None)

    (error,) = refused.value.errors
    assert (error.record, error.line, error.field) == (TABLE, index + 2, field) and reason in error.reason, error
    assert (Study.objects.count(), GenUPrediction.objects.count()) == (studies, predictions)


def test_a_prediction_here_answered_on_other_inputs_is_refused(utility_study):
    """A prediction the bundle shares with this installation (same question, source and answerer)
    is used only when it records the same inputs: the copy would score on another's otherwise."""
    study = _stale_study(utility_study)
    data = b"".join(bundle_stream(study=study, user=None))
    index = next(i for i, r in enumerate(_rows(data)) if r["answerer"] == "IR")
    data = _edited_rows(data, TABLE, (index, {"inputs": json.dumps(_cell())}))

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="genu-inputs-shared-copy", owner=None)
    (error,) = refused.value.errors
    assert (error.record, error.field) == (TABLE, "inputs") and "differs from this Gen-U prediction" in error.reason
