"""The database itself holds the invariants, whatever code writes."""
import pytest
from django.db import IntegrityError, transaction

from studies.models import GeneralizationQuestion, Item, Rationale
from tests.factories import DatasetFactory, ItemFactory, RationaleFactory, RationaleSourceFactory

pytestmark = pytest.mark.django_db


def test_one_rationale_per_item_and_source():
    rationale = RationaleFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        Rationale.objects.create(item=rationale.item, source=rationale.source, text="another")


def test_same_item_other_source_is_fine():
    rationale = RationaleFactory()
    Rationale.objects.create(item=rationale.item, source=RationaleSourceFactory(), text="another")
    assert Rationale.objects.count() == 2


def test_one_item_per_external_id_and_dataset():
    item = ItemFactory(external_id="q1")
    with pytest.raises(IntegrityError), transaction.atomic():
        Item.objects.create(dataset=item.dataset, external_id="q1", question="Other?", gold_answer="no")
    Item.objects.create(dataset=DatasetFactory(), external_id="q1", question="Other?", gold_answer="no")


@pytest.mark.parametrize("field", ["question", "gold_answer", "external_id"])
def test_item_text_fields_cannot_be_empty(field):
    values = {"dataset": DatasetFactory(), "external_id": "q", "question": "Q?", "gold_answer": "yes", field: ""}
    with pytest.raises(IntegrityError), transaction.atomic():
        Item.objects.create(**values)


def test_rationale_text_cannot_be_empty():
    with pytest.raises(IntegrityError), transaction.atomic():
        Rationale.objects.create(item=ItemFactory(), source=RationaleSourceFactory(), text="")


def test_generalization_question_unique_per_item_and_type():
    item = ItemFactory()
    GeneralizationQuestion.objects.create(item=item, qtype="rephrase", text="Q?", answer="yes")
    with pytest.raises(IntegrityError), transaction.atomic():
        GeneralizationQuestion.objects.create(item=item, qtype="rephrase", text="Q?", answer="no")
    GeneralizationQuestion.objects.create(item=item, qtype="similar", text="Q?", answer="no")
