"""The precompiled hot-path queries (``annotations.precompiled``) against their ORM twins.

Every query must return the same rows as the ORM queryset it stands for: the same instances,
the same selected values after the fields' converters, the same related objects cached, the
same fields deferred. Run on SQLite and on PostgreSQL (``scripts/test.sh`` runs both)."""
from __future__ import annotations

import pytest
from django.db import connection, models, transaction
from django.db.models import signals
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from annotations import precompiled
from annotations.models import Annotation, Assignment, Claim, QualificationTest
from annotations.services.answers import annotation_submit
from annotations.services.assignment import assignment_start
from annotations.services.qualification import qualification_submit
from studies.models import GeneralizationQuestion, Study
from tests.annotations.factories import (
    AttentionCheckFactory,
    ParticipantFactory,
    add_qualification,
    make_study,
)

MISSING = 2**40  # an id no row has


@pytest.fixture
def state(db):
    """A utility study with an attention check and a qualification test, one worker who answered,
    in the task's order, two claims and the check (placed after the first or the second: drawn per
    task), the third claim not yet; a generalization study with one started task."""
    study = make_study(units_per_task=3)
    AttentionCheckFactory(study=study)
    test = add_qualification(study)
    for _ in range(30):  # a task whose check stands after its first or second unit (its place is drawn)
        assignment = assignment_start(study=study, participant=ParticipantFactory(), consented=True)
        claims = list(assignment.claims.select_related("unit__item", "attention_check").order_by("position"))
        check = next(c for c in claims if c.attention_check_id)
        if claims.index(check) in (1, 2):
            break
    qualification_submit(assignment=assignment,
                         answers={str(q.pk): q.correct_answer for q in test.questions.all()})  # passed
    unit_claims = [c for c in claims if c.unit_id]
    assert claims.index(check) in (1, 2) and [c.pk for c in claims] == sorted(c.pk for c in claims)
    for claim in claims[:3]:  # answers go in the order the task asks
        if claim is check:
            annotation_submit(assignment=assignment, claim=check, step="attention", answer="no")
            continue
        first = "yes" if claim is unit_claims[0] else "no"
        for step, answer in (("before", first), ("after", "yes")):
            annotation_submit(assignment=assignment, claim=claim, step=step, answer=answer)
    gen = make_study(kind=Study.Kind.GENERALIZATION, units_per_task=2)
    gen_assignment = assignment_start(study=gen, participant=ParticipantFactory(), consented=True)
    gen_claim = gen_assignment.claims.filter(unit__isnull=False).select_related("unit").first()
    return {"study": study, "assignment": assignment, "unit_claims": unit_claims, "check": check,
            "gen_claim": gen_claim, "other_assignment": gen_assignment}


# The values each query is run with: rows found, rows with a LEFT JOIN empty, and nothing found.
VALUES = {
    "assignment_by_token": lambda s: [s["assignment"].token, s["other_assignment"].token, "no-such-token"],
    "assignment_lock": lambda s: [s["assignment"].pk, MISSING],
    "claim_with_unit": lambda s: [s["unit_claims"][0].pk, s["gen_claim"].pk, s["check"].pk, MISSING],
    "claim_with_check": lambda s: [s["check"].pk, s["unit_claims"][0].pk, MISSING],
    "generalization_question": lambda s: [s["gen_claim"].unit.generalization_question_id, MISSING],
    "claims_of_assignment": lambda s: [s["assignment"].pk, s["other_assignment"].pk, MISSING],
    "qualification_test_of_study": lambda s: [s["study"].pk, s["gen_claim"].study_id],
    "claim_for_answer": lambda s: [s["unit_claims"][0].pk, s["check"].pk, s["gen_claim"].pk, MISSING],
    "check_for_answer": lambda s: [s["check"].attention_check_id, MISSING],
    "generalization_question_for_answer": lambda s: [s["gen_claim"].unit.generalization_question_id, MISSING],
    "answers_of_claim": lambda s: [s["unit_claims"][0].pk, s["unit_claims"][1].pk, s["unit_claims"][2].pk],
}


