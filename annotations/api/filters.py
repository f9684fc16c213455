"""django-filter filter sets of the annotations API."""
from __future__ import annotations

import django_filters as df

from annotations.models import Annotation, Assignment, Participant
from lab.api.filters import ApiFilterSet, DateTimeFilter, IdFilter, filter_id_or_name
from lab.pseudonyms import ids_matching_pseudonyms
from studies.models import Split


def filter_by_worker(queryset, participant_field: str, value: str):
    """``worker=w_...``: a pseudonym (comma-separated for several), matched among the workers of
    the rows in ``queryset``."""
    pseudonyms = [v for v in value.split(",") if v.strip()]
    candidates = Participant.objects.filter(pk__in=queryset.order_by().values(participant_field)).values_list(
        "pk", "platform", "external_id"
    )
    ids = ids_matching_pseudonyms(pseudonyms, candidates.iterator(chunk_size=2000))
    return queryset.filter(**{f"{participant_field}__in": ids})


class AnnotationFilter(ApiFilterSet):
    study = IdFilter(field_name="claim__study_id")
    assignment = IdFilter(field_name="claim__assignment_id")
    item = IdFilter(field_name="claim__unit__item_id")
    source = df.CharFilter(method="filter_source", help_text="Rationale source id or name.")
    split = df.ChoiceFilter(field_name="claim__unit__item__split", choices=Split.choices)
    step = df.ChoiceFilter(choices=Annotation.Step.choices)
    worker = df.CharFilter(method="filter_worker", help_text="Worker pseudonym (w_...); comma-separated for several.")
    answered_after = DateTimeFilter(field_name="answered_at", lookup_expr="gte")
    answered_before = DateTimeFilter(field_name="answered_at", lookup_expr="lt")
    date = df.DateFilter(field_name="answered_at", lookup_expr="date", help_text="Answers recorded on this day (UTC).")

    class Meta:
        model = Annotation
        fields: list[str] = []

    def filter_source(self, queryset, name, value):
        return filter_id_or_name(queryset, "claim__unit__source", value)

    def filter_worker(self, queryset, name, value):
        return filter_by_worker(queryset, "claim__participant", value)


class AssignmentFilter(ApiFilterSet):
    study = IdFilter(field_name="study_id")
    status = df.ChoiceFilter(choices=Assignment.Status.choices)
    worker = df.CharFilter(method="filter_worker", help_text="Worker pseudonym (w_...); comma-separated for several.")
    # A task's start (created_at): its consent, or for an MTurk or Prolific task its landing page's
    # time (deadlines.task_clock_start), up to its duration before the row was written.
    created_after = DateTimeFilter(field_name="created_at", lookup_expr="gte", help_text=(
        "Tasks started at or after this time. An MTurk or Prolific task starts when its landing page was "
        "served, before it was written: to fetch new tasks as they come, page by id instead."))
    created_before = DateTimeFilter(field_name="created_at", lookup_expr="lt",
                                    help_text="Tasks started before this time (see created_after).")
    date = df.DateFilter(field_name="created_at", lookup_expr="date", help_text="Tasks started on this day (UTC).")

    class Meta:
        model = Assignment
        fields: list[str] = []

    def filter_worker(self, queryset, name, value):
        return filter_by_worker(queryset, "participant", value)
