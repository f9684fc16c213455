"""The report pages of a score run (bound into ``ScoreRunAdmin.get_urls``):

- ``<id>/report/``: the report, section by section (``?both=1`` adds the reverse Theil's U);
- ``<id>/figure/<name>.<png|svg>``: one figure, rendered server-side;
- ``<id>/download/``: the report as a zip (figures as PNG and SVG, tables as CSV, results.json);
- ``<id>/state/`` and ``<id>/state.json``: a run's state as it changes (queued, running, done,
  failed with its error); the page asks the JSON again every two seconds and opens the report
  when the run is done."""
from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from scoring import plots
from scoring.models import ScoreRun
from scoring.reports.download import report_zip, zip_name
from scoring.reports.sections import render_figure, report_sections
from scoring.run_stages import score_progress
from scoring.selectors import results_for_reader

POLL_SECONDS = 2
STATE_LABELS = {
    ScoreRun.Status.PENDING: "Queued: waiting for a worker",
    ScoreRun.Status.RUNNING: "Running",
    ScoreRun.Status.DONE: "Done",
    ScoreRun.Status.FAILED: "Failed",
}


def _run(model_admin, request, run_id: int) -> ScoreRun:
    """The run, its results as ``request.user`` may read them (``results_for_reader``: never saved;
    the report, its figures and its download are built from them)."""
    run = get_object_or_404(model_admin.get_queryset(request).select_related("study"), pk=run_id)
    if not model_admin.has_view_permission(request, run):
        raise PermissionDenied
    run.results = results_for_reader(run, user=request.user)
    return run


def _done(run: ScoreRun) -> ScoreRun:
    if run.status != ScoreRun.Status.DONE:
        raise Http404(f"Score run {run.pk} is {run.get_status_display().lower()}, not done.")
    return run


def report_view(model_admin, request, run_id: int):
    run = _run(model_admin, request, run_id)
    both = request.GET.get("both") == "1"
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": ScoreRun._meta,
        "title": f"Scoring report: {run.study.name}",
        "run": run,
        "results": run.results or {},
        "sections": report_sections(run, both_directions=both),
        "both": both,
        "can_score": model_admin.may_score(request),
    }
    return TemplateResponse(request, "admin/scoring/report.html", context)


def figure_view(model_admin, request, run_id: int, name: str, fmt: str):
    run = _done(_run(model_admin, request, run_id))
    if name not in plots.PLOTS or fmt not in plots.FORMATS:
        raise Http404("No such figure.")
    data = render_figure(name, run.results or {}, fmt)
    if data is None:
        raise Http404("This run has no data for that figure.")
    return HttpResponse(data, content_type=plots.FORMATS[fmt])


def download_view(model_admin, request, run_id: int):
    run = _done(_run(model_admin, request, run_id))
    response = HttpResponse(report_zip(run), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{zip_name(run)}"'
    return response


def run_state(run: ScoreRun) -> dict:
    """What the state page shows, as JSON. ``progress`` ({stage, step, steps}) is the stage a
    running task last told (``scoring.run_stages``), None when it told nothing."""
    end = run.finished_at or timezone.now()
    progress = score_progress(run.task_id) if run.status == ScoreRun.Status.RUNNING else None
    label = STATE_LABELS[run.status]
    if run.status == ScoreRun.Status.PENDING and run.attempts:
        label = f"Queued again: the worker stopped during start {run.attempts}"
    if progress:
        label = f"Running: {progress['stage']} (step {progress['step']} of {progress['steps']})"
    return {
        "id": run.pk,
        "study": run.study.name,
        "status": run.status,
        "label": label,
        "progress": progress,
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "elapsed_s": max(0, int((end - run.created_at).total_seconds())),
        "attempts": run.attempts,
        "n_warnings": len(run.warnings or []),
        "error": run.error if run.status == ScoreRun.Status.FAILED else "",
        "report_url": reverse("admin:scoring_scorerun_report", args=[run.pk])
        if run.status == ScoreRun.Status.DONE else None,
    }


def state_view(model_admin, request, run_id: int):
    run = _run(model_admin, request, run_id)
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": ScoreRun._meta,
        "title": f"Scoring {run.study.name}",
        "run": run,
        "state": run_state(run),
        "poll_url": reverse("admin:scoring_scorerun_state_json", args=[run.pk]),
        "poll_seconds": POLL_SECONDS,
    }
    return TemplateResponse(request, "admin/scoring/run_state.html", context)


def state_json(model_admin, request, run_id: int):
    return JsonResponse(run_state(_run(model_admin, request, run_id)))


def urls(model_admin) -> list:
    view = model_admin.admin_site.admin_view

    def bind(fn):
        return view(lambda request, **kwargs: fn(model_admin, request, **kwargs))

    return [
        path("<int:run_id>/report/", bind(report_view), name="scoring_scorerun_report"),
        path("<int:run_id>/figure/<str:name>.<str:fmt>", bind(figure_view), name="scoring_scorerun_figure"),
        path("<int:run_id>/download/", bind(download_view), name="scoring_scorerun_download"),
        path("<int:run_id>/state/", bind(state_view), name="scoring_scorerun_state"),
        path("<int:run_id>/state.json", bind(state_json), name="scoring_scorerun_state_json"),
    ]
