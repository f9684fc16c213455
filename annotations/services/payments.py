"""The audit-and-idempotency core of every platform call that changes state or moves money.

``platform_call_execute`` is the only way the platform services talk to a platform:

1. Find or create the ``PlatformCall`` row for a deterministic ``idempotency_key`` under a row
   lock. ``confirmed`` -> return it, nothing is sent.
2. ``sent`` (an earlier attempt whose answer was never recorded: a crash, a timeout) ->
   ask the platform (``reconcile``) whether it was applied. Applied -> mark confirmed, return.
   Not applied -> send again. Cannot tell yet -> raise ``CallOutcomeUnknown``; nothing is sent.
3. Mark the row ``sent`` and COMMIT, then send (with the platform's own idempotency token
   where it has one), then mark it ``confirmed`` with the response.

A refusal by the platform marks the row ``failed`` (not applied, safe to retry); a network
error or a crash leaves it ``sent`` for the next attempt or the next sync to reconcile (never
decided "not applied" while its request may still be on its way: ``calls.call_in_flight``); an
approval or rejection that answers "applied" after it was marked failed is recorded confirmed
(``LATE_CONFIRMED``), and what marking it failed undid (a rejection's hold) is put back with it.
The money therefore moves at most once per key, even when the platform call itself is not
idempotent (Prolific's bonus pay).

Precondition: call outside any ``transaction.atomic`` block, so the ``sent`` row is durable
before the request leaves.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from annotations.models import PlatformCall
from annotations.platforms.base import AlreadyDone, PlatformError, PlatformTransientError

logger = logging.getLogger(__name__)


class PlatformServiceError(Exception):
    """A domain error of the crowd-platform services, with a message the researcher can act on."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class CallOutcomeUnknown(PlatformServiceError):
    """An earlier attempt was sent and the platform cannot yet say whether it was applied.
    Nothing was sent this time; try again after the platform settles (or the next sync)."""


@dataclass
class CallSpec:
    platform: str
    operation: str
    idempotency_key: str
    platform_token: str = ""
    amount: Decimal = Decimal("0")
    currency: str = "USD"
    request_summary: dict | None = None
    user: Any = None
    study: Any = None
    publication: Any = None
    assignment: Any = None
    # Text to replace in what is stored of the call (error, response): a worker's raw platform id
    # -> their pseudonym, so the audit, read by researchers who may not see raw ids, names none.
    redact: dict[str, str] | None = None


def _redacted(value: Any, redact: dict[str, str] | None) -> Any:
    if not redact:
        return value
    if isinstance(value, str):
        for raw, shown in redact.items():
            if raw:
                value = value.replace(raw, shown)
        return value
    if isinstance(value, dict):
        return {_redacted(k, redact): _redacted(v, redact) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v, redact) for v in value]
    return value


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def _lock(call_id: int) -> PlatformCall:
    return PlatformCall.objects.select_for_update().get(pk=call_id)


