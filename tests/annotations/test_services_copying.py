"""``study_copy``: a new draft with a study's whole design (every design field, its sources and
items, its attention checks and its qualification test with its questions), made through the
services that make each part, all or nothing; never anything of the study's run. The refusals
that told a researcher to "copy the study" had no copy to point at."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission

from annotations.models import AttentionCheck, QualificationQuestion, QualificationTest, Unit
from annotations.services.copying import COPIED_FIELDS, NOT_COPIED_FIELDS, study_copy, study_copy_name
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.close import study_close
from annotations.services.qualification import attention_check_save, qualification_test_save
from studies.models import Item, Platform, Study, StudyShare
from studies.services.importers import items_import_table
from studies.services.sharing import study_share
from studies.services.studies import StudyError, study_create
from tests.annotations.factories import imported_outcomes_study, make_study
from tests.cockpit.conftest import staff_client
from tests.factories import ItemFactory
from tests.studies.helpers import write_jsonl

pytestmark = pytest.mark.django_db

DESIGN = {
    "item_sample_size": 3, "sample_seed": 11, "annotators_per_unit": 3, "units_per_task": 2,
    "reward": Decimal("3.25"), "hourly_pay_floor": Decimal("12.50"), "estimated_minutes_per_task": Decimal("4.5"),
    "platform": Platform.PROLIFIC, "instructions": "Read each question twice.", "example": "Q: Is ice cold? A: yes",
    "faithfulness_enabled": True, "stop_when_decided": True,
}
QUESTIONS = [
    {"question": "Is water wet?", "choices": [{"label": "yes", "text": "Yes"}, {"label": "no", "text": "No"}],
     "correct_answer": "yes"},
    {"question": "Which is a mammal?", "choices": [{"label": "whale", "text": "whale"},
                                                   {"label": "shark", "text": "shark"}], "correct_answer": "whale"},
]


def designed_study(owner, *, status=Study.Status.CLOSED, **fields) -> Study:
    """``owner``'s study of 5 items with a design far from the defaults, two attention checks and a
    qualification test of two questions (written through their services), in ``status``."""
    design = {**DESIGN, **fields}
    study = make_study(status=Study.Status.DRAFT, n_items=5, n_sources=2, owner=owner, name="designed",
                       quota=design.pop("annotators_per_unit"), units_per_task=design.pop("units_per_task"), **design)
    for question, answer in (("Attention: choose No.", "no"), ("Attention: choose Yes.", "yes")):
        attention_check_save(check=AttentionCheck(study=study, question=question, correct_answer=answer,
                                                  choices=[{"label": "yes", "text": "Yes"},
                                                           {"label": "no", "text": "No"}]), user=owner)
    qualification_test_save(test=QualificationTest(study=study, pass_mark=2, instructions="Answer both."),
                            user=owner, questions=QUESTIONS)
    if status != Study.Status.DRAFT:
        study = study_open(study=study, user=owner)
    if status == Study.Status.CLOSED:
        study_close(user=owner, study=study)
    study.refresh_from_db()
    return study


def checks_of(study):
    return list(AttentionCheck.objects.filter(study=study).order_by("pk").values_list(
        "question", "choices", "correct_answer"))


def test_every_field_of_a_study_is_either_copied_or_named_as_not_copied():
    fields = {f.name for f in Study._meta.get_fields() if not (f.auto_created and not f.concrete)}
    assert fields == set(COPIED_FIELDS) | set(NOT_COPIED_FIELDS)
    assert not set(COPIED_FIELDS) & set(NOT_COPIED_FIELDS)


def test_a_copy_of_a_closed_study_carries_its_whole_design_checks_and_test_and_opens():
    dana, _ = staff_client("dana")
    study = designed_study(dana)
    assert study.status == Study.Status.CLOSED and study.assignment_minutes is not None
    assert Unit.objects.filter(study=study).exists()

    copy = study_copy(study=study, user=dana, name="designed again")

    assert (copy.name, copy.status, copy.owner, copy.is_imported_outcome) == (
        "designed again", Study.Status.DRAFT, dana, False)
    for field in COPIED_FIELDS:
        assert getattr(copy, field) == getattr(study, field), field
    for field, value in DESIGN.items():  # the design really is not the defaults
        assert getattr(copy, field) == value, field
    assert copy.consent_text == study.consent_text and copy.consent_text
    assert set(copy.sources.all()) == set(study.sources.all()) and copy.sources.count() == 2
    assert set(copy.items.all()) == set(study.items.all()) and copy.items.count() == 3
    # Nothing of the run: new public ids, no tasks' minutes, no units, no shares.
    assert copy.entry_token and copy.entry_token != study.entry_token
    assert copy.completion_code and copy.completion_code != study.completion_code
    assert (copy.assignment_minutes, copy.first_answer_minutes) == (None, None)
    assert not Unit.objects.filter(study=copy).exists() and not copy.shares.exists()
    assert checks_of(copy) == checks_of(study) and len(checks_of(copy)) == 2
    test = QualificationTest.objects.get(study=copy)
    assert (test.pass_mark, test.instructions) == (2, "Answer both.")
    assert list(QualificationQuestion.objects.filter(test=test).values("question", "choices", "correct_answer")) \
        == QUESTIONS
    # The original is as it was.
    assert QualificationQuestion.objects.filter(test__study=study).count() == 2
    assert Study.objects.get(pk=study.pk).status == Study.Status.CLOSED

    opened = study_open(study=copy, user=dana)
    assert opened.status == Study.Status.OPEN and Unit.objects.filter(study=copy).exists()
    with pytest.raises(StudyError, match=r"is closed; copy it to run it again \(Copy this study"):
        study_open(study=study, user=dana)


def test_a_copy_may_run_on_another_platform():
    dana, _ = staff_client("dana")
    study = designed_study(dana)
    copy = study_copy(study=study, user=dana, name="on links", platform=Platform.LINK)
    assert (study.platform, copy.platform) == (Platform.PROLIFIC, Platform.LINK)
    with pytest.raises(StudyError, match="platform: 'nowhere' is not a platform") as refused:
        study_copy(study=study, user=dana, name="nowhere", platform="nowhere")
    assert "platform" in refused.value.problems and not Study.objects.filter(name="nowhere").exists()


def test_a_copy_keeps_the_items_the_study_showed_when_a_draw_would_give_others():
    dana, _ = staff_client("dana")
    study = make_study(status=Study.Status.CLOSED, n_items=4, owner=dana, name="all items")
    ItemFactory(dataset=study.dataset, split="test", question="Added since?")  # the split grew since
    copy = study_copy(study=study, user=dana, name="all items again")
    assert set(copy.items.all()) == set(study.items.all()) and copy.items.count() == 4
    assert copy.item_sample_size is None


def test_a_copy_takes_the_items_the_study_shows_though_a_reimport_moved_them_out_of_its_split(tmp_path):
    """The copy carries exactly the study's items, not a new draw: a draw from the split as it is
    now would be refused ("no items in the test split") though the study shows items."""
    dana, _ = staff_client("dana")
    study = designed_study(dana, status=Study.Status.DRAFT)  # 3 of 5 items; a draft's items may move
    shown = set(study.items.all())
    assert len(shown) == 3
    # The items re-imported in the train split, as a researcher does (``items_import_table``).
    items_import_table(file=write_jsonl(tmp_path / "moved.jsonl", [
        {"id": i.external_id, "question": i.question, "answer": i.gold_answer, "rationale": i.gold_rationale,
         "split": "train"} for i in Item.objects.filter(dataset=study.dataset)]),
        dataset_name=study.dataset.name, user=dana)
    assert not Item.objects.filter(dataset=study.dataset, split="test").exists()

    copy = study_copy(study=study, user=dana, name="moved again")

    assert set(copy.items.all()) == shown and (copy.split, copy.item_sample_size) == ("test", 3)
    assert checks_of(copy) == checks_of(study)


def test_a_copy_of_a_closed_study_takes_its_items_though_fewer_are_left_in_its_split():
    """A closed study's items are fixed (a re-import may not move them), but its split may hold
    fewer items than its sample size by other means; the ORM stands in for them here."""
    dana, _ = staff_client("dana")
    study = designed_study(dana)
    shown = list(study.items.order_by("pk"))
    Item.objects.filter(dataset=study.dataset).exclude(pk=shown[0].pk).update(split="train")

    copy = study_copy(study=study, user=dana, name="fewer left")

    assert set(copy.items.all()) == set(shown) and copy.items.count() == 3


def test_a_copy_of_a_draft_without_items_draws_its_sample():
    """A draft with no items (emptied: no service does that, so the ORM does) is copied as any new
    study is made: its sample is drawn, and the draw's checks apply."""
    dana, _ = staff_client("dana")
    study = designed_study(dana, status=Study.Status.DRAFT)
    drawn = set(study.items.all())
    study.items.clear()

    copy = study_copy(study=study, user=dana, name="drawn")

    assert set(copy.items.all()) == drawn and copy.items.count() == 3
    Item.objects.filter(dataset=study.dataset).update(split="train")
    with pytest.raises(StudyError, match="has no items in the test split: import them first") as refused:
        study_copy(study=study, user=dana, name="nothing to draw")
    assert "split" in refused.value.problems and not Study.objects.filter(name="nothing to draw").exists()


