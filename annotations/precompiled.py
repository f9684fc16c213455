"""The questionnaire's precompiled hot-path queries: the one place that runs SQL by hand.

A worker request runs three or four small queries, and compiling an ORM query costs several
times more CPU than running one of them on a warm connection (measured with
``benchmarks/questionnaire/load.py``: see its README for the figures and the decision to keep
this module). So the few queries of the worker pages and of an answer are compiled once per
process, from the models' metadata (no table or column name spelled by hand), and their rows
become model instances with the converters the ORM applies, related objects cached as
``select_related`` caches them; fields not selected are deferred (touching one loads it like
any deferred field).

Every query here is declared with its ORM twin (``HotQuery.queryset``): the tests compare the
two on SQLite and PostgreSQL (``tests/annotations/test_precompiled.py``), and ``PRECOMPILED =
False`` runs the twins instead (what the benchmark's ``--queries orm`` measures). Reads go to the
database the router names for the model, writes (and the locking reads) to the router's write
database. One statement is here because the ORM cannot write it at all: the claim's ``FOR KEY
SHARE`` on its study (``study_lock_read``), which runs by hand whatever ``PRECOMPILED`` says (its
twin, the same read without the lock, is what the tests compare it with). The two writes
(an answer's ``INSERT``, a claim's ``completed_at``) skip ``save()``: the ``INSERT`` falls back to
the ORM when anything listens to ``Annotation``'s save signals, and the ``UPDATE`` is what
``QuerySet.update`` does (no signals either).
"""
from __future__ import annotations

from datetime import datetime

from django.db import connections, models, router
from django.db.models import signals
from django.utils import timezone

from annotations.models import (
    Annotation,
    Assignment,
    AttentionCheck,
    Claim,
    QualificationGrant,
    QualificationTest,
)
from studies.models import GeneralizationQuestion, Study

# False: every query below runs its ORM twin (benchmark comparison; same rows, same shapes).
PRECOMPILED = True
# Every precompiled read, by name: the tests compare each with its ORM twin.
QUERIES: dict[str, HotQuery] = {}


