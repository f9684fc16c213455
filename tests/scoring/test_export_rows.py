"""The annotation export's rows: every value as the models hold it, however the rows are read
(keyset pages, per-study tables, timestamps and payloads turned into text by the database)."""
from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime

import pytest
from django.db import DataError, connection, transaction
from django.db.models import IntegerField, Value
from django.db.models.functions import Cast
from django.test.utils import CaptureQueriesContext

from annotations.models import Annotation
from scoring.api.export_annotations import IsoUtc, annotation_columns, annotation_rows, keyset_pages
from tests.work import open_utility_study, work

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("moment", [
    datetime(2026, 12, 1, 21, 30, 55, 123456, tzinfo=UTC),
    datetime(2026, 12, 1, 21, 30, 55, 120000, tzinfo=UTC),
    datetime(2026, 12, 1, 21, 30, 55, tzinfo=UTC),  # no fraction: isoformat() writes none
])
def test_the_database_writes_a_timestamp_as_isoformat_does(moment):
    study = open_utility_study(name="iso", n_items=1, n_sources=1, quota=1)
    work(study, "5f0c0ffee0c0ffee0c0ffee1")
    annotation = Annotation.objects.filter(claim__study=study).first()
    Annotation.objects.filter(pk=annotation.pk).update(answered_at=moment)
    text = Annotation.objects.filter(pk=annotation.pk).annotate(
        iso=IsoUtc("answered_at"), none=IsoUtc(Value(None, output_field=Annotation._meta.get_field("shown_at")))
    ).values_list("iso", "none").get()
    assert text == (moment.isoformat(), None)


def test_rows_match_the_stored_answers_across_pages():
    study = open_utility_study(name="rows", n_items=3, n_sources=2, quota=2)
    for worker in ("5f0c0ffee0c0ffee0c0ffee1", "5f0c0ffee0c0ffee0c0ffee2"):
        work(study, worker, payload=lambda claim, step: {"flag": True, "flag_note": "typo: «über»"} if step == "after" else None)
    names = [c.name for c in annotation_columns(raw_worker_ids=True)]
    queryset = Annotation.objects.filter(claim__study=study)
    rows = [dict(zip(names, row, strict=True))
            for row in annotation_rows(queryset, study=study, user=None, raw_worker_ids=True, page_rows=5)]
    stored = {a.pk: a for a in queryset.select_related("claim__participant", "claim__assignment", "claim__unit__item")}
    assert [r["annotation_id"] for r in rows] == sorted(stored)
    for row in rows:
        a = stored[row["annotation_id"]]
        assert row["shown_at"] == (a.shown_at.isoformat() if a.shown_at else None)
        assert row["answered_at"] == a.answered_at.isoformat()
        assert (json.loads(row["payload"]) if row["payload"] else {}) == a.payload
        assert row["worker_raw_id"] == a.claim.participant.external_id
        assert row["assignment_status"] == a.claim.assignment.status
        assert row["item_external_id"] == a.claim.unit.item.external_id
        assert row["answer"] == a.answer and row["step"] == a.step
    assert any(r["payload"] for r in rows)


def answered_by_two_workers(name: str):
    """A study two workers answered through the questionnaire, and its answers; PostgreSQL only
    (the read-ahead is PostgreSQL's: SQLite reads pages one after the other)."""
    if connection.vendor != "postgresql":
        pytest.skip("the read-ahead is PostgreSQL's (SQLite reads pages one after the other)")
    study = open_utility_study(name=name, n_items=3, n_sources=2, quota=2)
    for worker in ("5f0c0ffee0c0ffee0c0ffee1", "5f0c0ffee0c0ffee0c0ffee2"):
        work(study, worker)
    return study, Annotation.objects.filter(claim__study=study)


