"""Watch a study fill: the live progress page of one study and the small JSON it polls.

``/admin/studies/study/<id>/progress/`` renders the numbers once; its script asks
``/admin/studies/study/<id>/progress.json`` again every few seconds and puts the new numbers in
place (no reload, nothing loaded from elsewhere). Both read ``annotations.selectors.progress``."""
from __future__ import annotations

from django.http import JsonResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse

from annotations.selectors.progress import study_progress
from annotations.selectors.review import study_attention_failures
from annotations.services.platforms.access import may_hand_out_links
from cockpit.views_common import study_context, study_for

POLL_SECONDS = 5

TASK_ROWS = [
    ("in_progress", "In progress"),
    ("submitted", "Submitted, awaiting review"),
    ("approved", "Approved"),
    ("rejected", "Rejected"),
    ("returned", "Returned by the worker"),
    ("expired", "Expired (time ran out)"),
]


def progress_view(model_admin, request, study_id: int):
    study = study_for(request, study_id)
    progress = study_progress(study=study)
    context = {
        **study_context(model_admin.admin_site, request, study, f"Progress: {study.name}"),
        "progress": progress,
        "attention": study_attention_failures(study=study),
        # The warning names tasks to reject only to who may reject them (the worker page's actions' rule).
        "attention_can_reject": may_hand_out_links(user=request.user, study=study),
        "task_rows": [(key, label, progress.tasks[key]) for key, label in TASK_ROWS],
        "poll_url": reverse("admin:studies_study_progress_json", args=[study.pk]),
        "poll_seconds": POLL_SECONDS,
    }
    return TemplateResponse(request, "cockpit/study/progress.html", context)


def progress_json(model_admin, request, study_id: int):
    study = study_for(request, study_id)
    return JsonResponse(study_progress(study=study).as_dict())  # admin_view marks it never cached


def urls(model_admin) -> list:
    view = model_admin.admin_site.admin_view

    def bind(fn):
        return view(lambda request, study_id: fn(model_admin, request, study_id))

    return [
        path("<int:study_id>/progress/", bind(progress_view), name="studies_study_progress"),
        path("<int:study_id>/progress.json", bind(progress_json), name="studies_study_progress_json"),
    ]
