"""Read endpoints: 200 with the documented fields, filters (400 naming a bad filter value), cursor
pagination that stays correct while answers arrive, pseudonymised workers."""
from __future__ import annotations

import pytest

from annotations.models import Annotation
from lab.pseudonyms import worker_pseudonym
from tests.factories import GeneralizationQuestionFactory

pytestmark = pytest.mark.django_db


def test_every_read_list_answers_200_with_results(client_for, study_data):
    client = client_for(study_data.study.owner)
    GeneralizationQuestionFactory(item=study_data.items[0])
    for url in [
        "/api/v1/datasets/", "/api/v1/items/", "/api/v1/rationale-sources/", "/api/v1/rationales/",
        "/api/v1/generalization-questions/", "/api/v1/studies/", "/api/v1/assignments/", "/api/v1/annotations/",
        "/api/v1/scores/", "/api/v1/score-runs/",
    ]:
        response = client.get(url)
        assert response.status_code == 200, url
        body = response.json()
        assert body["results"], url
        detail = client.get(f"{url}{body['results'][0]['id']}/")
        assert detail.status_code == 200, url


def test_study_detail_counts_progress(client_for, study_data):
    body = client_for(study_data.study.owner).get(f"/api/v1/studies/{study_data.study.pk}/").json()
    assert body["owner"] == "dana"
    assert body["n_items"] == 2
    assert body["n_units"] == 4
    assert body["n_units_complete"] == 4
    assert body["n_annotations"] == len(study_data.annotations) == 2 * 3 * 2 * 2


def test_unknown_ids_are_404(client_for, researcher):
    client = client_for(researcher)
    for url in ["/api/v1/studies/999999/", "/api/v1/items/999999/", "/api/v1/annotations/999999/"]:
        assert client.get(url).status_code == 404


@pytest.mark.parametrize(
    "url, field",
    [
        ("/api/v1/annotations/?step=sideways", "step"),
        ("/api/v1/annotations/?answered_after=yesterday", "answered_after"),
        ("/api/v1/annotations/?utility=great", "utility"),
        ("/api/v1/items/?split=holdout", "split"),
        ("/api/v1/scores/?utility=2", "utility"),
        ("/api/v1/assignments/?status=lost", "status"),
        ("/api/v1/studies/?kind=poll", "kind"),
    ],
)
def test_bad_filter_values_are_400_naming_the_field(client_for, researcher, url, field):
    response = client_for(researcher).get(url)
    assert response.status_code == 400
    assert field in response.json()


def test_annotations_filter_by_source_name_step_worker_and_utility(client_for, study_data):
    client = client_for(study_data.study.owner)
    gpt3, t5 = study_data.sources
    rows = client.get("/api/v1/annotations/", {"source": gpt3.name, "step": "after", "page_size": 1000}).json()["results"]
    assert rows and {r["source"] for r in rows} == {gpt3.pk} and {r["step"] for r in rows} == {"after"}
    assert len(rows) == 2 * 3  # items x annotators per unit
    by_id = client.get("/api/v1/annotations/", {"source": t5.pk, "page_size": 1000}).json()["results"]
    assert {r["source"] for r in by_id} == {t5.pk}
    useful = client.get("/api/v1/annotations/", {"utility": "useful", "page_size": 1000}).json()["results"]
    assert {r["source"] for r in useful} == {gpt3.pk}
    participant = study_data.participants[1]
    pseudonym = worker_pseudonym(participant.platform, participant.external_id)
    mine = client.get("/api/v1/annotations/", {"worker": pseudonym, "page_size": 1000}).json()["results"]
    # A worker sees each item once: one unit of each item, answered before and after.
    assert len(mine) == 2 * 2 and {r["worker"] for r in mine} == {pseudonym}
    today = study_data.annotations[0].answered_at.date().isoformat()
    assert len(client.get("/api/v1/annotations/", {"date": today, "page_size": 1000}).json()["results"]) == 24
    assert client.get("/api/v1/annotations/", {"date": "1999-01-01"}).json()["results"] == []


def test_worker_ids_are_pseudonyms_unless_permitted_staff_asks(client_for, study_data, staff_raw, staff_plain):
    raw_ids = {p.external_id for p in study_data.participants}
    dana = client_for(study_data.study.owner)
    rows = dana.get("/api/v1/annotations/", {"page_size": 1000}).json()["results"]
    assert all(r["worker"].startswith("w_") and len(r["worker"]) == 18 for r in rows)
    assert "worker_raw_id" not in rows[0]
    assert not raw_ids & {r["worker"] for r in rows}
    assert dana.get("/api/v1/annotations/", {"include_raw_worker_ids": "true"}).status_code == 403
    assert client_for(staff_plain).get("/api/v1/assignments/", {"include_raw_worker_ids": "1"}).status_code == 403
    study_data.study.shared_with.add(staff_raw)
    staff_rows = client_for(staff_raw).get(
        "/api/v1/annotations/", {"include_raw_worker_ids": "true", "page_size": 1000}
    ).json()["results"]
    assert {r["worker_raw_id"] for r in staff_rows} == raw_ids


