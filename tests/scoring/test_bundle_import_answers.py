"""A bundle's answers are checked by the worker path's own rule (``annotations.services.steps.clean_answer``
with the labels of the question each claim asks, ``annotations.services.answers.claim_labels``): a
bundle edited and signed again so that an answer is one no worker could have given (``maybe`` to a
yes/no question, a multiple-choice label the item does not offer, a property mark that is neither
yes nor no) is refused naming data/annotations.csv, the row and the field, and nothing is written.
What is stored is what ``clean_answer`` returns: a payload key the worker path never writes does not
travel into the copy."""
from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest

from annotations.models import Annotation, Claim
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_start
from annotations.services.opening import study_open
from annotations.services.participants import participant_get_or_create
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.steps import RATIONALE_PROPERTIES
from scoring.services.bundle import BundleError, bundle_import
from studies.models import Platform, Study
from studies.services.studies import study_create
from tests.factories import DatasetFactory, ItemFactory, RationaleFactory, RationaleSourceFactory
from tests.scoring.test_bundle import _bundle, _edited_rows, _worked_study
from tests.work import work

pytestmark = pytest.mark.django_db

ANNOTATIONS = "data/annotations.csv"
ABCD = [{"label": label, "text": f"Choice {label}"} for label in "ABCD"]


def _rows(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(zipfile.ZipFile(io.BytesIO(data)).read(ANNOTATIONS).decode())))


def _edited(data: bytes, index: int, **cells) -> bytes:
    """The bundle with row ``index`` of data/annotations.csv given ``cells``, signed again (SHA256SUMS
    and datapackage.json's hashes), as someone editing a download would."""
    return _edited_rows(data, ANNOTATIONS, (index, cells))


def _refused(data: bytes):
    """The import's first error; no study, claim or answer was made."""
    studies, claims, answers = Study.objects.count(), Claim.objects.count(), Annotation.objects.count()
    with pytest.raises(BundleError) as refused:
        bundle_import(file=io.BytesIO(data), name="edited-copy", filename="study.zip", owner=None)
    assert (Study.objects.count(), Claim.objects.count(), Annotation.objects.count()) == (studies, claims, answers)
    assert not Study.objects.filter(name="edited-copy").exists()
    return refused.value.errors[0]


def _multiple_choice_study() -> Study:
    """A closed utility study of two A-D items (gold B), answered by two workers through the services."""
    dataset = DatasetFactory(name="mc-dataset")
    source = RationaleSourceFactory(name="mc-source")
    for n in range(2):
        item = ItemFactory(dataset=dataset, external_id=f"mc-q{n}", choices=ABCD, gold_answer="B")
        RationaleFactory(item=item, source=source, text=f"Because of mc-q{n}.", predicted_answer="B")
    study = study_open(study=study_create(name="mc-origin", dataset=dataset, sources=[source], annotators_per_unit=2,
                                          units_per_task=2, consent_text="I agree."), user=OPERATOR)
    for worker in ("MC1", "MC2"):
        work(study, worker, platform=Platform.LINK, answer=lambda claim, step: "A" if step == "before" else "B")
    study_close(user=OPERATOR, study=study)
    return study


def _properties_study() -> Study:
    """A closed rationale-properties study of two rationales, marked by one worker through the services."""
    dataset = DatasetFactory(name="props-dataset")
    source = RationaleSourceFactory(name="props-source")
    for n in range(2):
        item = ItemFactory(dataset=dataset, external_id=f"props-q{n}")
        RationaleFactory(item=item, source=source, text=f"Because of props-q{n}.", predicted_answer="yes")
    study = study_open(study=study_create(
        name="props-origin", dataset=dataset, kind=Study.Kind.RATIONALE_PROPERTIES, sources=[source],
        annotators_per_unit=1, units_per_task=2, consent_text="I agree."), user=OPERATOR)
    task = assignment_start(study=study, participant=participant_get_or_create(platform=Platform.LINK,
                                                                               external_id="P1"), consented=True)
    for claim in task.claims.order_by("position"):
        annotation_submit(assignment=task, claim=claim, step=Annotation.Step.PROPERTIES, answer="",
                          payload={name: "yes" if name == "grammatical" else "no" for name, _ in RATIONALE_PROPERTIES})
    assignment_submit(assignment=task)
    study_close(user=OPERATOR, study=study)
    return study


def test_an_after_answer_edited_to_maybe_is_refused_naming_the_row_and_the_field():
    """The probe: an ``after,yes`` row edited to ``after,maybe`` and signed again was imported, and
    the copy's re-score turned a useful rationale into a useless one without a word."""
    data = _bundle(_worked_study())
    index = next(i for i, r in enumerate(_rows(data)) if r["step"] == "after" and r["answer"] == "yes")

    error = _refused(_edited(data, index, answer="maybe"))

    assert (error.record, error.line, error.field) == (ANNOTATIONS, index + 2, "answer"), error
    assert "'maybe' is not one of the choices" in error.reason and "(yes, no)" in error.reason


