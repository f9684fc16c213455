"""A worker's withdrawal and a researcher's block of them.

- The block stays, as it covers the researcher's other studies too, but its reason (what the
  researcher wrote of the worker) goes with the worker's data: before, it was kept word for word,
  and bundles carried it into copies.
- A block made while the worker withdraws is refused as one made after: before, its check that the
  worker took part ran before it locked the worker's row, so it could write a block naming a worker
  whose withdrawal had just committed."""
from __future__ import annotations

from decimal import Decimal

import pytest

from annotations.models import WorkerBlock
from annotations.services.assignment import assignment_start
from annotations.services.errors import ParticipantBlocked
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms import blocks as blocks_service
from annotations.services.platforms.blocks import worker_block
from annotations.services.withdrawal import BLOCK_REASON_ERASED, participant_withdraw
from tests.annotations.factories import make_study
from tests.annotations.platforms.conftest import start_assignment
from tests.cockpit.conftest import staff_client

pytestmark = pytest.mark.django_db

REASON = "Typed nonsense ('asdf') in every answer."


def _working(owner, name):
    study = make_study(n_items=4, n_sources=1, quota=3, units_per_task=2, reward=Decimal("1.00"), owner=owner,
                       name=name)
    return study, start_assignment(study, platform="prolific", worker_id="p_worker", assignment_id="s_worker")


def test_a_withdrawal_keeps_the_block_and_erases_what_it_says_of_the_worker():
    alice, _ = staff_client("alice")
    study, task = _working(alice, "first")
    other = make_study(n_items=2, n_sources=1, owner=alice, name="second")
    block = worker_block(user=alice, study=study, participant=task.participant, reason=REASON)

    participant_withdraw(user=alice, study=study, worker_id="p_worker")

    block.refresh_from_db()
    assert block.reason == BLOCK_REASON_ERASED
    with pytest.raises(ParticipantBlocked):  # still blocked in the researcher's other studies
        assignment_start(study=other, participant=task.participant, consented=True)


def test_a_block_made_while_the_worker_withdraws_is_refused(monkeypatch):
    alice, _ = staff_client("alice")
    study, task = _working(alice, "first")
    made_by = blocks_service.actor

    def withdrawn_meanwhile(user):  # between the block's first check and its transaction
        participant_withdraw(user=alice, study=study, worker_id="p_worker")
        return made_by(user)

    monkeypatch.setattr(blocks_service, "actor", withdrawn_meanwhile)

    with pytest.raises(PlatformServiceError, match="withdrew from study"):
        worker_block(user=alice, study=study, participant=task.participant, reason=REASON)
    assert not WorkerBlock.objects.exists()
