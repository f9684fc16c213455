"""A researcher's review of what workers flagged: accept a flag (a real problem with the question
or the explanation; its assignment becomes eligible for the flagged-error bonus) or dismiss it.
Ticking "report a problem" alone earns nothing."""
from __future__ import annotations

from django.db import transaction

from annotations.models import Annotation, Bonus, FlagReview
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import DECIDE_FLAG, access_study


def _flagged(annotation: Annotation) -> bool:
    return isinstance(annotation.payload, dict) and bool(annotation.payload.get("flag"))


def flag_decide(*, annotation: Annotation, decision: str, user) -> FlagReview:
    """Record the researcher's ``decision`` (accepted / dismissed) on the flag of ``annotation``,
    as ``user``, who needs CHANGE on its study (``access.DECIDE_FLAG``, checked here: an accepted
    flag makes the task eligible for a bonus, whoever calls; ``access.OPERATOR`` for commands).
    Deciding again changes the decision, except that an accepted flag whose bonus was already
    paid stays accepted (the money moved). Refuses an answer that carries no flag."""
    if decision not in FlagReview.Decision.values:
        raise PlatformServiceError(f"decision {decision!r} is not one of {', '.join(FlagReview.Decision.values)}")
    annotation = Annotation.objects.select_related("claim__assignment").get(pk=annotation.pk)
    access_study(user=user, study=annotation.claim.study_id, access=DECIDE_FLAG)
    if not _flagged(annotation):
        raise PlatformServiceError(f"answer {annotation.pk} carries no flag: there is nothing to accept or dismiss")
    with transaction.atomic():
        review = FlagReview.objects.select_for_update().filter(annotation=annotation).first()
        if review is not None and review.decision == decision:
            return review
        if (review is not None and review.decision == FlagReview.Decision.ACCEPTED
                and Bonus.objects.filter(assignment_id=annotation.claim.assignment_id, kind=Bonus.Kind.FLAGGED_ERROR,
                                         status__in=[Bonus.Status.PAID, Bonus.Status.UNKNOWN]).exists()):
            raise PlatformServiceError(
                f"the flag on answer {annotation.pk} was accepted and its bonus paid: it can no longer be dismissed")
        who = user if getattr(user, "pk", None) else None
        review, _ = FlagReview.objects.update_or_create(annotation=annotation,
                                                        defaults={"decision": decision, "decided_by": who})
    return review


def flag_accept(*, annotation: Annotation, user) -> FlagReview:
    return flag_decide(annotation=annotation, decision=FlagReview.Decision.ACCEPTED, user=user)


def flag_dismiss(*, annotation: Annotation, user) -> FlagReview:
    return flag_decide(annotation=annotation, decision=FlagReview.Decision.DISMISSED, user=user)