@pytest.mark.django_db(transaction=True)
def test_pages_read_ahead_on_a_second_connection_give_the_same_rows():
    """Outside a transaction on PostgreSQL the pages are read ahead on a second connection while this
    one formats: the same rows, in the same order, and no page query on the caller's connection."""
    study, queryset = answered_by_two_workers("ahead")
    page_query = re.compile(r'"annotations_annotation"\."id" > \d+\) ORDER BY 1 ASC LIMIT 5$')

    def jit() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW jit")
            return cursor.fetchone()[0]

    jit_before = jit()
    with CaptureQueriesContext(connection) as main_connection:
        ahead = list(annotation_rows(queryset, study=study, user=None, raw_worker_ids=False, page_rows=5))
    assert jit() == jit_before  # the reader turns JIT off on its own connection only
    with transaction.atomic(), CaptureQueriesContext(connection) as in_transaction:
        sequential = list(annotation_rows(queryset, study=study, user=None, raw_worker_ids=False, page_rows=5))

    assert len(ahead) == queryset.count() == 12 and ahead == sequential
    assert not any(page_query.search(q["sql"]) for q in main_connection.captured_queries)
    assert sum(bool(page_query.search(q["sql"])) for q in in_transaction.captured_queries) == 4  # 3 pages and the empty one


@pytest.mark.django_db(transaction=True)
def test_the_read_ahead_stops_with_its_caller_and_hands_over_its_errors():
    """A client that goes away mid-export stops the reader thread (and closes its connection); an
    error of the database in the reader is raised to the caller, not lost in the thread."""
    study, queryset = answered_by_two_workers("ahead-stop")

    def readers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "export-read-ahead"]

    rows = annotation_rows(queryset, study=study, user=None, raw_worker_ids=False, page_rows=1)
    next(rows)
    assert readers()  # reading ahead of the caller
    rows.close()
    assert not readers()

    failing = queryset.annotate(bad=Cast(Value("not a number"), IntegerField())).order_by("id").values_list("id", "bad")
    with pytest.raises(DataError):
        list(keyset_pages(failing, page_rows=5))
    assert not readers()


def test_a_column_added_to_the_spec_is_one_line_and_reaches_every_format(monkeypatch):
    """Issue 23 item 7: the columns were four lists kept in step by position. One declaration
    now drives the query, the row and every format: a line for an answer's field and a line for
    its unit's field are all it takes."""
    from lab.api.streaming import Column, iter_csv, iter_jsonl
    from scoring.api import export_annotations as export

    study = open_utility_study(name="one-line", n_items=2, n_sources=1, quota=1)
    work(study, "5f0c0ffee0c0ffee0c0ffee3")
    monkeypatch.setattr(export, "ANNOTATION_SPEC", [
        *export.ANNOTATION_SPEC,
        (Column("question_key", "str", "The claim's question key."), export.ANSWER, "claim__question_key"),
        (Column("item_question", "str", "The item's question."), export.UNIT, "item__question"),
    ])
    columns = export.annotation_columns(raw_worker_ids=True)
    queryset = Annotation.objects.filter(claim__study=study).select_related("claim__unit__item")
    rows = list(export.annotation_rows(queryset, study=study, user=None, raw_worker_ids=True))

    names = [c.name for c in columns]
    assert names[-3:] == ["question_key", "item_question", "worker_raw_id"]
    stored = {a.pk: a for a in queryset}
    for row in map(dict, (zip(names, row, strict=True) for row in rows)):
        a = stored[row["annotation_id"]]
        assert (row["question_key"], row["item_question"]) == (a.claim.question_key, a.claim.unit.item.question)
        assert row["answer"] == a.answer and row["counts"] is True
    lines = [json.loads(line) for line in b"".join(iter_jsonl(columns, rows)).splitlines()]
    assert [line["item_question"] for line in lines] == [stored[r[0]].claim.unit.item.question for r in rows]
    assert b"".join(iter_csv(columns, rows)).decode().splitlines()[0].endswith("question_key,item_question,worker_raw_id")
