"""Migration ``0015_claim_rand_key`` on a database with units: adding the column gives every unit
the same key, so the migration draws one per existing unit."""
from __future__ import annotations

import pytest

from annotations.models.core import RAND_KEY_SPAN

BEFORE = [("annotations", "0018_bundle_answered_at_default")]
AFTER = [("annotations", "0019_claim_rand_key")]


@pytest.mark.django_db(transaction=True)
def test_existing_units_get_their_own_random_keys(migrate_to):
    apps = migrate_to(BEFORE)
    Study = apps.get_model("studies", "Study")
    Dataset = apps.get_model("studies", "Dataset")
    Item = apps.get_model("studies", "Item")
    Unit = apps.get_model("annotations", "Unit")
    dataset = Dataset.objects.create(name="keys-data")
    study = Study.objects.create(name="keys", dataset=dataset, status="open", platform="link")
    items = [Item.objects.create(dataset=dataset, external_id=f"q{i}", question=f"Question {i}?", gold_answer="yes")
             for i in range(40)]
    Unit.objects.bulk_create([Unit(study=study, item=item, question_key=f"item:{item.pk}", quota=3, n_claimed=i % 3)
                              for i, item in enumerate(items)])

    Unit = migrate_to(AFTER).get_model("annotations", "Unit")
    keys = list(Unit.objects.filter(study_id=study.pk).values_list("rand_key", flat=True))
    assert len(keys) == 40 and len(set(keys)) == 40
    assert all(0 <= key < RAND_KEY_SPAN for key in keys)
