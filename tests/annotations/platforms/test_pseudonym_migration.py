"""Issue 20, item 9: audit rows written before keys and summaries carried pseudonyms are
rewritten by migration 0011 (no raw worker id left to list or search), and the keys that guard
money do not change, so a payment retried after the upgrade finds its row and is not sent again."""
from __future__ import annotations

import pytest

from lab.pseudonyms import worker_pseudonym

BEFORE = [("annotations", "0010_worker_block")]
AFTER = [("annotations", "0011_platform_call_pseudonyms")]


@pytest.mark.django_db(transaction=True)
def test_old_audit_rows_name_workers_by_pseudonym_after_the_migration(migrate_to):
    old = migrate_to(BEFORE)
    calls = old.get_model("annotations", "PlatformCall")
    rows = {
        "block": calls.objects.create(platform="mturk", operation="block", idempotency_key="mturk:block:AVICTIM1",
                                      status="confirmed", request_summary={"worker_id": "AVICTIM1", "reason": "Spam."}),
        "grant": calls.objects.create(platform="mturk", operation="associate_qualification", status="confirmed",
                                      idempotency_key="mturk:qualgrant:3QUALAAAAAAAAAAAAAAAAAAAAAAAAA:AVICTIM1",
                                      request_summary={"worker_id": "AVICTIM1", "value": 100}),
        "bonus": calls.objects.create(platform="mturk", operation="bonus", idempotency_key="mturk:bonus:rlb1-a7-abc",
                                      status="sent", request_summary={"worker_id": "AVICTIM1", "amount": "0.50",
                                                                      "platform_assignment_id": "3ASGAAAA"}),
    }

    new = migrate_to(AFTER).get_model("annotations", "PlatformCall")

    pseudonym = worker_pseudonym("mturk", "AVICTIM1")
    after = {name: new.objects.get(pk=row.pk) for name, row in rows.items()}
    assert after["block"].idempotency_key == f"mturk:block:{pseudonym}"
    assert after["grant"].idempotency_key == f"mturk:qualgrant:3QUALAAAAAAAAAAAAAAAAAAAAAAAAA:{pseudonym}"
    assert after["bonus"].idempotency_key == "mturk:bonus:rlb1-a7-abc"  # the key that guards money is kept
    for row in after.values():
        assert "AVICTIM1" not in row.idempotency_key + str(row.request_summary)
        assert row.request_summary["worker"] == pseudonym
