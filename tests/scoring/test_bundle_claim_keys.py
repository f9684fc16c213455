"""A bundle's claims are checked against what the live app writes (``annotations.services.assignment``):
a claim's ``question_key`` is its unit's own key (``attn:<check>`` or ``attn:<check>:<task>`` for an
attention check), its worker is its task's worker, and a worker holds a question once. A bundle
rewritten and signed again so that one worker holds one unit twice is refused naming claims.csv,
the row and the field, and nothing is written."""
from __future__ import annotations

import csv
import io
import zipfile

import pytest
from django.test import Client

from annotations.models import Assignment, AttentionCheck, Claim
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from scoring.services import study_score
from scoring.services.bundle import BundleError, bundle_import
from studies.models import Study
from tests.annotations.factories import AttentionCheckFactory, make_study
from tests.annotations.pages import complete_task, entry_url, start
from tests.scoring.test_bundle import _bundle, _numbers, _resign, _rewrite, _worked_study

pytestmark = pytest.mark.django_db


def _edit_claims(change):
    def edit(content: bytes) -> bytes:
        rows = list(csv.DictReader(io.StringIO(content.decode())))
        header = list(rows[0])
        change(rows)
        out = io.StringIO()
        writer = csv.DictWriter(out, header, lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue().encode()
    return edit


def _claims(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(zipfile.ZipFile(io.BytesIO(data)).read("data/claims.csv").decode())))


def _two_units_of_one_task(rows: list[dict]) -> tuple[int, int]:
    """Indexes of two unit claims of one task whose units have different keys."""
    for i, a in enumerate(rows):
        for j, b in enumerate(rows):
            if (i < j and a["task_id"] == b["task_id"] and a["unit_id"] and b["unit_id"]
                    and a["question_key"] != b["question_key"]):
                return i, j
    raise AssertionError("no task with two units")


def test_a_rewritten_bundle_giving_one_worker_one_unit_twice_is_refused():
    study = _worked_study()
    data = _bundle(study)
    i, j = _two_units_of_one_task(_claims(data))

    def twice(rows):
        rows[j]["unit_id"] = rows[i]["unit_id"]  # the key of row j left as it was

    forged = _resign(_rewrite(data, "data/claims.csv", _edit_claims(twice)))
    studies, claims = Study.objects.count(), Claim.objects.count()

    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(forged), name="forged", filename="s.zip", owner=None)

    error = refused.value.errors[0]
    assert (error.record, error.line, error.field) == ("data/claims.csv", j + 2, "question_key"), error
    assert "is not the key of unit" in error.reason
    assert Study.objects.count() == studies and Claim.objects.count() == claims


def test_a_rewritten_bundle_whose_keys_follow_the_unit_is_refused_as_a_question_held_twice():
    study = _worked_study()
    data = _bundle(study)
    i, j = _two_units_of_one_task(_claims(data))

    def twice(rows):
        rows[j]["unit_id"], rows[j]["question_key"] = rows[i]["unit_id"], rows[i]["question_key"]

    forged = _resign(_rewrite(data, "data/claims.csv", _edit_claims(twice)))
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(forged), name="forged", filename="s.zip", owner=None)
    error = refused.value.errors[0]
    assert (error.record, error.line, error.field) == ("data/claims.csv", j + 2, "question_key"), error
    assert "already holds question" in error.reason and f"row {i + 2} of claims.csv" in error.reason


def test_a_claim_of_another_worker_than_its_task_is_refused():
    study = _worked_study()
    data = _bundle(study)
    rows = _claims(data)
    j = next(n for n, r in enumerate(rows) if r["worker"] != rows[0]["worker"])

    def move(rows):
        rows[j]["worker"] = rows[0]["worker"]

    forged = _resign(_rewrite(data, "data/claims.csv", _edit_claims(move)))
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(forged), name="forged", filename="s.zip", owner=None)
    error = refused.value.errors[0]
    assert (error.record, error.line, error.field) == ("data/claims.csv", j + 2, "worker"), error


def test_an_honest_bundle_keeps_its_keys_and_scores_the_same_and_its_copy_round_trips_again():
    study = _worked_study()
    original = study_score(study=study, similarity=False)
    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="copy", filename="s.zip", owner=None)
    assert _numbers(study_score(study=copy, similarity=False).results) == _numbers(original.results)
    # every unit claim keeps its unit's key, every check claim the form the live app writes, with the copy's ids
    for claim in Claim.objects.filter(study=copy).select_related("unit"):
        if claim.unit_id:
            assert claim.question_key == claim.unit.question_key
        else:
            assert claim.question_key in (f"attn:{claim.attention_check_id}",
                                          f"attn:{claim.attention_check_id}:{claim.assignment_id}")
    again = bundle_import(file=io.BytesIO(_bundle(copy)), name="copy-of-copy", filename="s.zip", owner=None)
    assert _numbers(study_score(study=again, similarity=False).results) == _numbers(original.results)


def test_a_check_given_again_keeps_the_live_apps_key_with_the_copys_ids():
    """A check left unanswered comes again keyed ``attn:<check>:<task>``; the copy keeps that form,
    with its own check and task ids, so the copy's own bundle imports again."""
    study = make_study(n_items=10, n_sources=1, units_per_task=2)
    AttentionCheckFactory(study=study, question="ATTENTION: choose No")
    client = Client()
    first = start(client, entry_url(study))
    assert client.post(first + "leave").status_code == 302  # nothing answered: the check comes again
    second = start(client, entry_url(study))
    complete_task(client, second)
    assert client.post(second + "submit").status_code == 302
    again_task = Assignment.objects.get(token=second.rstrip("/").split("/")[-1])
    assert Claim.objects.filter(assignment=again_task, question_key__startswith="attn:",
                                question_key__endswith=f":{again_task.pk}").exists()
    study_close(user=OPERATOR, study=study)

    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="copy", filename="s.zip", owner=None)
    check = AttentionCheck.objects.get(study=copy)
    keys = sorted(Claim.objects.filter(study=copy, attention_check=check).values_list("question_key", "assignment_id"))
    tasks = sorted(Assignment.objects.filter(study=copy).values_list("pk", flat=True))
    assert keys == [(f"attn:{check.pk}", tasks[0]), (f"attn:{check.pk}:{tasks[1]}", tasks[1])]
    again = bundle_import(file=io.BytesIO(_bundle(copy)), name="copy-of-copy", filename="s.zip", owner=None)
    assert Claim.objects.filter(study=again).count() == Claim.objects.filter(study=study).count()
