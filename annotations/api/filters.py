"""django-filter filter sets of the annotations API."""
from __future__ import annotations

import django_filters as df
from django import forms
from django_filters.fields import ChoiceField

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


# The statuses ``/api/v1/assignments/`` lists: every one but ``withdrawn`` (``AssignmentViewSet``
# leaves a withdrawn participant's tasks out: emptied, kept only as payment records).
LISTED_STATUSES = [(value, label) for value, label in Assignment.Status.choices
                   if value != Assignment.Status.WITHDRAWN]


class ListedStatusField(ChoiceField):
    """A listed status; ``withdrawn`` is a 400 saying why no task of that status is ever listed, not
    an empty page a caller would read as "no withdrawn tasks"."""

    def validate(self, value):
        if value == Assignment.Status.WITHDRAWN:
            listed = ", ".join(status for status, _label in LISTED_STATUSES)
            raise forms.ValidationError(
                f"status: {value!r} is not a status this list filters by: a withdrawn participant's tasks are "
                f"emptied and kept only as payment records, never listed. It filters by: {listed}.",
                code="invalid_choice")
        super().validate(value)


class ListedStatusFilter(df.ChoiceFilter):
    field_class = ListedStatusField


class AssignmentFilter(ApiFilterSet):
    study = IdFilter(field_name="study_id")
    status = ListedStatusFilter(choices=LISTED_STATUSES, help_text=(
        "The task's status. Withdrawn tasks (a participant's withdrawal) are kept only as payment records and "
        "never listed, so `withdrawn` is not a choice (a 400)."))
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
