"""The annotation export: one row per recorded answer, with the worker pseudonymised and the unit's
scores joined. The column set is stable: columns are only ever added at the end, never renamed
or removed; ``worker_raw_id`` is appended only when a permitted user asks for it.

One declaration (``ANNOTATION_SPEC``) says, for each column, its name, type, meaning and where its
value is read: the answer's own row (a field path from ``Annotation``, or a value the database
computes, ``_COMPUTED``), its unit (a field path from ``Unit``), the unit's score (a field path
from ``UnitScore``), what the unit's scores were computed with (``RUN``: a key of
``export_units.SCORED_WITH_COLUMNS``: the unit's own score run with its settings and majority
rule, read once per run, and whether the answers that count changed since, read once for the
study) or a value made per row (``MADE``). The queries, the column lists of CSV, JSON lines and
Parquet, and the order of each row's values all come from it: a column read from the database is
one line there."""
from __future__ import annotations

import queue
import re
import threading
from collections.abc import Iterator
from operator import itemgetter

from django.db import connections, transaction
from django.db.models import BooleanField, CharField, ExpressionWrapper, Func, QuerySet, TextField
from django.db.models.functions import Cast

from annotations.choices import answer_is_correct
from annotations.models import Annotation, Assignment, AttentionCheck, Participant, Unit
from annotations.selectors import claim_scored
from lab.api.streaming import Column
from lab.pseudonyms import worker_pseudonym
from scoring.api.export_units import SCORED_WITH_COLUMNS, SCORED_WITH_READS, ScoredWith, utility_label
from scoring.models import UnitScore
from studies.models import Study

ANSWER_STEPS = {"before", "after", "attention"}  # steps whose answer has a gold label
ANSWER, UNIT, SCORE, RUN, MADE = "answer", "unit", "score", "run", "made"  # where a column's value is read

ANNOTATION_SPEC: list[tuple[Column, str, str]] = [
    (Column("annotation_id", "int", "Id of the answer (one row per answered step)."), ANSWER, "id"),
    (Column("study_id", "int", "Study id."), ANSWER, "claim__study_id"),
    (Column("assignment_id", "int", "The worker's task (assignment) id."), ANSWER, "claim__assignment_id"),
    (Column("assignment_status", "str", "active, submitted, expired, approved, rejected or returned."),
     MADE, "assignment_status"),
    (Column("worker", "str", "Pseudonymised worker id: `w_` + 16 hex digits of HMAC-SHA256(salt, platform:id)."),
     MADE, "worker"),
    (Column("position", "int", "Position of the unit in the task (0-based)."), ANSWER, "claim__position"),
    (Column("unit_id", "int", "Unit id; empty for attention checks."), ANSWER, "claim__unit_id"),
    (Column("item_id", "int", "Item id; empty for attention checks."), UNIT, "item_id"),
    (Column("item_external_id", "str", "Item id in its dataset (e.g. StrategyQA qid)."), UNIT, "item__external_id"),
    (Column("split", "str", "Split of the item: train, dev, test or other."), UNIT, "item__split"),
    (Column("source_id", "int", "Rationale source id of the unit."), UNIT, "source_id"),
    (Column("source_name", "str", "Rationale source name of the unit."), UNIT, "source__name"),
    (Column("generalization_question_id", "int", "Generalization question answered (generalization studies)."),
     UNIT, "generalization_question_id"),
    (Column("generalization_type", "str", "rephrase, counterfactual or similar (generalization studies)."),
     UNIT, "generalization_question__qtype"),
    (Column("attention_check_id", "int", "Attention check id; empty for real units."),
     ANSWER, "claim__attention_check_id"),
    (Column("step", "str", "before (no rationale), after (with rationale), validation, properties or attention."),
     ANSWER, "step"),
    (Column("answer", "str", "The answer label given (yes/no, or a..d)."), ANSWER, "answer"),
    (Column("gold_answer", "str", "The correct label for this question (item, generalization question or check)."),
     MADE, "gold_answer"),
    (Column("answer_correct", "bool", "answer == gold_answer for before/after/attention steps; empty otherwise."),
     MADE, "answer_correct"),
    (Column("payload", "str", "JSON of the step's structured answer (validation and property marks)."),
     MADE, "payload"),
    (Column("shown_at", "datetime", "When the step became the one the task asks (UTC): a question's first step "
            "when the previous question was completed (or the consent or qualification pass), its explanation "
            "step when the first answer was recorded; a reload does not move it."), ANSWER, "shown_iso"),
    (Column("answered_at", "datetime", "When the answer was recorded (UTC)."), ANSWER, "answered_iso"),
    (Column("duration_ms", "int", "Time on the step in milliseconds, from shown_at to answered_at."), ANSWER,
     "duration_ms"),
    (Column("utility", "int", "Utility of the (item, source) unit after scoring: 1 useful, 0 unsure, -1 not useful."),
     SCORE, "utility"),
    (Column("utility_label", "str", "useful, unsure or not_useful; empty before scoring."), SCORE, "utility_label"),
    (Column("task_correct", "bool", "Whether the source's own predicted answer was correct."), SCORE, "task_correct"),
    (Column("gen_u", "int", "Gen-U of the unit's rationale (-1, 0, 1), when computed."), SCORE, "gen_u"),
    (Column("similarity", "float", "BERTScore similarity of the rationale to the gold rationale, when computed."),
     SCORE, "similarity"),
    (Column("counts", "bool", "The answer counts: its claim is complete, not given back, and its task submitted or "
            "approved and not on hold, and in a generalization study its question is not marked invalid (what "
            "scoring reads; `annotations.selectors.claim_scored`), as it is now: the scores are those of "
            "`score_run`, and `stale` says whether what counts changed since."), ANSWER, "counts"),
    *((column, RUN, name) for name, column in SCORED_WITH_COLUMNS.items()),
]
RAW_WORKER_SPEC = (Column("worker_raw_id", "str", "Raw platform id (only for staff with "
                          "studies.view_raw_worker_ids)."), MADE, "worker_raw_id")
