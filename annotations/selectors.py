"""Reads of the questionnaire: what a worker's page may show right now.

The rule that protects every study lives here: a rationale is put into a page only once the
worker's "before" answer for that claim is stored (generalization: the original question too).
A step page reads four small precompiled queries (see ``HotQuery``): the assignment with its
study, its claims, their answers, and the shown claim's content."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.core import signing
from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.models import QuerySet
from django.utils import timezone

from annotations.models import (
    Annotation,
    Assignment,
    AttentionCheck,
    Claim,
    QualificationGrant,
    QualificationTest,
    Unit,
)
from annotations.services.steps import (
    RATIONALE_PROPERTIES,
    VALIDATION_FIELDS,
    genq_choices,
    normalise_choices,
    steps_for,
)
from studies.models import GeneralizationQuestion, RationaleSource, Study

_SHOWN_SALT = "annotations.shown"
MAX_ID = 2**63 - 1  # BigAutoField
Step = Annotation.Step


# --- what counts ---------------------------------------------------------------------------------

# Assignments whose completed, unreleased claims count. Active work does not count yet; expired,
# returned and rejected work never does (its claims are released).
COUNTING_ASSIGNMENT_STATUSES = (Assignment.Status.SUBMITTED, Assignment.Status.APPROVED)


def claims_that_count(*, study: Study) -> QuerySet[Claim]:
    """The one definition of "this answer counts". A claim counts when it is

    - a claim of a unit (not an attention check),
    - not released (its slot was not given back: expiry, return, rejection),
    - completed (every step of its question answered), and
    - part of an assignment that is submitted or approved (not active, expired, returned or
      rejected).

    The answers that count are the annotations of these claims. Scoring, the exports, the progress
    counts and the unit counters read this (``Unit.n_completed`` is, per unit, the number of these
    claims; ``annotations.services.release`` keeps it so)."""
    return Claim.objects.filter(
        study_id=study.pk,
        unit__isnull=False,
        released=False,
        completed_at__isnull=False,
        assignment__status__in=COUNTING_ASSIGNMENT_STATUSES,
    )


# --- hot-path queries ---------------------------------------------------------------------------
# A worker request runs three or four small queries, and compiling an ORM query costs several
# times more CPU than running one of these on a warm connection. The few queries of the worker
# pages and of an answer are therefore compiled once per process (from the models' metadata, so
# no table or column name is spelled by hand) and rows become model instances with the same
# converters the ORM applies, related objects cached as ``select_related`` caches them. Fields
# not selected are deferred: touching one loads it like any deferred field.

class HotQuery:
    """``Model.objects.select_related(*paths).only(*fields).filter(<field>=%s)``, compiled once.

    ``spec`` maps a path ("" for the model itself, "unit", "unit__item", ...) to the attnames
    selected there (``"__all__"``: every concrete field); the primary key is always included.
    Joins follow the foreign keys: INNER where the key is required, LEFT JOIN otherwise."""

    def __init__(self, model, spec: dict[str, tuple[str, ...] | str], *, where: str,
                 order_by: tuple[str, ...] = (), for_update: bool = False):
        self.model, self.where, self.order_by, self.for_update = model, where, order_by, for_update
        self.nodes = []  # (path, model, fields, parent index, relation field, alias)
        aliases: dict[str, str] = {}
        for path, names in sorted(spec.items(), key=lambda kv: (kv[0].count("__") if kv[0] else -1, kv[0])):
            if path:
                parent_path, _, name = path.rpartition("__")
                parent = next(i for i, node in enumerate(self.nodes) if node[0] == parent_path)
                relation = self.nodes[parent][1]._meta.get_field(name)
                node_model = relation.related_model
            else:
                parent, relation, node_model = None, None, model
            opts = node_model._meta
            wanted = {opts.pk.attname} | (
                {f.attname for f in opts.concrete_fields} if names == "__all__"
                else {opts.get_field(n).attname for n in names}
            )
            fields = [f for f in opts.concrete_fields if f.attname in wanted]  # from_db's order
            aliases[path] = f"T{len(self.nodes)}"
            self.nodes.append((path, node_model, fields, parent, relation, aliases[path]))
        self.pk_index, start = [], 0  # where each node's primary key is in a row
        for _path, _model, fields, *_rest in self.nodes:
            self.pk_index.append(start + next(i for i, f in enumerate(fields) if f.primary_key))
            start += len(fields)
        self.attnames = [frozenset(f.attname for f in node[2]) for node in self.nodes]
        self._compiled: dict[str, tuple] = {}  # per database alias: (sql, converters)

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
        where_col = root[1]._meta.get_field(self.where).column
        sql = f"SELECT {', '.join(columns)} FROM {qn(root[1]._meta.db_table)} {root[5]} {' '.join(joins)} " \
              f"WHERE {root[5]}.{qn(where_col)} = %s"
        if self.order_by:
            order = []
            for name in self.order_by:
                path, _, attr = name.rpartition("__")
                node = next(node for node in self.nodes if node[0] == path)
                order.append(f"{node[5]}.{qn(node[1]._meta.get_field(attr).column)}")
            sql += " ORDER BY " + ", ".join(order)
        if self.for_update and connection.features.has_select_for_update:
            sql += " FOR UPDATE"
            if joins:
                sql += f" OF {root[5]}"
        return sql, [(i, conv, col) for i, (conv, col) in enumerate(converters) if conv]

    def _rows(self, value, connection) -> list[list]:
        compiled = self._compiled.get(connection.alias)
        if compiled is None:
            compiled = self._compiled[connection.alias] = self._compile(connection)
        sql, converters = compiled
        with connection.cursor() as cursor:
            cursor.execute(sql, [value])
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
        return objects[0]

    def values(self, *names: str, value, using: str = DEFAULT_DB_ALIAS) -> list[tuple]:
        """Rows of the named attnames of the model itself, as ``values_list(*names)``."""
        columns = [f.attname for f in self.nodes[0][2]]
        positions = [columns.index(name) for name in names]
        return [tuple(row[i] for i in positions) for row in self._rows(value, connections[using])]

    def all(self, value, using: str = DEFAULT_DB_ALIAS) -> list:
        return [self._instance(row, using) for row in self._rows(value, connections[using])]

    def first(self, value, using: str = DEFAULT_DB_ALIAS):
        rows = self._rows(value, connections[using])
        return self._instance(rows[0], using) if rows else None


_ASSIGNMENT_BY_TOKEN = HotQuery(Assignment, {"": "__all__", "study": "__all__"}, where="token")


def assignment_by_token(token: str) -> Assignment | None:
    """``Assignment.objects.select_related("study").filter(token=token).first()``, precompiled."""
    if not token or len(token) > 64:
        return None
    return _ASSIGNMENT_BY_TOKEN.first(token)


# --- server-side timing -------------------------------------------------------------------------

def shown_token(*, claim_id: int, step: str, at: datetime | None = None) -> str:
    """A signed record of when the server showed this step (the page carries it back)."""
    at = at or timezone.now()
    return signing.dumps([claim_id, step, at.timestamp()], salt=_SHOWN_SALT, compress=False)


def shown_at_from_token(token: str, *, claim_id: int, step: str) -> datetime | None:
    try:
        c, s, ts = signing.loads(token, salt=_SHOWN_SALT, max_age=7 * 24 * 3600)
    except (signing.BadSignature, ValueError, TypeError):
        return None
    if c != claim_id or s != step:
        return None
    return datetime.fromtimestamp(ts, tz=UTC)


# --- pages --------------------------------------------------------------------------------------

@dataclass
class StepView:
    claim: Claim
    step: str
    number: int
    total: int
    question: str
    choices: list[dict]
    is_attention: bool = False
    first_answer_text: str = ""
    rationale: str | None = None
    original_question: str = ""
    claimed_type: str = ""
    proposed_answer_text: str = ""
    predicted_answer_text: str = ""
    item_choices: list[dict] = field(default_factory=list)
    yes_no_questions: list[tuple[str, str]] = field(default_factory=list)
    shown: str = ""


@dataclass
class Page:
    state: str  # consent | qualification | step | finish | submitted | expired | returned | not_qualified
    assignment: Assignment
    step: StepView | None = None
    n_done: int = 0
    total: int = 0
    qualification: QualificationTest | None = None
    qualification_questions: list[dict] = field(default_factory=list)


def _choice_text(choices: list[dict], label: str) -> str:
    for choice in choices:
        if choice["label"] == label:
            return choice["text"]
    return label


def rationale_text(unit) -> str:
    if unit.rationale_id:
        return unit.rationale.text
    if unit.source_id and unit.source.kind == RationaleSource.Kind.GOLD:
        return unit.item.gold_rationale
    return ""


def step_view(*, claim: Claim, step: str, kind: str, answers: dict, number: int, total: int) -> StepView:
    shown = shown_token(claim_id=claim.pk, step=step)
    if claim.attention_check_id:
        check = claim.attention_check
        return StepView(claim=claim, step=step, number=number, total=total, question=check.question,
                        choices=normalise_choices(check.choices), is_attention=True, shown=shown)
    unit = claim.unit
    item = unit.item
    view = StepView(claim=claim, step=step, number=number, total=total, question=item.question,
                    choices=normalise_choices(item.choices), shown=shown)
    if kind == Study.Kind.UTILITY:
        if step == Step.AFTER:
            view.first_answer_text = _choice_text(view.choices, answers.get(Step.BEFORE, ""))
            view.rationale = rationale_text(unit)
    elif kind == Study.Kind.GENERALIZATION:
        genq = unit.generalization_question
        view.question = genq.text
        view.choices = genq_choices(genq, item)
        if step == Step.AFTER:
            view.first_answer_text = _choice_text(view.choices, answers.get(Step.BEFORE, ""))
            view.original_question = item.question
            view.item_choices = normalise_choices(item.choices)
            view.rationale = rationale_text(unit)
    elif kind == Study.Kind.QUESTION_VALIDATION:
        genq = unit.generalization_question
        view.question = genq.text
        view.original_question = item.question
        view.choices = genq_choices(genq, item)
        view.claimed_type = genq.get_qtype_display()
        view.proposed_answer_text = _choice_text(view.choices, genq.answer)
        view.yes_no_questions = list(VALIDATION_FIELDS)
    elif kind == Study.Kind.RATIONALE_PROPERTIES:
        view.rationale = rationale_text(unit)
        predicted = unit.rationale.predicted_answer if unit.rationale_id else item.gold_answer
        view.predicted_answer_text = _choice_text(view.choices, predicted) if predicted else ""
        view.yes_no_questions = list(RATIONALE_PROPERTIES)
    return view


# What a step page shows of one claim. Split by what the claim is, so that no query joins more
# than five tables (planning a seven-table join costs PostgreSQL about a millisecond a time).
_CLAIM_FIELDS = ("assignment_id", "unit_id", "attention_check_id", "question_key", "position", "completed_at")
_CLAIM_WITH_UNIT = HotQuery(
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
_CLAIM_WITH_CHECK = HotQuery(
    Claim, {"": _CLAIM_FIELDS, "attention_check": ("question", "choices")}, where="id"
)
_GENERALIZATION_QUESTION = HotQuery(
    GeneralizationQuestion, {"": ("text", "answer", "qtype", "metadata")}, where="id"
)


def _claim_with_content(claim_id: int, *, is_attention_check: bool) -> Claim:
    """One claim with exactly the columns a step page shows (wide JSON columns left out)."""
    claim = (_CLAIM_WITH_CHECK if is_attention_check else _CLAIM_WITH_UNIT).first(claim_id)
    if claim is None:
        raise Claim.DoesNotExist(f"No claim {claim_id}.")
    unit = claim.unit if claim.unit_id else None
    if unit is not None and unit.generalization_question_id:
        Unit.generalization_question.field.set_cached_value(
            unit, _GENERALIZATION_QUESTION.first(unit.generalization_question_id)
        )
    return claim


_CLAIMS = HotQuery(
    Claim, {"": ("completed_at", "attention_check_id")}, where="assignment_id", order_by=("position",)
)
_ANSWERS_SQL: dict[str, str] = {}


def _claims_with_answers(assignment_id: int) -> tuple[list[tuple], dict[int, dict[str, str]]]:
    """The assignment's claims in order as (id, completed_at, attention check id), and the
    answers so far by claim and step. Two index lookups: a join of the two tables is planned as
    a scan of every answer when the planner's statistics are stale."""
    claims = _CLAIMS.values("id", "completed_at", "attention_check_id", value=assignment_id)
    answered: dict[int, dict[str, str]] = {}
    if not claims:
        return claims, answered
    connection = connections[DEFAULT_DB_ALIAS]
    prefix = _ANSWERS_SQL.get(connection.vendor)
    if prefix is None:
        qn, opts = connection.ops.quote_name, Annotation._meta
        cols = ", ".join(qn(opts.get_field(name).column) for name in ("claim", "step", "answer"))
        prefix = _ANSWERS_SQL[connection.vendor] = (
            f"SELECT {cols} FROM {qn(opts.db_table)} WHERE {qn(opts.get_field('claim').column)} IN "
        )
    with connection.cursor() as cursor:
        cursor.execute(prefix + "(" + ", ".join(["%s"] * len(claims)) + ")", [claim[0] for claim in claims])
        for claim_id, step, answer in cursor.fetchall():
            answered.setdefault(claim_id, {})[step] = answer
    return claims, answered


