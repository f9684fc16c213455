"""django-filter filter sets of the studies API."""
from __future__ import annotations

import datetime as dt

import django_filters as df
from django import forms
from django.db.models import Q
from django.utils import timezone
from django_filters.fields import IsoDateTimeField

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

MAX_ID = 2**63 - 1


class IdFilter(df.NumberFilter):
    """An id: a whole number from 1 to 2^63-1 (bigger values are a 400, not a database overflow)."""

    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(*args, **kwargs)


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 date-time, converted to UTC so that every database accepts it (PostgreSQL
    refuses offsets beyond 15:59 that Python allows)."""

    def to_python(self, value):
        value = super().to_python(value)
        if value is None:
            return None
        if timezone.is_naive(value):
            value = timezone.make_aware(value, dt.UTC)
        try:
            return value.astimezone(dt.UTC)
        except OverflowError as exc:
            raise forms.ValidationError("Date-time out of range.", code="invalid") from exc


class DateTimeFilter(df.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


def filter_source_id_or_name(queryset, field_prefix: str, value: str):
    """``source=12`` or ``source=gpt3``: a rationale source by id or by name."""
    value = value.strip()
    if value.isdigit():
        if int(value) > MAX_ID:
            return queryset.none()
        return queryset.filter(**{f"{field_prefix}_id": int(value)})
    return queryset.filter(**{f"{field_prefix}__name": value})


class DatasetFilter(df.FilterSet):
    class Meta:
        model = Dataset
        fields = {"task_format": ["exact"], "name": ["exact"]}


class ItemFilter(df.FilterSet):
    split = df.ChoiceFilter(choices=Split.choices)
    study = IdFilter(field_name="studies", help_text="Items of this study.")

    dataset = IdFilter(field_name="dataset_id")

    class Meta:
        model = Item
        fields = {"external_id": ["exact"]}


class RationaleSourceFilter(df.FilterSet):
    study = IdFilter(field_name="studies", help_text="Sources of this study.")

    class Meta:
        model = RationaleSource
        fields = {"kind": ["exact"], "name": ["exact"]}


class RationaleFilter(df.FilterSet):
    source = df.CharFilter(method="filter_source", help_text="Rationale source id or name.")
    dataset = IdFilter(field_name="item__dataset")
    split = df.ChoiceFilter(field_name="item__split", choices=Split.choices)
    study = IdFilter(method="filter_study", help_text="Rationales of this study's items and sources.")

    item = IdFilter(field_name="item_id")

    class Meta:
        model = Rationale
        fields = {"prediction_correct": ["exact"]}

    def filter_source(self, queryset, name, value):
        return filter_source_id_or_name(queryset, "source", value)

    def filter_study(self, queryset, name, value):
        return queryset.filter(
            item__studies=value, source__in=RationaleSource.objects.filter(studies=value)
        )


class GeneralizationQuestionFilter(df.FilterSet):
    dataset = IdFilter(field_name="item__dataset")
    split = df.ChoiceFilter(field_name="item__split", choices=Split.choices)
    study = IdFilter(field_name="item__studies", help_text="Questions of this study's items.")

    item = IdFilter(field_name="item_id")

    class Meta:
        model = GeneralizationQuestion
        fields = {"qtype": ["exact"], "validation_status": ["exact"]}


class StudyFilter(df.FilterSet):
    created_after = DateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = DateTimeFilter(field_name="created_at", lookup_expr="lt")
    split = df.ChoiceFilter(choices=Split.choices)
    source = df.CharFilter(method="filter_source", help_text="Studies that use this source (id or name).")
    mine = df.BooleanFilter(method="filter_mine", help_text="true: only studies I own.")

    dataset = IdFilter(field_name="dataset_id")

    class Meta:
        model = Study
        fields = {"kind": ["exact"], "status": ["exact"]}

    def filter_source(self, queryset, name, value):
        value = value.strip()
        if value.isdigit():
            if int(value) > MAX_ID:
                return queryset.none()
            return queryset.filter(sources__id=int(value)).distinct()
        return queryset.filter(sources__name=value).distinct()

    def filter_mine(self, queryset, name, value):
        user = self.request.user if self.request else None
        if value is None or user is None:
            return queryset
        return queryset.filter(owner=user) if value else queryset.filter(~Q(owner=user) | Q(owner__isnull=True))


class ImportRecordFilter(df.FilterSet):
    dataset = IdFilter(field_name="dataset_id")
    imported_after = DateTimeFilter(field_name="imported_at", lookup_expr="gte")
    imported_before = DateTimeFilter(field_name="imported_at", lookup_expr="lt")

    class Meta:
        model = ImportRecord
        fields = {"kind": ["exact"]}


class GenerationJobFilter(df.FilterSet):
    source = df.CharFilter(method="filter_source", help_text="Rationale source id or name.")
    dataset = IdFilter(field_name="dataset_id")
    split = df.ChoiceFilter(choices=Split.choices)
    created_after = DateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = DateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = GenerationJob
        fields = {"kind": ["exact"], "status": ["exact"]}

    def filter_source(self, queryset, name, value):
        return filter_source_id_or_name(queryset, "source", value)