ANNOTATION_COLUMNS: list[Column] = [column for column, _, _ in ANNOTATION_SPEC]
RAW_WORKER_COLUMN = RAW_WORKER_SPEC[0]
PAGE_ROWS = 10_000
READ_AHEAD_PAGES = 2


def _unique(values) -> list[str]:
    return list(dict.fromkeys(values))


def _computed(fields, *, study: Study | None = None) -> dict:
    """The values the database computes, for those among ``fields`` (``study``: the one study the
    answers are of, whose kind says whether ``counts`` reads the question rule)."""
    computed = {
        "counts": lambda: ExpressionWrapper(claim_scored("claim__", study=study), output_field=BooleanField()),
        "payload_text": lambda: Cast("payload", TextField()),
        "shown_iso": lambda: IsoUtc("shown_at"),
        "answered_iso": lambda: IsoUtc("answered_at"),
        "utility_label": utility_label,
    }
    return {name: make() for name, make in computed.items() if name in fields}


# What the row maker (``annotation_rows``) adds to each row, in this order.
_MADE = ("assignment_status", "worker", "gold_answer", "answer_correct", "payload", "worker_raw_id")


class _Layout:
    """What ``ANNOTATION_SPEC`` asks to read, and where each column's value sits in the row the
    maker puts together: the answer's ``answer_fields``, then its unit's ``unit_fields`` without
    the id, the unit's gold answer, ``score_fields`` and ``run_fields`` (``_unit_table``), then the
    ``_MADE`` values.

    Per answer only what belongs to the answer and its claim is read (one join); the rest comes from
    per-study tables read once: units with their item, source, question and score; attention
    checks; workers (pseudonym computed once per worker) and tasks as they appear. Besides what the
    columns show, the rows need the answer's worker, task and payload and the unit's gold answer."""

    def __init__(self, *, raw_worker_ids: bool) -> None:
        self.specs = ANNOTATION_SPEC + ([RAW_WORKER_SPEC] if raw_worker_ids else [])
        read = {table: [value for _, where, value in self.specs if where == table] for table in (ANSWER, UNIT, SCORE)}
        self.answer_fields = _unique(["id", *read[ANSWER], "claim__participant_id", "claim__assignment_id",
                                      "claim__unit_id", "claim__attention_check_id", "step", "answer", "payload_text"])
        self.unit_fields = _unique(["id", *read[UNIT], "item_id", "source_id", "item__gold_answer",
                                    "generalization_question_id", "generalization_question__answer"])
        self.score_fields = read[SCORE]
        self.run_fields = [value for _, where, value in self.specs if where == RUN]

    def positions(self) -> list[int]:
        unit = len(self.answer_fields) - 1  # the unit's fields start after the answer's, its id left out
        score = unit + len(self.unit_fields) + 1  # after the unit's fields and its gold answer
        run = score + len(self.score_fields)
        made = run + len(self.run_fields)
        where = {
            ANSWER: self.answer_fields.index,
            UNIT: lambda value: unit + self.unit_fields.index(value),
            SCORE: lambda value: score + self.score_fields.index(value),
            RUN: lambda value: run + self.run_fields.index(value),
            MADE: lambda value: made + _MADE.index(value),
        }
        return [where[table](value) for _, table, value in self.specs]

    def answer(self, *names: str) -> list[int]:
        return [self.answer_fields.index(name) for name in names]


