"""The scoring importers check the importing user's rights themselves (the project's "checks beside
the write"): a study bundle or an outcomes file never adds a rationale or a generalization question
that another researcher's study would show its workers (``studies.services.content``), and
outcomes go into an existing study only for a user who may change it, whoever calls the service
(the admin, the API, a command)."""
from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest
from django.contrib.auth.models import Permission

from scoring.models import UnitScore
from scoring.services import outcomes_import, outcomes_study_create
from scoring.services.bundle import BundleError, bundle_import, bundle_stream
from scoring.services.bundle.export import SOURCE_FIELDS
from scoring.services.outcomes import OutcomesStudyNotYours
from studies.models import (
    GeneralizationQuestion,
    GenUPrediction,
    ImportRecord,
    Rationale,
    RationaleSource,
    Study,
)
from studies.services.importers import ImportValidationError
from studies.services.studies import study_create
from tests.annotations.factories import make_study
from tests.factories import RationaleSourceFactory, staff
from tests.scoring.test_bundle import _resign

pytestmark = pytest.mark.django_db

NOT_YOURS = "used by a study you may not change"


@pytest.fixture
def alice():
    return staff("alice")[0]


@pytest.fixture
def bob():
    return staff("bob")[0]


# --- study bundles -------------------------------------------------------------------------------


def _bundle_with(study: Study, change) -> bytes:
    """``study``'s bundle with its files changed by ``change`` (path -> bytes, in place) and its
    checksums recomputed, as someone crafting a bundle would."""
    src = zipfile.ZipFile(io.BytesIO(b"".join(bundle_stream(study=study, user=None))))
    files = {n: src.read(n) for n in src.namelist()}
    change(files)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for n, c in files.items():
            dst.writestr(n, c)
    return _resign(out.getvalue())


def _append_row(files: dict, path: str, values: dict) -> int:
    """Append a row (the table's other cells empty) to a CSV of the bundle; returns its line."""
    text = files[path].decode()
    header = next(csv.reader(io.StringIO(text)))
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow([values.get(name, "") for name in header])
    text = text if text.endswith("\n") else text + "\n"
    files[path] = (text + buffer.getvalue()).encode()
    return len(text.splitlines()) + 1


def test_a_bundle_adding_a_rationale_another_researchers_draft_shows_is_refused(alice, bob):
    origin = make_study(n_items=2, n_sources=1, status=Study.Status.CLOSED, name="bundle-rights-origin")
    item = origin.items.order_by("pk").first()
    gpt3 = RationaleSourceFactory(name="gpt3")  # no rationale of it yet
    bobs = study_create(name="Bob's draft", dataset=origin.dataset, sources=[gpt3], owner=bob)
    assert bobs.status == Study.Status.DRAFT and item in bobs.items.all()
    line = {}

    def add_gpt3_rationale(files):
        design = json.loads(files["study.json"])
        design["sources"].append({f: getattr(gpt3, f) for f in SOURCE_FIELDS})
        files["study.json"] = json.dumps(design).encode()
        line["at"] = _append_row(files, "data/rationales.csv",
                                 {"item_id": item.pk, "source": "gpt3", "text": "Alice's text."})

    data = _bundle_with(origin, add_gpt3_rationale)
    studies, rationales = Study.objects.count(), Rationale.objects.count()

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="alice-copy", owner=alice)

    [error] = refused.value.errors
    assert (error.record, error.line) == ("data/rationales.csv", line["at"]) and NOT_YOURS in error.reason
    assert Study.objects.count() == studies and Rationale.objects.count() == rationales
    assert not Rationale.objects.filter(item=item, source=gpt3).exists()
    assert not ImportRecord.objects.filter(kind="bundle").exists()

    # Bob may add to what his own study shows.
    copy = bundle_import(file=io.BytesIO(data), name="bob-copy", owner=bob)
    assert copy.owner == bob
    assert Rationale.objects.get(item=item, source=gpt3).text == "Alice's text."


