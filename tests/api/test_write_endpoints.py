"""Write endpoints: create a study from a JSON design, import files, start scoring and generation
jobs and read their progress. 201/202 on success, 400 naming the field, 401/403/404."""
from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from scoring.models import ScoreRun
from studies.models import GenerationJob, ImportRecord, Item, RationaleSource, Study
from tests.api.conftest import grant
from tests.factories import DatasetFactory, ItemFactory, RationaleSourceFactory

pytestmark = pytest.mark.django_db


def design(dataset_obj, source_objs, **overrides) -> dict:
    body = {
        "name": "api-pilot", "kind": "utility", "dataset": dataset_obj.name, "split": "test",
        "sources": [s.name for s in source_objs], "annotators_per_unit": 3, "units_per_task": 2,
        "reward": "2.50", "hourly_pay_floor": "15.00", "estimated_minutes_per_task": "8.0",
    }
    body.update(overrides)
    return body


# --- Studies ------------------------------------------------------------------------------
def test_create_a_study_from_a_json_design(client_for, researcher, other_researcher, study_data):
    client = client_for(researcher)
    body = design(study_data.study.dataset, study_data.sources, shared_with=[other_researcher.username])
    response = client.post("/api/v1/studies/", body, format="json")
    assert response.status_code == 201, response.json()
    created = response.json()
    study = Study.objects.get(pk=created["id"])
    assert study.owner == researcher and study.status == "draft"
    assert created["owner"] == "dana" and created["shared_with"] == ["olga"]
    assert set(study.sources.all()) == set(study_data.sources)
    assert created["n_items"] == study.items.count() == 2
    # The researcher it is shared with can read it; nobody else.
    assert client_for(other_researcher).get(f"/api/v1/studies/{study.pk}/").status_code == 200


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"dataset": "no-such-dataset"}, "dataset"),
        ({"sources": ["no-such-source"]}, "sources"),
        ({"annotators_per_unit": 0}, "annotators_per_unit"),
        ({"split": "holdout"}, "split"),
        ({"reward": "-1"}, "reward"),
        ({"name": ""}, "name"),
        ({"name": "utility-study"}, "name"),  # taken by the fixture's study
        ({"shared_with": ["nobody"]}, "shared_with"),
    ],
)
def test_bad_study_designs_are_400_naming_the_field(client_for, researcher, study_data, overrides, field):
    body = design(study_data.study.dataset, study_data.sources, **overrides)
    response = client_for(researcher).post("/api/v1/studies/", body, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert Study.objects.count() == 1


def test_a_refused_username_or_study_name_says_the_same_whoever_it_belongs_to(client_for, researcher, make_user,
                                                                              study_data):
    # Regression (issue 20, item 11): the 400s told whether a username or another's study existed.
    gone = make_user("gone")
    gone.is_active = False
    gone.save()
    client = client_for(researcher)
    said = {}
    for name in ("nobody", "gone"):
        response = client.post("/api/v1/studies/", design(study_data.study.dataset, study_data.sources,
                                                          shared_with=[name]), format="json")
        assert response.status_code == 400
        said[name] = response.json()["shared_with"][0].replace(name, "NAME")
    assert said["nobody"] == said["gone"] == "'NAME': not found or not yours."
    other = make_user("olga2", perms=["studies.add_study", "studies.view_dataset", "studies.view_rationalesource"])
    theirs = client_for(other).post("/api/v1/studies/", design(study_data.study.dataset, study_data.sources,
                                                               name="olgas-study"), format="json")
    assert theirs.status_code == 201, theirs.json()
    for taken in ("olgas-study", "utility-study"):  # another researcher's, the researcher's own
        response = client.post("/api/v1/studies/", design(study_data.study.dataset, study_data.sources, name=taken),
                               format="json")
        assert response.json()["name"] == [f"The name {taken!r} is not available: choose another name."]


def test_a_design_the_study_service_refuses_is_400_with_its_message(client_for, researcher, study_data):
    body = design(study_data.study.dataset, [], name="no-sources")
    response = client_for(researcher).post("/api/v1/studies/", body, format="json")
    assert response.status_code == 400
    # The design rules name the field they refuse (``study_design_problems``).
    assert "rationale source" in response.json()["sources"][0]
    assert not Study.objects.filter(name="no-sources").exists()


def test_create_study_needs_the_add_study_permission(client_for, make_user, study_data):
    client = client_for(make_user("reader"))
    response = client.post("/api/v1/studies/", design(study_data.study.dataset, study_data.sources), format="json")
    assert response.status_code == 403
    assert "studies.add_study" in response.json()["detail"]


# --- Imports ------------------------------------------------------------------------------
STRATEGYQA_ROWS = [
    {"qid": "q1", "question": "Is water wet?", "answer": True, "facts": ["Water is a liquid."]},
    {"qid": "q2", "question": "Can a fish climb trees?", "answer": False, "facts": ["Fish live in water."]},
]


def upload(name: str, content: str) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content.encode("utf-8"), content_type="application/json")


