"""The answers list a reviewer reads: each answer with its question, source, the explanation the
worker saw (on the answer given after it), both answers of the question, whether each was right,
the time it took, the worker's pseudonym and any problem they reported; filtered by study,
source, step, correctness, worker and reported problem. Read-only: answers are written by the
worker pages only. The columns come from ``annotations.selectors.review.answers_for_review``."""
from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from annotations.models import Annotation
from annotations.selectors import rationale_text
from annotations.selectors.review import answers_for_review, assignments_failing_attention
from studies.admin.display import short_text, short_text_with_title
from studies.admin.scoping import RawWorkerIdsAdmin, StudyScopedAdmin


class CorrectFilter(admin.SimpleListFilter):
    title = "correct"
    parameter_name = "correct"

    def lookups(self, request, model_admin):
        return [("yes", "Right"), ("no", "Wrong"), ("na", "No right answer (validation, properties)")]

    def queryset(self, request, queryset):
        value = self.value()
        if value == "yes":
            return queryset.filter(is_correct=True)
        if value == "no":
            return queryset.filter(is_correct=False)
        if value == "na":
            return queryset.filter(is_correct__isnull=True)
        return queryset


class ReportedProblemFilter(admin.SimpleListFilter):
    title = "reported problem"
    parameter_name = "flag"

    def lookups(self, request, model_admin):
        return [("yes", "Reported a problem"), ("no", "No report")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(payload__flag=True)
        if self.value() == "no":
            return queryset.exclude(payload__flag=True)
        return queryset


class AttentionFilter(admin.SimpleListFilter):
    """The answers of tasks that failed (or passed) an attention check: the failing tasks to review."""
    title = "task's attention check"
    parameter_name = "attention"

    def lookups(self, request, model_admin):
        return [("failed", "Task failed an attention check"), ("not_failed", "Task failed none")]

    def queryset(self, request, queryset):
        failing = assignments_failing_attention().values("pk")
        if self.value() == "failed":
            return queryset.filter(claim__assignment_id__in=failing)
        if self.value() == "not_failed":
            return queryset.exclude(claim__assignment_id__in=failing)
        return queryset


@admin.register(Annotation)
class AnnotationAdmin(StudyScopedAdmin, RawWorkerIdsAdmin):
    study_path = "claim__study"
    raw_worker_id_fields = ("external_id",)
    list_display = ("id", "worker", "question", "source", "step", "answer", "is_correct_display",
                    "before_after", "rationale_shown", "seconds", "reported_problem", "answered_at")
    list_filter = ("claim__study", "claim__unit__source", "step", CorrectFilter, "claim__participant",
                   ReportedProblemFilter, AttentionFilter)
    search_fields = ("claim__participant__external_id", "claim__question_key", "claim__unit__item__question")
    readonly_fields = ("claim", "step", "answer", "payload", "shown_at", "answered_at", "duration_ms")
    list_per_page = 50
    ordering = ("-answered_at", "-id")

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # answers are erased only by a withdrawal (``participant_withdraw``), which records it

    def get_queryset(self, request):
        return answers_for_review(super().get_queryset(request)).select_related(
            "claim__participant", "claim__study", "claim__unit__item", "claim__unit__source",
            "claim__unit__rationale", "claim__unit__generalization_question", "claim__attention_check",
        )

    @admin.display(ordering="claim__participant")
    def worker(self, obj):
        return obj.claim.participant

    @admin.display(description="question")
    def question(self, obj):
        claim = obj.claim
        if claim.attention_check_id:
            return format_html("<em>attention check:</em> {}", short_text(claim.attention_check.question))
        unit = claim.unit
        return short_text_with_title(unit.generalization_question.text if unit.generalization_question_id else unit.item.question)

    @admin.display(ordering="claim__unit__source__name")
    def source(self, obj):
        unit = obj.claim.unit
        return unit.source.name if unit is not None and unit.source_id else "—"

    @admin.display(description="right", boolean=True, ordering="is_correct")
    def is_correct_display(self, obj):
        return obj.is_correct

    @admin.display(description="before → after (right answer)")
    def before_after(self, obj):
        if obj.step not in (Annotation.Step.BEFORE, Annotation.Step.AFTER):
            return f"(right answer: {obj.gold})" if obj.gold and obj.step == Annotation.Step.ATTENTION else "—"
        return f"{obj.before_answer or '…'} → {obj.after_answer or '…'} ({obj.gold or '?'})"

    @admin.display(description="explanation shown")
    def rationale_shown(self, obj):
        """Shown on the answer given after the explanation: a worker sees it only after the first answer."""
        if obj.step != Annotation.Step.AFTER or obj.claim.unit is None:
            return "—"
        return short_text_with_title(rationale_text(obj.claim.unit))

    @admin.display(description="seconds", ordering="duration_ms")
    def seconds(self, obj):
        return "—" if obj.duration_ms is None else f"{obj.duration_ms / 1000:.1f}"

    @admin.display(description="reported problem")
    def reported_problem(self, obj):
        payload = obj.payload if isinstance(obj.payload, dict) else {}
        if not payload.get("flag"):
            return "—"
        return format_html("⚑ {}", payload.get("flag_note") or "(no note)")
