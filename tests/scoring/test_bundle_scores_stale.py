"""A copy imported from a study bundle says where the unit scores it carries came from and whether
the bundle called them stale: its import record keeps the bundle's settings.json ``scores_stale``
(and the run that scored them where the bundle was made), and the one rule of the `stale` column
(``selectors.unit_score_stale``) answers for those scores too, so the API, the score export and
the study page agree until a run here scores the copy again."""
from __future__ import annotations

import csv
import io
import json

import pytest

from annotations.services.withdrawal import participant_withdraw
from scoring.services import study_score
from scoring.services.bundle import bundle_import, bundle_stream
from studies.models import ImportRecord
from tests.cockpit.conftest import staff_client
from tests.scoring.test_bundle import _withdrawn_after_scoring
from tests.scoring.test_bundle_hostile_archives import _files, _pack, _refused
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


def _copy(study, user, name="copy"):
    data = b"".join(bundle_stream(study=study, user=user))
    return bundle_import(file=io.BytesIO(data), name=name, filename="orig-bundle.zip", owner=user)


def _api(client, study):
    response = client.get(f"/api/v1/scores/?study={study.pk}")
    assert response.status_code == 200, response.content[:500]
    return response.json()["results"]


def _export(client, study):
    response = client.get(f"/api/v1/studies/{study.pk}/export/scores/?file_format=csv")
    assert response.status_code == 200
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode("utf-8-sig"))))


def test_a_stale_bundles_copy_says_its_imported_scores_are_stale_and_where_they_came_from():
    alice, client, study, run = _withdrawn_after_scoring()

    copy = _copy(study, alice)

    scores = ImportRecord.objects.get(kind="bundle").summary["scores"]
    assert (scores["stale"], scores["score_run"], scores["n_stale"], scores["n_scored"]) == (True, run.pk, 2, 2)
    assert scores["finished_at"] == run.finished_at.isoformat()
    rows = _api(client, copy)
    assert len(rows) == 2 and {r["n_annotators"] for r in rows} == {3}  # the bundle's run's, of 3 answers
    assert {(r["score_run"], r["stale"]) for r in rows} == {(None, True)}
    for row in rows:
        assert "study bundle orig-bundle.zip said so" in row["stale_reason"]
        assert (f"changed after run {run.pk} of study {study.pk} began reading them, or after it finished for a "
                "run from before that was recorded") in row["stale_reason"]
        assert f"run {run.pk} of study {study.pk} ('orig2')" in row["scores_from"]
        assert "the bundle said 2 of its 2 units' scores were stale" in row["scores_from"]
    # the score export reads the same rule
    assert {(r["score_run"], r["stale"]) for r in _export(client, copy)} == {("", "true")}
    # the study page says it in a sentence
    page = client.get(f"/admin/studies/study/{copy.pk}/change/").content.decode()
    assert 'id="bundle-scores-origin"' in page and "units&#x27; scores were stale" in page

    again = study_score(study=copy, similarity=False)  # scored here: the run's own scores, not stale

    rows = _api(client, copy)
    assert {(r["score_run"], r["stale"], r["stale_reason"], r["scores_from"], r["n_annotators"])
            for r in rows} == {(again.pk, False, "", None, 2)}
    page = client.get(f"/admin/studies/study/{copy.pk}/change/").content.decode()
    assert f"Its unit scores are run {again.pk}&#x27;s, scored here from its answers" in page