def annotation_columns(*, raw_worker_ids: bool) -> list[Column]:
    return [column for column, _, _ in _Layout(raw_worker_ids=raw_worker_ids).specs]


def unit_score_lookup(study: Study, *, fields: list[str] | None = None) -> dict[tuple[int, int], tuple]:
    """(item, source) -> the score columns of ``ANNOTATION_SPEC`` (or ``fields`` of ``UnitScore``,
    ``utility_label`` included) of the study's scored units. Its size is the number of scored
    units, not of annotations."""
    fields = _Layout(raw_worker_ids=False).score_fields if fields is None else fields
    rows = (UnitScore.objects.filter(study=study).annotate(**_computed(fields))
            .values_list("item_id", "source_id", *fields).iterator(chunk_size=5000))
    return {(i, r): tuple(rest) for i, r, *rest in rows}


def _unit_table(study: Study, layout: _Layout, *, user) -> tuple[dict[int, tuple], tuple]:
    """Unit id -> its ``unit_fields`` (without the id), its gold answer (the generalization
    question's, else the item's), its score and what that score was computed with: the unit's own
    run and whether the answers changed since (``export_units.ScoredWith``: each run read once, the
    study's counting answers once; not per answer); and the same shape, with empties, for an answer
    without a unit (an attention check). ``user``: the reader (``export_units.scored_with_run``)."""
    n_score = len(layout.score_fields)
    scores = unit_score_lookup(study, fields=[*layout.score_fields, *SCORED_WITH_READS[3:], "score_run_id"])
    runs = ScoredWith(study.pk, user=user)
    order = list(SCORED_WITH_COLUMNS)
    run_at = [order.index(name) for name in layout.run_fields]
    no_run = (None,) * len(layout.run_fields)

    def scored(key: tuple[int, int], rest: tuple) -> tuple:
        n_annotators, imported, run_id = rest[n_score:]
        values = runs.values(run_id, *key, n_annotators, imported)
        return (*rest[:n_score], *(values[i] for i in run_at))

    by_pair = {key: scored(key, rest) for key, rest in scores.items()}
    no_score = (*("" if name == "utility_label" else None for name in layout.score_fields), *no_run)
    field = {name: i for i, name in enumerate(layout.unit_fields)}
    key, gq, gq_gold, item_gold = (itemgetter(field["item_id"], field["source_id"]), field["generalization_question_id"],
                                   field["generalization_question__answer"], field["item__gold_answer"])
    units = {
        row[0]: (*row[1:], row[gq_gold] if row[gq] is not None else row[item_gold], *by_pair.get(key(row), no_score))
        for row in Unit.objects.filter(study=study).values_list(*layout.unit_fields)
    }
    return units, (None,) * len(layout.unit_fields) + no_score