_QUALIFICATION_TEST = HotQuery(QualificationTest, {"": ("study_id",)}, where="study_id")


def qualification_needed(*, assignment: Assignment) -> QualificationTest | None:
    """The study's test when this worker has not passed it yet."""
    if _QUALIFICATION_TEST.first(assignment.study_id) is None:  # most studies have none: one cheap query
        return None
    test = QualificationTest.objects.filter(study_id=assignment.study_id).prefetch_related("questions").first()
    if test is None:
        return None
    if QualificationGrant.objects.filter(
        study_id=assignment.study_id, participant_id=assignment.participant_id, passed=True
    ).exists():
        return None
    return test


def assignment_page(*, assignment: Assignment, now: datetime | None = None) -> Page:
    """What the worker's page shows now, from the stored state only (so a reload resumes)."""
    now = now or timezone.now()
    status = assignment.status
    if status in (Assignment.Status.SUBMITTED, Assignment.Status.APPROVED, Assignment.Status.REJECTED):
        return Page(state="submitted", assignment=assignment)
    if status == Assignment.Status.EXPIRED or (status == Assignment.Status.ACTIVE and assignment.expires_at <= now):
        return Page(state="expired", assignment=assignment)
    if status == Assignment.Status.RETURNED:
        failed = QualificationGrant.objects.filter(
            study_id=assignment.study_id, participant_id=assignment.participant_id, passed=False
        ).exists()
        return Page(state="not_qualified" if failed else "returned", assignment=assignment)
    if assignment.consented_at is None:
        return Page(state="consent", assignment=assignment)

    # Light rows for the whole task; the full join only for the one claim the page shows.
    claims, answered = _claims_with_answers(assignment.pk)
    total = len(claims)
    n_done = sum(1 for _, completed_at, _ in claims if completed_at is not None)
    if not answered:
        test = qualification_needed(assignment=assignment)
        if test is not None:
            questions = [
                {"id": q.pk, "number": i, "question": q.question, "choices": normalise_choices(q.choices)}
                for i, q in enumerate(test.questions.all(), start=1)
            ]
            return Page(state="qualification", assignment=assignment, total=total,
                        qualification=test, qualification_questions=questions)
    kind = assignment.study.kind
    for number, (claim_id, completed_at, check_id) in enumerate(claims, start=1):
        if completed_at is not None:
            continue
        given = answered.get(claim_id, {})
        steps = steps_for(kind=kind, is_attention_check=bool(check_id))
        step = next(s for s in steps if s not in given)
        claim = _claim_with_content(claim_id, is_attention_check=bool(check_id))
        view = step_view(claim=claim, step=step, kind=kind, answers=given, number=number, total=total)
        return Page(state="step", assignment=assignment, step=view, n_done=n_done, total=total)
    return Page(state="finish", assignment=assignment, n_done=n_done, total=total)


