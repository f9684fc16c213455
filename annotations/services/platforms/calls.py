"""What to ask a platform about a call whose answer was lost (a crash, a timeout): was it
applied? Used by every service as the ``reconcile`` of ``payments.platform_call_execute`` and by
sync for the calls left unconfirmed."""
from __future__ import annotations

import datetime as dt

from django.utils import timezone

from annotations.models import Bonus, PlatformCall
from annotations.platforms.base import CrowdPlatform
from annotations.platforms.prolific import bonus_call_settling
from lab.pseudonyms import worker_pseudonym
from studies.models import Platform

from .common import OP

# How long a request may still be on its way after its call was marked sent: the longest a
# platform client waits for one (Prolific's httpx client: 5 s to connect, 30 s to read; MTurk's
# boto client: the same, up to three attempts), with a margin. Within it, a platform that has no
# record of the call is not proof that it was not applied (``call_in_flight``).
REQUEST_IN_FLIGHT = dt.timedelta(seconds=120)
# How sync's note of a failed reconcile starts (``sync``): a note of the app's, not of the call's sender.
RECONCILE_NOTE = "reconcile: "


def call_in_flight(call: PlatformCall) -> bool:
    """Whether ``call``, marked sent, may still be on its way to the platform (or being applied
    there): a Prolific bonus call within its settle window (``prolific.bonus_call_settling``), any
    other sent less than ``REQUEST_IN_FLIGHT`` ago whose sender has not come back. Its lost answer is not decided as not applied
    before then: another attempt would send it again, or count its payment as a sibling's."""
    if call.status != PlatformCall.Status.SENT or call.sent_at is None:
        return False
    if call.operation in (OP.BONUS, OP.BONUS_SETUP) and call.platform == Platform.PROLIFIC:
        return bonus_call_settling(call.sent_at)
    if call.error and not call.error.startswith(RECONCILE_NOTE):
        # Its sender came back with a network error (``payments.platform_call_execute`` keeps it;
        # sync's notes start ``RECONCILE_NOTE``): the platform answered an error, or the client gave up
        # after its timeout. A retry may ask the platform at once.
        return False
    return timezone.now() - call.sent_at < REQUEST_IN_FLIGHT


def reconcile_call(*, platform: CrowdPlatform, call: PlatformCall) -> bool | dict | None:
    """True or a dict (applied; the dict is what could be recovered), False (not applied), None
    (cannot tell yet). See ``payments.platform_call_reconcile``."""
    summary = call.request_summary or {}
    op = call.operation
    # Creating and publishing, like a review decision: the platform's "not there yet" is not
    # "not applied" while the call may still be on its way (``call_in_flight``): decided so, the
    # creation would be sent again (a second study) and its own late answer would find it failed.
    if op == OP.CREATE_HIT:
        found = platform.was_published(spec_token=call.platform_token)
        if found:
            return {"HITId": found.external_id}
        return None if call_in_flight(call) else False
    if op == OP.CREATE_STUDY:
        found = platform.was_published(spec_token=call.idempotency_key.rsplit(":", 1)[-1])
        if found:
            return {"id": found.external_id}
        return None if call_in_flight(call) else False
    if op == OP.PUBLISH_STUDY:
        if platform.get_study(study_id=summary["study_id"]).get("status", "UNPUBLISHED") != "UNPUBLISHED":
            return True
        return None if call_in_flight(call) else False
    if op in (OP.APPROVE, OP.REJECT):
        status = platform.assignment_status(platform_assignment_id=summary["platform_assignment_id"])
        wanted = "approved" if op == OP.APPROVE else "rejected"
        if status == wanted:
            return True
        if status == "submitted":
            # Still on its way (or being applied): not decided yet, so no other attempt sends it again.
            return None if call_in_flight(call) else False
        return None
    if op == OP.BONUS:
        # The summary names the worker by pseudonym (rows written before that by the raw id):
        # the platform is asked with the raw id of the call's assignment's participant.
        assignment = call.assignment
        worker_id = assignment.participant.external_id if assignment is not None else summary.get("worker_id", "")
        siblings = bonus_call_siblings(call=call, worker_id=worker_id)
        if any(call_in_flight(other) for other in siblings):
            # A payment the platform lists may be that sibling's, whose answer is still on its way
            # and will confirm it without asking: nothing is decided until it has settled.
            return None
        # An earlier bonus of the same amount to the same worker on the same assignment shows on
        # the platform too: the platform is told which of those the app already accounts for.
        return platform.bonus_was_paid(worker_id=worker_id,
                                       platform_assignment_id=summary["platform_assignment_id"],
                                       amount=call.amount, token=call.platform_token, sent_at=call.sent_at,
                                       reason=bonus_call_reason(call),
                                       accounted=bonus_calls_accounted(siblings=siblings))
    if op == OP.BONUS_SETUP:
        # A set-up moves no money (only its pay call does), so one not applied is set up again;
        # but one still in flight may answer yet: like a payment (``bonus_was_paid``), it is not
        # decided while it is settling (``prolific.bonus_call_settling``).
        return None if bonus_call_settling(call.sent_at) else False
    if op == OP.ADD_ASSIGNMENTS:
        hit = platform.get_hit(hit_id=summary["hit_id"])
        return hit.get("MaxAssignments", 0) >= summary["target_max_assignments"]
    if op == OP.CREATE_QUALIFICATION:
        qid = platform.find_qualification_type(name=summary["name"])
        return {"QualificationTypeId": qid} if qid else False
    # Blocking, notifying, granting, expiring, stopping: doing it
    # again is harmless, so an unknown outcome is treated as "not applied".
    return False


