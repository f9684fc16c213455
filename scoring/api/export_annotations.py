"""The annotation export: one row per recorded answer, with the worker pseudonymised and the unit's
scores joined. The column set is stable: columns are only ever added at the end, never renamed
or removed; ``worker_raw_id`` is appended only when a permitted user asks for it."""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from django.db import connections
from django.db.models import BooleanField, CharField, ExpressionWrapper, Func, QuerySet, TextField
from django.db.models.functions import Cast

from annotations.models import Annotation, Assignment, AttentionCheck, Participant, Unit
from annotations.selectors import claim_counts
from annotations.services.steps import answer_is_correct
from lab.api.streaming import Column
from lab.pseudonyms import worker_pseudonym
from scoring.metrics.labels import UTILITY_NAMES
from scoring.models import UnitScore
from studies.models import Study

ANSWER_STEPS = {"before", "after", "attention"}  # steps whose answer has a gold label
ANNOTATION_COLUMNS: list[Column] = [
    Column("annotation_id", "int", "Id of the answer (one row per answered step)."),
    Column("study_id", "int", "Study id."),
    Column("assignment_id", "int", "The worker's task (assignment) id."),
    Column("assignment_status", "str", "active, submitted, expired, approved, rejected or returned."),
    Column("worker", "str", "Pseudonymised worker id: `w_` + 16 hex digits of HMAC-SHA256(salt, platform:id)."),
    Column("position", "int", "Position of the unit in the task (0-based)."),
    Column("unit_id", "int", "Unit id; empty for attention checks."),
    Column("item_id", "int", "Item id; empty for attention checks."),
    Column("item_external_id", "str", "Item id in its dataset (e.g. StrategyQA qid)."),
    Column("split", "str", "Split of the item: train, dev, test or other."),
    Column("source_id", "int", "Rationale source id of the unit."),
    Column("source_name", "str", "Rationale source name of the unit."),
    Column("generalization_question_id", "int", "Generalization question answered (generalization studies)."),
    Column("generalization_type", "str", "rephrase, counterfactual or similar (generalization studies)."),
    Column("attention_check_id", "int", "Attention check id; empty for real units."),
    Column("step", "str", "before (no rationale), after (with rationale), validation, properties or attention."),
    Column("answer", "str", "The answer label given (yes/no, or a..d)."),
    Column("gold_answer", "str", "The correct label for this question (item, generalization question or check)."),
    Column("answer_correct", "bool", "answer == gold_answer for before/after/attention steps; empty otherwise."),
    Column("payload", "str", "JSON of the step's structured answer (validation and property marks)."),
    Column("shown_at", "datetime", "When the step was shown (UTC)."),
    Column("answered_at", "datetime", "When the answer was recorded (UTC)."),
    Column("duration_ms", "int", "Time spent on the step in milliseconds."),
    Column("utility", "int", "Utility of the (item, source) unit after scoring: 1 useful, 0 unsure, -1 not useful."),
    Column("utility_label", "str", "useful, unsure or not_useful; empty before scoring."),
    Column("task_correct", "bool", "Whether the source's own predicted answer was correct."),
    Column("gen_u", "int", "Gen-U of the unit's rationale (-1, 0, 1), when computed."),
    Column("similarity", "float", "BERTScore similarity of the rationale to the gold rationale, when computed."),
    Column("counts", "bool", "The answer counts: its claim is complete, not given back, and its task submitted or "
           "approved (what scoring reads; `annotations.selectors.claims_that_count`)."),
]
RAW_WORKER_COLUMN = Column("worker_raw_id", "str", "Raw platform id (only for staff with studies.view_raw_worker_ids).")

# Per answer only what belongs to the answer and its claim (one join); the rest comes from
# per-study tables read once: units with their item, source and question; attention checks;
# workers (pseudonym computed once per worker) and tasks as they appear.
_FIELDS = [
    "id", "claim__study_id", "claim__assignment_id", "claim__participant_id", "claim__position", "claim__unit_id",
    "claim__attention_check_id", "step", "answer", "payload_text", "shown_iso", "answered_iso", "duration_ms", "counts",
]
_UNIT_FIELDS = [
    "id", "item_id", "item__external_id", "item__split", "item__gold_answer", "source_id", "source__name",
    "generalization_question_id", "generalization_question__qtype", "generalization_question__answer",
]
PAGE_ROWS = 10_000
READ_AHEAD_PAGES = 2
def annotation_columns(*, raw_worker_ids: bool) -> list[Column]:
    return ANNOTATION_COLUMNS + ([RAW_WORKER_COLUMN] if raw_worker_ids else [])