class HotQuery:
    """``Model.objects.select_related(*paths).only(*fields).filter(<where>=value).order_by(...)``,
    compiled once per database.

    ``spec`` maps a path ("" for the model itself, "unit", "unit__item", ...) to the attnames
    selected there (``"__all__"``: every concrete field); the primary key is always included.
    Joins follow the foreign keys: INNER where the key is required, LEFT JOIN otherwise.
    ``where`` is an attname of the model, or ``<attname>__in`` for a list of values.

    ``subqueries`` adds columns to the model itself, as ``annotate(name=Subquery(...))`` would:
    ``{name: (model, attname, outer key, {attname: constant})}`` is the value of ``attname`` in the
    one row of ``model`` whose ``outer key`` is this row's primary key and whose other columns
    equal the constants (a unique key: the row or NULL). A correlated scalar subquery is one index
    lookup per row whatever the planner's statistics, where a join can be planned as a scan."""

    def __init__(self, name: str, model, spec: dict[str, tuple[str, ...] | str], *, where: str,
                 order_by: tuple[str, ...] = (), for_update: bool = False,
                 subqueries: dict[str, tuple] | None = None):
        self.name, self.model, self.spec = name, model, spec
        self.where, self.order_by, self.for_update = where, order_by, for_update
        self.subqueries = dict(subqueries or {})
        self.nodes = []  # (path, model, fields, parent index, relation field, alias)
        for path, names in sorted(spec.items(), key=lambda kv: (kv[0].count("__") if kv[0] else -1, kv[0])):
            if path:
                parent_path, _, name_ = path.rpartition("__")
                parent = next(i for i, node in enumerate(self.nodes) if node[0] == parent_path)
                relation = self.nodes[parent][1]._meta.get_field(name_)
                node_model = relation.related_model
            else:
                parent, relation, node_model = None, None, model
            opts = node_model._meta
            wanted = {opts.pk.attname} | (
                {f.attname for f in opts.concrete_fields} if names == "__all__"
                else {opts.get_field(n).attname for n in names}
            )
            fields = [f for f in opts.concrete_fields if f.attname in wanted]  # from_db's order
            self.nodes.append((path, node_model, fields, parent, relation, f"T{len(self.nodes)}"))
        self.pk_index, start = [], 0  # where each node's primary key is in a row
        for _path, _model, fields, *_rest in self.nodes:
            self.pk_index.append(start + next(i for i, f in enumerate(fields) if f.primary_key))
            start += len(fields)
        self.attnames = [frozenset(f.attname for f in node[2]) for node in self.nodes]
        self._compiled: dict[str, tuple] = {}  # per database alias: (sql, converters)
        assert name not in QUERIES, name
        QUERIES[name] = self

    # --- the ORM twin ---

    def queryset(self, value, using: str | None = None) -> models.QuerySet:
        """The same query through the ORM (same joins, same columns, same order)."""
        names = []
        for path, _model, fields, *_rest in self.nodes:
            for f in fields:
                if not f.primary_key:
                    names.append(f"{path}__{f.name}" if path else f.name)
        qs = self.model._default_manager.all()
        if using is not None:
            qs = qs.using(using)
        if len(self.nodes) > 1:
            qs = qs.select_related(*(node[0] for node in self.nodes[1:]))
        qs = qs.only(*names).filter(**{self.where: value}).order_by(*self.order_by)
        for sub_name, (sub_model, attname, outer_key, constants) in self.subqueries.items():
            qs = qs.annotate(**{sub_name: models.Subquery(
                sub_model._default_manager.filter(**{outer_key: models.OuterRef("pk")}, **constants)
                .values(attname)[:1])})
        if self.for_update:
            qs = qs.select_for_update(of=("self",) if len(self.nodes) > 1 else ())
        return qs

    # --- compiled once per database ---

    def _compile(self, connection):
        qn = connection.ops.quote_name
        columns, converters, joins = [], [], []
        left = set()
        for i, (_path, node_model, fields, parent, relation, alias) in enumerate(self.nodes):
            for model_field in fields:
                columns.append(f"{alias}.{qn(model_field.column)}")
                col = model_field.get_col(alias)
                converters.append(
                    (connection.ops.get_db_converters(col) + model_field.get_db_converters(connection), col)
                )
            if parent is None:
                continue
            outer = relation.null or parent in left
            if outer:
                left.add(i)
            parent_alias = self.nodes[parent][5]
            joins.append(
                f"{'LEFT OUTER' if outer else 'INNER'} JOIN {qn(node_model._meta.db_table)} {alias} ON "
                f"({parent_alias}.{qn(relation.column)} = {alias}.{qn(relation.target_field.column)})"
            )
        root = self.nodes[0]
        sub_params = []
        for n, (sub_model, attname, outer_key, constants) in enumerate(self.subqueries.values()):
            sub_alias, opts = f"S{n}", sub_model._meta
            field = opts.get_field(attname)
            conditions = [f"{sub_alias}.{qn(opts.get_field(outer_key).column)} = {root[5]}.{qn(root[1]._meta.pk.column)}"]
            for key, constant in constants.items():
                conditions.append(f"{sub_alias}.{qn(opts.get_field(key).column)} = %s")
                sub_params.append(opts.get_field(key).get_db_prep_value(constant, connection))
            columns.append(f"(SELECT {sub_alias}.{qn(field.column)} FROM {qn(opts.db_table)} {sub_alias} "
                           f"WHERE {' AND '.join(conditions)} LIMIT 1)")
            col = field.get_col(sub_alias)
            converters.append((connection.ops.get_db_converters(col) + field.get_db_converters(connection), col))
        where_col = root[1]._meta.get_field(self.where.removesuffix("__in")).column
        sql = f"SELECT {', '.join(columns)} FROM {qn(root[1]._meta.db_table)} {root[5]} {' '.join(joins)} " \
              f"WHERE {root[5]}.{qn(where_col)}"
        tail = ""
        if self.order_by:
            order = []
            for name in self.order_by:
                path, _, attr = name.rpartition("__")
                node = next(node for node in self.nodes if node[0] == path)
                order.append(f"{node[5]}.{qn(node[1]._meta.get_field(attr).column)}")
            tail += " ORDER BY " + ", ".join(order)
        if self.for_update and connection.features.has_select_for_update:
            tail += " FOR UPDATE"
            if joins:
                tail += f" OF {root[5]}"
        return sql, tail, [(i, conv, col) for i, (conv, col) in enumerate(converters) if conv], sub_params

    def _db(self) -> str:
        return (router.db_for_write if self.for_update else router.db_for_read)(self.model)

    def _rows(self, value, connection) -> list[list]:
        compiled = self._compiled.get(connection.alias)
        if compiled is None:
            compiled = self._compiled[connection.alias] = self._compile(connection)
        sql, tail, converters, sub_params = compiled
        if self.where.endswith("__in"):
            params = list(value)
            if not params:
                return []
            sql = f"{sql} IN ({', '.join(['%s'] * len(params))}){tail}"
        else:
            params, sql = [value], f"{sql} = %s{tail}"
        params = [*sub_params, *params]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        if converters:
            rows = [list(row) for row in rows]
            for row in rows:
                for i, funcs, col in converters:
                    value = row[i]
                    for func in funcs:
                        value = func(value, col, connection)
                    row[i] = value
        return rows

    def _instance(self, row, db: str) -> models.Model:
        objects: list = []
        start = 0
        for n, (_path, node_model, fields, parent, relation, _alias) in enumerate(self.nodes):
            values = row[start:start + len(fields)]
            obj = None
            if row[self.pk_index[n]] is not None:
                obj = node_model.from_db(db, self.attnames[n], values)
            start += len(fields)
            if parent is not None and objects[parent] is not None:
                relation.set_cached_value(objects[parent], obj)
            objects.append(obj)
        for sub_name, sub_value in zip(self.subqueries, row[start:], strict=True):
            setattr(objects[0], sub_name, sub_value)
        return objects[0]

    # --- what callers use ---

    def values(self, *names: str, value) -> list[tuple]:
        """Rows of the named attnames of the model itself, as ``values_list(*names)``."""
        if not PRECOMPILED:
            return list(self.queryset(value).values_list(*names))
        columns = [f.attname for f in self.nodes[0][2]]
        subquery_start = sum(len(node[2]) for node in self.nodes)
        positions = [columns.index(name) if name in columns else subquery_start + list(self.subqueries).index(name)
                     for name in names]
        return [tuple(row[i] for i in positions) for row in self._rows(value, connections[self._db()])]

    def all(self, value) -> list:
        if not PRECOMPILED:
            return list(self.queryset(value))
        db = self._db()
        return [self._instance(row, db) for row in self._rows(value, connections[db])]

    def first(self, value):
        """The first row (the queries by primary key or unique key have at most one)."""
        if not PRECOMPILED:
            return self.queryset(value).first()
        db = self._db()
        rows = self._rows(value, connections[db])
        return self._instance(rows[0], db) if rows else None


