"""A bundle's claims and answers fit together as the worker path leaves them: a claim data/claims.csv
gives as completed has an answer in data/annotations.csv for every step of its question
(``annotations.services.steps.steps_for``), a step is answered once, and a claim not completed has
no answer to its last step (that answer is what completes a claim). A bundle edited and signed again
so that a counted claim lost its after answer would otherwise import and score its unit on a before
majority over more workers than its after one; it is refused naming the file, line, field and
reason, and nothing is written. An unchanged bundle, work still in progress included, imports."""
from __future__ import annotations

import csv
import io
import zipfile

import pytest

from annotations.models import Annotation, Assignment, Claim, Participant
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from scoring.services import study_score
from scoring.services.bundle import BundleError, bundle_import
from studies.models import Platform, Study
from tests.annotations.factories import make_study
from tests.scoring.test_bundle import _answerer, _bundle, _numbers, _resign, _rewrite, _worked_study
from tests.work import work

pytestmark = pytest.mark.django_db

CLAIMS, ANNOTATIONS, TASKS = "data/claims.csv", "data/annotations.csv", "data/tasks.csv"
FLAG_REVIEWS = "data/flag_reviews.csv"
COUNTING = ("submitted", "approved")  # annotations.selectors.COUNTING_ASSIGNMENT_STATUSES


def _table(data: bytes, path: str) -> tuple[list[str], list[dict]]:
    reader = csv.DictReader(io.StringIO(zipfile.ZipFile(io.BytesIO(data)).read(path).decode()))
    return list(reader.fieldnames), list(reader)


def _with_rows(data: bytes, path: str, rows: list[dict]) -> bytes:
    """The bundle with the CSV file ``path`` holding ``rows``, signed again, as someone editing a
    download would."""
    header, _rows = _table(data, path)

    def write(_content: bytes) -> bytes:
        out = io.StringIO()
        writer = csv.DictWriter(out, header, lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue().encode()
    return _resign(_rewrite(data, path, write))


def _counted_claim(data: bytes, *, check: bool = False) -> tuple[int, dict]:
    """(index, row) in data/claims.csv of a claim that counts (completed, not released, its task
    submitted or approved and not on hold), or, with ``check``, of a completed attention check's;
    none with a flagged answer the researcher decided on (data/flag_reviews.csv names it)."""
    _header, tasks = _table(data, TASKS)
    counting = {t["id"] for t in tasks if t["status"] in COUNTING and t["on_hold"] == "false"}
    _header, reviews = _table(data, FLAG_REVIEWS)
    reviewed = {(r["task_id"], r["position"]) for r in reviews}
    _header, claims = _table(data, CLAIMS)
    return next((i, c) for i, c in enumerate(claims)
                if c["completed_at"] and c["released"] == "false" and c["task_id"] in counting
                and bool(c["attention_check_id"]) == check and (c["task_id"], c["position"]) not in reviewed)


def _answer_index(rows: list[dict], claim: dict, step: str) -> int:
    return next(i for i, r in enumerate(rows)
                if (r["assignment_id"], r["position"], r["step"]) == (claim["task_id"], claim["position"], step))


def _scored_bundle() -> bytes:
    study = _worked_study()
    assert study_score(study=study, similarity=False).status == "done"
    return _bundle(study)


def _refused(data: bytes):
    """The import's errors; no study, participant, task, claim or answer was made."""
    counts = [m.objects.count() for m in (Study, Participant, Assignment, Claim, Annotation)]
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="edited-copy", filename="study.zip", owner=None)
    assert [m.objects.count() for m in (Study, Participant, Assignment, Claim, Annotation)] == counts
    assert not Study.objects.filter(name="edited-copy").exists()
    return refused.value.errors


@pytest.mark.parametrize(("check", "step"), [(False, "after"), (False, "before"), (True, "attention")])
def test_a_completed_claim_missing_an_answer_is_refused_naming_its_claims_row(check, step):
    data = _scored_bundle()
    index, claim = _counted_claim(data, check=check)
    _header, answers = _table(data, ANNOTATIONS)
    del answers[_answer_index(answers, claim, step)]

    errors = _refused(_with_rows(data, ANNOTATIONS, answers))

    assert len(errors) == 1
    error = errors[0]
    assert (error.record, error.line, error.field) == (CLAIMS, index + 2, "completed_at")  # line 1: the header
    assert f"data/annotations.csv has no '{step}' answer for it" in error.reason
    assert f"task {claim['task_id']}, position {claim['position']}" in error.reason
    assert f"line {index + 2}, {CLAIMS}: field 'completed_at'" in str(error)


