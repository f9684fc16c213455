"""A generalization study's bundle carries the borrowed utility its latest run borrowed, stale unit
scores and all as that run judged them: a lender's task rejected after the run (nothing scored
again) neither drops pairs from data/borrowed_utility.csv nor calls the table another run's, it is
only noted (``pairs_stale_since_run``); the stale pairs the run named are mapped onto the copy's
items and sources at import, so the copy, on another installation, re-scores to the original's
warnings; and a hand-edited list of stale pairs is refused by settings.json and key, as a bad table
row is, while scoring a copy holding one (imported before the check) does not crash."""
from __future__ import annotations

import io
import json
import zipfile

import pytest

from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.platforms.review import assignment_reject
from scoring.models import BundledUtility
from scoring.selectors import bundle_import_record
from scoring.services import study_score
from scoring.services.bundle import BundleError, bundle_import, bundle_stream, export
from studies.models import Platform, Study
from tests.annotations.factories import make_study
from tests.scoring.test_bundle import _numbers, _resign, _rewrite
from tests.scoring.test_bundle_borrowed_utility import _borrower_of, _utility_answer
from tests.studies.helpers import RESEARCHER, researcher
from tests.work import work

pytestmark = pytest.mark.django_db

N_ITEMS, N_SOURCES, N_GENQ = 4, 2, 2
STALE_UNITS_NOTE = "generalization units appear under 'unknown' in the by-utility breakdown because"


def _lender_and_borrower():
    """``test_bundle_borrowed_utility._lender_and_borrower`` with the lender's units in tasks of
    four (six workers, three answers a unit), so that rejecting one task makes the unit scores of
    four of its eight pairs stale (one answer fewer counts) and leaves the others current. Returns
    the lender, the borrower and the lender's tasks."""
    lender = make_study(n_items=N_ITEMS, n_sources=N_SOURCES, n_genq=N_GENQ, quota=3, units_per_task=4,
                        name="lender-utility")
    tasks = [work(lender, f"U{n}", answer=_utility_answer, platform=Platform.LINK) for n in range(6)]
    study_close(user=OPERATOR, study=lender)
    assert study_score(study=lender, similarity=False).status == "done"
    return lender, _borrower_of(lender), tasks


def _reject(lender, task) -> None:
    assignment_reject(user=OPERATOR, study=lender, assignment=task, feedback="Failed the checks, sorry.")


def _bundle(study: Study) -> bytes:
    return b"".join(bundle_stream(study=study, user=None))


def _settings(data: bytes) -> dict:
    return json.loads(zipfile.ZipFile(io.BytesIO(data)).read("settings.json"))


def _rows(data: bytes) -> list[str]:
    return zipfile.ZipFile(io.BytesIO(data)).read("data/borrowed_utility.csv").decode().splitlines()[1:]


def _elsewhere() -> object:
    """The owner of a copy made on another installation: a researcher who may see none of the
    original's dataset and sources, so the copy gets its own items and sources (other ids)."""
    return researcher("elsewhere", *RESEARCHER)


def test_a_lender_gone_stale_after_the_run_leaves_the_bundle_what_the_run_borrowed():
    lender, borrower, tasks = _lender_and_borrower()
    original = study_score(study=borrower, similarity=False)
    assert original.status == "done", original.error
    by_utility = original.results["generalization"]["by_utility"]
    assert "unknown" not in by_utility
    _reject(lender, tasks[0])  # after the borrower's run: four lent pairs are stale now, nothing scored again

    data = _bundle(borrower)

    section = _settings(data)["borrowed_utility"]
    assert section["same_as_latest_run"] is True and "note" not in section  # no run was scored again since
    assert section["from"] == original.results["generalization"]["original_utility_from"]
    assert len(_rows(data)) == N_ITEMS * N_SOURCES  # every pair the run borrowed
    # today's staleness is a note only
    assert section["pairs_stale_since_run"] == 4 and section["stale_since_note"] == export.BORROWED_STALE_SINCE
    assert "stale_note" not in section

    copy = bundle_import(file=io.BytesIO(data), name="borrower-copy", filename="study.zip", owner=None)
    rescored = study_score(study=copy, similarity=False)
    assert rescored.status == "done", rescored.error
    assert rescored.results["generalization"]["by_utility"] == by_utility
    assert _numbers(rescored.results) == _numbers(original.results)
    assert not any("may differ from the bundle's results.json" in w for w in rescored.results["warnings"])

    # Once the lender is scored again, the run is no longer the one those runs gave: the existing rule.
    study_score(study=lender, similarity=False)
    section = _settings(_bundle(borrower))["borrowed_utility"]
    assert section["same_as_latest_run"] is False and section["note"] == export.BORROWED_NOT_THE_RUNS
    assert "pairs_stale_since_run" not in section


