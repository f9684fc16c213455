"""Admin for scoring runs and the study report.

- the report pages of one run (report, figures, download, the run's live state):
  ``scoring.reports.views``;
- ``/admin/scoring/scorerun/score/``: "Score now" (POST, CSRF-protected) queues
  ``scoring.tasks.score_study_task`` for a study through ``score_run_enqueue`` (which checks the
  user's right: ``scoring.add_scorerun`` and VIEW on the study, as the API) and opens the run's
  state page, which follows it until the report is there; a study already being scored opens its
  pending or running run instead, saying so (``already_being_scored``; the study page's "Score
  again" posts here too, and the outcomes import's "Score it now" says the same);
- ``/admin/scoring/scorerun/import-outcomes/``: a study run elsewhere (an outcomes file such as
  ``rationale_utility.json``) becomes a finished study through ``outcomes_study_create`` and is
  scored at once: what ``manage.py import_outcomes --score`` does, from the admin;
- the action "Apply the crowd's verdicts to the questions" (a question-validation study's latest
  finished run): ``scoring.services.validation.question_validation_apply``, which leaves the rights
  check to the one writer of a question's status (``generalization_questions_set_validation``).
"""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from lab.ids import parse_id
from scoring.models import ScoreRun, UnitScore
from scoring.reports import views as report_views
from scoring.selectors import results_for_reader, warnings_for_reader
from scoring.services import ScoringQueueUnavailable, outcomes_study_create, score_run_enqueue
from scoring.services.outcomes import OutcomesStudyNotYours
from scoring.services.runs import SCORE_PERMISSION, ScoreRunRefused, already_being_scored
from scoring.services.validation import VerdictsNotApplicable, question_validation_apply
from studies.admin.scoping import StudyScopedAdmin
from studies.lm import genu as genu_rule
from studies.models import Dataset, Split, Study
from studies.selectors import datasets_for_design, studies_for_user
from studies.services.content import ContentNotYours
from studies.services.importers import ImportValidationError
from studies.services.questions import QuestionError
from studies.services.studies import StudyError, study_delete_check


class ScoreNowForm(forms.Form):
    """"Score now": a study the user may see (scoring needs ``scoring.add_scorerun`` on top)."""

    study = forms.ModelChoiceField(queryset=Study.objects.none())

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["study"].queryset = studies_for_user(user=user)


class ImportOutcomesForm(forms.Form):
    """A utility study run elsewhere: its outcomes file, the dataset its questions belong to and the
    name of the finished study to create (or to import into again, when the user may change it:
    ``outcomes_study_create`` checks that, for the admin as for the command)."""

    file = forms.FileField(help_text="One JSON object per line and per (question, source), as in "
                                     "rationale_utility.json.")
    dataset = forms.ModelChoiceField(queryset=Dataset.objects.none(),
                                     help_text="The dataset whose questions the file answers (import them first).")
    split = forms.ChoiceField(choices=Split.choices, initial=Split.TEST)
    study = forms.CharField(max_length=Study._meta.get_field("name").max_length,
                            help_text="Name of the finished study, e.g. Joshi et al. 2023 (released).")
    score = forms.BooleanField(required=False, initial=True, label="Score it now")

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        # the datasets a study of the user's may use (``outcomes_study_create`` checks it too)
        self.fields["dataset"].queryset = datasets_for_design(user=user).order_by("name")

    def clean_study(self):
        name = self.cleaned_data["study"].strip()
        if not name:
            raise forms.ValidationError("Name the study.")
        return name


