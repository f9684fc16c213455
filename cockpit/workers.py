"""Review a study's workers: the list of everyone who took a task, and one worker's page with their
answers, accuracy, time, reported problems and tasks, from which the researcher approves, rejects,
pays a bonus or blocks. Every button is a POST that calls the audited platform services
(``annotations.services.platforms``) and needs PAY access to the study; GET changes nothing. The
list's withdrawal form (a participant's withdrawal: ``annotations.services.withdrawal``) needs
change rights on the study."""
from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from annotations.admin.actions import BonusForm, post_action, task_ids
from annotations.models import Assignment, Bonus, Participant, ParticipantLink
from annotations.selectors import study_withdrawals_summary
from annotations.selectors.platforms import assignments_bonus_offered
from annotations.selectors.review import (
    study_attention_failures,
    study_participants,
    study_worker,
    study_workers,
    worker_assignments,
)
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import may_hand_out_links
from annotations.services.platforms.blocks import worker_block
from annotations.services.platforms.bonus import bonus_pay
from annotations.services.platforms.review import (
    assignment_approve,
    assignment_reject,
    submitted_not_here_to_decide,
)
from annotations.services.withdrawal import participant_withdraw
from cockpit.views_common import study_context, study_for
from studies.selectors import CHANGE, PAY, study_user_may


def answers_url(study_id: int, participant_id: int | None = None) -> str:
    url = reverse("admin:annotations_annotation_changelist") + f"?claim__study__id__exact={study_id}"
    return url + (f"&claim__participant__id__exact={participant_id}" if participant_id else "")


def workers_view(model_admin, request, study_id: int):
    study = study_for(request, study_id)
    context = {
        **study_context(model_admin.admin_site, request, study, f"Workers: {study.name}"),
        "workers": study_workers(study=study),
        "attention": study_attention_failures(study=study),
        # The warning names tasks to reject only to who may reject them (the worker page's actions' rule).
        "attention_can_reject": may_hand_out_links(user=request.user, study=study),
        "statuses": Assignment.Status.choices,
        "can_withdraw": study_user_may(user=request.user, study=study, access=CHANGE),
        "withdraw_ways": WITHDRAW_WAYS,
        "withdrawals": study_withdrawals_summary(study=study),
    }
    return TemplateResponse(request, "cockpit/study/workers.html", context)


# How the withdrawal form may name the participant: the service's keyword, the form's label.
WITHDRAW_WAYS = [("pseudonym", "Pseudonym (w_...)"), ("worker_id", "Platform worker id"),
                 ("participant_identifier", "Participant identifier they typed")]


