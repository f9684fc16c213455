"""A researcher's preview of a study's task, page by page, exactly as a worker gets it.

Staff only (``/w/preview/<study id>/``), and only for a study the user may see. The task is chosen by the real assignment rule: inside a
transaction that is rolled back, the study's units are built (a draft) and ``assignment_start``
runs for a throwaway participant, so the preview shows a task a new worker could get now (no
question twice, the source mix, the attention checks in their places) and records nothing: no
participant, assignment, claim, answer or unit survives and no quota moves. The chosen task
travels, signed, in the preview's links (``?task=...&n=<claim index>&step=<step>``), so every
page shows the same task; the pages are the worker templates, rendered by the worker pages' own
step builder (``selectors.step_view``). Every page is a GET; the question form submits by GET to
the next preview page. As a worker's pages do, the consent page says how long the task allows
(``worker_pages.time_allowed``), a study with a qualification test shows it after the consent
(``?step=qualification``, its questions read as the worker's page reads them), and every page of
the task says its deadline (``worker_pages.task_deadline``, for a task consented to now).

A link is good for ``PREVIEW_LINK_MAX_AGE``, and every page reads its question's rows through the
study as it is now (``selectors.preview.preview_claim``): a link older than that, or one naming a
row that has left the study since (a source taken off a draft, a deleted attention check), starts
a fresh preview with a note saying why, instead of showing what the study no longer holds. Who may
preview is checked on every page, whatever the link.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import timedelta
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

from annotations.models import Annotation, Claim, Participant, QualificationTest
from annotations.selectors import StepView, step_view
from annotations.selectors.cost import questions_per_task
from annotations.selectors.preview import PreviewOutdated, preview_claim, preview_qualification
from annotations.services.assignment import assignment_start
from annotations.services.errors import AnnotationError
from annotations.services.steps import steps_for
from annotations.services.units import study_units_build
from annotations.worker_pages import task_deadline, time_allowed
from studies.models import Platform, Study
from studies.selectors import studies_for_user

Step = Annotation.Step
UNKNOWN_FIRST_ANSWER = "(the answer chosen on the previous page)"
QUALIFICATION = "qualification"  # the ``step`` of the test's page (``?n=0&step=qualification``)
_SALT = "annotations.preview"
# How long a preview link (its signed task) opens: long enough for a researcher to go through a
# task, short enough that a link passed on or left in a history shows nothing for long.
PREVIEW_LINK_MAX_AGE = timedelta(hours=24)


@dataclass
class PreviewPage:
    """What step.html and qualification.html read of ``page`` (``selectors.Page`` without an
    assignment)."""

    state: str
    step: StepView | None = None
    n_done: int = 0
    total: int = 0
    qualification: QualificationTest | None = None
    qualification_questions: list[dict] = field(default_factory=list)


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


def _link_task(study: Study, signed: str) -> tuple[list | None, str]:
    """The task a preview link carries, and why there is none where it has expired (a bad or
    another study's signature: none, and no reason, as before)."""
    try:
        return signing.loads(signed, salt=f"{_SALT}:{study.pk}", max_age=PREVIEW_LINK_MAX_AGE), ""
    except signing.SignatureExpired:
        hours = int(PREVIEW_LINK_MAX_AGE.total_seconds() // 3600)
        return None, (f"This preview link was made more than {hours} hours ago, so it no longer opens. "
                      "Here is a fresh preview of the task a new worker would get now.")
    except signing.BadSignature:
        return None, ""


def _changed(error: PreviewOutdated) -> str:
    return (f"This study has changed since this preview link was made ({error}). "
            "Here is a fresh preview of the task a new worker would get now.")


@never_cache
@staff_member_required
@require_GET
def preview_view(request: HttpRequest, study_id: int) -> HttpResponse:
    # A study the user may not see is a 404, as in the admin and the API (issue 10 item 9).
    study = get_object_or_404(studies_for_user(user=request.user), pk=study_id)
    context = {"study": study, "researcher_preview": True, "preview_restart_url": _url(study)}
    n = _int(request.GET.get("n"))
    task, notice = _link_task(study, request.GET.get("task", ""))
    claim = None
    if task is not None and n < len(task):
        try:
            claim = preview_claim(study=study, entry=task[n], number=n + 1)
        except PreviewOutdated as error:
            task, notice = None, _changed(error)
    if task is None:
        try:
            task = preview_task(study=study)
        except NothingToPreview as error:
            if request.GET.get("step"):
                return _message(request, context, "Nothing to preview", " ".join(filter(None, [notice, str(error)])))
            context["preview_message"] = " ".join(filter(None, [notice, str(error)]))
            context["questions"] = questions_per_task(study=study)
            context["time_allowed"] = time_allowed(study)
            return _respond(render(request, "annotations/landing.html", context))
        signed = signing.dumps(task, salt=f"{_SALT}:{study.pk}", compress=True)
        if notice or not request.GET.get("step"):  # the consent page, then the task's first page
            context["preview_message"] = notice
            context["questions"] = len(task)  # as the task's pages count them ("Question 1 of N")
            context["time_allowed"] = time_allowed(study)  # as a worker's landing page tells it
            context["preview_next_url"] = _url(study)
            # A new worker's task waits for the study's test, if it has one, before its first question.
            first = QUALIFICATION if preview_qualification(study=study) else _steps(study, task[0])[0]
            context["preview_next_params"] = [("task", signed), ("n", 0), ("step", first)]
            return _respond(render(request, "annotations/landing.html", context))
    else:
        signed = request.GET["task"]
    if n >= len(task):
        return _message(request, context, "End of preview",
                        f"End of preview: that was the last of the {len(task)} question(s) of this task.")
    steps = _steps(study, task[n])
    qualification = preview_qualification(study=study)  # the test as it is now (a worker passed it to get here)
    if qualification is not None and n == 0 and request.GET.get("step") == QUALIFICATION:
        test, questions = qualification
        page = PreviewPage(state="qualification", total=len(task), qualification=test,
                           qualification_questions=questions)
        context.update({
            "page": page, "deadline": task_deadline(page, study=study),
            "preview_next_url": _url(study),
            "preview_next_params": [("task", signed), ("n", 0), ("step", steps[0])],
            "preview_skip_url": _url(study, task=signed, n=0, step=steps[0]),
        })
        return _respond(render(request, "annotations/qualification.html", context))
    step = request.GET.get("step") if request.GET.get("step") in steps else steps[0]
    if claim is None:  # a fresh task, drawn just now from the study as it is
        try:
            claim = preview_claim(study=study, entry=task[n], number=n + 1)
        except PreviewOutdated as error:  # changed again in between: the restart link draws anew
            return _message(request, context, "The study changed",
                            f"This study changed while the preview was drawn ({error}). Restart the preview.")
    given = request.GET.get("answer", "")
    view = step_view(claim=claim, step=step, kind=study.kind, answers={Step.BEFORE: given}, number=n + 1,
                     total=len(task))
    if step == Step.AFTER and given not in {choice["label"] for choice in view.choices}:
        view.first_answer_text = UNKNOWN_FIRST_ANSWER
    following = _next(study, task, n, step)
    next_n, next_step = following if following else (len(task), steps[0])
    page = PreviewPage(state="step", step=view, n_done=n, total=len(task))
    context.update({
        "page": page, "deadline": task_deadline(page, study=study, test_passed=qualification is not None),
        "preview_next_url": _url(study),
        "preview_next_params": [("task", signed), ("n", next_n), ("step", next_step)],
        "preview_skip_url": _url(study, task=signed, n=next_n, step=next_step),
    })
    return _respond(render(request, "annotations/step.html", context))


def _respond(response: HttpResponse) -> HttpResponse:
    response["Referrer-Policy"] = "same-origin"
    return response