def test_every_precompiled_query_is_compared():
    assert set(VALUES) == set(precompiled.QUERIES)


def snapshot(query: precompiled.HotQuery, obj: models.Model) -> list:
    """What a row holds, node by node: model, primary key, the selected values, the deferred
    fields, and whether the related object is cached (``None`` for an empty LEFT JOIN)."""
    objects = {"": obj}
    out = []
    for path, node_model, fields, _parent, relation, _alias in query.nodes:
        if path:
            parent = objects[path.rpartition("__")[0]]
            assert parent is None or relation.is_cached(parent), f"{query.name}: {path} not cached"
            objects[path] = None if parent is None else relation.get_cached_value(parent)
        node = objects[path]
        if node is None:
            out.append((path, None))
            continue
        assert type(node) is node_model and node._state.db == "default" and not node._state.adding
        out.append((path, node.pk, {f.attname: getattr(node, f.attname) for f in fields},
                    sorted(node.get_deferred_fields())))
    out.append({name: getattr(obj, name) for name in query.subqueries})  # annotate(name=Subquery(...))
    return out


@pytest.mark.parametrize("name", sorted(VALUES))
def test_precompiled_rows_equal_the_orm_rows(name, state, monkeypatch):
    query = precompiled.QUERIES[name]
    found = 0
    for value in VALUES[name](state):
        orm = [snapshot(query, obj) for obj in query.queryset(value)]
        hot = [snapshot(query, obj) for obj in query.all(value)]
        if not query.order_by:  # no ORDER BY: either may return the rows in any order
            orm, hot = sorted(orm, key=repr), sorted(hot, key=repr)
        assert hot == orm, f"{name}({value!r})"
        first = query.first(value)
        assert (first is None) == (not orm)
        if query.order_by and orm:
            assert snapshot(query, first) == orm[0]
        columns = [f.attname for f in query.nodes[0][2]] + list(query.subqueries)
        assert sorted(query.values(*columns, value=value)) == sorted(
            query.queryset(value).values_list(*columns))
        monkeypatch.setattr(precompiled, "PRECOMPILED", False)  # the twin path gives the same rows
        assert sorted((snapshot(query, obj) for obj in query.all(value)), key=repr) == sorted(orm, key=repr)
        monkeypatch.setattr(precompiled, "PRECOMPILED", True)
        found += bool(orm)
    assert found, f"{name}: no value found a row, so nothing was compared"


def test_the_claims_study_lock_reads_the_grant_as_its_orm_twin(state):
    """``study_lock_grant`` (by hand: the ORM has no ``FOR KEY SHARE``) returns what its twin
    returns (the study's status and the worker's grant), for a worker who passed, one who failed,
    one who never took the test, and no study."""
    study, passed = state["study"], state["assignment"].participant
    test = QualificationTest.objects.get(study=study)
    failed = ParticipantFactory()
    qualification_submit(assignment=assignment_start(study=study, participant=failed),
                         answers={str(q.pk): "no" if q.correct_answer == "yes" else "yes"
                                  for q in test.questions.all()})  # every answer wrong
    cases = [(study.pk, passed.pk, True), (study.pk, failed.pk, False), (study.pk, ParticipantFactory().pk, None),
             (state["gen_claim"].study_id, passed.pk, None), (MISSING, passed.pk, None)]
    for study_id, participant_id, expected in cases:
        twin = precompiled.study_lock_grant_queryset(study_id=study_id, participant_id=participant_id)
        status, got = precompiled.study_lock_grant(study_id=study_id, participant_id=participant_id)
        twin_status, twin_passed = twin.first() or (None, None)
        assert got is twin_passed is expected, (study_id, participant_id)  # a bool, converted as the ORM does
        assert status == twin_status == (None if study_id == MISSING else "open"), (study_id, status)
        assert twin.exists() == (study_id != MISSING)


