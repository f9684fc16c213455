"""django-filter filter sets of the annotations API (also used by the annotation export)."""
from __future__ import annotations

import django_filters as df
from django.db.models import Exists, OuterRef

from annotations.models import Annotation, Assignment, Participant
from scoring.models import UnitScore
from studies.api.common import participant_ids_for_pseudonyms
from studies.api.filters import DateTimeFilter, IdFilter, filter_source_id_or_name
from studies.models import Split

UTILITY_CATEGORIES = [("useful", "useful (+1)"), ("unsure", "unsure (0)"), ("not_useful", "not useful (-1)")]
UTILITY_VALUES = {"useful": 1, "unsure": 0, "not_useful": -1}
UTILITY_LABELS = {value: label for label, value in UTILITY_VALUES.items()}  # 1 -> "useful", ...


def filter_by_worker(queryset, participant_field: str, value: str):
    """``worker=w_...``: a pseudonym (comma-separated for several), matched among the workers of
    the studies in ``queryset``."""
    pseudonyms = [v for v in value.split(",") if v.strip()]
    participants = Participant.objects.filter(
        pk__in=queryset.order_by().values(participant_field)
    )
    ids = participant_ids_for_pseudonyms(pseudonyms, participants)
    return queryset.filter(**{f"{participant_field}__in": ids})


class AnnotationFilter(df.FilterSet):
    study = IdFilter(field_name="claim__study_id")
    assignment = IdFilter(field_name="claim__assignment_id")
    item = IdFilter(field_name="claim__unit__item_id")
    source = df.CharFilter(method="filter_source", help_text="Rationale source id or name.")
    split = df.ChoiceFilter(field_name="claim__unit__item__split", choices=Split.choices)
    step = df.ChoiceFilter(choices=Annotation.Step.choices)
    worker = df.CharFilter(method="filter_worker", help_text="Worker pseudonym (w_...); comma-separated for several.")
    utility = df.ChoiceFilter(
        choices=UTILITY_CATEGORIES, method="filter_utility",
        help_text="Utility category of the annotated (item, source) unit, once scored.",
    )
    answered_after = DateTimeFilter(field_name="answered_at", lookup_expr="gte")
    answered_before = DateTimeFilter(field_name="answered_at", lookup_expr="lt")
    date = df.DateFilter(field_name="answered_at", lookup_expr="date", help_text="Answers recorded on this day (UTC).")

    class Meta:
        model = Annotation
        fields: list[str] = []

    def filter_source(self, queryset, name, value):
        return filter_source_id_or_name(queryset, "claim__unit__source", value)

    def filter_worker(self, queryset, name, value):
        return filter_by_worker(queryset, "claim__participant", value)

    def filter_utility(self, queryset, name, value):
        scored = UnitScore.objects.filter(
            study=OuterRef("claim__study"),
            item=OuterRef("claim__unit__item"),
            source=OuterRef("claim__unit__source"),
            utility=UTILITY_VALUES[value],
        )
        return queryset.filter(Exists(scored))


class AssignmentFilter(df.FilterSet):
    study = IdFilter(field_name="study_id")
    status = df.ChoiceFilter(choices=Assignment.Status.choices)
    worker = df.CharFilter(method="filter_worker", help_text="Worker pseudonym (w_...); comma-separated for several.")
    created_after = DateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = DateTimeFilter(field_name="created_at", lookup_expr="lt")
    date = df.DateFilter(field_name="created_at", lookup_expr="date", help_text="Tasks started on this day (UTC).")

    class Meta:
        model = Assignment
        fields: list[str] = []

    def filter_worker(self, queryset, name, value):
        return filter_by_worker(queryset, "participant", value)
