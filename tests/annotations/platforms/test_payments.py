"""The audit-and-idempotency core: a key is sent at most once, an unknown outcome is reconciled
before anything is sent again, and a refusal is recorded as failed."""
from __future__ import annotations

from decimal import Decimal

import pytest

from annotations.models import PlatformCall
from annotations.platforms.base import AlreadyDone, PlatformError, PlatformTransientError
from annotations.services.payments import CallOutcomeUnknown, CallSpec, platform_call_execute


def _spec(key: str = "test:op:1") -> CallSpec:
    return CallSpec(platform="mturk", operation="bonus", idempotency_key=key, amount=Decimal("1.00"),
                    request_summary={"worker_id": "AW"})


class Platform:
    """A counter standing in for the far side of the wire, so the test sees what was sent."""

    def __init__(self, *, fail_with: Exception | None = None):
        self.sent = 0
        self.fail_with = fail_with

    def send(self) -> dict:
        self.sent += 1
        if self.fail_with is not None:
            raise self.fail_with
        return {"ok": True}


@pytest.mark.django_db
def test_a_confirmed_key_is_never_sent_again():
    platform = Platform()
    first = platform_call_execute(spec=_spec(), send=platform.send)
    second = platform_call_execute(spec=_spec(), send=platform.send)
    assert platform.sent == 1 and first.pk == second.pk
    assert second.status == "confirmed" and second.response == {"ok": True} and second.attempts == 1


@pytest.mark.django_db
def test_a_refusal_is_recorded_as_failed_and_may_be_retried():
    with pytest.raises(PlatformError):
        platform_call_execute(spec=_spec(), send=Platform(fail_with=PlatformError("no such worker")).send)
    call = PlatformCall.objects.get()
    assert call.status == "failed" and call.error == "no such worker"
    retried = platform_call_execute(spec=_spec(), send=Platform().send)
    assert retried.status == "confirmed" and retried.attempts == 2


@pytest.mark.django_db
def test_a_timeout_leaves_the_call_sent_and_the_retry_reconciles_first():
    with pytest.raises(PlatformTransientError):
        platform_call_execute(spec=_spec(), send=Platform(fail_with=PlatformTransientError("read timeout")).send)
    assert PlatformCall.objects.get().status == "sent"

    platform = Platform()
    unknown = pytest.raises(CallOutcomeUnknown)
    with unknown:
        platform_call_execute(spec=_spec(), send=platform.send, reconcile=lambda call: None)
    assert platform.sent == 0  # cannot tell: nothing sent

    done = platform_call_execute(spec=_spec(), send=platform.send, reconcile=lambda call: True)
    assert platform.sent == 0 and done.status == "confirmed" and done.response["reconciled"] is True


@pytest.mark.django_db
def test_reconciled_as_not_applied_is_sent_again_once():
    with pytest.raises(RuntimeError):
        platform_call_execute(spec=_spec(), send=Platform(fail_with=RuntimeError("killed")).send)
    platform = Platform()
    call = platform_call_execute(spec=_spec(), send=platform.send, reconcile=lambda call: False)
    assert platform.sent == 1 and call.status == "confirmed" and call.attempts == 2


@pytest.mark.django_db
def test_the_platform_saying_already_done_confirms_the_call():
    call = platform_call_execute(spec=_spec(), send=Platform(fail_with=AlreadyDone("token already processed")).send)
    assert call.status == "confirmed" and call.response["already_done"] is True


@pytest.mark.django_db
def test_a_call_in_flight_elsewhere_is_not_sent_twice():
    platform = Platform()
    PlatformCall.objects.create(platform="mturk", operation="bonus", idempotency_key="test:op:1", status="sent",
                                amount=Decimal("1.00"))
    with pytest.raises(CallOutcomeUnknown):
        platform_call_execute(spec=_spec(), send=platform.send)  # no way to reconcile: refuse
    assert platform.sent == 0
