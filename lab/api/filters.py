"""Filter fields the API's filter sets share: ids that cannot overflow the database, UTC date-times,
and "a related object by id or by name"; the filter backend that answers 400 to a query parameter
the endpoint does not read, and the ordering backend that answers 400 to an ``ordering`` term the
list cannot order by (both ``REST_FRAMEWORK``'s defaults)."""
from __future__ import annotations

import datetime as dt

import django_filters as df
from django import forms
from django.utils import timezone
from django_filters.fields import IsoDateTimeField
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import ValidationError
from rest_framework.filters import OrderingFilter
from rest_framework.settings import api_settings

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


# The query parameters a paginator or a filter backend reads itself (DRF's names for them).
PAGINATOR_PARAM_ATTRIBUTES = (
    "cursor_query_param", "page_query_param", "page_size_query_param", "limit_query_param", "offset_query_param",
)
BACKEND_PARAM_ATTRIBUTES = ("ordering_param", "search_param")


def accepted_query_params(view, *, filterset_class=None, extra=()) -> set[str]:
    """The query parameters ``view`` reads: the filters of ``filterset_class``, its paginator's and
    filter backends' own (``cursor``, ``page_size``, ``ordering``), DRF's ``format``, the view's
    ``extra_query_params`` (those it reads on purpose, e.g. ``include_raw_worker_ids``) and ``extra``."""
    accepted = set(extra) | set(getattr(view, "extra_query_params", ()))
    if filterset_class is not None:
        accepted |= set(filterset_class.base_filters)
    if api_settings.URL_FORMAT_OVERRIDE:
        accepted.add(api_settings.URL_FORMAT_OVERRIDE)
    paginator = getattr(view, "paginator", None)
    for attribute in PAGINATOR_PARAM_ATTRIBUTES:
        if paginator is not None and getattr(paginator, attribute, None):
            accepted.add(getattr(paginator, attribute))
    for backend in getattr(view, "filter_backends", ()):
        for attribute in BACKEND_PARAM_ATTRIBUTES:
            if getattr(backend, attribute, None):
                accepted.add(getattr(backend, attribute))
    return accepted


def reject_unknown_query_params(*, params, accepted: set[str]) -> None:
    """400 naming each query parameter not in ``accepted``, with the ones that are. A parameter the
    endpoint does not read would otherwise be ignored without a word, and a "filtered" list or export
    would be every row."""
    unknown = sorted(set(params) - accepted)
    if unknown:
        listed = ", ".join(sorted(accepted))
        raise ValidationError({
            name: [f"Unknown query parameter {name!r}: this endpoint does not read it. It accepts: {listed}."]
            for name in unknown
        })


class StrictDjangoFilterBackend(DjangoFilterBackend):
    """django-filter's backend that answers 400 to a query parameter that is neither a filter of
    the view's filter set nor one the view reads otherwise (``accepted_query_params``)."""

    def filter_queryset(self, request, queryset, view):
        filterset_class = self.get_filterset_class(view, queryset)
        reject_unknown_query_params(
            params=request.query_params, accepted=accepted_query_params(view, filterset_class=filterset_class)
        )
        return super().filter_queryset(request, queryset, view)


class StrictOrderingFilter(OrderingFilter):
    """DRF's ordering backend that answers 400 to an ``ordering`` term (``-`` for descending
    stripped) that is not one of the view's ``ordering_fields``, naming it and the fields it may
    order by. DRF's drops such a term without a word (``remove_invalid_fields``): ``-answerd_at``
    gave the default order, oldest first, to a script paging newest first. A field left out of
    ``ordering_fields`` on purpose (a raw worker id) is refused the same way."""

    def get_ordering(self, request, queryset, view):
        params = request.query_params.get(self.ordering_param)
        if params:
            terms = [param.strip() for param in params.split(",")]
            valid = [name for name, _label in self.get_valid_fields(queryset, view, {"request": request})]
            invalid = [term for term in terms if term.removeprefix("-") not in valid]
            if invalid:
                listed = ", ".join(sorted(valid))
                raise ValidationError({self.ordering_param: [
                    f"{term!r} is not a field this list can be ordered by. It orders by: {listed} (a leading '-' "
                    f"for descending, several separated by commas)." for term in invalid
                ]})
        return super().get_ordering(request, queryset, view)

    def get_ordering_terms(self, queryset, view, context) -> list[str]:
        """Every term ``?ordering=`` accepts: each of ``get_valid_fields`` (what ``get_ordering``
        checks against) and its ``-`` form, sorted as the 400 lists them."""
        fields = sorted(name for name, _label in self.get_valid_fields(queryset, view, context))
        return [term for name in fields for term in (name, f"-{name}")]

    def get_schema_operation_parameters(self, view):
        """DRF documents ``ordering`` as a bare string, so a client learns which terms a list takes
        only from a 400. The schema lists them instead (a comma-separated array of those terms),
        computed by ``get_ordering_terms`` from the view's queryset, the same source the filter
        validates against, so the documented and the accepted terms cannot drift apart."""
        terms = self.get_ordering_terms(view.get_queryset(), view, {"request": getattr(view, "request", None)})
        listed = ", ".join(f"`{term}`" for term in terms)
        (parameter,) = super().get_schema_operation_parameters(view)
        parameter.update({
            "description": (
                f"{parameter['description']} One or several of {listed}, separated by commas (a leading "
                f"'-' for descending); any other term is a 400."
            ),
            "schema": {"type": "array", "items": {"type": "string", "enum": terms}},
            "style": "form",
            "explode": False,
        })
        return [parameter]