def test_a_copy_elsewhere_names_the_stale_pairs_as_the_original_did():
    lender, borrower, tasks = _lender_and_borrower()
    _reject(lender, tasks[0])  # before the borrower's run: it leaves four stale pairs out
    original = study_score(study=borrower, similarity=False)
    assert original.status == "done", original.error
    provenance = original.results["generalization"]["original_utility_from"]
    assert provenance["pairs_stale"] == 4 and provenance["pairs_stale_left_out"] == 4
    assert any(STALE_UNITS_NOTE in w for w in original.results["warnings"])
    data = _bundle(borrower)
    section = _settings(data)["borrowed_utility"]
    assert section["stale_pair_sources"] == {str(s.pk): s.name for s in borrower.sources.all()}
    assert len(_rows(data)) == 4

    copy = bundle_import(file=io.BytesIO(data), name="borrower-copy", filename="study.zip", owner=_elsewhere())
    assert set(copy.items.values_list("pk", flat=True)).isdisjoint(borrower.items.values_list("pk", flat=True))
    rescored = study_score(study=copy, similarity=False)

    assert rescored.status == "done", rescored.error
    assert rescored.results["warnings"] == original.results["warnings"]
    assert not any("have no utility for their original rationale" in w for w in rescored.results["warnings"])
    assert rescored.results["generalization"]["by_utility"] == original.results["generalization"]["by_utility"]
    # the copy's results name the stale pairs by its own items and sources
    items = dict(copy.items.values_list("external_id", "pk"))
    renamed = bundle_import_record(study=copy).summary["renamed"]["sources"]  # the original's name -> the copy's
    sources = {name: copy.sources.get(name=renamed[name]).pk for name in renamed}
    theirs = dict(borrower.items.values_list("pk", "external_id"))
    names = dict(borrower.sources.values_list("pk", "name"))
    [entry] = provenance["studies"]
    expected = sorted([items[theirs[i]], sources[names[s]]] for i, s in entry["stale_pairs"])
    [copied] = rescored.results["generalization"]["original_utility_from"]["studies"]
    assert copied["stale_pairs"] == expected and copied["pairs_stale"] == 4


def test_a_hand_edited_list_of_stale_pairs_is_refused_naming_the_key(stale_bundle):
    for bad in ([[1]], "abc", [["x", 1]], [[1, 2, 3]], [True, False], {"a": 1}):
        def edit(content: bytes, bad=bad) -> bytes:
            settings = json.loads(content)
            settings["borrowed_utility"]["from"]["studies"][0]["stale_pairs"] = bad
            return json.dumps(settings).encode()

        data = _resign(_rewrite(stale_bundle, "settings.json", edit))
        with pytest.raises(BundleError) as refused:
            bundle_import(file=io.BytesIO(data), name="edited-copy", owner=None)

        errors = [(e.record, e.field) for e in refused.value.errors]
        assert errors and set(errors) == {("settings.json", "borrowed_utility.from.studies.stale_pairs")}, (bad, errors)
        assert not Study.objects.filter(name="edited-copy").exists()


@pytest.fixture
def stale_bundle():
    lender, borrower, tasks = _lender_and_borrower()
    _reject(lender, tasks[0])
    assert study_score(study=borrower, similarity=False).status == "done"
    return _bundle(borrower)


def test_other_hand_edited_provenance_is_refused_naming_the_key(stale_bundle):
    def edit(content: bytes) -> bytes:
        settings = json.loads(content)
        section = settings["borrowed_utility"]
        section["from"]["pairs_stale"] = "four"
        section["from"]["studies"].append("a lender")
        section["from"]["studies"][0]["stale_pairs"].append([10 ** 9, 1])  # no item of the bundle
        return json.dumps(settings).encode()

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(_resign(_rewrite(stale_bundle, "settings.json", edit))),
                      name="edited-copy", owner=None)

    assert {(e.record, e.field) for e in refused.value.errors} == {
        ("settings.json", "borrowed_utility.from.pairs_stale"), ("settings.json", "borrowed_utility.from.studies"),
        ("settings.json", "borrowed_utility.from.studies.stale_pairs")}


def test_a_copy_holding_malformed_stale_pairs_still_scores(stale_bundle):
    """A copy imported before the import checked ``from`` may hold anything there: its scoring
    reads the pairs that are pairs and leaves the rest, instead of failing every run."""
    copy = bundle_import(file=io.BytesIO(stale_bundle), name="older-copy", owner=None)
    good = study_score(study=copy, similarity=False)
    assert good.status == "done", good.error
    # what such a copy holds (no service writes it any more: the import refuses it, above)
    bundled = BundledUtility.objects.get(study=copy)
    studies = bundled.provenance["studies"]
    bundled.provenance = {**bundled.provenance, "studies": [
        {**studies[0], "stale_pairs": [[1], "abc", ["x", 1], *studies[0]["stale_pairs"]]}, "a lender", 7]}
    bundled.save(update_fields=["provenance"])

    run = study_score(study=copy, similarity=False)

    assert run.status == "done", run.error
    assert run.results["warnings"] == good.results["warnings"]
    assert run.results["generalization"]["by_utility"] == good.results["generalization"]["by_utility"]