def test_pseudonyms_depend_on_the_salt(settings):
    settings.RL_PSEUDONYM_SALT = "salt-a"
    a = worker_pseudonym("prolific", "PID1")
    assert a == worker_pseudonym("prolific", "PID1")
    settings.RL_PSEUDONYM_SALT = "salt-b"
    assert worker_pseudonym("prolific", "PID1") != a


def test_cursor_pagination_neither_skips_nor_repeats_while_answers_arrive(client_for, study_data):
    client = client_for(study_data.study.owner)
    seen: list[int] = []
    response = client.get("/api/v1/annotations/", {"page_size": 5}).json()
    seen += [r["id"] for r in response["results"]]
    # New answers arrive between page requests.
    claim = study_data.annotations[0].claim
    new = Annotation.objects.create(claim=claim, step="properties", payload={"coherent": True})
    while response["next"]:
        response = client.get(response["next"]).json()
        seen += [r["id"] for r in response["results"]]
    expected = sorted(a.pk for a in study_data.annotations) + [new.pk]
    assert seen == expected


def test_ordering_by_answered_at_descending(client_for, study_data):
    rows = client_for(study_data.study.owner).get(
        "/api/v1/annotations/", {"ordering": "-answered_at", "page_size": 1000}
    ).json()["results"]
    times = [r["answered_at"] for r in rows]
    assert times == sorted(times, reverse=True)


def test_scores_and_summary(client_for, study_data):
    client = client_for(study_data.study.owner)
    gpt3, t5 = study_data.sources
    scores = client.get("/api/v1/scores/", {"study": study_data.study.pk, "utility": "not_useful"}).json()["results"]
    assert {s["source_name"] for s in scores} == {t5.name} and all(s["utility"] == -1 for s in scores)
    summary = client.get(f"/api/v1/studies/{study_data.study.pk}/summary/").json()
    by_name = {row["source_name"]: row for row in summary}
    assert by_name[gpt3.name]["n_useful"] == 2 and by_name[gpt3.name]["share_useful"] == 1.0
    assert by_name[t5.name]["share_not_useful"] == 1.0 and by_name[t5.name]["task_accuracy"] == 0.0
    # Each row names what its figures were computed with: the run that wrote the unit scores, its
    # similarity model and Gen-U method (none here: scored without either).
    from scoring.selectors import score_run_latest

    run = score_run_latest(study=study_data.study)
    assert {(row["score_run"], row["similarity_model"], row["gen_u_method"]) for row in summary} == {(run.pk, None, None)}


def test_results_json_of_the_latest_finished_run_or_404(client_for, study_data):
    client = client_for(study_data.study.owner)
    body = client.get(f"/api/v1/studies/{study_data.study.pk}/results/").json()
    assert body["study"]["id"] == study_data.study.pk
    study_data.study.score_runs.all().delete()
    response = client.get(f"/api/v1/studies/{study_data.study.pk}/results/")
    assert response.status_code == 404
    assert "score-runs" in response.json()["detail"]


def test_studies_filter_by_source_name_and_mine(client_for, study_data, other_study_data, make_user):
    staff = client_for(make_user("root", superuser=True))
    gpt3 = study_data.sources[0]
    assert [s["id"] for s in staff.get("/api/v1/studies/", {"source": gpt3.name}).json()["results"]] == [
        study_data.study.pk
    ]
    dana = client_for(study_data.study.owner)
    assert [s["id"] for s in dana.get("/api/v1/studies/", {"mine": "true"}).json()["results"]] == [study_data.study.pk]


@pytest.mark.parametrize(
    "url, field",
    [
        ("/api/v1/rationales/?dataset=9223372036854775808", "dataset"),
        ("/api/v1/annotations/?study=0", "study"),
        ("/api/v1/annotations/?answered_after=9999-12-31T23:00:00-19:59", "answered_after"),
    ],
)
def test_out_of_range_filter_values_are_400_not_database_errors(client_for, researcher, url, field):
    response = client_for(researcher).get(url)
    assert response.status_code == 400 and field in response.json()


def test_extreme_but_valid_time_offsets_are_converted_to_utc(client_for, study_data):
    # PostgreSQL refuses offsets beyond 15:59; the filter converts to UTC first.
    response = client_for(study_data.study.owner).get("/api/v1/annotations/?answered_after=2957-02-14T04:47:06-19:59")
    assert response.status_code == 200 and response.json()["results"] == []
