"""A generalization study borrows the utility of its original rationales from every study its owner
may view (``score.borrowed_utility``), so its results name studies another reader of it may not
view. A VIEW share of the borrowing study gets the borrowed utility and every figure built on it,
but not the id, name or score run of a lender it may not view: ``results_for_reader``
(``/results/``, the report page) and the bundle (results.json, settings.json,
data/borrowed_utility.csv, from the API and the admin) name it ``lender_withheld`` instead. The
owner, and a reader who may view the lender, see it as scored."""
from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest
from django.test import Client
from django.urls import reverse

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from scoring.models import ScoreRun
from scoring.selectors import LENDER_WITHHELD_ID, lender_withheld, results_for_reader
from scoring.services import study_score
from scoring.services.bundle.export import BUNDLE_READER
from studies.models import Platform, Study, StudyShare
from studies.services.sharing import study_share
from studies.services.studies import study_create
from tests.annotations.factories import TEST_CONSENT, make_study
from tests.cockpit.test_study_owner_rights import researcher_without_reference_views
from tests.scoring.test_bundle_borrowed_utility import (
    N_GENQ,
    N_ITEMS,
    N_SOURCES,
    _generalization_answer,
    _utility_answer,
)
from tests.scoring.test_results_for_reader import _body, api
from tests.work import work

pytestmark = pytest.mark.django_db

SECRET = "alice-secret-pilot"
SHARED = "alice-shared-utility"


def _other_utility_answer(claim, step):
    """``_utility_answer`` but right after the rationale on every item: another utility on some pairs."""
    return claim.unit.item.gold_answer if step == "after" else _utility_answer(claim, step)


def _scored_utility(owner, name: str, answer, *, dataset=None, sources=None) -> Study:
    if dataset is None:
        study = make_study(n_items=N_ITEMS, n_sources=N_SOURCES, n_genq=N_GENQ, quota=3, owner=owner,
                           units_per_task=N_ITEMS * N_SOURCES, name=name)
    else:
        study = study_open(study=study_create(
            name=name, dataset=dataset, kind=Study.Kind.UTILITY, sources=sources, annotators_per_unit=3,
            units_per_task=N_ITEMS * N_SOURCES, consent_text=TEST_CONSENT, owner=owner), user=OPERATOR)
    for n in range(3):
        work(study, f"{name}-U{n}", answer=answer, platform=Platform.LINK)
    study_close(user=OPERATOR, study=study)
    assert study_score(study=study, similarity=False).status == "done"
    return study


@pytest.fixture
def lab():
    """Alice's scored utility studies: her private pilot and one she shares with Bob, which give
    different utilities on some pairs; and her scored generalization study of the same items and
    sources, which borrows from both, shared with Bob at VIEW only."""
    alice, _ = researcher_without_reference_views("alice")
    bob, _ = researcher_without_reference_views("bob")
    pilot = _scored_utility(alice, SECRET, _utility_answer)
    sources = list(pilot.sources.order_by("id"))
    other = _scored_utility(alice, SHARED, _other_utility_answer, dataset=pilot.dataset, sources=sources)
    borrower = study_open(study=study_create(
        name="alice-generalization", dataset=pilot.dataset, kind=Study.Kind.GENERALIZATION, sources=sources,
        annotators_per_unit=3, units_per_task=N_ITEMS * N_SOURCES * N_GENQ, consent_text=TEST_CONSENT,
        owner=alice), user=OPERATOR)
    for n in range(3):
        work(borrower, f"G{n}", answer=_generalization_answer(n), platform=Platform.LINK)
    study_close(user=OPERATOR, study=borrower)
    run = study_score(study=borrower, similarity=False)
    assert run.status == "done", run.error
    study_share(study=borrower, user=alice, with_user=bob, level=StudyShare.Level.VIEW)
    study_share(study=other, user=alice, with_user=bob, level=StudyShare.Level.VIEW)
    # Both lend: one is chosen on each pair (the most counted answers, then the newest), the other
    # named where it gives another utility.
    named = _lenders(run.results)
    assert {e["id"] for e in named} == {pilot.pk, other.pk} and pilot.pk in {e["id"] for e in named[1:]} | {
        e["id"] for e in run.results["generalization"]["original_utility_from"]["studies"]}
    return {"alice": alice, "bob": bob, "pilot": pilot, "other": other, "borrower": borrower, "run": run}


def _bundle(client, path: str) -> dict[str, str]:
    response = client.get(path)
    assert response.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    return {name: archive.read(name).decode() for name in archive.namelist()}


def _outputs(lab, user) -> dict[str, str]:
    """Every copy of the borrowing study's results ``user`` is handed, as text."""
    borrower, run = lab["borrower"], lab["run"]
    client = api(user)
    page = Client()
    page.force_login(user)
    report = page.get(reverse("admin:scoring_scorerun_report", args=[run.pk]))
    assert report.status_code == 200
    run_page = page.get(reverse("admin:scoring_scorerun_change", args=[run.pk]))
    assert run_page.status_code == 200
    return {"results": _body(client.get(f"/api/v1/studies/{borrower.pk}/results/")),
            "report": report.content.decode(),
            # the run's warnings, listed apart from results.json (a warning names other lenders)
            "score run": _body(client.get(f"/api/v1/score-runs/{run.pk}/")),
            "score runs": _body(client.get(f"/api/v1/score-runs/?study={borrower.pk}")),
            "run page": run_page.content.decode(),
            **{f"api {k}": v for k, v in _bundle(client, f"/api/v1/studies/{borrower.pk}/bundle/").items()},
            **{f"admin {k}": v for k, v in _bundle(
                page, reverse("admin:studies_study_bundle", args=[borrower.pk])).items()}}