def test_given_items_of_another_dataset_are_refused():
    dana, _ = staff_client("dana")
    study = make_study(status=Study.Status.DRAFT, owner=dana)
    other = make_study(status=Study.Status.DRAFT, owner=dana)
    with pytest.raises(StudyError, match="Items of another dataset than the study's") as refused:
        study_create(name="mixed", dataset=study.dataset, sources=list(study.sources.all()), user=dana,
                     items=list(other.items.all()))
    assert "items" in refused.value.problems and not Study.objects.filter(name="mixed").exists()


def test_a_copy_on_mturk_is_refused_while_mturk_is_closed(settings):
    settings.RL_MTURK_CLOSED_ON = "2026-09-30"  # the default: Amazon's closure
    dana, _ = staff_client("dana")
    study = designed_study(dana, platform=Platform.MTURK)
    count = Study.objects.count()
    for platform in (Platform.MTURK, None):  # chosen, or the study's own
        with pytest.raises(StudyError, match="platform: Amazon Mechanical Turk is closed") as refused:
            study_copy(study=study, user=dana, name="on mturk", platform=platform)
        assert "closed Mechanical Turk for good on 2026-09-30" in refused.value.problems["platform"]
        assert list(refused.value.problems) == ["platform"] and Study.objects.count() == count

    assert study_copy(study=study, user=dana, name="on links", platform=Platform.LINK).platform == Platform.LINK

    settings.RL_MTURK_CLOSED_ON = ""  # an operator whose MTurk endpoint still answers
    assert study_copy(study=study, user=dana, name="on mturk").platform == Platform.MTURK


