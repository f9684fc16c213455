"""Bonuses: the same bonus (assignment, amount, kind, reason) is one ``Bonus`` row, paid once."""
from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from annotations.models import Assignment, Bonus, PlatformCall, Publication
from annotations.platforms import get_platform
from annotations.platforms.base import PlatformError, money
from annotations.services.payments import CallSpec, PlatformServiceError, platform_call_execute
from studies.models import Platform

from .calls import reconciler
from .common import OP, actor, assignment_platform
from .tokens import bonus_token


def bonus_pay(*, assignment: Assignment, amount: Decimal, reason: str, user=None,
              kind: str = Bonus.Kind.OTHER) -> Bonus:
    """Pay ``amount`` to the worker of ``assignment``. The same bonus (assignment, amount, kind,
    reason) is one ``Bonus`` row and is paid once, however often this is called."""
    assignment = Assignment.objects.select_related("participant", "study").get(pk=assignment.pk)
    try:
        amount = Decimal(str(amount))
    except ArithmeticError as exc:
        raise PlatformServiceError(f"bonus amount {amount!r} is not a number") from exc
    if amount <= 0 or amount != money(amount):
        raise PlatformServiceError(f"bonus amount {amount} must be positive with at most two decimals")
    limit = Decimal(str(settings.RL_MAX_BONUS))
    if amount > limit:
        raise PlatformServiceError(f"bonus amount {amount} is above the limit of {limit} (RL_MAX_BONUS)")
    reason = (reason or "").strip()
    if not reason:
        raise PlatformServiceError("a bonus needs a reason the worker will read")
    if kind not in Bonus.Kind.values:
        raise PlatformServiceError(f"bonus kind {kind!r} is not one of {', '.join(Bonus.Kind.values)}")
    if assignment.status not in (Assignment.Status.SUBMITTED, Assignment.Status.APPROVED):
        raise PlatformServiceError(
            f"assignment {assignment.pk} is {assignment.get_status_display().lower()}: bonuses go to submitted "
            "or approved work"
        )
    name = assignment_platform(assignment)
    platform = get_platform(name)
    token = bonus_token(assignment=assignment, amount=amount, kind=kind, reason=reason)
    with transaction.atomic():
        bonus, _ = Bonus.objects.select_for_update().get_or_create(
            token=token,
            defaults={"assignment": assignment, "participant": assignment.participant, "kind": kind,
                      "amount": money(amount), "currency": platform.currency, "reason": reason,
                      "created_by": actor(user)},
        )
        if bonus.status in (Bonus.Status.PAID, Bonus.Status.RECORDED):
            return bonus
        if name == Platform.LINK:
            bonus.status = Bonus.Status.RECORDED
            bonus.save(update_fields=["status"])
            return bonus
    summary = {"platform_assignment_id": assignment.platform_assignment_id,
               "worker_id": assignment.participant.external_id, "amount": str(bonus.amount), "kind": kind,
               "reason": reason[:500]}
    common = {"user": actor(user), "study": assignment.study, "assignment": assignment}
    try:
        if name == Platform.PROLIFIC:
            call = _prolific_bonus(platform=platform, assignment=assignment, bonus=bonus, summary=summary,
                                   common=common)
        else:
            call = platform_call_execute(
                spec=CallSpec(platform=name, operation=OP.BONUS, idempotency_key=f"{name}:bonus:{token}",
                              platform_token=token, amount=bonus.amount, currency=bonus.currency,
                              request_summary=summary, **common),
                send=lambda: platform.bonus(worker_id=assignment.participant.external_id,
                                            platform_assignment_id=assignment.platform_assignment_id,
                                            amount=bonus.amount, reason=reason, token=token),
                reconcile=reconciler(platform),
            )
    except PlatformError as exc:
        Bonus.objects.filter(pk=bonus.pk).update(status=Bonus.Status.FAILED)
        raise PlatformServiceError(f"bonus for assignment {assignment.pk} failed: {exc.message}") from exc
    except PlatformServiceError:
        Bonus.objects.filter(pk=bonus.pk, status=Bonus.Status.PENDING).update(
            platform_call=PlatformCall.objects.filter(idempotency_key=f"{name}:bonus:{token}").first())
        raise
    Bonus.objects.filter(pk=bonus.pk).update(status=Bonus.Status.PAID, paid_at=timezone.now(), platform_call=call)
    bonus.refresh_from_db()
    return bonus


def _prolific_bonus(*, platform, assignment, bonus, summary, common) -> PlatformCall:
    publication = (Publication.objects.filter(study=assignment.study, platform=Platform.PROLIFIC, dry_run=False)
                   .exclude(external_ids=[]).order_by("-batch").first())
    study_external_id = assignment.platform_task_id or (publication.prolific_study_id if publication else "")
    if not study_external_id:
        raise PlatformServiceError(f"assignment {assignment.pk} has no Prolific study id: sync the study first")
    setup = platform_call_execute(
        spec=CallSpec(platform=Platform.PROLIFIC, operation=OP.BONUS_SETUP,
                      idempotency_key=f"{Platform.PROLIFIC}:bonus_setup:{bonus.token}",
                      request_summary={**summary, "study_id": study_external_id}, **common),
        send=lambda: platform.bonus_setup(study_external_id=study_external_id,
                                          submission_id=assignment.platform_assignment_id, amount=bonus.amount),
        reconcile=lambda call: False,  # a set-up bonus moves no money until paid: set it up again
    )
    bulk_id = setup.response["id"]
    Bonus.objects.filter(pk=bonus.pk).update(platform_call=setup)
    return platform_call_execute(
        spec=CallSpec(platform=Platform.PROLIFIC, operation=OP.BONUS,
                      idempotency_key=f"{Platform.PROLIFIC}:bonus:{bonus.token}",
                      amount=bonus.amount, currency=bonus.currency,
                      request_summary={**summary, "bulk_bonus_id": bulk_id}, **common),
        send=lambda: platform.bonus_pay(bulk_id=bulk_id),
        reconcile=reconciler(platform),
    )