_CLAIM_FOR_ANSWER = HotQuery(
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
_CHECK_FOR_ANSWER = HotQuery(AttentionCheck, {"": ("choices", "correct_answer")}, where="id")
_GENERALIZATION_QUESTION_FOR_ANSWER = HotQuery(GeneralizationQuestion, {"": ("metadata",)}, where="id")


def claim_for_answer(*, token: str, claim_id: int) -> tuple[Assignment | None, Claim | None]:
    """The assignment of ``token`` (as ``assignment_by_token``) and the claim a POSTed answer is
    for, with what validation needs joined. One query when the claim is the assignment's own
    (the usual case); the claim may belong to another assignment: the answer service refuses
    that (``ForeignClaim``)."""
    # An id out of the column's range matches nothing, as in the ORM.
    claim = _CLAIM_FOR_ANSWER.first(claim_id) if 0 < claim_id <= MAX_ID else None
    if claim is not None and claim.attention_check_id:
        Claim.attention_check.field.set_cached_value(
            claim, _CHECK_FOR_ANSWER.first(claim.attention_check_id)
        )
    elif claim is not None and claim.unit.generalization_question_id:
        Unit.generalization_question.field.set_cached_value(
            claim.unit, _GENERALIZATION_QUESTION_FOR_ANSWER.first(claim.unit.generalization_question_id)
        )
    if claim is not None and token and claim.assignment.token == token:
        return claim.assignment, claim
    return assignment_by_token(token), claim