def _lenders(results: dict) -> list[dict]:
    """Every entry of ``results`` that names a lending study."""
    gen = results["generalization"]
    provenance = gen["original_utility_from"]
    return [*provenance["studies"], *provenance["other_lenders"], *provenance["not_scored_here"],
            *gen["by_utility_other_lenders"]]


NAMING = ("id", "name", "score_run")


def _without_names(entries: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k not in NAMING} for e in entries]


def _rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_a_view_share_gets_no_id_name_or_run_of_a_lender_it_may_not_view(lab):
    bob, alice, pilot, other = lab["bob"], lab["alice"], lab["pilot"], lab["other"]
    assert api(bob).get(f"/api/v1/studies/{pilot.pk}/").status_code == 404
    pilot_run = ScoreRun.objects.get(study=pilot, status="done")

    outputs, owner = _outputs(lab, bob), _outputs(lab, alice)

    leaks = [name for name, text in outputs.items() if SECRET in text]
    assert not leaks, leaks
    results, owners = json.loads(outputs["results"]), json.loads(owner["results"])
    shown, scored = _lenders(results), _lenders(owners)
    withheld = [(e["id"], e["name"], e["score_run"]) for e in shown if e["name"] != SHARED]
    assert withheld and set(withheld) == {(None, lender_withheld(), None)}
    assert [e["id"] for e in shown if e["name"] == SHARED] == [other.pk for e in scored if e["id"] == other.pk]
    assert pilot_run.pk not in {e["score_run"] for e in shown}
    # What the lenders lent, and every figure, are the owner's.
    assert _without_names(shown) == _without_names(scored)
    for key in ("by_utility", "consistency", "all", "by_type", "by_source"):
        assert results["generalization"][key] == owners["generalization"][key], key
    assert len(results["warnings"]) == len(owners["warnings"])
    if any(SECRET in w for w in owners["warnings"]):
        assert any(repr(lender_withheld()) in w for w in results["warnings"])

    for where in ("api", "admin"):
        settings = json.loads(outputs[f"{where} settings.json"])["borrowed_utility"]
        provenance = settings["from"]
        entries = [*provenance["studies"], *provenance["other_lenders"]]
        assert {(e["id"], e["name"], e["score_run"]) for e in entries if e["name"] != SHARED} == {
            (None, lender_withheld(BUNDLE_READER), None)}
        assert settings["same_as_latest_run"] is True
        assert json.loads(outputs[f"{where} results.json"])["generalization"]["original_utility_from"] == provenance
        assert _rows(outputs[f"{where} data/borrowed_utility.csv"]) == [
            {**r, "study_id": str(LENDER_WITHHELD_ID) if r["study_id"] == str(pilot.pk) else r["study_id"]}
            for r in _rows(owner[f"{where} data/borrowed_utility.csv"])]


def test_a_row_lent_by_a_withheld_study_has_no_study_id(lab):
    """Where Bob may view neither lender, every row of data/borrowed_utility.csv carries
    ``LENDER_WITHHELD_ID`` in place of its lender's id, with the utility the owner's has."""
    bob, alice = lab["bob"], lab["alice"]
    StudyShare.objects.filter(study=lab["other"], user=bob).delete()

    outputs, owner = _outputs(lab, bob), _outputs(lab, alice)

    assert not [name for name, text in outputs.items() if SECRET in text or SHARED in text]
    rows, owners = _rows(outputs["api data/borrowed_utility.csv"]), _rows(owner["api data/borrowed_utility.csv"])
    assert {r["study_id"] for r in rows} == {str(LENDER_WITHHELD_ID)}
    assert [{**r, "study_id": ""} for r in rows] == [{**r, "study_id": ""} for r in owners]
    assert len({r["study_id"] for r in owners}) >= 1 and str(LENDER_WITHHELD_ID) not in {r["study_id"] for r in owners}


def test_the_owner_and_a_reader_of_the_lender_see_every_lender(lab):
    alice, bob, pilot, run = lab["alice"], lab["bob"], lab["pilot"], lab["run"]

    owner = _outputs(lab, alice)

    for name in ("results", "report", "api results.json", "api settings.json", "admin settings.json"):
        assert SECRET in owner[name] and "withheld: a study" not in owner[name], name
    body = json.loads(owner["results"])
    body.pop("scores_stale")
    assert body == json.loads(json.dumps(run.results))
    assert str(LENDER_WITHHELD_ID) not in {r["study_id"] for r in _rows(owner["api data/borrowed_utility.csv"])}
    assert results_for_reader(run, user=None) is run.results  # the operator

    study_share(study=pilot, user=alice, with_user=bob, level=StudyShare.Level.VIEW)
    assert results_for_reader(run, user=bob) == run.results
    assert SECRET in _outputs(lab, bob)["api settings.json"]
    assert ScoreRun.objects.get(pk=run.pk).results == run.results  # what is stored is unchanged


def test_the_runs_warnings_name_no_lender_a_reader_may_not_view(lab):
    # The API's score run and the admin's run page list the warnings apart from results.json: they
    # named the private pilot (a warning quotes the other lenders) to a reader of the borrower only.
    owner, reader = _outputs(lab, lab["alice"]), _outputs(lab, lab["bob"])
    named = [name for name in ("score run", "score runs", "run page") if SECRET in owner[name]]
    assert named, "the owner's warnings name the pilot: the setup lends from it on some pair"
    assert [name for name in named if SECRET in reader[name]] == []
    assert all(lender_withheld() in reader[name] or "withheld: a study" in reader[name] for name in named)