# --- the reads -----------------------------------------------------------------------------------

ASSIGNMENT_BY_TOKEN = HotQuery("assignment_by_token", Assignment, {"": "__all__", "study": "__all__"},
                               where="token")
# The assignment row lock that serialises everything changing one assignment.
ASSIGNMENT_LOCK = HotQuery("assignment_lock", Assignment,
                           {"": ("status", "expires_at", "created_at", "qualification_pending")},
                           where="id", for_update=True)

# What a step page shows of one claim. Split by what the claim is, so that no query joins more
# than five tables (planning a seven-table join costs PostgreSQL about a millisecond a time).
_CLAIM_FIELDS = ("assignment_id", "unit_id", "attention_check_id", "question_key", "position", "completed_at")
CLAIM_WITH_UNIT = HotQuery(
    "claim_with_unit",
    Claim,
    {
        "": _CLAIM_FIELDS,
        "unit": ("item_id", "rationale_id", "source_id", "generalization_question_id"),
        "unit__item": ("question", "choices", "gold_answer", "gold_rationale"),
        "unit__rationale": ("text", "predicted_answer"),
        "unit__source": ("kind",),
    },
    where="id",
)
CLAIM_WITH_CHECK = HotQuery("claim_with_check", Claim,
                            {"": _CLAIM_FIELDS, "attention_check": ("question", "choices")}, where="id")