def test_import_a_strategyqa_file(client_for, researcher):
    response = client_for(researcher).post(
        "/api/v1/imports/",
        {"kind": "strategyqa", "dataset": "sqa-api", "file": upload("sqa_test.json", json.dumps(STRATEGYQA_ROWS))},
        format="multipart",
    )
    assert response.status_code == 201, response.json()
    record = ImportRecord.objects.get(pk=response.json()["id"])
    assert record.created == 2 and record.imported_by == researcher
    assert set(Item.objects.filter(dataset__name="sqa-api").values_list("split", flat=True)) == {"test"}
    listed = client_for(researcher).get("/api/v1/imports/").json()["results"]
    assert [r["id"] for r in listed] == [record.pk]


def test_import_of_a_real_strategyqa_split(client_for, researcher, strategyqa_dir):
    path = strategyqa_dir / "strategyqa_processed_dev.json"
    with path.open("rb") as fh:
        response = client_for(researcher).post(
            "/api/v1/imports/", {"kind": "strategyqa", "file": fh}, format="multipart"
        )
    assert response.status_code == 201, response.json()
    assert response.json()["created"] == 184


def test_a_bad_import_file_is_400_with_every_row_and_imports_nothing(client_for, researcher):
    rows = STRATEGYQA_ROWS + [{"qid": "q3", "question": "", "answer": "maybe"}]
    response = client_for(researcher).post(
        "/api/v1/imports/",
        {"kind": "strategyqa", "dataset": "sqa-bad", "file": upload("sqa_test.json", json.dumps(rows, indent=1))},
        format="multipart",
    )
    assert response.status_code == 400
    body = response.json()
    assert "nothing imported" in body["file"][0]
    fields = {e["field"] for e in body["errors"]}
    assert {"question", "answer"} <= fields and all(e["line"] for e in body["errors"])
    assert not Item.objects.filter(dataset__name="sqa-bad").exists()


@pytest.mark.parametrize(
    "form, field",
    [
        ({"kind": "spreadsheet"}, "kind"),
        ({"kind": "strategyqa"}, "file"),
        ({"kind": "rationales", "file": "x"}, "dataset"),
    ],
)
def test_import_form_errors_name_the_field(client_for, researcher, form, field):
    if form.get("file") == "x":
        form = {**form, "file": upload("r.jsonl", "{}")}
    response = client_for(researcher).post("/api/v1/imports/", form, format="multipart")
    assert response.status_code == 400
    assert field in response.json()


def test_import_needs_the_permission(client_for, make_user):
    response = client_for(make_user("reader")).post(
        "/api/v1/imports/", {"kind": "strategyqa", "file": upload("a.json", "[]")}, format="multipart"
    )
    assert response.status_code == 403


# --- Scoring jobs -------------------------------------------------------------------------
def test_start_scoring_and_poll_until_done(client_for, researcher, study_data, django_capture_on_commit_callbacks):
    client = client_for(researcher)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/v1/score-runs/", {"study": study_data.study.pk}, format="json")
    assert response.status_code == 202, response.json()
    run_id = response.json()["id"]
    progress = client.get(f"/api/v1/score-runs/{run_id}/").json()
    run = ScoreRun.objects.get(pk=run_id)
    assert progress["status"] == run.status == "done", run.error
    assert progress["has_results"] is True and run.task_id
    body = client.get(f"/api/v1/studies/{study_data.study.pk}/results/").json()
    assert body.pop("scores_stale")["stale"] is False
    assert body == run.results


def test_scoring_a_study_one_cannot_see_is_404(client_for, researcher, other_study_data):
    response = client_for(researcher).post("/api/v1/score-runs/", {"study": other_study_data.study.pk}, format="json")
    assert response.status_code == 404
    assert not ScoreRun.objects.filter(study=other_study_data.study, status="pending").exists()


def test_scoring_without_a_study_is_400(client_for, researcher):
    response = client_for(researcher).post("/api/v1/score-runs/", {"study": "three"}, format="json")
    assert response.status_code == 400 and "study" in response.json()


# --- Generation jobs ----------------------------------------------------------------------
# A researcher who starts LM jobs, reading the sources, datasets and items they run on.
JOB_STARTER = ("studies.add_generationjob", "studies.view_rationalesource", "studies.view_dataset", "studies.view_item")


