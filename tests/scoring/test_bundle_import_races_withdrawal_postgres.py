"""A withdrawal from a study while a copy of it is being imported from its bundle reaches the copy.

The import reads the original's withdrawals at its start and writes the copy for the length of its
transaction. A withdrawal committed meanwhile looked for the original's copies, found none (the copy
was not committed yet) and said so (``copies_withdrawn`` 0); the import then committed a copy that
held the worker's tasks and answers. The import now holds the original's ``WITHDRAWAL_LOCK`` shared
until it commits: the withdrawal waits for it, then withdraws the worker from the copy too.

Run with ``DATABASE_URL=postgres://...``; skipped on SQLite (its IMMEDIATE transactions serialise
the two)."""
from __future__ import annotations

import io

import pytest
from django.db import connection

from annotations.models import Assignment
from annotations.services.withdrawal import participant_withdraw
from scoring.services.bundle import bundle_import, bundle_stream, importing
from tests.annotations.test_qualification_race_postgres import WAIT, Step, paused_after, waits_on_a_lock
from tests.scoring.test_bundle_snapshot import _worked

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_a_withdrawal_while_a_copy_is_imported_waits_for_it_and_withdraws_the_worker_from_it(monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    alice, _, study = _worked("original", workers=("W1", "W2", "W3"))
    data = b"".join(bundle_stream(study=study, user=alice))  # made before the withdrawal: W1 is in it

    reached, release = paused_after(importing._Import, "original_withdrawals", monkeypatch)
    imported = Step(lambda: bundle_import(file=io.BytesIO(data), name="copy", owner=alice))
    imported.start()
    assert reached.wait(WAIT)  # the import read the original's withdrawals and goes on writing
    withdrawn = Step(lambda: participant_withdraw(user=alice, study=study, worker_id="W1"))
    withdrawn.start()
    try:
        assert waits_on_a_lock(withdrawn), "the withdrawal did not wait for the import"
    finally:
        release.set()
    copy = imported.outcome()
    outcome = withdrawn.outcome()

    assert outcome.created and outcome.copies_withdrawn == 1
    live = Assignment.objects.filter(study=copy).exclude(status=Assignment.Status.WITHDRAWN)
    assert live.count() == 2  # W2's and W3's; W1's is withdrawn from the copy as from the original
    assert not Assignment.objects.filter(study=study, participant__external_id="W1").exclude(
        status=Assignment.Status.WITHDRAWN).exists()