GENERALIZATION_QUESTION = HotQuery("generalization_question", GeneralizationQuestion,
                                   {"": ("text", "answer", "qtype", "metadata")}, where="id")
# A page's claims, each with its first answer and when it was given: a claim that is not completed
# has at most its first step answered (the last step completes it in the same transaction), so this
# is all a page needs of the answers (steps.answered_steps), and the first answer's time is when its
# later step became current (``selectors.step_current_since``). One query, index lookups per claim.
CLAIMS_OF_ASSIGNMENT = HotQuery(
    "claims_of_assignment", Claim, {"": ("completed_at", "attention_check_id")},
    where="assignment_id", order_by=("position",),
    subqueries={"before_answer": (Annotation, "answer", "claim", {"step": Annotation.Step.BEFORE}),
                "before_answered_at": (Annotation, "answered_at", "claim", {"step": Annotation.Step.BEFORE})},
)
QUALIFICATION_TEST_OF_STUDY = HotQuery("qualification_test_of_study", QualificationTest, {"": ("study_id",)},
                                       where="study_id")

# An answer POST: the claim with its assignment, study and what validation needs.
CLAIM_FOR_ANSWER = HotQuery(
    "claim_for_answer",
    Claim,
    {
        "": ("assignment_id", "unit_id", "attention_check_id", "completed_at", "released"),
        "assignment": "__all__",
        "assignment__study": "__all__",
        "unit": ("item_id", "generalization_question_id"),
        "unit__item": ("choices",),
    },
    where="id",
)
CHECK_FOR_ANSWER = HotQuery("check_for_answer", AttentionCheck, {"": ("choices", "correct_answer")}, where="id")
GENERALIZATION_QUESTION_FOR_ANSWER = HotQuery("generalization_question_for_answer", GeneralizationQuestion,
                                              {"": ("metadata",)}, where="id")
ANSWERS_OF_CLAIM = HotQuery("answers_of_claim", Annotation, {"": "__all__"}, where="claim_id")


# --- the claim's lock on its study ---------------------------------------------------------------

_STUDY_LOCK_SQL: dict[str, tuple] = {}


def _study_lock_sql(connection) -> tuple:
    """(the statement, the converters of its grant column and that column) for this database."""
    if connection.alias not in _STUDY_LOCK_SQL:
        qn = connection.ops.quote_name
        study, grant = Study._meta, QualificationGrant._meta
        passed = grant.get_field("passed")
        sql = (f"SELECT S.{qn(study.get_field('status').column)}, (SELECT G.{qn(passed.column)} FROM {qn(grant.db_table)} G "
               f"WHERE G.{qn(grant.get_field('study').column)} = S.{qn(study.pk.column)} "
               f"AND G.{qn(grant.get_field('participant').column)} = %s LIMIT 1), "
               f"S.{qn(study.get_field('owner').column)} "
               f"FROM {qn(study.db_table)} S WHERE S.{qn(study.pk.column)} = %s")
        if connection.vendor == "postgresql":  # elsewhere (SQLite) a plain read: writes are serialised
            sql += " FOR KEY SHARE"
        col = passed.get_col("G")
        _STUDY_LOCK_SQL[connection.alias] = (
            sql, connection.ops.get_db_converters(col) + passed.get_db_converters(connection), col)
    return _STUDY_LOCK_SQL[connection.alias]


def study_lock_read(*, study_id: int, participant_id: int) -> tuple[str | None, bool | None, int | None]:
    """Lock the study's row ``FOR KEY SHARE`` until the transaction ends (PostgreSQL) and read its
    status and owner as committed now (after any close or handover it waited for) and whether the
    worker passed the study's qualification test: ``(status, passed, owner_id)``, ``passed`` of
    their grant, ``None`` without one; ``(None, None, None)`` without the study. Call inside the
    claim's transaction.

    ``FOR KEY SHARE`` locks of concurrent claims do not wait for each other (nor for updates of the
    study's other columns); a ``SELECT ... FOR UPDATE`` of the study waits for them, and they for
    it. The ORM has ``FOR UPDATE`` and ``FOR NO KEY UPDATE`` only, both of which would queue the
    study's claims one behind the other. One statement, what the grant read was before."""
    db = router.db_for_write(Study)
    connection = connections[db]
    sql, converters, col = _study_lock_sql(connection)
    with connection.cursor() as cursor:
        cursor.execute(sql, [participant_id, study_id])
        row = cursor.fetchone()
    if row is None:
        return None, None, None
    status, value, owner_id = row
    for func in converters:
        value = func(value, col, connection)
    return status, value, owner_id