@pytest.fixture
def lm_source(db):
    ItemFactory(dataset=DatasetFactory(name="gen-dataset"))
    return RationaleSourceFactory(
        name="tiny-t5", kind=RationaleSource.Kind.LM, backend="seq2seq", model_name_or_path="/models/tiny-t5"
    )


def test_start_a_generation_job_and_read_its_progress(client_for, make_user, lm_source):
    user = grant(make_user("priya"), *JOB_STARTER)
    item = ItemFactory()
    client = client_for(user)
    response = client.post(
        "/api/v1/generation-jobs/",
        {"kind": "rationales", "source": lm_source.name, "dataset": item.dataset.name, "split": "test"},
        format="json",
    )
    assert response.status_code == 202, response.json()
    job = GenerationJob.objects.get(pk=response.json()["id"])
    assert job.total == 1 and job.created_by == user
    progress = client.get(f"/api/v1/generation-jobs/{job.pk}/").json()
    assert progress["status"] == "queued" and progress["done"] == 0 and progress["total"] == 1


@pytest.mark.parametrize(
    "body, field",
    [
        ({"kind": "rationales", "dataset": "gen-dataset"}, "source"),
        ({"kind": "generalization_questions", "dataset": "gen-dataset"}, "generator"),
        ({"kind": "faithfulness", "dataset": "gen-dataset", "params": {"task_model": "/m", "task_backend": "causal"}},
         "source"),
        ({"kind": "rationales", "source": "tiny-t5"}, "dataset"),
        ({"kind": "rationales", "source": "nope", "dataset": "gen-dataset"}, "source"),
        ({"kind": "rationales", "source": "tiny-t5", "dataset": "no-such"}, "dataset"),
        ({"kind": "sing"}, "kind"),
    ],
)
def test_bad_generation_jobs_are_400_naming_the_field(client_for, make_user, lm_source, body, field):
    client = client_for(grant(make_user("priya"), *JOB_STARTER))
    response = client.post("/api/v1/generation-jobs/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()


def test_generation_service_errors_are_400(client_for, make_user):
    client = client_for(grant(make_user("priya"), *JOB_STARTER))
    not_lm = RationaleSourceFactory(name="imported-file")
    item = ItemFactory()
    response = client.post(
        "/api/v1/generation-jobs/", {"kind": "rationales", "source": not_lm.pk, "dataset": item.dataset.pk},
        format="json",
    )
    assert response.status_code == 400
    assert "not a language model source" in response.json()["non_field_errors"][0]


@pytest.mark.parametrize("kind, params, named", [
    ("quark", {"reward": "marker:is", "report": {"heldout": {"after": 1.0}}, "best": {"step": 1}, "checkpoint_step": 9,
               "history": []}, "params.best, params.checkpoint_step, params.history, params.report"),
    ("rationales", {"cursor": 10**6, "max_requests": 3}, "params.cursor"),
])
def test_a_job_refuses_parameters_it_does_not_document_naming_each(client_for, make_user, lm_source, kind, params,
                                                                   named):
    client = client_for(grant(make_user("priya"), *JOB_STARTER))
    response = client.post("/api/v1/generation-jobs/", {"kind": kind, "source": lm_source.name, "dataset": "gen-dataset",
                                                        "params": params}, format="json")
    assert response.status_code == 400
    assert response.json()["non_field_errors"][0].startswith(f"{named}: not a parameter of {kind} jobs")
    assert not GenerationJob.objects.exists()


def test_generation_jobs_need_the_permission(client_for, researcher, lm_source):
    response = client_for(researcher).post("/api/v1/generation-jobs/", {"kind": "rationales"}, format="json")
    assert response.status_code == 403


def test_text_that_cannot_be_stored_is_400_naming_the_field(client_for, researcher, study_data):
    client = client_for(researcher)
    body = design(study_data.study.dataset, study_data.sources, shared_with=["a\x00b"])
    response = client.post("/api/v1/studies/", body, format="json")
    # The JSON parser refuses it, naming where: no endpoint can store such text.
    assert response.status_code == 400 and "at shared_with[0]: the text contains a NUL" in response.json()["detail"]
    body = design(study_data.study.dataset, study_data.sources, instructions="\ud800")
    response = client.post("/api/v1/studies/", json.dumps(body), content_type="application/json")
    assert response.status_code == 400 and "at instructions: the text is not valid Unicode" in response.json()["detail"]
    # A form body: refused before the view (lab.middleware), naming the field.
    response = client.post("/api/v1/studies/", {**design(study_data.study.dataset, study_data.sources),
                                                "instructions": "a\x00b"}, format="multipart")
    assert response.status_code == 400 and "“instructions” of the form contains a NUL" in response.json()["detail"]