def test_a_fresh_bundles_copy_is_not_stale_until_its_answers_change():
    alice, client = staff_client("alice")
    study = open_utility_study(name="fresh", owner=alice, quota=3, n_sources=1)
    for worker in ("PID", "P2", "P3"):
        work(study, worker)
    run = study_score(study=study, similarity=False)
    copy = _copy(study, alice)

    rows = _api(client, copy)
    assert {(r["score_run"], r["stale"], r["stale_reason"]) for r in rows} == {(None, False, "")}
    assert all(f"run {run.pk} of study {study.pk}" in r["scores_from"] and
               r["scores_from"].endswith("the bundle said they match its answers") for r in rows)

    # withdrawn from the original and, through it, from the copy: the imported scores no longer match
    outcome = participant_withdraw(user=alice, study=study, worker_id="PID")
    assert outcome.copies_withdrawn == 1

    rows = _api(client, copy)
    assert {(r["stale"], r["stale_reason"]) for r in rows} == {
        (True, "2 answers count for this unit now; the run aggregated 3")}
    assert {r["stale"] for r in _export(client, copy)} == {"true"}


def test_a_bundle_whose_scores_stale_names_a_unit_it_does_not_hold_is_refused_whole():
    alice, _, study, _ = _withdrawn_after_scoring()
    files = _files(b"".join(bundle_stream(study=study, user=alice)))
    written = json.loads(files["settings.json"])
    written["scores_stale"]["units"].append({"item_id": 10**9, "source": "nobody"})
    files["settings.json"] = json.dumps(written).encode()

    errors = _refused(_pack(files))

    assert [(e.record, e.field) for e in errors] == [("settings.json", "scores_stale.units")]
    assert "is not an item_id and source of the bundle" in errors[0].reason


def test_a_copys_bundle_says_its_imported_scores_are_stale_and_a_copy_of_that_copy_keeps_saying_it():
    """A copy not scored here has no run of its own: its bundle's settings.json ``scores_stale``
    answers for the scores it imported, by the same rule as the API, naming the run that scored
    them where the first bundle was made; a copy of the copy says stale as the first copy did."""
    alice, client, study, run = _withdrawn_after_scoring()
    copy = _copy(study, alice)

    files = _files(b"".join(bundle_stream(study=copy, user=alice)))

    stale = json.loads(files["settings.json"])["scores_stale"]
    assert (stale["stale"], stale["score_run"], stale["stale_units"], stale["scored_units"]) == (True, run.pk, 2, 2)
    assert stale["finished_at"] == run.finished_at.isoformat()
    assert f"run {run.pk} of study {study.pk}" in stale["scores_from"]
    assert {(u["item_id"], u["source"]) for u in stale["units"]} == {
        (r["item"], r["source_name"]) for r in _api(client, copy) if r["stale"]}
    assert "score the study again" in json.loads(files["datapackage.json"])["description"]

    second = _copy(copy, alice, name="copy-of-copy")

    scores = ImportRecord.objects.filter(kind="bundle", summary__study=second.pk).get().summary["scores"]
    assert (scores["stale"], scores["score_run"], scores["n_stale"]) == (True, run.pk, 2)
    assert scores["finished_at"] == run.finished_at.isoformat()  # from the copy's settings.json
    rows = _api(client, second)
    assert len(rows) == 2 and {(r["score_run"], r["stale"]) for r in rows} == {(None, True)}
    assert all("said so" in r["stale_reason"] and f"run {run.pk} of study {copy.pk}" in r["scores_from"]
               for r in rows)


def test_a_fresh_copys_bundle_turns_stale_when_a_withdrawal_reaches_the_copy():
    alice, _ = staff_client("alice")
    study = open_utility_study(name="fresh-copy", owner=alice, quota=3, n_sources=1)
    for worker in ("PID", "P2", "P3"):
        work(study, worker)
    run = study_score(study=study, similarity=False)
    copy = _copy(study, alice)
    stale = json.loads(_files(b"".join(bundle_stream(study=copy, user=alice)))["settings.json"])["scores_stale"]
    assert (stale["stale"], stale["score_run"], stale["withdrawn_since_run"]["participants"]) == (False, run.pk, 0)

    assert participant_withdraw(user=alice, study=study, worker_id="PID").copies_withdrawn == 1

    stale = json.loads(_files(b"".join(bundle_stream(study=copy, user=alice)))["settings.json"])["scores_stale"]
    assert (stale["stale"], stale["stale_units"], stale["withdrawn_since_run"]["participants"]) == (True, 2, 1)