@admin.register(ScoreRun)
class ScoreRunAdmin(StudyScopedAdmin):
    list_display = ("id", "study", "status", "requested_by", "created_at", "finished_at", "n_warnings", "report_link")
    list_filter = ("status",)
    linked_lookups = ("study",)  # the cockpit's "Score runs" link: ?study__id__exact=
    search_fields = ("study__name",)
    list_select_related = ("study", "requested_by")
    readonly_fields = ("study", "status", "requested_by", "by_operator", "results", "warnings", "error", "task_id",
                       "created_at", "finished_at")
    change_list_template = "admin/scoring/scorerun_change_list.html"
    actions = ("apply_question_verdicts", "apply_question_verdicts_with_short")

    def has_add_permission(self, request):
        return False

    def get_object(self, request, object_id, from_field=None):
        """The run, its results as ``request.user`` may read them (``results_for_reader``; never
        saved: a run is never edited), so its page shows no setting the report withholds."""
        run = super().get_object(request, object_id, from_field)
        if run is not None:
            run.warnings = warnings_for_reader(run, user=request.user)
            run.results = results_for_reader(run, user=request.user)
        return run

    def has_change_permission(self, request, obj=None):
        # A run is never edited (its attempts bound the retries, its updated_at is the worker's
        # heartbeat).
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        """A run is the record of the numbers its study published (``score_run_latest`` reads the
        newest finished one, its unit scores point at it): none is deleted on its own, whoever asks,
        a running one neither. No "Delete selected" (asked with no run), and ``delete_view`` refuses
        every run. A run goes only with its study, when ``study_delete`` deletes a draft for its
        owner: the study's delete page asks this of each run it would take along, so a run of a
        draft the user may delete (``study_delete_check``) answers yes there, and only there."""
        if obj is None or obj.study.status != Study.Status.DRAFT:
            return False
        try:
            study_delete_check(study=obj.study, user=request.user)
        except StudyError:
            return False
        return True

    def delete_view(self, request, object_id, extra_context=None):
        raise PermissionDenied("A score run is not deleted: it is the record of its study's results (it goes only "
                               "with its study, when the owner deletes a draft).")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # no "Delete" link to the page that refuses it (a draft's owner is asked yes above)
        extra_context = {**(extra_context or {}), "show_delete": False}
        return super().change_view(request, object_id, form_url, extra_context=extra_context)

    def may_score(self, request) -> bool:
        """Whether "Score now" is offered: the right to start a scoring run (``score_run_enqueue``
        checks it, and the study, itself)."""
        return request.user.has_perm(SCORE_PERMISSION)

    @admin.action(description="Apply the crowd's verdicts to the questions (question-validation runs)")
    def apply_question_verdicts(self, request, queryset):
        """Each chosen run's verdicts become its questions' validation status
        (``question_validation_apply``); a refusal (not the study's latest run, not a
        question-validation study, the user's rights) is said and changes nothing for that run."""
        self._apply_question_verdicts(request, queryset, include_short=False)

    @admin.action(description="Apply the crowd's verdicts, short questions too (judged by fewer workers than asked)")
    def apply_question_verdicts_with_short(self, request, queryset):
        """As ``apply_question_verdicts``, also applying the verdicts of questions judged by fewer
        workers than the study asks (``include_short``, e.g. a study closed short), which the
        message names."""
        self._apply_question_verdicts(request, queryset, include_short=True)

    def _apply_question_verdicts(self, request, queryset, *, include_short: bool) -> None:
        for run in queryset.select_related("study").order_by("pk"):
            try:
                applied = question_validation_apply(run=run, user=request.user, include_short=include_short)
            except (VerdictsNotApplicable, QuestionError, ContentNotYours) as exc:
                messages.error(request, f"Run {run.pk} ({run.study.name}): {exc}")
            else:
                messages.success(request, f"Run {run.pk} ({run.study.name}): {applied.message()}")

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
            path("import-outcomes/", view(self.import_outcomes_view), name="scoring_scorerun_import_outcomes"),
            *report_views.urls(self),
        ] + super().get_urls()

    def changelist_view(self, request, extra_context=None):
        # Opened from a study (its score runs): "Score now" offers that study first.
        study = request.GET.get("study__id__exact", "")
        initial = {"study": parse_id(study)} if parse_id(study) else {}
        extra_context = {**(extra_context or {}), "score_form": ScoreNowForm(user=request.user, initial=initial),
                         "can_score": self.may_score(request),
                         "can_import_outcomes": self._may_import_outcomes(request)}
        return super().changelist_view(request, extra_context=extra_context)

    def score_now_view(self, request):
        if not self.may_score(request):
            raise PermissionDenied
        form = ScoreNowForm(request.POST, user=request.user)
        if not form.is_valid():
            messages.error(request, "Choose a study to score.")
            return redirect("admin:scoring_scorerun_changelist")
        try:
            run = score_run_enqueue(study=form.cleaned_data["study"], user=request.user)
        except (ScoreRunRefused, ScoringQueueUnavailable) as exc:
            messages.error(request, str(exc))
            return redirect("admin:scoring_scorerun_changelist")
        if run.already_queued:
            messages.info(request, already_being_scored(run))
        return redirect("admin:scoring_scorerun_state", run.pk)

    def _may_import_outcomes(self, request) -> bool:
        return request.user.has_perm("studies.add_study") and self.may_score(request)

    def import_outcomes_view(self, request):
        """Upload an outcomes file: the finished study appears with its unit scores, or nothing is
        written and every bad line is listed; "Score it now" then follows the run to its report."""
        if not self._may_import_outcomes(request):
            raise PermissionDenied
        errors, failed_file, unlisted = None, "", 0
        form = ImportOutcomesForm(request.POST or None, request.FILES or None, user=request.user)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                study, summary = outcomes_study_create(name=data["study"], dataset=data["dataset"], file=data["file"],
                                                       split=data["split"], owner=request.user, user=request.user)
            except OutcomesStudyNotYours:  # the service's check, shown on the name the user gave
                form.add_error("study", "A study of this name exists that you may not change: choose another name.")
            except ImportValidationError as exc:
                errors, failed_file, unlisted = exc.errors, exc.filename or data["file"].name, exc.unlisted
            else:
                messages.success(request, f"Imported {study.name}: {summary['created']} outcome(s) created, "
                                          f"{summary['updated']} updated, {summary['unchanged']} unchanged.")
                if not data["score"]:
                    return redirect("admin:studies_study_change", study.pk)
                try:
                    run = score_run_enqueue(study=study, user=request.user)
                except (ScoreRunRefused, ScoringQueueUnavailable) as exc:
                    messages.error(request, str(exc))
                    return redirect("admin:studies_study_change", study.pk)
                if run.already_queued:
                    messages.info(request, already_being_scored(run))
                return redirect("admin:scoring_scorerun_state", run.pk)
        context = {**self.admin_site.each_context(request), "title": "Import a study run elsewhere",
                   "opts": self.model._meta, "form": form, "errors": errors, "failed_file": failed_file,
                   "unlisted": unlisted}
        return TemplateResponse(request, "admin/scoring/import_outcomes.html", context, status=400 if errors else 200)


@admin.register(UnitScore)
class UnitScoreAdmin(StudyScopedAdmin):
    list_display = ("study", "item", "source", "n_annotators", "before_majority", "after_majority", "utility",
                    "task_correct", "gen_u_with_tie_rule", "similarity", "imported")
    list_filter = ("imported", "utility", "source")
    search_fields = ("study__name", "item__question", "item__external_id")
    list_select_related = ("study", "item", "source")

    # Gen-U's column says its tie rule; hovering it gives the rule in full (the help text).
    @admin.display(description=format_html('<span title="{}">Gen-U (a tie to the {} score)</span>',
                                            genu_rule.TIE_RULE_TEXT, genu_rule.TIE_RULE), ordering="gen_u")
    def gen_u_with_tie_rule(self, obj):
        """Gen-U with its tie rule in the column header (``studies.lm.genu.TIE_RULE``, in full
        ``TIE_RULE_TEXT``)."""
        return obj.gen_u

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # a score run rewrites them
