"""Admin for scoring runs and the study report.

- ``/admin/scoring/scorerun/<id>/report/``: the report (tables, warnings, plots) of one run;
- ``/admin/scoring/scorerun/<id>/plot/<name>.png``: a plot rendered server-side (Agg);
- ``/admin/scoring/scorerun/score/``: "Score now" (POST, CSRF-protected) queues
  ``scoring.tasks.score_study_task`` for a study through ``score_run_enqueue``.
"""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from scoring import plots
from scoring.metrics import FAITHFULNESS_CAVEATS
from scoring.models import ScoreRun, UnitScore
from scoring.selectors import report_tables
from scoring.services import score_run_enqueue
from studies.admin.scoping import StudyScopedAdmin
from studies.models import Study
from studies.selectors import studies_for_user


class ScoreNowForm(forms.Form):
    """"Score now": a study the user may see (scoring needs ``scoring.change_scorerun`` on top)."""

    study = forms.ModelChoiceField(queryset=Study.objects.none())

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["study"].queryset = studies_for_user(user=user)


@admin.register(ScoreRun)
class ScoreRunAdmin(StudyScopedAdmin):
    list_display = ("id", "study", "status", "created_at", "finished_at", "n_warnings", "report_link")
    list_filter = ("status",)
    search_fields = ("study__name",)
    readonly_fields = ("study", "status", "results", "warnings", "error", "task_id", "created_at", "finished_at")
    change_list_template = "admin/scoring/scorerun_change_list.html"

    def has_add_permission(self, request):
        return False

    @admin.display(description="warnings")
    def n_warnings(self, obj: ScoreRun) -> int:
        return len(obj.warnings or [])

    @admin.display(description="report")
    def report_link(self, obj: ScoreRun):
        if obj.status != ScoreRun.Status.DONE:
            return "—"
        return format_html('<a href="{}">report</a>', reverse("admin:scoring_scorerun_report", args=[obj.pk]))

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<int:run_id>/report/", view(self.report_view), name="scoring_scorerun_report"),
            path("<int:run_id>/plot/<str:name>.png", view(self.plot_view), name="scoring_scorerun_plot"),
            path("score/", view(require_POST(self.score_now_view)), name="scoring_scorerun_score"),
        ] + super().get_urls()

    def changelist_view(self, request, extra_context=None):
        extra_context = {**(extra_context or {}), "score_form": ScoreNowForm(user=request.user)}
        return super().changelist_view(request, extra_context=extra_context)

    def _run(self, request, run_id: int) -> ScoreRun:
        run = get_object_or_404(self.get_queryset(request).select_related("study"), pk=run_id)
        if not self.has_view_permission(request, run):
            raise PermissionDenied
        return run

    def report_view(self, request, run_id: int):
        run = self._run(request, run_id)
        results = run.results or {}
        available = [name for name, fn in plots.PLOTS.items() if run.status == ScoreRun.Status.DONE and fn(results)]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Scoring report: {run.study.name}",
            "run": run,
            "results": results,
            "tables": report_tables(results),
            "plots": available,
            "faithfulness_caveats": FAITHFULNESS_CAVEATS,
            "score_form": ScoreNowForm(user=request.user, initial={"study": run.study_id}),
            "can_score": self.has_change_permission(request),
        }
        return TemplateResponse(request, "admin/scoring/report.html", context)

    def plot_view(self, request, run_id: int, name: str):
        run = self._run(request, run_id)
        fn = plots.PLOTS.get(name)
        if fn is None or run.status != ScoreRun.Status.DONE:
            raise Http404("No such plot.")
        png = fn(run.results or {})
        if png is None:
            raise Http404("This run has no data for that plot.")
        return HttpResponse(png, content_type="image/png")

    def score_now_view(self, request):
        if not self.has_change_permission(request):
            raise PermissionDenied
        form = ScoreNowForm(request.POST, user=request.user)
        if not form.is_valid():
            messages.error(request, "Choose a study to score.")
            return redirect("admin:scoring_scorerun_changelist")
        run = score_run_enqueue(study=form.cleaned_data["study"])
        messages.success(request, f"Scoring of {run.study.name} queued (run {run.pk}); reload to see it finish.")
        return redirect("admin:scoring_scorerun_changelist")


@admin.register(UnitScore)
class UnitScoreAdmin(StudyScopedAdmin):
    list_display = ("study", "item", "source", "n_annotators", "before_majority", "after_majority", "utility",
                    "task_correct", "gen_u", "similarity", "imported")
    list_filter = ("imported", "utility", "source")
    search_fields = ("study__name", "item__question", "item__external_id")
    list_select_related = ("study", "item", "source")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