def platform_call_execute(
    *,
    spec: CallSpec,
    send: Callable[[], dict],
    reconcile: Callable[[PlatformCall], bool | dict | None] | None = None,
    guard: Callable[[], str] | None = None,
) -> PlatformCall:
    """Send at most once per ``spec.idempotency_key``; see the module docstring. ``guard``: the
    caller's last check, run in the transaction that marks the call sent, after its row is locked
    (take further locks there, in that order: the call's row, then others); it returns why the call
    must not be sent ("" to send it). A refusal is recorded as the call's error, nothing is sent,
    and ``PlatformServiceError`` is raised with it. Its locks are held until the call is recorded
    sent, so a contrary call checked under the same lock sees this one sent."""
    with transaction.atomic():
        call, created = PlatformCall.objects.select_for_update().get_or_create(
            idempotency_key=spec.idempotency_key,
            defaults={
                "platform": spec.platform,
                "operation": spec.operation,
                "platform_token": spec.platform_token[:64],
                "amount": spec.amount,
                "currency": spec.currency,
                "request_summary": _json_safe(spec.request_summary or {}),
                "user": spec.user if getattr(spec.user, "pk", None) else None,
                "study": spec.study,
                "publication": spec.publication,
                "assignment": spec.assignment,
                "status": PlatformCall.Status.FAILED,  # becomes "sent" just below, before sending
            },
        )
        if not created and call.status == PlatformCall.Status.CONFIRMED:
            return call
    if not created and call.status == PlatformCall.Status.SENT:
        applied = platform_call_reconcile(call=call, reconcile=reconcile)
        if applied is True:
            call.refresh_from_db()
            return call
        if applied is None:
            when = f" at {call.sent_at:%Y-%m-%d %H:%M}" if call.sent_at else ""
            raise CallOutcomeUnknown(
                f"{call.get_operation_display()} ({call.idempotency_key}) was sent{when} and the platform cannot "
                "yet say whether it went through; nothing was sent again. Try again later: the next sync "
                "reconciles it."
            )
    with transaction.atomic():
        call = _lock(call.pk)
        if call.status == PlatformCall.Status.CONFIRMED:  # a concurrent attempt finished first
            return call
        if call.status == PlatformCall.Status.SENT:  # a concurrent attempt is sending right now
            raise CallOutcomeUnknown(
                f"{call.get_operation_display()} ({call.idempotency_key}) is being sent by another attempt; "
                "nothing was sent again"
            )
        refusal = guard() if guard is not None else ""
        if refusal:
            call.error = _redacted(refusal, spec.redact)[:2000]
            call.save(update_fields=["error", "updated_at"])
        else:
            PlatformCall.STATUS.move(call, PlatformCall.Status.SENT, attempts=call.attempts + 1,
                                     sent_at=timezone.now(), error="")
    if refusal:
        raise PlatformServiceError(refusal)
    # The "sent" row is committed: from here on a crash is recoverable by reconcile.
    try:
        response = send()
    except AlreadyDone as exc:
        response = {"already_done": True, **exc.result, "message": str(exc)[:500]}
    except PlatformTransientError as exc:
        with transaction.atomic():
            call = _lock(call.pk)
            call.error = _redacted(exc.message, spec.redact)[:2000]
            call.save(update_fields=["error", "updated_at"])
        raise
    except PlatformError as exc:
        with transaction.atomic():
            call = _lock(call.pk)
            PlatformCall.STATUS.move(call, PlatformCall.Status.FAILED,
                                     error=_redacted(exc.message, spec.redact)[:2000],
                                     response=_redacted(_json_safe(exc.response), spec.redact))
        raise
    return platform_call_confirm(call=call, response=_redacted(_json_safe(response or {}), spec.redact))


# Operations whose answer "applied", arriving after reconciliation marked the row failed (the
# platform had no record of it yet), is recorded confirmed: a review decision, or publishing a
# Prolific study, which the platform applies once whichever attempt sent it. Any other such answer
# raises ``TransitionError`` as before: a Prolific bonus set-up's late record is never paid
# (``platforms.bonus._prolific_bonus``); a creation (a study, a HIT) is not one of these, as a
# second attempt creates a second one (``platforms.publish._publication_send`` records the error).
LATE_CONFIRMED = frozenset({PlatformCall.Operation.APPROVE, PlatformCall.Operation.REJECT,
                            PlatformCall.Operation.PUBLISH_STUDY})
# Sent (``call=``) inside the transaction that confirms such a call: the service owning its
# decision puts back there what was undone when it was marked not applied (a rejection's hold:
# ``platforms.review.reject_confirmed_late``, the counterpart of ``reject_not_applied``). A receiver
# that raises rolls the confirmation back with it.
call_confirmed_late = Signal()