def test_the_claims_study_lock_is_a_key_share_lock_on_postgresql(state):
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        precompiled.study_lock_grant(study_id=state["study"].pk, participant_id=state["assignment"].participant_id)
    (sql,) = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT")]
    assert sql.endswith(" FOR KEY SHARE") == (connection.vendor == "postgresql")


def test_a_deferred_field_loads_like_the_orm(state):
    claim = precompiled.CLAIM_WITH_UNIT.first(state["unit_claims"][0].pk)
    assert "participant_id" in claim.get_deferred_fields()
    assert claim.participant_id == Claim.objects.get(pk=claim.pk).participant_id


def test_nothing_listens_to_the_saves_the_precompiled_writes_skip(db):
    """The answer INSERT and the claim UPDATE bypass ``save()``: nothing in the project may
    listen to those models' saves (the INSERT would fall back to ``save()`` if anything did)."""
    for model in (Annotation, Claim):
        for signal in (signals.pre_save, signals.post_save):
            assert not signal.has_listeners(model), f"{signal} has a listener for {model.__name__}"


def test_a_save_listener_gets_every_answer(state):
    """Should anything listen to ``Annotation`` saves, the answer goes through ``save()``."""
    heard = []

    def listener(sender, instance, created, **kwargs):
        heard.append((instance.step, created))

    assignment, claim = state["assignment"], state["unit_claims"][2]
    annotation_submit(assignment=assignment, claim=claim, step="before", answer="no")
    signals.post_save.connect(listener, sender=Annotation)
    try:
        annotation = annotation_submit(assignment=assignment, claim=claim, step="after", answer="yes")
    finally:
        signals.post_save.disconnect(listener, sender=Annotation)
    assert heard == [("after", True)]
    assert Annotation.objects.get(pk=annotation.pk).answer == "yes"
    assert Claim.objects.get(pk=claim.pk).completed_at is not None


class Recorder:
    """A router that sends everything to "default" and records what it was asked."""

    asked: list = []

    def db_for_read(self, model, **hints):
        self.asked.append(("read", model.__name__))
        return "default"

    def db_for_write(self, model, **hints):
        self.asked.append(("write", model.__name__))
        return "default"


@override_settings(DATABASE_ROUTERS=[f"{__name__}.Recorder"])
def test_reads_and_writes_go_where_the_router_says(state):
    Recorder.asked.clear()
    assignment, claim = state["assignment"], state["unit_claims"][2]
    annotation_submit(assignment=assignment, claim=claim, step="before", answer="yes")
    annotation_submit(assignment=assignment, claim=claim, step="after", answer="yes")
    assert ("write", "Annotation") in Recorder.asked  # the INSERT
    assert ("write", "Claim") in Recorder.asked  # completed_at
    assert ("write", "Assignment") in Recorder.asked  # the row lock
    assert ("read", "Claim") in Recorder.asked  # the task's claims and their first answers
    assert ("read", "Annotation") not in Recorder.asked
    annotation_submit(assignment=assignment, claim=claim, step="after", answer="yes")  # sent again
    assert ("read", "Annotation") in Recorder.asked  # the stored answer, to compare
    Recorder.asked.clear()
    precompiled.study_lock_grant(study_id=state["study"].pk, participant_id=assignment.participant_id)
    assert Recorder.asked == [("write", "Study")]  # a lock: where the writes go


def test_types_survive_the_converters(state):
    """JSON, datetimes and decimals come back as the ORM's types."""
    answer = precompiled.ANSWERS_OF_CLAIM.all(state["check"].pk)[0]
    assert answer.payload == {"correct": True} and answer.answered_at.tzinfo is not None
    assignment = precompiled.ASSIGNMENT_BY_TOKEN.first(state["assignment"].token)
    assert assignment.study.reward == Study.objects.get(pk=state["study"].pk).reward
    assert isinstance(assignment, Assignment) and assignment.expires_at.tzinfo is not None
    assert QualificationTest.objects.filter(study=state["study"]).exists()
    assert GeneralizationQuestion.objects.filter(pk=state["gen_claim"].unit.generalization_question_id).exists()
