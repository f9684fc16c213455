"""A generalization study's Figure 4 by the utility of the original rationale borrows that utility
from another (utility) study. Its bundle carries the borrowed table with where it came from (the
lending study and its score run), so the study imported from the bundle re-scores ``by_utility``
to the last digit from the bundle alone; a bundle without the table (made before bundles carried
it) says that ``by_utility`` cannot be reproduced instead of giving other numbers."""
from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest
from django.core.management import call_command

from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from scoring.models import UnitScore
from scoring.reports.sections import generalization_section
from scoring.services import study_score
from scoring.services.bundle import bundle_import, bundle_stream
from studies.models import GeneralizationQuestion, Platform, Study
from studies.services.studies import study_create
from tests.annotations.factories import TEST_CONSENT, make_study
from tests.scoring.test_bundle import _numbers, _resign
from tests.work import work

pytestmark = pytest.mark.django_db

N_ITEMS, N_SOURCES, N_GENQ = 4, 2, 2


def _utility_answer(claim, step):
    """Before: right on even items; after: right unless item + source is a multiple of 3. Three
    workers answer alike, so the units are useful, unsure and not useful."""
    unit = claim.unit
    gold = unit.item.gold_answer
    other = "no" if gold == "yes" else "yes"
    if step == "before":
        return gold if unit.item_id % 2 == 0 else other
    return other if (unit.item_id + unit.source_id) % 3 == 0 else gold


def _generalization_answer(n: int):
    def answer(claim, step):
        unit = claim.unit
        right = unit.generalization_question.answer
        wrong = "no" if right == "yes" else "yes"
        if step == "before":
            return right if (unit.generalization_question_id + n) % 2 == 0 else wrong
        return wrong if (unit.item_id + unit.source_id + n) % 4 == 0 else right
    return answer


def _lender_and_borrower() -> tuple[Study, Study]:
    """A scored utility study (the lender) and a scored generalization study of the same items and
    sources (the borrower), both made, worked and closed the way the app does it; half of the
    generalization questions are counterfactuals (their consistency with the item reads the
    lender's majorities too)."""
    lender = make_study(n_items=N_ITEMS, n_sources=N_SOURCES, n_genq=N_GENQ, quota=3,
                        units_per_task=N_ITEMS * N_SOURCES, name="lender-utility")
    for n in range(3):
        work(lender, f"U{n}", answer=_utility_answer, platform=Platform.LINK)
    study_close(user=OPERATOR, study=lender)
    assert study_score(study=lender, similarity=False).status == "done"
    return lender, _borrower_of(lender)


def _borrower_of(lender: Study) -> Study:
    """A closed generalization study of ``lender``'s items and sources, worked by three workers the
    way the app does it; half of its questions are counterfactuals (their consistency with the item
    reads the lender's majorities too)."""
    questions = GeneralizationQuestion.objects.filter(item__in=lender.items.all()).order_by("id")
    GeneralizationQuestion.objects.filter(pk__in=list(questions.values_list("pk", flat=True))[::2]).update(
        qtype=GeneralizationQuestion.Type.COUNTERFACTUAL, answer="no")
    borrower = study_create(
        name="borrower-generalization", dataset=lender.dataset, kind=Study.Kind.GENERALIZATION,
        sources=list(lender.sources.order_by("id")), annotators_per_unit=3,
        units_per_task=N_ITEMS * N_SOURCES * N_GENQ, consent_text=TEST_CONSENT)
    borrower = study_open(study=borrower, user=OPERATOR)
    for n in range(3):
        work(borrower, f"G{n}", answer=_generalization_answer(n), platform=Platform.LINK)
    study_close(user=OPERATOR, study=borrower)
    return borrower


def _bundle(study: Study) -> bytes:
    return b"".join(bundle_stream(study=study, user=None))


def _without_borrowed_table(data: bytes) -> bytes:
    """The bundle as one made before bundles carried the borrowed utility: no table, no resource
    for it in datapackage.json, no section in settings.json (checksums recomputed)."""
    src, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            content = src.read(name)
            if name == "data/borrowed_utility.csv":
                continue
            if name == "settings.json":
                settings = json.loads(content)
                settings.pop("borrowed_utility", None)
                content = json.dumps(settings).encode()
            if name == "datapackage.json":
                package = json.loads(content)
                package["resources"] = [r for r in package["resources"] if r["path"] != "data/borrowed_utility.csv"]
                content = json.dumps(package).encode()
            dst.writestr(name, content)
    return _resign(out.getvalue())


