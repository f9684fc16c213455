"""Filter fields the API's filter sets share: ids that cannot overflow the database, UTC date-times,
and "a related object by id or by name"."""
from __future__ import annotations

import datetime as dt

import django_filters as df
from django import forms
from django.utils import timezone
from django_filters.fields import IsoDateTimeField

from lab.ids import MAX_ID, parse_id


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


def filter_id_or_name(queryset, field_prefix: str, value: str):
    """``source=12`` or ``source=gpt3``: a related object by id or by its ``name``."""
    value = value.strip()
    if value.isascii() and value.isdigit():
        pk = parse_id(value)
        return queryset.none() if pk is None else queryset.filter(**{f"{field_prefix}__pk": pk})
    return queryset.filter(**{f"{field_prefix}__name": value})
