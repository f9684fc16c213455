"""What to ask a platform about a call whose answer was lost (a crash, a timeout): was it
applied? Used by every service as the ``reconcile`` of ``payments.platform_call_execute`` and by
sync for the calls left unconfirmed."""
from __future__ import annotations

from annotations.models import PlatformCall
from annotations.platforms.base import CrowdPlatform

from .common import OP


def reconcile_call(*, platform: CrowdPlatform, call: PlatformCall) -> bool | dict | None:
    """True or a dict (applied; the dict is what could be recovered), False (not applied), None
    (cannot tell yet). See ``payments.platform_call_reconcile``."""
    summary = call.request_summary or {}
    op = call.operation
    if op == OP.CREATE_HIT:
        found = platform.was_published(spec_token=call.platform_token)
        return {"HITId": found.external_id} if found else False
    if op == OP.CREATE_STUDY:
        found = platform.was_published(spec_token=call.idempotency_key.rsplit(":", 1)[-1])
        return {"id": found.external_id} if found else False
    if op == OP.PUBLISH_STUDY:
        return platform.get_study(study_id=summary["study_id"]).get("status", "UNPUBLISHED") != "UNPUBLISHED"
    if op in (OP.APPROVE, OP.REJECT):
        status = platform.assignment_status(platform_assignment_id=summary["platform_assignment_id"])
        wanted = "approved" if op == OP.APPROVE else "rejected"
        if status == wanted:
            return True
        return False if status == "submitted" else None
    if op == OP.BONUS:
        # The summary names the worker by pseudonym (rows written before that by the raw id):
        # the platform is asked with the raw id of the call's assignment's participant.
        assignment = call.assignment
        worker_id = assignment.participant.external_id if assignment is not None else summary.get("worker_id", "")
        return platform.bonus_was_paid(worker_id=worker_id,
                                       platform_assignment_id=summary["platform_assignment_id"],
                                       amount=call.amount, token=call.platform_token, sent_at=call.sent_at)
    if op == OP.ADD_ASSIGNMENTS:
        hit = platform.get_hit(hit_id=summary["hit_id"])
        return hit.get("MaxAssignments", 0) >= summary["target_max_assignments"]
    if op == OP.CREATE_QUALIFICATION:
        qid = platform.find_qualification_type(name=summary["name"])
        return {"QualificationTypeId": qid} if qid else False
    # Setting up a Prolific bonus, blocking, notifying, granting, expiring, stopping: doing it
    # again is harmless, so an unknown outcome is treated as "not applied".
    return False


def reconciler(platform: CrowdPlatform):
    """``reconcile_call`` bound to ``platform``, as ``platform_call_execute`` takes it."""
    return lambda call: reconcile_call(platform=platform, call=call)