def test_a_bundle_adding_a_generalization_question_another_researchers_study_draws_is_refused(alice, bob):
    origin = make_study(kind=Study.Kind.GENERALIZATION, n_items=2, n_sources=1, n_genq=1,
                        status=Study.Status.CLOSED, name="bundle-rights-generalization")
    item = origin.items.order_by("pk").first()
    bobs = study_create(name="Bob's generalization draft", kind=Study.Kind.GENERALIZATION, dataset=origin.dataset,
                        sources=list(origin.sources.all()), owner=bob)
    assert item in bobs.items.all()
    line = {}

    def add_question(files):
        rows = list(csv.DictReader(io.StringIO(files["data/generalization_questions.csv"].decode())))
        new = {**rows[0], "id": str(max(int(r["id"]) for r in rows) + 1000), "item_id": str(item.pk),
               "text": "Alice's new question?"}
        line["at"] = _append_row(files, "data/generalization_questions.csv", new)

    data = _bundle_with(origin, add_question)
    studies, questions = Study.objects.count(), GeneralizationQuestion.objects.count()

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="alice-copy", owner=alice)

    [error] = refused.value.errors
    assert (error.record, error.line) == ("data/generalization_questions.csv", line["at"])
    assert NOT_YOURS in error.reason
    assert Study.objects.count() == studies and GeneralizationQuestion.objects.count() == questions

    # The operator (a management command: no owner) may.
    bundle_import(file=io.BytesIO(data), name="operator-copy", owner=None)
    assert GeneralizationQuestion.objects.filter(item=item, text="Alice's new question?").exists()


def test_a_bundle_adding_gen_u_predictions_another_researchers_study_would_score_is_refused(alice, bob):
    # Bob's draft shows the source's rationales of the origin's items, so his Gen-U reads the
    # predictions of their generalization questions for that source: Alice's bundle may not add one.
    origin = make_study(kind=Study.Kind.GENERALIZATION, n_items=2, n_sources=1, n_genq=1,
                        status=Study.Status.CLOSED, name="bundle-rights-gen-u")
    item = origin.items.order_by("pk").first()
    source = origin.sources.get()
    question = GeneralizationQuestion.objects.filter(item=item).first()
    bobs = study_create(name="Bob's utility draft", dataset=origin.dataset, sources=[source], owner=bob)
    assert item in bobs.items.all()
    line = {}

    def add_prediction(files):
        line["at"] = _append_row(files, "data/genu_predictions.csv", {
            "generalization_question_id": question.pk, "source": source.name, "answerer": "I",
            "predicted_answer": "yes", "correct": "true"})

    data = _bundle_with(origin, add_prediction)
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="alice-copy", owner=alice)
    [error] = refused.value.errors
    assert (error.record, error.line) == ("data/genu_predictions.csv", line["at"]) and NOT_YOURS in error.reason
    assert not GenUPrediction.objects.exists()

    # The origin study (the operator's) scores them too: only the operator may add them.
    bundle_import(file=io.BytesIO(data), name="operator-copy", owner=None)
    assert GenUPrediction.objects.filter(generalization_question=question, rationale_source=source).count() == 1


# --- outcomes ------------------------------------------------------------------------------------


def _gpt3_lines(utility_file, tmp_path, n=2):
    rows = [line for line in utility_file.read_text().splitlines() if '"rationale_source":"gpt3"' in line][:n]
    path = tmp_path / "gpt3.json"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_outcomes_adding_a_rationale_another_researchers_draft_shows_are_refused(
        alice, bob, strategyqa_test_items, utility_file, tmp_path):
    gpt3 = RationaleSourceFactory(name="gpt3")  # Bob lists it; it has no rationale yet
    study_create(name="Bob's draft", dataset=strategyqa_test_items, sources=[gpt3], owner=bob)
    path = _gpt3_lines(utility_file, tmp_path)

    with pytest.raises(ImportValidationError) as refused:
        outcomes_study_create(name="Alice's outcomes", dataset=strategyqa_test_items, file=path, owner=alice,
                              user=alice)

    assert [e.line for e in refused.value.errors] == [1, 2]
    assert all(NOT_YOURS in e.reason for e in refused.value.errors)
    assert not Study.objects.filter(name="Alice's outcomes").exists()
    assert not Rationale.objects.filter(source=gpt3).exists() and not UnitScore.objects.exists()

    # Bob may.
    _, summary = outcomes_study_create(name="Bob's outcomes", dataset=strategyqa_test_items, file=path, owner=bob,
                                       user=bob)
    assert summary["rationales_created"] == 2 and Rationale.objects.filter(source=gpt3).count() == 2