def bonus_call_token(call: PlatformCall) -> str:
    """The ``Bonus.token`` a bonus call pays (its key is ``<platform>:bonus:<token>``)."""
    return call.idempotency_key.split(":", 2)[-1]


def bonus_call_reason(call: PlatformCall) -> str:
    """The reason ``call`` sent: its bonus's (the audit row keeps only the first 500 characters)."""
    reason = Bonus.objects.filter(token=bonus_call_token(call)).values_list("reason", flat=True).first()
    return reason if reason is not None else (call.request_summary or {}).get("reason", "")


def bonus_call_siblings(*, call: PlatformCall, worker_id: str) -> list[PlatformCall]:
    """Every other bonus call of ``call``'s amount, on its platform, to the same worker
    (``worker_id``, the raw id) on the same platform assignment, whatever its status."""
    platform_assignment_id = (call.request_summary or {}).get("platform_assignment_id", "")
    others = (PlatformCall.objects
              .filter(platform=call.platform, operation=OP.BONUS, amount=call.amount,
                      request_summary__platform_assignment_id=platform_assignment_id)
              .exclude(pk=call.pk).select_related("assignment__participant").order_by("pk"))
    pseudonym = worker_pseudonym(call.platform, worker_id) if worker_id else ""
    out = []
    for other in others:
        summary = other.request_summary or {}
        if other.assignment is not None:
            same_worker = other.assignment.participant.external_id == worker_id
        else:
            same_worker = worker_id in (summary.get("worker"), summary.get("worker_id")) or (
                bool(pseudonym) and summary.get("worker") == pseudonym)
        if same_worker:
            out.append(other)
    return out


def bonus_calls_accounted(*, siblings: list[PlatformCall]) -> list[str]:
    """The reason sent by each of ``siblings`` (``bonus_call_siblings``: the other bonus calls of
    a call's amount to its worker on its platform assignment) that the app has confirmed: the
    payments of that amount the platform lists for those calls, not for the call itself."""
    reasons = {bonus_call_token(other): (other.request_summary or {}).get("reason", "")
               for other in siblings if other.status == PlatformCall.Status.CONFIRMED}
    for token, reason in Bonus.objects.filter(token__in=list(reasons)).values_list("token", "reason"):
        reasons[token] = reason
    return list(reasons.values())


def reconcile_serialise(call: PlatformCall) -> bool:
    """For a bonus call, inside the caller's transaction: lock (by id, so two attempts never
    deadlock) every bonus call on its platform with the same platform assignment, itself included,
    and return True; False for any other call (nothing locked). ``payments.platform_call_reconcile``
    holds these locks while it counts the payments the app's other confirmed bonuses account for
    (``bonus_calls_accounted``) and until it writes this call's outcome: two same-amount bonuses
    reconciled at the same moment (beat's sync and a researcher's retry) are decided one after the
    other, the second seeing the first confirmed, never both on the strength of one payment."""
    if call.operation != OP.BONUS:
        return False
    platform_assignment_id = (call.request_summary or {}).get("platform_assignment_id", "")
    siblings = (PlatformCall.objects.select_for_update()
                .filter(platform=call.platform, operation=OP.BONUS,
                        request_summary__platform_assignment_id=platform_assignment_id)
                .order_by("pk").values_list("pk", flat=True))
    list(siblings)  # evaluated: the rows are locked until the caller's transaction ends
    return True


def reconciler(platform: CrowdPlatform):
    """``reconcile_call`` bound to ``platform``, as ``platform_call_execute`` takes it, with the
    locks that serialise a bonus's reconciliation with its siblings' (``reconcile_serialise``)."""
    def reconcile(call: PlatformCall) -> bool | dict | None:
        return reconcile_call(platform=platform, call=call)

    reconcile.serialise = reconcile_serialise
    return reconcile
