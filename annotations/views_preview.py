"""A researcher's preview of a study's task, page by page, as a worker will see it.

Staff only (``/w/preview/<study id>/``), and only for a study the user may see. It renders the worker templates (the consent page,
then for each of the first units the "before" page and the "after" page with the rationale)
from the study's content directly: nothing is written, no participant, assignment, claim or
answer is created and no quota moves. Every page is a GET; the question form submits by GET
to the next preview page (``?n=<unit index>&step=before|after``, or ``step=intro``).

Units: the study's ``Unit`` rows in id order once they are built (the study was opened),
otherwise the same units derived in memory (items x sources, in the order
``annotations.services.units`` builds them), never saved.
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from annotations.models import Annotation, Unit
from annotations.selectors import StepView, rationale_text
from annotations.services.steps import genq_choices, normalise_choices
from studies.models import GeneralizationQuestion, Rationale, RationaleSource, Study
from studies.selectors import studies_for_user

Step = Annotation.Step
PREVIEW_MAX_UNITS = 10  # "the first few units": at most a task's worth, capped here
PREVIEW_KINDS = (Study.Kind.UTILITY, Study.Kind.GENERALIZATION)
STEPS = ("intro", Step.BEFORE, Step.AFTER)
UNKNOWN_FIRST_ANSWER = "(the answer chosen on the previous page)"


@dataclass
class PreviewPage:
    """What step.html reads of ``page`` (``selectors.Page`` without an assignment)."""

    state: str
    step: StepView | None = None
    n_done: int = 0
    total: int = 0


def preview_limit(study: Study) -> int:
    return max(1, min(study.units_per_task, PREVIEW_MAX_UNITS))


def _built_units(study: Study, limit: int) -> list[Unit]:
    return list(
        Unit.objects.filter(study=study)
        .select_related("item", "rationale", "source", "generalization_question")
        .order_by("id")[:limit]
    )


def _derived_units(study: Study, limit: int) -> list[Unit]:
    """The first units ``study_units_build`` would make, as unsaved instances."""
    sources = list(study.sources.order_by("id"))
    if not sources:
        return []
    items = study.items.order_by("id")
    if study.kind == Study.Kind.UTILITY:
        questions = ((item, None) for item in items.iterator())
    else:
        genqs = (
            GeneralizationQuestion.objects.filter(item__in=items)
            .exclude(validation_status=GeneralizationQuestion.Validation.INVALID)
            .select_related("item")
            .order_by("item_id", "id")
        )
        questions = ((genq.item, genq) for genq in genqs.iterator())
    units: list[Unit] = []
    for item, genq in questions:
        rationales = {
            r.source_id: r for r in Rationale.objects.filter(item=item, source__in=sources)
        }
        for source in sources:
            rationale = rationales.get(source.pk)
            if rationale is None and not (source.kind == RationaleSource.Kind.GOLD and item.gold_rationale):
                continue  # the unit builder skips (item, source) pairs without a rationale
            units.append(Unit(study=study, item=item, source=source, rationale=rationale,
                              generalization_question=genq, question_key=f"item:{item.pk}", quota=0))
            if len(units) >= limit:
                return units
    return units


def preview_units(study: Study) -> list[Unit]:
    limit = preview_limit(study)
    if study.kind not in PREVIEW_KINDS:
        return []
    return _built_units(study, limit) or _derived_units(study, limit)


def _choice_text(choices: list[dict], label: str) -> str:
    for choice in choices:
        if choice["label"] == label:
            return choice["text"]
    return UNKNOWN_FIRST_ANSWER


def preview_step_view(*, study: Study, unit: Unit, step: str, number: int, total: int,
                      first_answer: str = "") -> StepView:
    """A ``StepView`` as ``selectors._step_view`` builds it for utility/generalization units."""
    item = unit.item
    view = StepView(claim=None, step=step, number=number, total=total, question=item.question,
                    choices=normalise_choices(item.choices))
    if study.kind == Study.Kind.GENERALIZATION:
        genq = unit.generalization_question
        view.question = genq.text
        view.choices = genq_choices(genq, item)
        if step == Step.AFTER:
            view.original_question = item.question
            view.item_choices = normalise_choices(item.choices)
    if step == Step.AFTER:
        view.first_answer_text = _choice_text(view.choices, first_answer)
        view.rationale = rationale_text(unit)
    return view


def _url(study: Study, **params) -> str:
    return reverse("annotations:preview", args=[study.pk]) + ("?" + urlencode(params) if params else "")


def _next(n: int, step: str) -> tuple[int, str]:
    if step == "intro":
        return 0, Step.BEFORE
    if step == Step.BEFORE:
        return n, Step.AFTER
    return n + 1, Step.BEFORE


def _int(value: str | None) -> int:
    try:
        return max(0, int(value or 0))
    except ValueError:
        return 0


@never_cache
@staff_member_required
@require_GET
def preview_view(request: HttpRequest, study_id: int) -> HttpResponse:
    # A study the user may not see is a 404, as in the admin and the API (issue 10 item 9).
    study = get_object_or_404(studies_for_user(user=request.user), pk=study_id)
    step = request.GET.get("step") or "intro"
    if step not in STEPS:
        step = "intro"
    n = _int(request.GET.get("n"))
    context = {"study": study, "researcher_preview": True, "preview_restart_url": _url(study)}

    if step == "intro":
        if study.kind in PREVIEW_KINDS:
            context["preview_next_url"] = _url(study)
            context["preview_next_params"] = [("n", 0), ("step", Step.BEFORE)]
        else:
            context["preview_message"] = (
                f"Question preview covers utility and generalization studies; this is a "
                f"{study.get_kind_display().lower()} study, so only its consent and instructions page is shown."
            )
        return _respond(render(request, "annotations/landing.html", context))

    if study.kind not in PREVIEW_KINDS:
        return _respond(render(request, "annotations/message.html", {
            **context, "title": "Preview not available",
            "message": "Question preview covers utility and generalization studies.",
        }))
    units = preview_units(study)
    if n >= len(units):
        message = (
            f"End of preview: that was the last of the {len(units)} question(s) shown in a preview."
            if units else "This study has no questions to preview yet: add items and rationale sources."
        )
        return _respond(render(request, "annotations/message.html",
                               {**context, "title": "End of preview", "message": message}))
    view = preview_step_view(study=study, unit=units[n], step=step, number=n + 1, total=len(units),
                             first_answer=request.GET.get("answer", ""))
    next_n, next_step = _next(n, step)
    context.update({
        "page": PreviewPage(state="step", step=view, n_done=n, total=len(units)),
        "preview_next_url": _url(study),
        "preview_next_params": [("n", next_n), ("step", next_step)],
        "preview_skip_url": _url(study, n=next_n, step=next_step),
    })
    return _respond(render(request, "annotations/step.html", context))


def _respond(response: HttpResponse) -> HttpResponse:
    response["Referrer-Policy"] = "same-origin"
    return response
