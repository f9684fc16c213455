"""Results are computed with the study owner's rights (``genu.answerer_sources_readable``), so they
may name the fine-tuning and answering settings of a Gen-U answerer source that another reader of
the study may not read. Every copy a reader is handed (``/results/``, ``/summary/``, ``/scores/``,
both exports, the bundle's results.json and settings.json, the report page and its download) goes
through ``scoring.selectors.results_for_reader``: such a reader gets the answerer's model and why
the rest is withheld, in the bundle's study.json wording (``ANSWERER_WITHHELD``); the owner, a
reader of the source and the operator get everything as before."""
from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from rest_framework.test import APIClient

from scoring.models import ScoreRun
from scoring.selectors import ANSWERER_WITHHELD_UNRECORDED, answerer_withheld, results_for_reader
from scoring.services import study_score
from scoring.services.bundle.export import WITHHELD
from studies.api.tokens import api_token_create
from studies.models import GenUPrediction, Study, StudyShare
from studies.selectors import sources_for_user
from studies.services.questions import generalization_questions_set_validation
from studies.services.sharing import study_share
from studies.services.studies import study_update
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.factories import GeneralizationQuestionFactory, RationaleSourceFactory
from tests.scoring.conftest import utility_study  # noqa: F401
from tests.scoring.test_services_score import collect, make_unit

pytestmark = pytest.mark.django_db

PRESET = "DAVE-SECRET-PRESET"
BASE = "DAVE-SECRET-BASE"
DATASET = "DAVE-SECRET-DATA"
SECRETS = (PRESET, BASE, DATASET, "DAVE-OVERRIDE")
WITHHELD_FOR_READER = answerer_withheld()


