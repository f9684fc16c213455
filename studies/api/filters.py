"""django-filter filter sets of the studies API."""
from __future__ import annotations

import django_filters as df
from django.db.models import Q

from lab.api.filters import ApiFilterSet, BooleanFilter, DateTimeFilter, IdFilter, filter_id_or_name
from studies.models import (
    Dataset,
    GeneralizationQuestion,
    GenerationJob,
    ImportRecord,
    Item,
    Rationale,
    RationaleSource,
    Split,
    Study,
)
from studies.selectors import studies_for_user


class StudyIdFilter(IdFilter):
    """``study=<id>``: rows of one study, and only of a study the user may see (a study the user
    cannot see matches nothing, so a list never tells what another researcher's study holds)."""

    def __init__(self, *args, lookup: str, **kwargs):
        self.lookup = lookup
        kwargs.setdefault("help_text", "Only rows of this study (one you may see).")
        super().__init__(*args, **kwargs)

    def filter(self, qs, value):
        if value in (None, ""):
            return qs
        user = getattr(self.parent.request, "user", None)
        if not studies_for_user(user=user).filter(pk=value).exists():
            return qs.none()
        return qs.filter(**{self.lookup: value}).distinct()


class DatasetFilter(ApiFilterSet):
    class Meta:
        model = Dataset
        fields = {"task_format": ["exact"], "name": ["exact"]}


class ItemFilter(ApiFilterSet):
    split = df.ChoiceFilter(choices=Split.choices)
    study = StudyIdFilter(lookup="studies")
    dataset = IdFilter(field_name="dataset_id")

    class Meta:
        model = Item
        fields = {"external_id": ["exact"]}


class RationaleSourceFilter(ApiFilterSet):
    study = StudyIdFilter(lookup="studies")

    class Meta:
        model = RationaleSource
        fields = {"kind": ["exact"], "name": ["exact"]}


class RationaleFilter(ApiFilterSet):
    source = df.CharFilter(method="filter_source", help_text="Rationale source id or name.")
    dataset = IdFilter(field_name="item__dataset")
    split = df.ChoiceFilter(field_name="item__split", choices=Split.choices)
    study = StudyIdFilter(lookup="item__studies", help_text="Rationales of this study's items and sources.")
    item = IdFilter(field_name="item_id")

    class Meta:
        model = Rationale
        fields = {"prediction_correct": ["exact"]}

    def filter_source(self, queryset, name, value):
        return filter_id_or_name(queryset, "source", value)

    def filter_queryset(self, queryset):
        queryset = super().filter_queryset(queryset)
        study = self.form.cleaned_data.get("study")
        if study:  # the study's own sources, not every source that has a rationale for its items
            queryset = queryset.filter(source__studies=study)
        return queryset


class GeneralizationQuestionFilter(ApiFilterSet):
    dataset = IdFilter(field_name="item__dataset")
    split = df.ChoiceFilter(field_name="item__split", choices=Split.choices)
    study = StudyIdFilter(lookup="item__studies", help_text="Questions of this study's items.")
    item = IdFilter(field_name="item_id")

    class Meta:
        model = GeneralizationQuestion
        fields = {"qtype": ["exact"], "validation_status": ["exact"]}


class StudyFilter(ApiFilterSet):
    created_after = DateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = DateTimeFilter(field_name="created_at", lookup_expr="lt")
    split = df.ChoiceFilter(choices=Split.choices)
    source = df.CharFilter(method="filter_source", help_text="Studies that use this source (id or name).")
    mine = BooleanFilter(method="filter_mine", help_text="true: only studies I own; false: only those I do not own.")
    dataset = IdFilter(field_name="dataset_id")

    class Meta:
        model = Study
        fields = {"kind": ["exact"], "status": ["exact"]}

    def filter_source(self, queryset, name, value):
        return filter_id_or_name(queryset, "sources", value).distinct()

    def filter_mine(self, queryset, name, value):
        user = self.request.user if self.request else None
        if value is None or user is None:
            return queryset
        return queryset.filter(owner=user) if value else queryset.filter(~Q(owner=user) | Q(owner__isnull=True))


class ImportRecordFilter(ApiFilterSet):
    dataset = IdFilter(field_name="dataset_id")
    imported_after = DateTimeFilter(field_name="imported_at", lookup_expr="gte")
    imported_before = DateTimeFilter(field_name="imported_at", lookup_expr="lt")

    class Meta:
        model = ImportRecord
        fields = {"kind": ["exact"]}


class GenerationJobFilter(ApiFilterSet):
    source = df.CharFilter(method="filter_source", help_text="Rationale source id or name.")
    dataset = IdFilter(field_name="dataset_id")
    split = df.ChoiceFilter(choices=Split.choices)
    created_after = DateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = DateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = GenerationJob
        fields = {"kind": ["exact"], "status": ["exact"]}

    def filter_source(self, queryset, name, value):
        return filter_id_or_name(queryset, "source", value)