def platform_call_confirm(*, call: PlatformCall, response: dict) -> PlatformCall:
    """Record that ``call`` was applied. An approval or rejection marked failed meanwhile
    (``LATE_CONFIRMED``) is confirmed all the same, since the platform applied it: its response
    notes what it had been marked, and the row goes back through ``sent``, the one way its status
    machine reaches ``confirmed``; what marking it failed undid is put back in the same transaction
    (``call_confirmed_late``)."""
    with transaction.atomic():
        call = _lock(call.pk)
        response = _json_safe(response or {})
        late = call.status == PlatformCall.Status.FAILED and call.operation in LATE_CONFIRMED
        if late:
            response = {**response, "confirmed_after_failed": call.error or "marked failed"}
            PlatformCall.STATUS.move(call, PlatformCall.Status.SENT)
            logger.warning("platform call %s %s %s answered applied after it was marked failed: %s",
                           call.platform, call.operation, call.idempotency_key, response["confirmed_after_failed"])
        PlatformCall.STATUS.move(call, PlatformCall.Status.CONFIRMED, confirmed_at=timezone.now(),
                                 response=response, error="")
        if late:
            call_confirmed_late.send(sender=PlatformCall, call=call)
    logger.info("platform call confirmed: %s %s %s", call.platform, call.operation, call.idempotency_key)
    return call


def platform_call_note_error(*, call: PlatformCall, error: str) -> None:
    """Keep ``error`` on the audit row of ``call`` without changing its status (an unknown
    outcome stays unknown), so the admin shows why it is still unresolved."""
    with transaction.atomic():
        locked = _lock(call.pk)
        locked.error = error[:2000]
        locked.save(update_fields=["error", "updated_at"])


def platform_call_reconcile(
    *, call: PlatformCall, reconcile: Callable[[PlatformCall], bool | dict | None] | None
) -> bool | None:
    """Ask the platform about a ``sent`` call. ``reconcile`` answers True or a dict (applied; the
    dict is what could be recovered, e.g. the HIT id), False (not applied) or None (cannot tell).
    Returns True: confirmed now. False: marked failed (safe to send again). None: left ``sent``.

    A ``reconcile`` with a ``serialise`` attribute (``platforms.calls.reconciler``) serialises the
    calls whose answer depends on their siblings' outcomes: ``serialise(call)`` takes, inside one
    transaction, the row locks it needs and returns True (False: nothing to serialise for this call,
    and it is reconciled as any other). That transaction holds them while the platform is asked and
    until the outcome is written, so a sibling's reconciliation at the same moment (beat's sync
    and a researcher's retry) waits and then reads this one's outcome (a bonus: the payments the
    app's confirmed calls already account for, ``calls.bonus_calls_accounted``)."""
    if reconcile is None:
        return None
    serialise = getattr(reconcile, "serialise", None)
    if serialise is not None:
        with transaction.atomic():
            if serialise(call):
                locked = _lock(call.pk)
                if locked.status == PlatformCall.Status.CONFIRMED:  # reconciled meanwhile by another attempt
                    return True
                if locked.status != PlatformCall.Status.SENT:
                    return False
                return _reconcile_and_record(call=locked, reconcile=reconcile)
    return _reconcile_and_record(call=call, reconcile=reconcile)


def _reconcile_and_record(*, call: PlatformCall, reconcile: Callable[[PlatformCall], bool | dict | None]
                          ) -> bool | None:
    try:
        applied = reconcile(call)
    except PlatformTransientError:
        return None
    if applied is True or isinstance(applied, dict):
        recovered = applied if isinstance(applied, dict) else {}
        platform_call_confirm(call=call, response={**(call.response or {}), **recovered, "reconciled": True})
        return True
    if applied is False:
        with transaction.atomic():
            locked = _lock(call.pk)
            if locked.status == PlatformCall.Status.SENT:
                PlatformCall.STATUS.move(locked, PlatformCall.Status.FAILED,
                                         error="reconciled: the platform has no record of it; safe to send again")
        return False
    return None