class IsoUtc(Func):
    """A datetime as the text ``datetime.isoformat()`` gives for its UTC value, made by the database:
    turning a million timestamps into datetimes and back into text costs more than the rest of
    the export. (Parquet turns the text back into timestamps in Arrow.)"""

    output_field = CharField()

    def as_postgresql(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        utc = f"(({sql}) AT TIME ZONE 'UTC')"
        return (
            f"CASE WHEN date_part('microseconds', {utc})::bigint %% 1000000 = 0 "
            f"THEN to_char({utc}, 'YYYY-MM-DD\"T\"HH24:MI:SS\"+00:00\"') "
            f"ELSE to_char({utc}, 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"') END",
            (*params, *params, *params),
        )

    def as_sqlite(self, compiler, connection, **extra_context):
        # Django stores a datetime as the text of its UTC value: "YYYY-MM-DD HH:MM:SS[.ffffff]".
        sql, params = compiler.compile(self.source_expressions[0])
        return f"(REPLACE({sql}, ' ', 'T') || '+00:00')", params


class _Workers:
    """Participant id -> (pseudonym, raw id) and assignment id -> status, read in bulk for the ids a
    page brings that were not seen yet: their size is the number of workers and tasks, not answers."""

    def __init__(self, layout: _Layout) -> None:
        self.participant, self.assignment = layout.answer("claim__participant_id", "claim__assignment_id")
        self.people: dict[int, tuple[str, str]] = {}
        self.task_status: dict[int, str] = {}

    def read(self, page: list[tuple]) -> None:
        people = {row[self.participant] for row in page} - self.people.keys()
        if people:
            for pk, platform, external_id in Participant.objects.filter(pk__in=people).values_list(
                "id", "platform", "external_id"
            ):
                self.people[pk] = (worker_pseudonym(platform, external_id), external_id)
        tasks = {row[self.assignment] for row in page} - self.task_status.keys()
        if tasks:
            self.task_status.update(Assignment.objects.filter(pk__in=tasks).values_list("id", "status"))


# What an export's reads set for their own transaction (``export_read_settings``): a page's plan is
# estimated as costly (a nested loop over the study's answers, cut by the LIMIT) and crosses
# jit_above_cost, but it runs in about 0.05 s: compiling it took a quarter of that on every page.
# Parallel workers would take the core the caller formats on.
EXPORT_READ_SETTINGS = ("SET LOCAL jit = off", "SET LOCAL max_parallel_workers_per_gather = 0")
# A snapshot id as ``pg_export_snapshot()`` gives it (e.g. ``00000003-0000001B-1``).
SNAPSHOT_ID = re.compile(r"[0-9A-Fa-f]+(-[0-9A-Fa-f]+)+")


def export_read_settings(cursor) -> None:
    """``EXPORT_READ_SETTINGS`` on ``cursor``'s connection, inside a transaction (PostgreSQL): SET
    LOCAL, so they end with the transaction and never outlive it on the server connection. Behind
    PgBouncer in transaction mode (``DATABASE_PGBOUNCER``) a plain SET in autocommit stayed on the
    server connection it ran on, handed next to other clients, while the pages ran on others."""
    for statement in EXPORT_READ_SETTINGS:
        cursor.execute(statement)


def snapshot_join(cursor, snapshot: str) -> None:
    """Make the transaction just begun on ``cursor``'s connection read ``snapshot`` (an id from
    ``pg_export_snapshot()`` in a transaction still open on another connection): REPEATABLE READ,
    read only, seeing exactly what that transaction sees. Its first statements."""
    if not SNAPSHOT_ID.fullmatch(snapshot):
        raise ValueError(f"not a snapshot id: {snapshot!r}")
    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    cursor.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")


def keyset_pages(pages: QuerySet, *, page_rows: int, ahead: int = READ_AHEAD_PAGES,
                 snapshot: str | None = None) -> Iterator[list[tuple]]:
    """``pages`` (``values_list`` starting with ``id``, ordered by id) in pages of ``page_rows``:
    each page is ``id > last id``, so memory stays flat.

    On PostgreSQL outside a transaction (a streamed response) a reader thread reads the pages on a
    second connection, up to ``ahead`` pages before the caller, so the database keeps reading
    while Python formats instead of waiting for each request for the next page; each page in a
    short transaction of its own, with ``export_read_settings``. Inside a transaction (whose rows
    another connection cannot see) and on SQLite the pages are read one after the other on the
    caller's connection, unless the caller's transaction handed its ``snapshot``
    (``pg_export_snapshot()``, the study bundle's): the reader then reads that very snapshot
    (``snapshot_join``), so its pages are what the caller's connection would read."""
    connection = connections[pages.db]
    if connection.vendor != "postgresql" or (connection.in_atomic_block and snapshot is None):
        last = 0
        while page := list(pages.filter(id__gt=last)[:page_rows]):
            yield page
            last = page[-1][0]
        return

    ready: queue.Queue[list[tuple] | BaseException] = queue.Queue(maxsize=ahead)
    stop = threading.Event()

    def hand_over(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False  # the caller went away (a client that disconnected)

    def read_all() -> None:
        try:
            if snapshot is not None:  # the bundle's: one transaction reading the caller's snapshot
                with transaction.atomic(using=pages.db), connections[pages.db].cursor() as cursor:
                    snapshot_join(cursor, snapshot)
                    export_read_settings(cursor)
                    last = 0
                    while hand_over(page := list(pages.filter(id__gt=last)[:page_rows])) and page:
                        last = page[-1][0]
                return
            # Else each page in a short transaction of its own (its settings SET LOCAL): a download
            # that takes minutes holds no transaction, nor, behind PgBouncer, a server connection.
            last = 0
            while True:
                with transaction.atomic(using=pages.db), connections[pages.db].cursor() as cursor:
                    export_read_settings(cursor)
                    page = list(pages.filter(id__gt=last)[:page_rows])
                if not hand_over(page) or not page:
                    return
                last = page[-1][0]
        except BaseException as error:  # handed to the caller, which raises it
            hand_over(error)
        finally:
            connections.close_all()  # this thread's own connection

    reader = threading.Thread(target=read_all, name="export-read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            page = ready.get()
            if isinstance(page, BaseException):
                raise page
            if not page:
                return
            yield page
    finally:
        stop.set()
        reader.join()


def annotation_rows(
    queryset: QuerySet[Annotation], *, study: Study, user, raw_worker_ids: bool, page_rows: int = PAGE_ROWS,
    snapshot: str | None = None,
) -> Iterator[tuple]:
    """Rows in ``annotation_columns(raw_worker_ids=...)`` order, read in pages of ``page_rows`` by id
    (keyset: each page is ``id > last id``, so memory stays flat however many answers there are).
    The score runs' settings as ``user`` may read them (``export_units.scored_with_run``; None: the
    operator). ``snapshot``: the caller's transaction's exported snapshot, which the pages read
    ahead are read from (``keyset_pages``); everything else is read on the caller's connection."""
    layout = _Layout(raw_worker_ids=raw_worker_ids)
    units, no_unit = _unit_table(study, layout, user=user)
    unit_gold = len(layout.unit_fields) - 1
    checks = dict(AttentionCheck.objects.filter(study=study).values_list("id", "correct_answer"))
    workers = _Workers(layout)
    pick = itemgetter(*layout.positions())
    person, task, unit, check, step, answer, payload = layout.answer(
        "claim__participant_id", "claim__assignment_id", "claim__unit_id", "claim__attention_check_id", "step",
        "answer", "payload_text")
    pages = queryset.annotate(**_computed(layout.answer_fields, study=study)).order_by("id").values_list(*layout.answer_fields)
    for page in keyset_pages(pages, page_rows=page_rows, snapshot=snapshot):
        workers.read(page)
        people, task_status = workers.people, workers.task_status
        for row in page:
            u = units.get(row[unit], no_unit)
            gold = checks.get(row[check]) if row[check] is not None else u[unit_gold]
            given = row[answer]
            correct = answer_is_correct(given, gold) if (row[step] in ANSWER_STEPS and gold is not None and given) else None
            pseudonym, external_id = people[row[person]]
            text = row[payload]
            yield pick(row + u + (task_status[row[task]], pseudonym, gold, correct, "" if text == "{}" else text,
                                  external_id))
