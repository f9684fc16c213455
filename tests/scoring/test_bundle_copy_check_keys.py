"""A copy imported before the import rebuilt attention-check keys (c2b1678) stored its bundle's
check keys verbatim: ``attn:<origin's check>`` (or ``attn:<origin's check>:<origin's task>`` for a
check given again). Its own bundle writes each check claim's key as the live app writes it, rebuilt
from the ids the bundle writes (the stored key's shape says whether it has the task part), so it
imports again and scores the same; a live study's bundle writes the keys it stores."""
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
from scoring.services.bundle import bundle_import
from studies.models import Study
from tests.annotations.factories import AttentionCheckFactory, make_study
from tests.annotations.pages import complete_task, entry_url, start
from tests.scoring.test_bundle import _bundle, _numbers, _worked_study

pytestmark = pytest.mark.django_db


def _claims(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(zipfile.ZipFile(io.BytesIO(data)).read("data/claims.csv").decode())))


def _check_given_again() -> Study:
    """A study whose one worker left a task unanswered, so its check came again as ``attn:<check>:<task>``."""
    study = make_study(n_items=10, n_sources=1, units_per_task=2)
    AttentionCheckFactory(study=study, question="ATTENTION: choose No")
    client = Client()
    first = start(client, entry_url(study))
    assert client.post(first + "leave").status_code == 302
    second = start(client, entry_url(study))
    complete_task(client, second)
    assert client.post(second + "submit").status_code == 302
    study_close(user=OPERATOR, study=study)
    return study


def _copy_as_before_c2b1678(study: Study) -> Study:
    """The study's copy with its check claims keyed as the importer before c2b1678 stored them: the
    bundle's keys verbatim, with the origin's check and task ids."""
    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="copy", filename="s.zip", owner=None)
    check = {c: o for c, o in zip(AttentionCheck.objects.filter(study=copy).order_by("id").values_list("id", flat=True),
                                  AttentionCheck.objects.filter(study=study).order_by("id").values_list("id", flat=True),
                                  strict=True)}
    tasks = dict(zip(Assignment.objects.filter(study=copy).order_by("id").values_list("id", flat=True),
                     Assignment.objects.filter(study=study).exclude(status=Assignment.Status.WITHDRAWN)
                     .order_by("id").values_list("id", flat=True), strict=True))
    for claim in Claim.objects.filter(study=copy, attention_check__isnull=False):
        given_again = claim.question_key.count(":") == 2
        claim.question_key = (f"attn:{check[claim.attention_check_id]}:{tasks[claim.assignment_id]}" if given_again
                              else f"attn:{check[claim.attention_check_id]}")
        claim.save(update_fields=["question_key"])
    origin_keys = sorted(Claim.objects.filter(study=study, attention_check__isnull=False)
                         .values_list("question_key", flat=True))
    assert sorted(Claim.objects.filter(study=copy, attention_check__isnull=False)
                  .values_list("question_key", flat=True)) == origin_keys  # the origin's ids, as stored then
    return copy


def _live_keys(study: Study) -> None:
    for claim in Claim.objects.filter(study=study).select_related("unit"):
        if claim.unit_id:
            assert claim.question_key == claim.unit.question_key
        else:
            assert claim.question_key in (f"attn:{claim.attention_check_id}",
                                          f"attn:{claim.attention_check_id}:{claim.assignment_id}"), claim.question_key


def test_a_copy_imported_before_keys_were_rebuilt_bundles_again_and_scores_the_same():
    study = _worked_study()
    original = study_score(study=study, similarity=False)
    copy = _copy_as_before_c2b1678(study)

    data = _bundle(copy)
    for row in _claims(data):
        if row["attention_check_id"]:
            assert row["question_key"] == f"attn:{row['attention_check_id']}", row
    again = bundle_import(file=io.BytesIO(data), name="copy-of-copy", filename="s.zip", owner=None)

    _live_keys(again)
    assert _numbers(study_score(study=again, similarity=False).results) == _numbers(original.results)


def test_a_copy_imported_before_keys_were_rebuilt_keeps_a_check_given_again_in_its_task_form():
    study = _check_given_again()
    copy = _copy_as_before_c2b1678(study)

    again = bundle_import(file=io.BytesIO(_bundle(copy)), name="copy-of-copy", filename="s.zip", owner=None)

    check = AttentionCheck.objects.get(study=again)
    tasks = sorted(Assignment.objects.filter(study=again).values_list("pk", flat=True))
    keys = sorted(Claim.objects.filter(study=again, attention_check=check).values_list("question_key", "assignment_id"))
    assert keys == [(f"attn:{check.pk}", tasks[0]), (f"attn:{check.pk}:{tasks[1]}", tasks[1])]
    assert Claim.objects.filter(study=again).count() == Claim.objects.filter(study=study).count()


@pytest.mark.parametrize("made", [_worked_study, _check_given_again])
def test_a_live_studys_bundle_writes_the_keys_it_stores(made):
    study = made()
    stored = dict(Claim.objects.filter(study=study).values_list("pk", "question_key"))
    rows = _claims(_bundle(study))
    assert {int(r["id"]): r["question_key"] for r in rows} == stored
    assert any(r["attention_check_id"] for r in rows)
