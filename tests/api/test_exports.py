"""Streamed exports: CSV, JSON lines and Parquet round-trip through pandas with the documented
columns, filters apply, workers are pseudonymised."""
from __future__ import annotations

import io

import pandas as pd
import pytest
from django.http import StreamingHttpResponse

from lab.api.streaming import iter_parquet
from lab.pseudonyms import worker_pseudonym
from scoring.api.export_annotations import ANNOTATION_COLUMNS
from scoring.api.export_units import SCORE_COLUMNS

pytestmark = pytest.mark.django_db

READERS = {
    "csv": lambda b: pd.read_csv(io.BytesIO(b), keep_default_na=True),
    "jsonl": lambda b: pd.read_json(io.BytesIO(b), lines=True),
    "parquet": lambda b: pd.read_parquet(io.BytesIO(b)),
}


def download(client, url, **params) -> tuple[object, bytes]:
    response = client.get(url, params)
    if not isinstance(response, StreamingHttpResponse):
        return response, b""
    return response, b"".join(response.streaming_content)


@pytest.mark.parametrize("file_format", ["csv", "jsonl", "parquet"])
def test_annotation_export_round_trips_through_pandas(client_for, study_data, file_format):
    client = client_for(study_data.study.owner)
    response, body = download(
        client, f"/api/v1/studies/{study_data.study.pk}/export/annotations/", file_format=file_format
    )
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="study-{study_data.study.pk}-annotations.{file_format}"'
    frame = READERS[file_format](body)
    assert list(frame.columns) == [c.name for c in ANNOTATION_COLUMNS]
    assert len(frame) == len(study_data.annotations)
    assert sorted(frame["annotation_id"]) == sorted(a.pk for a in study_data.annotations)
    expected = {worker_pseudonym(p.platform, p.external_id) for p in study_data.participants}
    assert set(frame["worker"]) == expected
    raw = {p.external_id for p in study_data.participants}
    assert not raw & set(map(str, frame.to_numpy().ravel()))
    gpt3 = study_data.sources[0]
    useful = frame[frame["source_name"] == gpt3.name]
    assert set(useful["utility"]) == {1} and set(useful["utility_label"]) == {"useful"}
    before = useful[useful["step"] == "before"]
    assert set(before["answer"]) == {"no"} and not before["answer_correct"].astype(bool).any()
    assert (frame["duration_ms"] > 0).all()


@pytest.mark.parametrize("file_format", ["csv", "jsonl", "parquet"])
def test_score_export_round_trips_through_pandas(client_for, study_data, file_format):
    client = client_for(study_data.study.owner)
    response, body = download(client, f"/api/v1/studies/{study_data.study.pk}/export/scores/", file_format=file_format)
    assert response.status_code == 200
    frame = READERS[file_format](body)
    assert list(frame.columns) == [c.name for c in SCORE_COLUMNS]
    assert len(frame) == len(study_data.scores)
    assert frame.groupby("source_name")["utility"].first().to_dict() == {
        study_data.sources[0].name: 1, study_data.sources[1].name: -1
    }


def test_export_filtered_to_one_source(client_for, study_data):
    t5 = study_data.sources[1]
    client = client_for(study_data.study.owner)
    _, body = download(
        client, f"/api/v1/studies/{study_data.study.pk}/export/annotations/", file_format="csv", source=t5.name
    )
    frame = pd.read_csv(io.BytesIO(body))
    assert set(frame["source_name"]) == {t5.name} and len(frame) == len(study_data.annotations) // 2
    _, body = download(client, f"/api/v1/studies/{study_data.study.pk}/export/scores/", source=str(t5.pk))
    assert set(pd.read_csv(io.BytesIO(body))["source_id"]) == {t5.pk}


def test_raw_worker_ids_in_exports_only_for_permitted_staff(client_for, study_data, staff_raw):
    url = f"/api/v1/studies/{study_data.study.pk}/export/annotations/"
    response, _ = download(client_for(study_data.study.owner), url, include_raw_worker_ids="true")
    assert response.status_code == 403
    assert "view_raw_worker_ids" in response.json()["detail"]
    assert download(client_for(staff_raw), url, include_raw_worker_ids="true")[0].status_code == 404
    study_data.study.shared_with.add(staff_raw)
    response, body = download(client_for(staff_raw), url, include_raw_worker_ids="true", file_format="parquet")
    frame = pd.read_parquet(io.BytesIO(body))
    assert list(frame.columns)[-1] == "worker_raw_id"
    assert set(frame["worker_raw_id"]) == {p.external_id for p in study_data.participants}


@pytest.mark.parametrize(
    "params, field",
    [({"file_format": "xlsx"}, "file_format"), ({"step": "middle"}, "step"), ({"answered_after": "soon"}, "answered_after")],
)
def test_bad_export_parameters_are_400_naming_the_field(client_for, study_data, params, field):
    response, _ = download(
        client_for(study_data.study.owner), f"/api/v1/studies/{study_data.study.pk}/export/annotations/", **params
    )
    assert response.status_code == 400
    assert field in response.json()