def test_a_multiple_choice_answer_the_item_does_not_offer_is_refused():
    data = _bundle(_multiple_choice_study())
    rows = _rows(data)
    assert {r["answer"] for r in rows} == {"A", "B"}  # the honest bundle: its choices' labels
    index = next(i for i, r in enumerate(rows) if r["step"] == "before")

    error = _refused(_edited(data, index, answer="E"))

    assert (error.record, error.line, error.field) == (ANNOTATIONS, index + 2, "answer"), error
    assert "'E' is not one of the choices" in error.reason and "(A, B, C, D)" in error.reason


def test_a_property_mark_that_is_neither_yes_nor_no_is_refused_naming_the_payload():
    data = _bundle(_properties_study())
    rows = _rows(data)
    index = len(rows) - 1
    marks = json.loads(rows[index]["payload"])
    marks["grammatical"] = "maybe"

    error = _refused(_edited(data, index, payload=json.dumps(marks)))

    assert (error.record, error.line, error.field) == (ANNOTATIONS, index + 2, "payload"), error
    assert "'maybe' is not one of the choices for 'Is the explanation grammatical and coherent?'" in error.reason


def test_a_payload_key_the_worker_path_never_writes_does_not_reach_the_copy():
    """What is stored is what ``clean_answer`` returns: a key added to a properties payload (one that
    would collide with the grouping keys of what reads it) is left out, the marks are kept."""
    study = _properties_study()
    data = _bundle(study)
    rows = _rows(data)
    marks = json.loads(rows[0]["payload"])

    copy = bundle_import(file=io.BytesIO(_edited(data, 0, payload=json.dumps({**marks, "item_id": True}))),
                         name="edited-copy", filename="study.zip", owner=None)

    payloads = list(Annotation.objects.filter(claim__study=copy).values_list("payload", flat=True))
    assert len(payloads) == 2 and all(p == marks for p in payloads), payloads
    assert sorted(payloads, key=str) == sorted(Annotation.objects.filter(claim__study=study)
                                               .values_list("payload", flat=True), key=str)


def test_a_properties_answer_cell_the_payload_does_not_give_is_refused():
    """A properties answer's own cell is empty (the marks are its answer): a row that writes one there
    is not what the worker path stores."""
    data = _bundle(_properties_study())

    error = _refused(_edited(data, 0, answer="yes"))

    assert (error.record, error.line, error.field) == (ANNOTATIONS, 2, "answer"), error
    assert "'yes' is not the answer its payload gives ('')" in error.reason


def test_an_untouched_bundle_of_each_kind_imports_with_its_answers_as_stored():
    for study in (_multiple_choice_study(), _properties_study()):
        copy = bundle_import(file=io.BytesIO(_bundle(study)), name=f"{study.name}-copy", filename="s.zip", owner=None)
        fields = ("claim__position", "step", "answer", "payload")
        assert sorted(Annotation.objects.filter(claim__study=copy).values_list(*fields), key=str) == sorted(
            Annotation.objects.filter(claim__study=study).values_list(*fields), key=str)



def test_a_validation_correcting_the_proposed_answer_to_itself_counts_as_no_correction():
    """The page offered the proposed answer as a correction before the worker path refused it
    (``clean_answer``'s ``proposed_answer``), so stored answers, and bundles of them, hold some: the
    bundle imports as the app stored it, and the answer-corrected reading counts such a correction
    as none, in the original and its copy alike (it called the question valid with the answer every
    judge rejected)."""
    from scoring.services import study_score
    from tests.annotations.factories import make_study
    from tests.scoring.test_services_validation import WRONG_ANSWER, _validate

    study = make_study(kind=Study.Kind.QUESTION_VALIDATION, n_items=2, n_genq=1, n_sources=1, quota=1,
                       units_per_task=2)
    _validate(study, 0, verdicts={0: [WRONG_ANSWER], 1: [WRONG_ANSWER]})
    study_close(user=OPERATOR, study=study)
    for stored in Annotation.objects.filter(claim__study=study, step=Annotation.Step.VALIDATION):
        # what the page let a judge send before: the proposed answer as the correction
        stored.payload = {**stored.payload, "corrected_answer": stored.claim.unit.generalization_question.answer}
        stored.save(update_fields=["payload"])

    def readings(scored: Study) -> list[tuple]:
        rows = study_score(study=scored, similarity=False).results["question_validation"]["questions"]
        return [(r["majority_of_verdicts"], r["answer_corrected"], r["suggested_corrected_answer"]) for r in rows]

    assert readings(study) == [("invalid", "invalid", "")] * 2
    copy = bundle_import(file=io.BytesIO(_bundle(study)), name="legacy-copy", filename="study.zip", owner=None)
    assert readings(copy) == [("invalid", "invalid", "")] * 2
