"""Flagged questions and explanations in one list: every answer on which a worker reported a
problem, with the question, the explanation, the worker's note and the researcher's decision;
"accept" (a real problem: the assignment becomes eligible for the flagged-error bonus) and
"dismiss" go through ``annotations.services.flags``."""
from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import Q

from annotations.admin.platforms import ReadOnlyAdmin
from annotations.models import FlaggedAnswer, FlagReview
from annotations.selectors import rationale_text
from annotations.services.flags import flag_accept, flag_dismiss
from annotations.services.payments import PlatformServiceError
from studies.admin.display import short_text_with_title
from studies.selectors import CHANGE


class DecisionFilter(admin.SimpleListFilter):
    title = "decision"
    parameter_name = "decision"

    def lookups(self, request, model_admin):
        return [("open", "Not decided yet"), *FlagReview.Decision.choices]

    def queryset(self, request, queryset):
        if self.value() == "open":
            return queryset.filter(flag_review__isnull=True)
        if self.value() in FlagReview.Decision.values:
            return queryset.filter(flag_review__decision=self.value())
        return queryset


@admin.register(FlaggedAnswer)
class FlaggedAnswerAdmin(ReadOnlyAdmin):
    study_path = "claim__study"
    list_display = ("id", "study", "worker", "step", "question", "source", "explanation", "note", "decision",
                    "answered_at")
    list_filter = (DecisionFilter, "claim__study")
    actions = ["accept_flags", "dismiss_flags"]
    list_per_page = 50
    ordering = ("-answered_at", "-id")

    def get_queryset(self, request):
        return (super().get_queryset(request).filter(Q(payload__flag=True))
                .select_related("claim__study", "claim__participant", "claim__unit__item", "claim__unit__rationale",
                                "claim__unit__generalization_question", "claim__unit__source", "flag_review"))

    @admin.display(ordering="claim__study")
    def study(self, obj):
        return obj.claim.study

    @admin.display(ordering="claim__participant")
    def worker(self, obj):
        return obj.claim.participant

    @admin.display(description="question")
    def question(self, obj):
        unit = obj.claim.unit
        if unit is None:
            return "—"
        text = unit.generalization_question.text if unit.generalization_question_id else unit.item.question
        return short_text_with_title(text)

    @admin.display(description="source", ordering="claim__unit__source__name")
    def source(self, obj):
        unit = obj.claim.unit
        return unit.source.name if unit is not None and unit.source_id else "—"

    @admin.display(description="explanation")
    def explanation(self, obj):
        unit = obj.claim.unit
        text = rationale_text(unit) if unit is not None else ""
        return short_text_with_title(text)

    @admin.display(description="worker's note")
    def note(self, obj):
        payload = obj.payload if isinstance(obj.payload, dict) else {}
        return payload.get("flag_note") or "(no note)"

    @admin.display(description="decision")
    def decision(self, obj):
        review = getattr(obj, "flag_review", None)
        return review.get_decision_display() if review else "not decided yet"

    def _decide(self, request, queryset, service, verb: str) -> None:
        allowed = self.model._default_manager.filter(
            **self._in_studies(request, CHANGE)).values_list("pk", flat=True)
        done = 0
        for answer in queryset.filter(pk__in=list(allowed)):
            try:
                service(annotation=answer, user=request.user)
                done += 1
            except PlatformServiceError as exc:
                self.message_user(request, exc.message, messages.ERROR)
        refused = queryset.exclude(pk__in=list(allowed)).count()
        if refused:
            self.message_user(request, f"{refused} flag(s) belong to studies you may not change.", messages.ERROR)
        if done:
            self.message_user(request, f"{done} flag(s) {verb}.", messages.SUCCESS)

    @admin.action(description="Accept: a real problem (eligible for the flagged-error bonus)")
    def accept_flags(self, request, queryset):
        self._decide(request, queryset, flag_accept, "accepted")

    @admin.action(description="Dismiss")
    def dismiss_flags(self, request, queryset):
        self._decide(request, queryset, flag_dismiss, "dismissed")