def test_a_researcher_the_study_is_not_shared_with_is_refused_and_nothing_is_made():
    dana, _ = staff_client("dana")
    study = designed_study(dana)
    stan, _ = staff_client("stan")  # every model permission, no share
    before = (Study.objects.count(), AttentionCheck.objects.count(), QualificationTest.objects.count())
    with pytest.raises(StudyError, match=f"study {study.pk}: not found or not yours to copy"):
        study_copy(study=study, user=stan, name="stolen")
    assert (Study.objects.count(), AttentionCheck.objects.count(), QualificationTest.objects.count()) == before


def test_a_view_share_copies_under_the_rules_of_any_new_study():
    """A view share reads the study page, checks and test included, so it may copy them; the copy
    uses the study's dataset and sources only where its reader may use them in a design of their
    own (``studies.view_dataset`` / ``view_rationalesource``), as for any new study: a view share
    itself does not lend them."""
    dana, _ = staff_client("dana")
    study = designed_study(dana)
    lee, _ = staff_client("lee")  # every model permission: reads every dataset and source
    study_share(study=study, user=dana, with_user=lee, level=StudyShare.Level.VIEW)
    copy = study_copy(study=study, user=lee, name="lee's copy")
    assert copy.owner == lee and checks_of(copy) == checks_of(study)

    kim, _ = staff_client("kim", perms=False)
    kim.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="studies", codename__in=["view_study", "add_study", "change_study"]))
    study_share(study=study, user=dana, with_user=kim, level=StudyShare.Level.VIEW)
    count = Study.objects.count()
    with pytest.raises(StudyError, match="you may read it only through a study shared with you") as refused:
        study_copy(study=study, user=kim, name="kim's copy")
    assert {"dataset", "sources"} <= set(refused.value.problems) and Study.objects.count() == count


