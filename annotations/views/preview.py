"""A researcher's preview of a study's task, page by page, exactly as a worker gets it.

Staff only (``/w/preview/<study id>/``), and only for a study the user may see. The task is chosen by the real assignment rule: inside a
transaction that is rolled back, the study's units are built (a draft) and ``assignment_start``
runs for a throwaway participant, so the preview shows a task a new worker could get now (no
question twice, the source mix, the attention checks in their places) and records nothing: no
participant, assignment, claim, answer or unit survives and no quota moves. The chosen task
travels, signed, in the preview's links (``?task=...&n=<claim index>&step=<step>``), so every
page shows the same task; the pages are the worker templates, rendered by the worker pages' own
step builder (``selectors.step_view``). Every page is a GET; the question form submits by GET to
the next preview page.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from random import Random
from urllib.parse import urlencode

from django.contrib.admin.views.decorators import staff_member_required
from django.core import signing
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from annotations.models import Annotation, AttentionCheck, Claim, Participant, Unit
from annotations.selectors import StepView, step_view
from annotations.selectors.cost import questions_per_task
from annotations.services.assignment import assignment_start
from annotations.services.errors import AnnotationError
from annotations.services.steps import steps_for
from annotations.services.units import study_units_build
from studies.models import GeneralizationQuestion, Item, Platform, Rationale, RationaleSource, Study
from studies.selectors import studies_for_user

Step = Annotation.Step
UNKNOWN_FIRST_ANSWER = "(the answer chosen on the previous page)"
_SALT = "annotations.preview"


@dataclass
class PreviewPage:
    """What step.html reads of ``page`` (``selectors.Page`` without an assignment)."""

    state: str
    step: StepView | None = None
    n_done: int = 0
    total: int = 0


class NothingToPreview(Exception):
    """The rule gives a new worker no task (the message says why)."""


def preview_task(*, study: Study, rng: Random | None = None) -> list[list]:
    """The task a new worker would get now, chosen by ``assignment_start`` inside a transaction
    that is rolled back. Returns its claims in order: ``["u", item, source, rationale,
    generalization question]`` (ids, 0 for none) or ``["a", attention check id]``. Raises
    ``NothingToPreview``."""
    if study.status == Study.Status.CLOSED:
        raise NothingToPreview("This study is closed: it gives no task any more.")
    with transaction.atomic():
        try:
            study = Study.objects.get(pk=study.pk)
            if study.status == Study.Status.DRAFT:
                study_units_build(study=study)  # what opening it will build
                # Saved: the claim reads the status again under its lock (rolled back with the rest).
                Study.STATUS.move(study, Study.Status.OPEN)
            participant = Participant.objects.create(platform=Platform.LINK,
                                                     external_id=f"preview-{secrets.token_hex(8)}")
            assignment = assignment_start(study=study, participant=participant, consented=True, rng=rng)
            task = [
                ["a", c.attention_check_id] if c.attention_check_id else
                ["u", c.unit.item_id, c.unit.source_id or 0, c.unit.rationale_id or 0,
                 c.unit.generalization_question_id or 0]
                for c in Claim.objects.filter(assignment=assignment).select_related("unit").order_by("position")
            ]
        except AnnotationError as error:
            raise NothingToPreview(error.message) from error
        finally:
            transaction.set_rollback(True)
    return task


def _claim(entry: list) -> Claim:
    """An unsaved claim with what a step page shows, from one entry of a preview task."""
    if entry[0] == "a":
        return Claim(attention_check=AttentionCheck.objects.get(pk=entry[1]))
    _, item_id, source_id, rationale_id, genq_id = entry
    unit = Unit(
        item=Item.objects.get(pk=item_id),
        source=RationaleSource.objects.get(pk=source_id) if source_id else None,
        rationale=Rationale.objects.get(pk=rationale_id) if rationale_id else None,
        generalization_question=GeneralizationQuestion.objects.get(pk=genq_id) if genq_id else None,
    )
    return Claim(unit=unit)


def _url(study: Study, **params) -> str:
    return reverse("annotations:preview", args=[study.pk]) + ("?" + urlencode(params) if params else "")


def _steps(study: Study, entry: list) -> tuple[str, ...]:
    return tuple(steps_for(kind=study.kind, is_attention_check=entry[0] == "a"))


def _next(study: Study, task: list[list], n: int, step: str) -> tuple[int, str] | None:
    steps = _steps(study, task[n])
    if step in steps and steps.index(step) + 1 < len(steps):
        return n, steps[steps.index(step) + 1]
    if n + 1 < len(task):
        return n + 1, _steps(study, task[n + 1])[0]
    return None


def _int(value: str | None) -> int:
    try:
        return max(0, int(value or 0))
    except ValueError:
        return 0


def _message(request, context, title: str, message: str) -> HttpResponse:
    return _respond(render(request, "annotations/message.html", {**context, "title": title, "message": message}))


@never_cache
@staff_member_required
@require_GET
def preview_view(request: HttpRequest, study_id: int) -> HttpResponse:
    # A study the user may not see is a 404, as in the admin and the API (issue 10 item 9).
    study = get_object_or_404(studies_for_user(user=request.user), pk=study_id)
    context = {"study": study, "researcher_preview": True, "preview_restart_url": _url(study)}
    try:
        task = signing.loads(request.GET.get("task", ""), salt=f"{_SALT}:{study.pk}")
    except signing.BadSignature:
        task = None
    if task is None:
        try:
            task = preview_task(study=study)
        except NothingToPreview as error:
            if request.GET.get("step"):
                return _message(request, context, "Nothing to preview", str(error))
            context["preview_message"] = str(error)
            context["questions"] = questions_per_task(study=study)
            return _respond(render(request, "annotations/landing.html", context))
        signed = signing.dumps(task, salt=f"{_SALT}:{study.pk}", compress=True)
        if not request.GET.get("step"):  # the consent page, then the task's first page
            context["questions"] = len(task)  # as the task's pages count them ("Question 1 of N")
            context["preview_next_url"] = _url(study)
            context["preview_next_params"] = [("task", signed), ("n", 0), ("step", _steps(study, task[0])[0])]
            return _respond(render(request, "annotations/landing.html", context))
    else:
        signed = request.GET["task"]
    n = _int(request.GET.get("n"))
    if n >= len(task):
        return _message(request, context, "End of preview",
                        f"End of preview: that was the last of the {len(task)} question(s) of this task.")
    steps = _steps(study, task[n])
    step = request.GET.get("step") if request.GET.get("step") in steps else steps[0]
    claim = _claim(task[n])
    given = request.GET.get("answer", "")
    view = step_view(claim=claim, step=step, kind=study.kind, answers={Step.BEFORE: given}, number=n + 1,
                     total=len(task))
    if step == Step.AFTER and given not in {choice["label"] for choice in view.choices}:
        view.first_answer_text = UNKNOWN_FIRST_ANSWER
    following = _next(study, task, n, step)
    next_n, next_step = following if following else (len(task), steps[0])
    context.update({
        "page": PreviewPage(state="step", step=view, n_done=n, total=len(task)),
        "preview_next_url": _url(study),
        "preview_next_params": [("task", signed), ("n", next_n), ("step", next_step)],
        "preview_skip_url": _url(study, task=signed, n=next_n, step=next_step),
    })
    return _respond(render(request, "annotations/step.html", context))


def _respond(response: HttpResponse) -> HttpResponse:
    response["Referrer-Policy"] = "same-origin"
    return response