def study_lock_grant(*, study_id: int, participant_id: int) -> tuple[str | None, bool | None]:
    """``study_lock_read`` less the owner: ``(status, passed)``, the same one statement."""
    status, passed, _owner_id = study_lock_read(study_id=study_id, participant_id=participant_id)
    return status, passed


def study_lock_grant_queryset(*, study_id: int, participant_id: int) -> models.QuerySet:
    """The ORM twin of ``study_lock_grant``, less the lock: the study's status and ``passed`` of the
    worker's grant, one row per study found."""
    grant = QualificationGrant.objects.filter(study_id=models.OuterRef("pk"), participant_id=participant_id)
    return (Study.objects.filter(pk=study_id).annotate(passed=models.Subquery(grant.values("passed")[:1]))
            .values_list("status", "passed"))


# --- the writes ----------------------------------------------------------------------------------

_INSERT_FIELDS = ("claim", "step", "answer", "payload", "shown_at", "answered_at", "duration_ms")
_WRITE_SQL: dict[str, tuple[str, str]] = {}


def _write_sql(connection) -> tuple[str, str]:
    """(insert an answer, mark a claim completed) for this database."""
    if connection.alias not in _WRITE_SQL:
        qn = connection.ops.quote_name
        ann, claim = Annotation._meta, Claim._meta
        insert = (
            f"INSERT INTO {qn(ann.db_table)} ({', '.join(qn(ann.get_field(n).column) for n in _INSERT_FIELDS)}) "
            f"VALUES ({', '.join(['%s'] * len(_INSERT_FIELDS))})"
        )
        if connection.features.can_return_columns_from_insert:
            insert += f" RETURNING {qn(ann.pk.column)}"
        completed = qn(claim.get_field("completed_at").column)
        _WRITE_SQL[connection.alias] = (
            insert,
            f"UPDATE {qn(claim.db_table)} SET {completed} = %s WHERE {qn(claim.pk.column)} = %s",
        )
    return _WRITE_SQL[connection.alias]


def _save_listened(model) -> bool:
    return signals.pre_save.has_listeners(model) or signals.post_save.has_listeners(model)


def answer_insert(*, claim_id: int, step: str, answer: str, payload: dict, shown_at: datetime | None,
                  duration_ms: int | None) -> Annotation:
    """``Annotation.objects.create(...)``; precompiled unless something listens to its saves."""
    annotation = Annotation(claim_id=claim_id, step=step, answer=answer, payload=payload, shown_at=shown_at,
                            answered_at=timezone.now(), duration_ms=duration_ms)
    db = router.db_for_write(Annotation, instance=annotation)
    if not PRECOMPILED or _save_listened(Annotation):
        annotation.save(force_insert=True, using=db)
        return annotation
    connection = connections[db]
    opts = Annotation._meta
    params = [opts.get_field(name).get_db_prep_save(getattr(annotation, opts.get_field(name).attname), connection)
              for name in _INSERT_FIELDS]
    insert, _ = _write_sql(connection)
    with connection.cursor() as cursor:
        cursor.execute(insert, params)
        annotation.pk = (cursor.fetchone()[0] if connection.features.can_return_columns_from_insert
                         else connection.ops.last_insert_id(cursor, opts.db_table, opts.pk.column))
    annotation._state.adding = False
    annotation._state.db = db
    return annotation


def claim_completed(*, claim_id: int, at: datetime) -> None:
    """``Claim.objects.filter(pk=claim_id).update(completed_at=at)``, precompiled."""
    db = router.db_for_write(Claim)
    if not PRECOMPILED:
        Claim.objects.using(db).filter(pk=claim_id).update(completed_at=at)
        return
    connection = connections[db]
    _, completed = _write_sql(connection)
    with connection.cursor() as cursor:
        cursor.execute(completed, [Claim._meta.get_field("completed_at").get_db_prep_save(at, connection), claim_id])