def test_a_study_of_imported_outcomes_is_refused():
    dana, _ = staff_client("dana")
    outcomes = imported_outcomes_study(dana)
    assert outcomes.is_imported_outcome
    count = Study.objects.count()
    with pytest.raises(StudyError, match="holds outcomes imported from elsewhere: it has no design"):
        study_copy(study=outcomes, user=dana, name="outcomes again")
    assert Study.objects.count() == count


def test_a_name_in_use_is_refused_naming_the_field_and_nothing_is_made():
    dana, _ = staff_client("dana")
    study = designed_study(dana)
    make_study(status=Study.Status.DRAFT, owner=dana, name="taken")
    before = (Study.objects.count(), AttentionCheck.objects.count(), QualificationTest.objects.count(),
              QualificationQuestion.objects.count())
    with pytest.raises(StudyError, match="name: A study named 'taken' exists already") as refused:
        study_copy(study=study, user=dana, name=" taken ")
    assert list(refused.value.problems) == ["name"]
    with pytest.raises(StudyError, match="name: This field cannot be blank"):
        study_copy(study=study, user=dana, name="  ")
    assert (Study.objects.count(), AttentionCheck.objects.count(), QualificationTest.objects.count(),
            QualificationQuestion.objects.count()) == before


def test_a_refusal_after_the_study_was_made_leaves_nothing_behind():
    """The copy is one transaction: a user who may add studies but not change them (so not write
    a study's attention checks) is refused by ``attention_check_save``, and the study already
    inserted goes with it."""
    dana, _ = staff_client("dana")
    study = designed_study(dana, status=Study.Status.OPEN)
    ann, _ = staff_client("ann")
    ann.user_permissions.remove(Permission.objects.get(content_type__app_label="studies", codename="change_study"))
    study_share(study=study, user=dana, with_user=ann, level=StudyShare.Level.VIEW)
    before = (Study.objects.count(), AttentionCheck.objects.count(), QualificationTest.objects.count())
    with pytest.raises(StudyError, match="its attention checks or qualification test could not be copied"):
        study_copy(study=study, user=ann, name="half a copy")
    assert (Study.objects.count(), AttentionCheck.objects.count(), QualificationTest.objects.count()) == before
    assert not Study.objects.filter(name="half a copy").exists()


def test_the_name_offered_is_unique():
    dana, _ = staff_client("dana")
    study = make_study(status=Study.Status.DRAFT, owner=dana, name="pilot")
    assert study_copy_name(study=study) == "pilot (copy)"
    study_copy(study=study, user=dana, name="pilot (copy)")
    assert study_copy_name(study=study) == "pilot (copy 2)"
    long = make_study(status=Study.Status.DRAFT, owner=dana, name="x" * 200)
    assert study_copy_name(study=long) == "x" * 193 + " (copy)"


def test_the_operator_copies_any_study():
    dana, _ = staff_client("dana")
    study = designed_study(dana, status=Study.Status.DRAFT)
    copy = study_copy(study=study, user=None, name="operator's copy")
    assert copy.owner is None and checks_of(copy) == checks_of(study)
    assert QualificationTest.objects.get(study=copy).questions.count() == 2
    assert study_open(study=copy, user=OPERATOR).status == Study.Status.OPEN