def api(user) -> APIClient:
    _, key = api_token_create(user=user, name="t", read_only=False, by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _body(response) -> str:
    assert response.status_code == 200, response.content[:500]
    return (b"".join(response.streaming_content) if response.streaming else response.content).decode()


@pytest.fixture
def shared(utility_study):  # noqa: F811
    """Alice's scored study, whose Gen-U Dave's fine-tuned source (which Alice may read, Carol not)
    answered, shared with Carol at view level."""
    study, items, good, _ = utility_study
    alice, _ = researcher_without_reference_views("alice")
    carol, _ = researcher_without_reference_views("carol")
    alice.user_permissions.add(Permission.objects.get(content_type__app_label="studies",
                                                      codename="view_rationalesource"))
    alice = type(alice).objects.get(pk=alice.pk)
    study.owner = alice
    study.save()
    study.sources.add(good)
    collect(study, make_unit(study, items[0], good), [("no", "yes")] * 5)
    question = GeneralizationQuestionFactory(item=items[0], text="q?", answer="yes")
    generalization_questions_set_validation(questions=[question], status="valid")
    dave_ft = RationaleSourceFactory(
        name="dave-ft", kind="lm", backend="seq2seq", model_name_or_path="dave/ckpt", template="DAVE-TEMPLATE",
        training={"preset": PRESET, "overrides": ["DAVE-OVERRIDE"], "base_model": BASE,
                  "data": {"dataset": DATASET, "split": "train"}})
    for role in ("I", "IR"):
        GenUPrediction.objects.create(generalization_question=question, rationale_source=good, answerer=role,
                                      answerer_source=dave_ft, answerer_model="dave/ckpt", predicted_answer="yes",
                                      correct=True)
    run = study_score(study=study, similarity=False)
    assert run.status == "done", run.error
    study_share(study=study, user=alice, with_user=carol, level=StudyShare.Level.VIEW)
    assert not sources_for_user(user=carol).filter(pk=dave_ft.pk).exists()
    return {"study": study, "run": run, "alice": alice, "carol": carol, "dave_ft": dave_ft}


def _outputs(study, user) -> dict[str, str]:
    """Every reader-facing copy of the run's results, for ``user``."""
    client = api(user)
    bundle = zipfile.ZipFile(io.BytesIO(b"".join(client.get(f"/api/v1/studies/{study.pk}/bundle/").streaming_content)))
    return {
        "results": _body(client.get(f"/api/v1/studies/{study.pk}/results/")),
        "summary": _body(client.get(f"/api/v1/studies/{study.pk}/summary/")),
        "scores": _body(client.get(f"/api/v1/scores/?study={study.pk}")),
        "export_scores": _body(client.get(f"/api/v1/studies/{study.pk}/export/scores/?file_format=csv")),
        "export_annotations": _body(client.get(f"/api/v1/studies/{study.pk}/export/annotations/?file_format=csv")),
        **{f"bundle {name}": bundle.read(name).decode() for name in ("study.json", "results.json", "settings.json")},
    }


def test_a_view_share_gets_no_settings_of_an_answerer_source_it_may_not_read(shared):
    study, carol = shared["study"], shared["carol"]

    outputs = _outputs(study, carol)

    leaks = {name: [s for s in SECRETS if s in text] for name, text in outputs.items()}
    assert not any(leaks.values()), leaks
    results = json.loads(outputs["results"])
    for role in ("F^I", "F^IR"):
        [entry] = results["gen_u"]["answerers"][role]
        assert entry == {"model": "dave/ckpt", "matched_by": "answerer source", "withheld": WITHHELD_FOR_READER}
    assert f"F^I dave/ckpt ({WITHHELD_FOR_READER})" in results["gen_u"]["method"]
    assert WITHHELD_FOR_READER in json.loads(outputs["summary"])[0]["gen_u_method"]
    bundle_results = json.loads(outputs["bundle results.json"])
    assert bundle_results["gen_u"]["answerers"]["F^I"][0]["withheld"] == WITHHELD  # study.json's wording
    assert json.loads(outputs["bundle settings.json"])["latest_run"]["gen_u"]["answerers"]["F^IR"][0][
        "withheld"] == WITHHELD
    # the figures themselves are the same as the owner's
    assert bundle_results["gen_u"]["n_questions"] == shared["run"].results["gen_u"]["n_questions"]


def test_the_owner_and_a_reader_of_the_source_get_the_settings_as_scored(shared):
    study, run, carol = shared["study"], shared["run"], shared["carol"]
    entry = run.results["gen_u"]["answerers"]["F^I"][0]
    assert entry["answerer_source"] == shared["dave_ft"].pk  # the results record whose settings they are

    owner = _outputs(study, shared["alice"])
    body = json.loads(owner["results"])
    assert body.pop("scores_stale")["stale"] is False  # beside the run's results: are they still current
    assert body == json.loads(json.dumps(run.results))
    for name in ("results", "summary", "scores", "export_scores", "bundle results.json", "bundle settings.json"):
        assert PRESET in owner[name] and "withheld" not in owner[name], name
    assert results_for_reader(run, user=None) is run.results  # the operator

    carol.user_permissions.add(Permission.objects.get(content_type__app_label="studies",
                                                      codename="view_rationalesource"))
    carol = type(carol).objects.get(pk=carol.pk)
    assert results_for_reader(run, user=carol) == run.results
    assert PRESET in _outputs(study, carol)["results"]


def test_an_old_run_without_the_source_shows_its_settings_only_to_the_owner_and_the_requester(shared):
    run, alice, carol = shared["run"], shared["alice"], shared["carol"]
    # A run scored before the answerers recorded their source (results.json as it was then).
    results = json.loads(json.dumps(run.results))
    for entries in results["gen_u"]["answerers"].values():
        for entry in entries:
            del entry["answerer_source"]
    ScoreRun.objects.filter(pk=run.pk).update(results=results)
    run.refresh_from_db()

    shown = results_for_reader(run, user=carol)
    [entry] = shown["gen_u"]["answerers"]["F^I"]
    assert entry["withheld"] == ANSWERER_WITHHELD_UNRECORDED and PRESET not in json.dumps(shown)
    assert PRESET in results_for_reader(run, user=alice)["gen_u"]["method"]
    ScoreRun.objects.filter(pk=run.pk).update(requested_by=carol)
    run.refresh_from_db()
    assert PRESET in results_for_reader(run, user=carol)["gen_u"]["method"]


def test_the_report_page_and_its_download_withhold_them_too(shared, client):
    run, carol = shared["run"], shared["carol"]
    client.force_login(carol)

    page = client.get(reverse("admin:scoring_scorerun_report", args=[run.pk]))
    download = client.get(reverse("admin:scoring_scorerun_download", args=[run.pk]))

    assert page.status_code == 200 and download.status_code == 200
    text = page.content.decode()
    assert PRESET not in text and "withheld" in text
    archive = zipfile.ZipFile(io.BytesIO(download.content))
    assert not [name for name in archive.namelist() if PRESET in archive.read(name).decode(errors="replace")]


def test_the_score_run_admin_page_withholds_them_too(shared, client):
    """The run's own admin page shows its results: as the reader may read them, like the report."""
    run, carol, alice = shared["run"], shared["carol"], shared["alice"]
    client.force_login(carol)
    page = client.get(reverse("admin:scoring_scorerun_change", args=[run.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert not [s for s in SECRETS if s in text] and "withheld" in text
    client.force_login(alice)
    assert PRESET in client.get(reverse("admin:scoring_scorerun_change", args=[run.pk])).content.decode()
    run.refresh_from_db()
    assert run.results["gen_u"]["answerers"]  # the stored results are unchanged
    assert PRESET in str(run.results)


def _hand_to_carol(shared):
    """Alice hands her study to Carol (who holds studies.change_study but may not read Dave's source),
    as the study page and the API do."""
    study, alice, carol = shared["study"], shared["alice"], shared["carol"]
    study_update(study=Study.objects.get(pk=study.pk), user=alice, owner=carol)
    assert Study.objects.get(pk=study.pk).owner_id == carol.pk
    return type(carol).objects.get(pk=carol.pk)


def test_an_owner_handed_the_study_gets_no_settings_the_old_owner_could_read(shared):
    """Results are computed for the owner at run time: a study handed on after its run shows its new
    owner only what they may read, in every copy, as it does a share."""
    study, run = shared["study"], shared["run"]
    carol = _hand_to_carol(shared)
    assert not sources_for_user(user=carol).filter(pk=shared["dave_ft"].pk).exists()

    outputs = _outputs(study, carol)

    leaks = {name: [s for s in SECRETS if s in text] for name, text in outputs.items()}
    assert not any(leaks.values()), leaks
    [entry] = json.loads(outputs["results"])["gen_u"]["answerers"]["F^I"]
    assert entry == {"model": "dave/ckpt", "matched_by": "answerer source", "withheld": WITHHELD_FOR_READER}
    assert json.loads(outputs["bundle results.json"])["gen_u"]["answerers"]["F^IR"][0]["withheld"] == WITHHELD
    assert results_for_reader(run, user=None) is run.results  # the operator still gets everything
    assert PRESET in str(ScoreRun.objects.get(pk=run.pk).results)  # and the stored results are unchanged


def test_an_old_run_without_the_source_shows_a_new_owner_nothing_they_may_not_read(shared):
    """A run from before the answerers recorded their source does not say whose rights named the
    settings: they are kept for a reader who may read a source with those very settings (the old
    owner, here) and for the run's requester, not for an owner the study was handed to."""
    run, alice = shared["run"], shared["alice"]
    results = json.loads(json.dumps(run.results))
    for entries in results["gen_u"]["answerers"].values():
        for entry in entries:
            del entry["answerer_source"]
    ScoreRun.objects.filter(pk=run.pk).update(results=results)
    run.refresh_from_db()
    carol = _hand_to_carol(shared)

    shown = results_for_reader(run, user=carol)
    [entry] = shown["gen_u"]["answerers"]["F^I"]
    assert entry["withheld"] == ANSWERER_WITHHELD_UNRECORDED and not [s for s in SECRETS if s in json.dumps(shown)]
    assert PRESET in results_for_reader(run, user=alice)["gen_u"]["method"]  # she may read Dave's source
    ScoreRun.objects.filter(pk=run.pk).update(requested_by=carol)
    run.refresh_from_db()
    assert PRESET in results_for_reader(run, user=carol)["gen_u"]["method"]
