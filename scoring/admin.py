"""Admin for scoring runs and the study report.

- the report pages of one run (report, figures, download, the run's live state):
  ``scoring.reports.views``;
- ``/admin/scoring/scorerun/score/``: "Score now" (POST, CSRF-protected) queues
  ``scoring.tasks.score_study_task`` for a study through ``score_run_enqueue`` and opens the
  run's state page, which follows it until the report is there.
"""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from scoring.models import ScoreRun, UnitScore
from scoring.reports import views as report_views
from scoring.services import ScoringQueueUnavailable, score_run_enqueue
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
            return format_html('<a href="{}">follow it</a>', reverse("admin:scoring_scorerun_state", args=[obj.pk]))
        return format_html('<a href="{}">report</a>', reverse("admin:scoring_scorerun_report", args=[obj.pk]))

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("score/", view(require_POST(self.score_now_view)), name="scoring_scorerun_score"),
            *report_views.urls(self),
        ] + super().get_urls()

    def changelist_view(self, request, extra_context=None):
        extra_context = {**(extra_context or {}), "score_form": ScoreNowForm(user=request.user)}
        return super().changelist_view(request, extra_context=extra_context)

    def score_now_view(self, request):
        if not self.has_change_permission(request):
            raise PermissionDenied
        form = ScoreNowForm(request.POST, user=request.user)
        if not form.is_valid():
            messages.error(request, "Choose a study to score.")
            return redirect("admin:scoring_scorerun_changelist")
        try:
            run = score_run_enqueue(study=form.cleaned_data["study"])
        except ScoringQueueUnavailable as exc:
            messages.error(request, str(exc))
            return redirect("admin:scoring_scorerun_changelist")
        return redirect("admin:scoring_scorerun_state", run.pk)


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