def unit_score_lookup(study: Study) -> dict[tuple[int, int], tuple]:
    """(item, source) -> (utility, utility label, task_correct, gen_u, similarity) of the study's
    scored units. Its size is the number of scored units, not of annotations."""
    return {
        (i, r): (utility, UTILITY_NAMES.get(utility, ""), *rest)
        for i, r, utility, *rest in UnitScore.objects.filter(study=study)
        .values_list("item_id", "source_id", "utility", "task_correct", "gen_u", "similarity")
        .iterator(chunk_size=5000)
    }


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

    def __init__(self) -> None:
        self.people: dict[int, tuple[str, str]] = {}
        self.task_status: dict[int, str] = {}

    def read(self, page: list[tuple]) -> None:
        people = {row[3] for row in page} - self.people.keys()
        if people:
            for pk, platform, external_id in Participant.objects.filter(pk__in=people).values_list(
                "id", "platform", "external_id"
            ):
                self.people[pk] = (worker_pseudonym(platform, external_id), external_id)
        tasks = {row[2] for row in page} - self.task_status.keys()
        if tasks:
            self.task_status.update(Assignment.objects.filter(pk__in=tasks).values_list("id", "status"))


def keyset_pages(pages: QuerySet, *, page_rows: int, ahead: int = READ_AHEAD_PAGES) -> Iterator[list[tuple]]:
    """``pages`` (``values_list`` starting with ``id``, ordered by id) in pages of ``page_rows``:
    each page is ``id > last id``, so memory stays flat.

    On PostgreSQL outside a transaction (a streamed response) a reader thread reads the pages on a
    second connection, up to ``ahead`` pages before the caller, so the database keeps reading
    while Python formats instead of waiting for each request for the next page. Inside a
    transaction (whose rows another connection cannot see) and on SQLite the pages are read one
    after the other on the caller's connection."""
    connection = connections[pages.db]
    if connection.vendor != "postgresql" or connection.in_atomic_block:
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
            with connections[pages.db].cursor() as cursor:
                # A page's plan is estimated as costly (a nested loop over the study's answers, cut
                # by the LIMIT) and crosses jit_above_cost, but it runs in about 0.05 s: compiling
                # it took a quarter of that on every page. Parallel workers would take the core
                # the caller formats on. Both settings live and die with this connection.
                cursor.execute("SET jit = off")
                cursor.execute("SET max_parallel_workers_per_gather = 0")
            last = 0
            while hand_over(page := list(pages.filter(id__gt=last)[:page_rows])) and page:
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
    queryset: QuerySet[Annotation], *, study: Study, raw_worker_ids: bool, page_rows: int = PAGE_ROWS
) -> Iterator[tuple]:
    """Rows in ``ANNOTATION_COLUMNS`` order, read in pages of ``page_rows`` by id (keyset: each page
    is ``id > last id``, so memory stays flat however many answers there are)."""
    # Unit id -> the unit's item, source and question, and its scores: one lookup per answer.
    scores = unit_score_lookup(study)
    no_score = (None, "", None, None, None)
    units = {
        row[0]: (*row[1:], *scores.get((row[1], row[5]), no_score))
        for row in Unit.objects.filter(study=study).values_list(*_UNIT_FIELDS)
    }
    checks = dict(AttentionCheck.objects.filter(study=study).values_list("id", "correct_answer"))
    workers = _Workers()
    no_unit = (None,) * (len(_UNIT_FIELDS) - 1) + no_score
    pages = queryset.annotate(
        counts=ExpressionWrapper(claim_counts("claim__"), output_field=BooleanField()),
        payload_text=Cast("payload", TextField()), shown_iso=IsoUtc("shown_at"), answered_iso=IsoUtc("answered_at"),
    ).order_by("id").values_list(*_FIELDS)
    for page in keyset_pages(pages, page_rows=page_rows):
        workers.read(page)
        people, task_status = workers.people, workers.task_status
        for (
            pk, study_id, assignment_id, participant_id, position, unit_id, check_id, step, answer, payload,
            shown_at, answered_at, duration_ms, counts,
        ) in page:
            (
                item_id, item_external_id, split, item_gold, source_id, source_name, genq_id, genq_type, genq_answer,
                utility, utility_label, task_correct, gen_u, similarity,
            ) = units.get(unit_id, no_unit)
            if check_id is not None:
                gold = checks.get(check_id)
            elif genq_id is not None:
                gold = genq_answer
            else:
                gold = item_gold
            correct = answer_is_correct(answer, gold) if (step in ANSWER_STEPS and gold is not None and answer) else None
            pseudonym, external_id = people[participant_id]
            row = (
                pk, study_id, assignment_id, task_status[assignment_id], pseudonym, position, unit_id, item_id,
                item_external_id, split, source_id, source_name, genq_id, genq_type, check_id, step, answer, gold,
                correct, "" if payload == "{}" else payload, shown_at, answered_at,
                duration_ms, utility, utility_label, task_correct, gen_u, similarity, counts,
            )
            yield row + (external_id,) if raw_worker_ids else row