def withdraw_view(model_admin, request, study_id: int):
    """POST only: withdraw the participant the form names (``participant_withdraw``, which checks
    the user's change rights on the study itself), then back to the workers list."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    study = study_for(request, study_id, access=CHANGE)
    way = request.POST.get("way", "")
    if way not in dict(WITHDRAW_WAYS):
        messages.error(request, f"Nothing was done: {way[:40]!r} is not a way to name a participant.")
    else:
        try:
            outcome = participant_withdraw(user=request.user, study=study, **{way: request.POST.get("who", "")})
        except PlatformServiceError as exc:
            messages.error(request, f"Nothing was done: {exc.message}")
        else:
            copies = _copies_note(outcome)
            if outcome.created:
                messages.success(request, f"Participant withdrawn: {outcome.answers_erased} answer(s) of "
                                          f"{outcome.tasks_ended} task(s) erased; their questions go back to the pool "
                                          f"while the study is open. Money already paid is unchanged.{copies}")
            else:
                messages.info(request, f"This participant was already withdrawn: nothing more to erase.{copies}")
    return HttpResponseRedirect(reverse("admin:studies_study_workers", args=[study.pk]))


def _copies_note(outcome) -> str:
    """What the withdrawal did in the copies of the study imported from its bundle here (counts only:
    a copy another researcher owns is not named)."""
    note = ""
    if outcome.copies_withdrawn:
        note += f" Also withdrawn from {outcome.copies_withdrawn} copy(ies) imported from this study's bundle."
    if outcome.copies_not_changeable:
        note += (f" {outcome.copies_not_changeable} more copy(ies) hold this worker but are not yours to change: "
                 "their owners withdraw there by the worker's pseudonym.")
    return note


def _worker(study, participant_id: int) -> Participant:
    return get_object_or_404(study_participants(study=study), pk=participant_id)


def worker_view(model_admin, request, study_id: int, participant_id: int):
    study = study_for(request, study_id)
    participant = _worker(study, participant_id)
    url = reverse("admin:studies_study_worker", args=[study.pk, participant.pk])
    if request.method == "POST":
        study = study_for(request, study_id, access=PAY)
        post_action(request, WORKER_ACTIONS, study, participant)
        return HttpResponseRedirect(url)
    assignments = list(worker_assignments(study=study, participant=participant))
    offered = set(assignments_bonus_offered(study=study).filter(participant=participant).values_list("pk", flat=True))
    # PAY on this study, not run elsewhere: the rule that shows completion codes (``may_hand_out_links``)
    # is the one that offers review, bonus and block (the services refuse them on a study run elsewhere).
    can_pay = may_hand_out_links(user=request.user, study=study)
    context = {
        **study_context(model_admin.admin_site, request, study, "Worker"),
        "record": study_worker(study=study, participant=participant),
        "attention": study_attention_failures(study=study, participant=participant),
        "attention_participant": participant.pk,
        "attention_can_reject": can_pay,  # its tasks to reject, linked to the actions shown below
        # One browser may have used several of the study's links (recognised as this worker).
        "links": list(ParticipantLink.objects.filter(study=study, participant=participant).order_by("id")),
        # Their completion codes (what the worker is paid against) only for those who may hand them out.
        "link_codes_shown": can_pay,
        "assignments": assignments,
        "submitted": [a for a in assignments if a.status == Assignment.Status.SUBMITTED],
        # Submitted on the platform, not here (sync: not_submitted_here / no_answers): reject, or approve once cleared.
        "submitted_not_here": submitted_not_here_to_decide(assignments),
        # What a bonus is offered for: the publish page's rule (``assignments_bonus_offered``), not held
        # and no rejection sent, so the page offers only what ``bonus_pay`` pays.
        "bonusable": [a for a in assignments if a.pk in offered],
        "bonus_kinds": Bonus.Kind.choices,
        # No review, bonus or block on a study run elsewhere (a bundle's copy too): the services
        # refuse them there (``study_imported``, the one rule), so the page offers none.
        "can_pay": can_pay,
        "can_withdraw": study_user_may(user=request.user, study=study, access=CHANGE),
        "answers_url": answers_url(study.pk, participant.pk),
        "workers_url": reverse("admin:studies_study_workers", args=[study.pk]),
        "reward": study.reward,
    }
    return TemplateResponse(request, "cockpit/study/worker.html", context)


def _assignment(request, study, participant, raw: str | None = None) -> Assignment:
    """The task named by the form's ``assignment`` (one whole number), of this study and worker;
    ``PlatformServiceError`` otherwise (the page says so; no 500 for ``abc`` or ``1.5``)."""
    raw = request.POST.get("assignment", "") if raw is None else raw
    ids = task_ids(raw)
    if len(ids) != 1:
        raise PlatformServiceError(f"task {raw[:40]!r} is one task number, not {len(ids)}")
    assignment = Assignment.objects.filter(pk=ids[0], study=study, participant=participant).first()
    if assignment is None:
        raise PlatformServiceError(f"task {ids[0]} is not one of this worker's tasks in this study")
    return assignment


def _approve(request, study, participant) -> str:
    assignment = assignment_approve(user=request.user, study=study, assignment=_assignment(request, study, participant))
    return f"Task {assignment.pk} approved: its reward is paid."


def _reject(request, study, participant) -> str:
    assignment = assignment_reject(user=request.user, study=study, assignment=_assignment(request, study, participant),
                                   feedback=request.POST.get("feedback", ""), category=request.POST.get("category", ""))
    return rejected_message(study, assignment)


def _bonus(request, study, participant) -> str:
    asked = BonusForm(request.POST).asked()
    asked_at = timezone.now()
    bonus = bonus_pay(user=request.user, study=study, assignment=_assignment(request, study, participant, asked.tasks),
                      amount=asked.amount, reason=asked.reason, kind=asked.kind)
    if bonus.created_at < asked_at:  # the same bonus (task, amount, kind, reason) asked before: one row, paid once
        return (f"This bonus of {bonus.amount} {bonus.currency} was asked for before ({bonus.get_status_display()}): "
                "the same bonus is not paid again. A second bonus needs another amount, kind or reason.")
    return f"Bonus of {bonus.amount} {bonus.currency}: {bonus.get_status_display()}."


def _block(request, study, participant) -> str:
    everywhere = request.POST.get("everywhere") == "on"
    worker_block(user=request.user, study=study, participant=participant, reason=request.POST.get("reason", ""),
                 everywhere=everywhere)
    if everywhere:
        return "Worker blocked in every study: they cannot start another task."
    return "Worker blocked in this study and in the other studies you own: they cannot start another task there."


# The worker page's buttons (``annotations.admin.actions.post_action``, as the publish page's):
# each calls the platform service with the acting user and the study; the service checks the right.
WORKER_ACTIONS = {"approve": _approve, "reject": _reject, "bonus": _bonus, "block": _block}


def rejected_message(study, assignment) -> str:
    """What a rejection did: on an open study its questions go back to the pool, on any other
    nobody takes them again."""
    if study.status == study.Status.OPEN:
        return f"Task {assignment.pk} rejected; its questions go back to the pool."
    return (f"Task {assignment.pk} rejected; the study is {study.get_status_display().lower()}, so its questions "
            "are not offered again (its answers no longer count).")


def urls(model_admin) -> list:
    view = model_admin.admin_site.admin_view
    return [
        path("<int:study_id>/workers/", view(lambda r, study_id: workers_view(model_admin, r, study_id)),
             name="studies_study_workers"),
        path("<int:study_id>/workers/withdraw/", view(lambda r, study_id: withdraw_view(model_admin, r, study_id)),
             name="studies_study_withdraw"),
        path("<int:study_id>/workers/<int:participant_id>/",
             view(lambda r, study_id, participant_id: worker_view(model_admin, r, study_id, participant_id)),
             name="studies_study_worker"),
    ]