def test_an_unscored_bundle_whose_counted_claim_lost_its_after_answer_is_refused_too():
    # no unit scores to compare the answers with (``unit_scores_match_answers``): before this check,
    # such a bundle imported silently and its copy scored the unit on 5 before and 4 after answers
    data = _bundle(_worked_study())
    assert len(_table(data, "data/unit_scores.csv")[1]) == 0
    index, claim = _counted_claim(data)
    _header, answers = _table(data, ANNOTATIONS)
    del answers[_answer_index(answers, claim, "after")]

    errors = _refused(_with_rows(data, ANNOTATIONS, answers))

    assert [(e.record, e.line, e.field) for e in errors] == [(CLAIMS, index + 2, "completed_at")]
    assert "data/annotations.csv has no 'after' answer for it" in errors[0].reason


def test_an_answer_given_twice_for_one_step_is_refused_naming_the_second_row():
    data = _scored_bundle()
    _index, claim = _counted_claim(data)
    _header, answers = _table(data, ANNOTATIONS)
    first = _answer_index(answers, claim, "after")
    again = dict(answers[first], annotation_id=str(max(int(a["annotation_id"]) for a in answers) + 1))
    answers.append(again)

    errors = _refused(_with_rows(data, ANNOTATIONS, answers))

    error = errors[0]
    assert (error.record, error.line, error.field) == (ANNOTATIONS, len(answers) + 1, "step")
    assert f"'after' is answered again for the claim at task {claim['task_id']}, position {claim['position']}" \
        in error.reason
    assert f"row {first + 2} of {ANNOTATIONS} answers it" in error.reason


def test_an_answer_to_the_last_step_of_a_claim_not_completed_is_refused_naming_the_answer():
    data = _scored_bundle()
    index, claim = _counted_claim(data)
    _header, claims = _table(data, CLAIMS)
    claims[index]["completed_at"] = ""
    _header, answers = _table(data, ANNOTATIONS)

    errors = _refused(_with_rows(data, CLAIMS, claims))

    error = errors[0]
    assert (error.record, error.line, error.field) == (ANNOTATIONS, _answer_index(answers, claim, "after") + 2, "step")
    assert "has no completed_at: the answer to the last step completes a claim" in error.reason


def test_an_unchanged_bundle_with_work_in_progress_imports_every_answer_and_scores_the_same():
    # no attention check: the late worker's first claim is a unit, answered before its rationale only
    study = make_study(n_items=2, n_sources=1, quota=3, units_per_task=2, name="claims-origin")
    for n in range(2):
        work(study, f"PID{n}", answer=_answerer(n), platform=Platform.LINK)
    work(study, "PID-late", answer=_answerer(2), platform=Platform.LINK, steps=1, submit=False)
    study_close(user=OPERATOR, study=study)
    original = study_score(study=study, similarity=False)
    assert original.status == "done", original.error
    data = _bundle(study)
    _header, claims = _table(data, CLAIMS)
    _header, answers = _table(data, ANNOTATIONS)
    open_claims = {(c["task_id"], c["position"]) for c in claims if not c["completed_at"]}
    assert [a["step"] for a in answers if (a["assignment_id"], a["position"]) in open_claims] == ["before"]
    data = _with_rows(data, ANNOTATIONS, answers)  # written again and signed again: the same bundle

    copy = bundle_import(file=io.BytesIO(data), name="unchanged-copy", filename="study.zip", owner=None)

    assert Annotation.objects.filter(claim__study=copy).count() == len(answers)
    assert Claim.objects.filter(study=copy, completed_at__isnull=False).count() == len(claims) - len(open_claims)
    rescored = study_score(study=copy, similarity=False)
    assert rescored.status == "done", rescored.error
    assert _numbers(rescored.results) == _numbers(original.results)
