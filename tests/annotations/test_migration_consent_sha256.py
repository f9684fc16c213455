"""Migration ``0020_consentreceipt_consent_sha256``: receipts taken before it record no hash (an
empty one), and so do receipts that code of the schema before it writes meanwhile (a rolling
deploy: the column has a database default)."""
from __future__ import annotations

import pytest

BEFORE = [("annotations", "0019_claim_rand_key")]
AFTER = [("annotations", "0020_consentreceipt_consent_sha256")]


@pytest.mark.django_db(transaction=True)
def test_receipts_from_before_the_hash_keep_an_empty_one(migrate_to):
    old = migrate_to(BEFORE)
    Study, Dataset = old.get_model("studies", "Study"), old.get_model("studies", "Dataset")
    Participant = old.get_model("annotations", "Participant")
    OldReceipt = old.get_model("annotations", "ConsentReceipt")
    study = Study.objects.create(name="receipts", dataset=Dataset.objects.create(name="receipts-data"),
                                 status="open", platform="link", consent_text="I agree.")
    worker = Participant.objects.create(platform="link", external_id="anon-1")
    OldReceipt.objects.create(key="a" * 32, study=study, participant=worker)

    Receipt = migrate_to(AFTER).get_model("annotations", "ConsentReceipt")
    OldReceipt.objects.create(key="b" * 32, study=study, participant=worker)  # the old code, the new schema
    assert dict(Receipt.objects.values_list("key", "consent_sha256")) == {"a" * 32: "", "b" * 32: ""}