def test_a_bundle_re_scores_by_utility_from_its_borrowed_table_alone():
    lender, borrower = _lender_and_borrower()
    original = study_score(study=borrower, similarity=False)
    assert original.status == "done", original.error
    by_utility = original.results["generalization"]["by_utility"]
    assert {"useful", "unsure", "not_useful"} <= set(by_utility) and "unknown" not in by_utility
    assert original.results["generalization"]["consistency"]["item_with_counterfactuals"]
    lent_run = lender.score_runs.get(status="done")

    data = _bundle(borrower)

    # Another installation has no lender: the copy has the bundle alone.
    lender.delete()
    assert not UnitScore.objects.exclude(study=borrower).exists()
    copy = bundle_import(file=io.BytesIO(data), name="borrower-copy", filename="study.zip", owner=None)
    rescored = study_score(study=copy, similarity=False)

    assert rescored.status == "done", rescored.error
    assert rescored.results["generalization"]["by_utility"] == by_utility
    assert (rescored.results["generalization"]["consistency"]
            == original.results["generalization"]["consistency"])
    assert _numbers(rescored.results) == _numbers(original.results)

    # The bundle carries the table and says where it came from: the lender and its score run; the
    # copy's results and report say they read it from the bundle.
    archive = zipfile.ZipFile(io.BytesIO(data))
    section = json.loads(archive.read("settings.json"))["borrowed_utility"]
    assert section["from"]["studies"] == [{"id": lent_run.study_id, "name": "lender-utility",
                                           "pairs": N_ITEMS * N_SOURCES, "score_run": lent_run.pk}]
    assert section["from"] == original.results["generalization"]["original_utility_from"]
    assert section["same_as_latest_run"] is True and section["table"] == "data/borrowed_utility.csv"
    rows = list(csv.DictReader(io.StringIO(archive.read("data/borrowed_utility.csv").decode())))
    assert len(rows) == N_ITEMS * N_SOURCES and {r["study_id"] for r in rows} == {str(lent_run.study_id)}
    package = json.loads(archive.read("datapackage.json"))
    assert "data/borrowed_utility.csv" in {r["path"] for r in package["resources"]}
    source = rescored.results["generalization"]["original_utility_from"]
    assert source["studies"] == section["from"]["studies"] and "study bundle" in source["read_from"]
    notes = " ".join(generalization_section(rescored.results).notes)
    assert "from 'lender-utility' (8 pairs)" in notes and "Read from the study bundle" in notes


def test_a_bundle_without_the_borrowed_table_says_by_utility_cannot_be_reproduced(tmp_path):
    lender, borrower = _lender_and_borrower()
    original = study_score(study=borrower, similarity=False)
    path = tmp_path / "older.zip"
    path.write_bytes(_without_borrowed_table(_bundle(borrower)))

    out = io.StringIO()
    call_command("study_bundle", "import", str(path), "--name", "older-copy", stdout=out)
    copy = Study.objects.get(name="older-copy")
    assert "by_utility) cannot be reproduced" in out.getvalue()
    # The lender is still here and visible, but it need not be what the bundle was scored with:
    # the copy never borrows from it.
    rescored = study_score(study=copy, similarity=False)

    assert rescored.status == "done", rescored.error
    gen = rescored.results["generalization"]
    assert gen["by_utility"] is None and "item_with_counterfactuals" not in gen["consistency"]
    assert "no borrowed utility table" in gen["original_utility_from"]["unavailable"]
    assert any("by_utility) cannot be reproduced and is left out" in w and "no borrowed utility table" in w
               for w in rescored.results["warnings"])
    # what does not need the borrowed table is the original's
    for key in ("all", "by_type", "by_source", "by_source_and_type"):
        assert gen[key] == original.results["generalization"][key]
    notes = " ".join(generalization_section(rescored.results).notes)
    assert "not known here: the study bundle it was imported from has no borrowed utility table" in notes


def test_a_bundle_whose_lender_was_scored_again_since_says_its_by_utility_may_differ():
    lender, borrower = _lender_and_borrower()
    original = study_score(study=borrower, similarity=False)
    study_score(study=lender, similarity=False)  # after the borrower's run: its unit scores are another run's
    data = _bundle(borrower)
    assert json.loads(zipfile.ZipFile(io.BytesIO(data)).read("settings.json"))[
        "borrowed_utility"]["same_as_latest_run"] is False

    copy = bundle_import(file=io.BytesIO(data), name="borrower-later-copy", owner=None)
    rescored = study_score(study=copy, similarity=False)

    assert rescored.results["generalization"]["by_utility"] == original.results["generalization"]["by_utility"]
    assert any("Figure 4 may differ from the bundle's results.json" in w for w in rescored.results["warnings"])


def test_a_bundle_copy_lends_only_once_scored_here():
    """A copy's unit scores are the ones its bundle stated, checked against nothing (a hand-edited
    bundle can state any utility): another study borrows them only once a run here scored the copy."""
    lender, borrower = _lender_and_borrower()
    copy = bundle_import(file=io.BytesIO(_bundle(lender)), name="lender-copy", filename="lender.zip", owner=None)
    assert UnitScore.objects.filter(study=copy, score_run__isnull=True, utility__isnull=False).exists()

    lent = study_score(study=borrower, similarity=False).results["generalization"]["original_utility_from"]
    assert [s["name"] for s in lent["studies"]] == ["lender-utility"] and not lent["other_lenders"]
    assert lent["not_scored_here"] == [{"id": copy.pk, "name": "lender-copy"}]

    # With the original gone, the pairs are 'unknown' and the warning names the copy to score.
    lender.delete()
    run = study_score(study=borrower, similarity=False)
    assert "unknown" in run.results["generalization"]["by_utility"]
    assert any(f"lend once scored here: 'lender-copy' (id {copy.pk})" in w for w in run.results["warnings"])

    assert study_score(study=copy, similarity=False).status == "done"
    lent = study_score(study=borrower, similarity=False).results["generalization"]["original_utility_from"]
    # Scored here, the copy lends and agrees with the original.
    assert [s["name"] for s in lent["studies"]] == ["lender-copy"] and not lent["other_lenders"]
    assert lent["not_scored_here"] == []