def test_export_negotiates_csv_accept_header(client_for, study_data):
    response = client_for(study_data.study.owner).get(
        f"/api/v1/studies/{study_data.study.pk}/export/scores/", HTTP_ACCEPT="text/csv"
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")


def test_empty_export_is_a_valid_file_with_the_columns(client_for, study_data):
    client = client_for(study_data.study.owner)
    for file_format in ("csv", "parquet"):
        _, body = download(
            client, f"/api/v1/studies/{study_data.study.pk}/export/annotations/", file_format=file_format,
            date="1999-01-01",
        )
        frame = READERS[file_format](body)
        assert len(frame) == 0 and list(frame.columns) == [c.name for c in ANNOTATION_COLUMNS]


def test_parquet_is_written_in_row_groups():
    from lab.api.streaming import Column

    columns = [Column("n", "int", ""), Column("s", "str", "")]
    chunks = list(iter_parquet(columns, ((i, str(i)) for i in range(25)), row_group_rows=10))
    # Two full row groups are sent as soon as they are made; the last one goes with the footer.
    assert len(chunks) == 3 and chunks[0].startswith(b"PAR1") and chunks[-1].endswith(b"PAR1")
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(io.BytesIO(b"".join(chunks)))
    assert parquet.num_row_groups == 3 and parquet.read().num_rows == 25


def test_json_lines_are_one_exact_object_per_row_whatever_the_text_holds():
    """iter_jsonl writes each row into one reused dict: every line holds its own row's values
    (an empty value never keeps the row before's), across batches; text that imitates a line
    boundary, quotes, backslashes and line breaks stay inside their value; a row of the wrong
    length is an error, not a line."""
    import json
    from datetime import UTC, datetime

    from lab.api.streaming import CSV_BATCH_ROWS, Column, iter_jsonl

    columns = [Column("annotation_id", "int", ""), Column("answer", "str", ""), Column("ok", "bool", ""),
               Column("at", "datetime", ""), Column("x", "float", "")]
    hostile = ['},{"annotation_id":', '}\n{"annotation_id":7}', 'say "hi" \\ \\"', "é\u2028", "", None]
    rows = [(i, hostile[i % len(hostile)], i % 2 == 0, datetime(2026, 12, 2, 6, 0, i % 60, i % 3, tzinfo=UTC),
             i / 7 if i % 5 else None) for i in range(2 * CSV_BATCH_ROWS + 3)]

    chunks = list(iter_jsonl(columns, iter(rows)))

    assert len(chunks) == 3 and all(chunk.endswith(b"\n") for chunk in chunks)
    lines = b"".join(chunks).decode().split("\n")
    assert lines[-1] == "" and len(lines) == len(rows) + 1
    for line, (pk, text, ok, at, x) in zip(lines, rows, strict=False):
        assert json.loads(line) == {"annotation_id": pk, "answer": text, "ok": ok, "at": at.isoformat(), "x": x}
    with pytest.raises(ValueError):
        list(iter_jsonl(columns, iter([rows[0], rows[1][:4]])))


@pytest.fixture
def rescored_with_gen_u_and_similarity(study_data):
    """``study_data`` with validated generalization questions answered by F^I and F^IR, scored again
    with similarity (BERTScore against the gold rationale) on, as a researcher would."""
    pytest.importorskip("bert_score")
    from scoring.services import study_score
    from studies.models import GeneralizationQuestion, GenUPrediction
    from studies.services.questions import generalization_questions_set_validation

    for item in study_data.items:
        question = GeneralizationQuestion.objects.create(item=item, qtype="rephrase", text=f"Really, {item.question}",
                                                         answer=item.gold_answer)
        generalization_questions_set_validation(questions=[question], status="valid")
        for source in study_data.sources:
            for answerer, correct in (("I", False), ("IR", True)):
                GenUPrediction.objects.create(
                    generalization_question=question, rationale_source=source, answerer=answerer,
                    answerer_model=f"t5-base-{answerer}", correct=correct,
                    predicted_answer=question.answer if correct else "no")
    run = study_score(study=study_data.study, similarity=True)
    assert run.status == "done", run.error
    assert run.results["similarity"] and run.results["gen_u"]["method"]
    return run


@pytest.mark.parametrize("file_format", ["csv", "jsonl", "parquet"])
def test_exported_scores_name_the_run_the_similarity_model_and_the_gen_u_method(
        client_for, study_data, staff_plain, rescored_with_gen_u_and_similarity, file_format):
    """Every row of both exports names what its utility, gen_u and similarity rest on, the values the
    per-source summary gives: the run that wrote them, its similarity model, its Gen-U method."""
    run = rescored_with_gen_u_and_similarity
    similarity = run.results["similarity"]
    expected = {"score_run": run.pk,
                "similarity_model": f"{similarity['name']}, layer {similarity['num_layers']}, files "
                                    f"{similarity['fingerprint'][:19]}; {similarity['method']}",
                "gen_u_method": run.results["gen_u"]["method"]}
    study_data.study.shared_with.add(staff_plain)
    client = client_for(staff_plain)
    summary = client.get(f"/api/v1/studies/{study_data.study.pk}/summary/").json()
    assert {tuple(row[k] for k in expected) for row in summary} == {tuple(expected.values())}
    scores = client.get("/api/v1/scores/", {"study": study_data.study.pk}).json()["results"]
    assert scores and {tuple(row[k] for k in expected) for row in scores} == {tuple(expected.values())}
    for export in ("scores", "annotations"):
        response, body = download(client, f"/api/v1/studies/{study_data.study.pk}/export/{export}/",
                                  file_format=file_format)
        assert response.status_code == 200
        frame = READERS[file_format](body)
        columns = list(frame.columns)
        assert columns[columns.index("score_run"):columns.index("majority_rule") + 1] == [
            *expected, "stale", "majority_rule"], export
        assert len(frame) == len(study_data.scores if export == "scores" else study_data.annotations)
        scored = frame[frame["unit_id"].notna()] if export == "annotations" else frame  # not attention checks
        for column, value in expected.items():
            assert set(scored[column]) == {value}, (export, column)
        assert set(scored["stale"]) == {False}, export
    assert frame["gen_u"].notna().all() and frame["similarity"].notna().all()


def _majority_rules(client, study) -> dict[str, set]:
    """The majority_rule values each place gives of ``study``: both exports (JSON lines; the
    annotations' scored rows only: an attention check has no unit), /summary/ and /scores/, and the
    columns each export's X-Export-Columns header names."""
    found = {}
    for export in ("scores", "annotations"):
        response, body = download(client, f"/api/v1/studies/{study.pk}/export/{export}/", file_format="jsonl")
        assert response.status_code == 200
        assert "majority_rule" in response["X-Export-Columns"].split(","), export
        frame = READERS["jsonl"](body)
        scored = frame[frame["unit_id"].notna()] if export == "annotations" else frame
        assert len(scored), export
        found[export] = set(scored["majority_rule"])
    found["summary"] = {row["majority_rule"] for row in client.get(f"/api/v1/studies/{study.pk}/summary/").json()}
    found["scores list"] = {row["majority_rule"] for row in
                            client.get("/api/v1/scores/", {"study": study.pk}).json()["results"]}
    return found


def test_both_exports_the_summary_and_the_scores_name_the_majority_rule_of_the_run(client_for, study_data):
    """utility rests on each unit's majority: plurality, a tie counted as wrong (results.json
    majority_readings); with three or more choices a strict majority gives other utilities, so every
    place that gives utility names the rule its run used."""
    expected = ("plurality (the label more annotators gave than any other; our reading of SPEC section 2); a tie "
                "is no majority answer and counts as wrong; results.json majority_readings gives strict_majority "
                "beside it")
    assert study_data.run.results["majority_readings"]["default"] == "plurality"
    found = _majority_rules(client_for(study_data.study.owner), study_data.study)
    assert found == dict.fromkeys(("scores", "annotations", "summary", "scores list"), {expected})
    described = {c.name: c.description for c in SCORE_COLUMNS}["majority_rule"]
    assert "tie" in described and "strict majority" in described
    assert {c.name: c.description for c in ANNOTATION_COLUMNS}["majority_rule"] == described


def test_a_run_keeps_the_majority_rule_it_recorded_and_one_that_recorded_none_says_so(client_for, study_data):
    """The rule is read from the run that wrote the scores, not from today's MAJORITY_RULE: a run
    recorded under another default keeps it, and one from before the rule was recorded says
    "not recorded". (Such runs are made by older code: their results are written here.)"""
    from scoring.models import ScoreRun

    client = client_for(study_data.study.owner)
    run = study_data.run
    results = dict(run.results)
    results["majority_readings"] = {**results["majority_readings"], "default": "strict_majority"}
    ScoreRun.objects.filter(pk=run.pk).update(results=results)
    found = _majority_rules(client, study_data.study)
    strict = ("strict_majority (more than half of the annotators; otherwise no majority answer, counted as wrong "
              "like a tie); a tie is no majority answer and counts as wrong; results.json majority_readings gives "
              "plurality beside it")
    assert found == dict.fromkeys(found, {strict})

    del results["majority_readings"]
    ScoreRun.objects.filter(pk=run.pk).update(results=results)
    found = _majority_rules(client, study_data.study)
    assert len({frozenset(v) for v in found.values()}) == 1
    (text,) = found["scores"]
    assert text.startswith("not recorded: ") and "majority_readings" in text and "plurality" not in text
