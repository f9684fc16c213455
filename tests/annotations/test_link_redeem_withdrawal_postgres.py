"""A consent on a single-person link read before another browser redeemed it, racing the
withdrawal of the participant that redemption made, takes the row locks in the withdrawal's
order, on PostgreSQL (READ COMMITTED): the worker's row, then the link's.

The withdrawal (``withdrawal.participant_withdraw``) locks the worker's row ``FOR UPDATE`` and
later updates their links (revoked, no participant). The consent locks the link's participant first
only when the link it was given names one (``entry._consent_first``); a link read while unused
names none. Before, ``participant_link_redeem`` locked the link's row, found the participant the
other browser's redemption set, and the consent then waited for that participant's row while it
held the link's: the withdrawal, waiting for the link's row, deadlocked with it ("deadlock
detected", a 500). Now the redemption lets the link's row go, locks its participant, then locks the
row again: it waits for the withdrawal and is refused, the link being withdrawn.

Run with ``DATABASE_URL=postgres://...``; skipped on SQLite (no row locks: writes are serialised)."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client

from annotations.models import Assignment, ConsentReceipt, ParticipantLink, Withdrawal
from annotations.services import withdrawal as withdrawal_service
from annotations.services.entry import PlatformRefs, consent_take, consent_text_sha256
from annotations.services.errors import StudyNotOpen
from annotations.services.links import links_generate
from annotations.services.participants import participant_link_redeem
from annotations.services.platforms.access import OPERATOR
from annotations.services.withdrawal import participant_withdraw
from lab.pseudonyms import worker_pseudonym
from tests.annotations.factories import make_study
from tests.annotations.pages import start
from tests.annotations.test_qualification_race_postgres import WAIT, Step, paused_after, waits_on_a_lock

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

KEY = "k" * 32


@pytest.fixture(autouse=True)
def _needs_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


def test_a_consent_on_a_link_read_before_its_redemption_waits_for_the_withdrawal_and_is_refused(monkeypatch):
    study = make_study(n_items=6, n_sources=1, units_per_task=2, quota=5)
    (link,) = links_generate(study=study, user=OPERATOR, n=1)
    stale = ParticipantLink.objects.get(pk=link.pk)  # read while unused: names no participant
    assert stale.participant_id is None
    start(Client(), f"/w/l/{link.token}/")  # another browser redeems the link and starts its task
    participant = ParticipantLink.objects.get(pk=link.pk).participant
    assert participant is not None

    reached, release = paused_after(withdrawal_service, "_refuse_while_owed", monkeypatch)
    withdrawal = Step(lambda: participant_withdraw(
        user=OPERATOR, study=study, pseudonym=worker_pseudonym(participant.platform, participant.external_id)))
    withdrawal.start()
    assert reached.wait(WAIT)  # the withdrawal holds the worker's row FOR UPDATE, not yet committed
    consented = Step(lambda: consent_take(
        key=KEY, study=study, consent_sha256=consent_text_sha256(study), refs=PlatformRefs(), held_task_id=None,
        completion_code=stale.completion_code, link=stale,
        participant=lambda: participant_link_redeem(link=stale)))
    consented.start()
    try:
        assert waits_on_a_lock(consented), "the consent did not wait for the withdrawal"
    finally:
        release.set()
    outcome = withdrawal.outcome()  # a deadlock fails one of the two with OperationalError
    with pytest.raises(StudyNotOpen) as refused:
        consented.outcome()

    assert refused.value.message == "This link has been withdrawn by the researcher."
    assert outcome.created and outcome.tasks_ended == 1
    assert Withdrawal.objects.filter(study=study).count() == 1
    revoked = ParticipantLink.objects.get(pk=link.pk)
    assert revoked.revoked and revoked.participant_id is None
    assert not ConsentReceipt.objects.filter(key=KEY).exists()
    assert not Assignment.objects.filter(study=study, participant=participant).exclude(
        status=Assignment.Status.WITHDRAWN).exists()