SCORED_WITH = ("similarity_model", "gen_u_method", "majority_rule", "counted_answers",
               "counted_tasks_failing_a_check", "other_readings")


def _scored_with(row: dict) -> dict:
    """The row's scored-with values; the other readings as a set (the bundle's results.json has its
    keys sorted, so a copy lists them in another order)."""
    said = {name: row[name] for name in SCORED_WITH}
    if said["other_readings"]:
        head, _, readings = said["other_readings"].partition(" gives ")
        said["other_readings"] = (head, set(readings.split("; ")))
    return said


def test_a_copy_names_what_its_imported_scores_were_computed_with_and_so_does_a_copy_of_it():
    """Before, a copy's scores came with every scored-with column empty (the score export, the API,
    /summary/), as if no rule had made them, and its bundle's settings.json named this installation's
    default majority rule beside the original's unit scores."""
    alice, client = staff_client("alice")
    study = open_utility_study(name="orig", owner=alice, quota=3, n_sources=2)
    for worker in ("P1", "P2", "P3"):
        work(study, worker)
    run = study_score(study=study, similarity=False)
    original = _scored_with(_api(client, study)[0])
    assert original["majority_rule"].startswith("plurality (") and original["counted_answers"]

    copy = _copy(study, alice)
    copy_of_copy = _copy(copy, alice, name="copy of copy")

    for each in (copy, copy_of_copy):
        rows = _api(client, each)
        assert rows and {r["score_run"] for r in rows} == {None}
        assert all(_scored_with(r) == original for r in rows)
        exported = _export(client, each)
        assert {r["majority_rule"] for r in exported} == {original["majority_rule"]}
        assert {r["counted_answers"] for r in exported} == {original["counted_answers"]}
        summary = client.get(f"/api/v1/studies/{each.pk}/summary/").json()
        assert {s["majority_rule"] for s in summary} == {original["majority_rule"]}
    files = _files(b"".join(bundle_stream(study=copy, user=alice)))
    written = json.loads(files["settings.json"])
    assert written["scores_stale"]["score_run"] == run.pk
    assert written["rules"]["majority"].startswith(original["majority_rule"] + " (the run that scored")
    assert "this installation's rule: no finished score run" in written["rules"]["gen_u_tie_rule"]

    # What a copy's bundle carries there is checked as any other cell of it.
    for hostile in (["plurality"], {"majority_rule": ["x"]}, {"not_a_column": "x"}, None):
        written["scores_stale"]["scored_with"] = hostile
        files["settings.json"] = json.dumps(written).encode()
        errors = _refused(_pack(files))
        assert [(e.record, e.field) for e in errors] == [("settings.json", "scores_stale.scored_with")]


@pytest.mark.parametrize("hostile", [
    {"counted_answers": {"other_readings": {"x": {"utility_shares": {"all": {"useful": 10 ** 400}}}}}},
    {"gen_u": {"method": {"not": "text"}}},
    {"similarity": ["not", "an", "object"]},
])
def test_a_bundles_results_json_that_no_run_writes_is_a_row_error_not_a_500(hostile):
    """What the copy keeps of its imported scores' settings is read from the bundle's results.json
    by the exports' own texts: a value they cannot be made of (a number too large to print, a method
    that is not text) refuses the bundle, naming results.json, as the settings a copy's bundle
    carries are checked."""
    alice, _ = staff_client("alice")
    study = open_utility_study(name="orig", owner=alice, quota=3, n_sources=1)
    for worker in ("P1", "P2", "P3"):
        work(study, worker)
    study_score(study=study, similarity=False)
    files = _files(b"".join(bundle_stream(study=study, user=alice)))
    results = json.loads(files["results.json"])
    results.update(hostile)
    files["results.json"] = json.dumps(results).encode()

    errors = _refused(_pack(files))

    assert [e.record for e in errors] == ["results.json"]
    assert "not what a score run records" in errors[0].reason