def test_outcomes_go_into_an_existing_study_only_for_a_user_who_may_change_it(
        alice, bob, strategyqa_test_items, utility_file, tmp_path):
    path = _gpt3_lines(utility_file, tmp_path)
    bobs, _ = outcomes_study_create(name="Bob's outcomes", dataset=strategyqa_test_items, file=path, owner=bob,
                                    user=bob)
    more = _gpt3_lines(utility_file, tmp_path, n=4)
    scores = set(UnitScore.objects.values_list("pk", "study_id", "item_id", "source_id"))

    with pytest.raises(OutcomesStudyNotYours) as refused:
        outcomes_import(study=bobs, file=more, user=alice)
    assert refused.value.errors[0].field == "study" and "you may not change it" in refused.value.errors[0].reason
    with pytest.raises(OutcomesStudyNotYours):
        outcomes_study_create(name="Bob's outcomes", dataset=strategyqa_test_items, file=more, owner=alice,
                              user=alice)
    assert set(UnitScore.objects.values_list("pk", "study_id", "item_id", "source_id")) == scores
    assert RationaleSource.objects.filter(name="gpt3").count() == 1

    # Bob, and the operator, may import into it again.
    assert outcomes_import(study=bobs, file=more, user=bob)["created"] == 2
    assert outcomes_study_create(name="Bob's outcomes", dataset=strategyqa_test_items, file=more,
                                 user=None)[1]["unchanged"] == 4


# --- creating the study ----------------------------------------------------------------------------


def test_the_imports_create_a_study_only_for_a_user_who_may_create_studies(strategyqa_test_items, utility_file,
                                                                          tmp_path):
    # Study creation is checked in the services, not only by the admin's and the API's views: a
    # user with every other permission but studies.add_study gets no study from either import.
    carol = staff("carol")[0]
    carol.user_permissions.remove(Permission.objects.get(content_type__app_label="studies", codename="add_study"))
    carol = type(carol).objects.get(pk=carol.pk)  # permissions are cached per instance
    path = _gpt3_lines(utility_file, tmp_path)
    origin = make_study(n_items=2, n_sources=1, status=Study.Status.CLOSED, name="bundle-add-origin")
    data = b"".join(bundle_stream(study=origin, user=None))
    studies = Study.objects.count()

    with pytest.raises(ImportValidationError) as refused:
        outcomes_study_create(name="Carol's outcomes", dataset=strategyqa_test_items, file=path, owner=carol,
                              user=carol)
    [error] = refused.value.errors
    assert error.field == "study" and "studies.add_study" in error.reason
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="carol-copy", owner=carol)
    [error] = refused.value.errors
    assert error.field == "owner" and "studies.add_study" in error.reason
    assert Study.objects.count() == studies and not UnitScore.objects.exists()
    assert not ImportRecord.objects.exists()

    # With the permission both create it.
    carol.user_permissions.add(Permission.objects.get(content_type__app_label="studies", codename="add_study"))
    carol = type(carol).objects.get(pk=carol.pk)
    study, _ = outcomes_study_create(name="Carol's outcomes", dataset=strategyqa_test_items, file=path, owner=carol,
                                     user=carol)
    assert study.owner == carol and UnitScore.objects.filter(study=study).count() == 2
    assert bundle_import(file=io.BytesIO(data), name="carol-copy", owner=carol).owner == carol
