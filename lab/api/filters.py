"""Filter fields the API's filter sets share: ids and other whole numbers that cannot overflow the
database, yes/no parameters read by one rule (``parse_boolean``), UTC date-times, and "a related
object by id or by name"; the base filter set that uses them for model fields (``ApiFilterSet``);
the filter backend that answers 400 to a query parameter the endpoint does not read, and the
ordering backend that answers 400 to an ``ordering`` term the list cannot order by (both
``REST_FRAMEWORK``'s defaults)."""
from __future__ import annotations

import datetime as dt

import django_filters as df
from django import forms
from django.db import models
from django.db.backends.base.operations import BaseDatabaseOperations
from django.utils import timezone
from django_filters.fields import IsoDateTimeField
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import ValidationError
from rest_framework.filters import OrderingFilter
from rest_framework.settings import api_settings

from lab.ids import MAX_ID, parse_id


class WholeNumberFilter(df.NumberFilter):
    """A whole number from ``min_value`` to ``max_value``: a fraction (``0.99``) or a value out of
    range is a 400 naming the parameter, never truncated to a whole number (django-filter's
    ``NumberFilter`` reads a decimal and the database compares its integer part) nor sent to the
    database to overflow. The schema documents it as an integer with that range (django-filter's
    number filter is documented as a "number", which a client may send with a fraction)."""

    field_class = forms.IntegerField

    def __init__(self, *args, min_value: int, max_value: int, **kwargs):
        super().__init__(*args, min_value=min_value, max_value=max_value, **kwargs)
        schema = {"type": "integer", "minimum": min_value, "maximum": max_value}
        if kwargs.get("help_text"):
            schema["description"] = str(kwargs["help_text"])
        self._spectacular_annotation = {"field": schema}  # drf-spectacular's extend_schema_field


class IdFilter(WholeNumberFilter):
    """An id: a whole number from 1 to 2^63-1 (bigger values are a 400, not a database overflow)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(*args, **kwargs)


def integer_field_filter(field: models.Field) -> dict:
    """``ApiFilterSet``'s filter for an integer model field: a ``WholeNumberFilter`` over the
    range every database stores for the field's type."""
    low, high = BaseDatabaseOperations.integer_field_ranges[field.get_internal_type()]
    return {"min_value": low, "max_value": high}


# The one rule for a yes/no query parameter of the API: each boolean filter and
# ``include_raw_worker_ids`` (``studies.api.access``). Any case; an empty value is "not given".
TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")
BOOLEAN_WORDS_TEXT = f"{', '.join(TRUE_WORDS)} for yes, or {', '.join(FALSE_WORDS)} for no (any case)"


def boolean_problem(name: str, value: str) -> str:
    """The 400's message for ``name=value`` that is not one of the yes/no words."""
    return f"{name}: {value!r} is not a yes/no value. It accepts {BOOLEAN_WORDS_TEXT}."


def parse_boolean(value: str | None) -> bool | None:
    """``True`` or ``False`` for one of the yes/no words, ``None`` for no value (absent or empty);
    ``ValueError`` for anything else, which no caller may read as "no filter" or as "no"."""
    if value is None or not value.strip():
        return None
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(value)


def boolean_query_param(request, name: str) -> bool | None:
    """The yes/no query parameter ``name`` of ``request`` (``parse_boolean``), a 400 naming it and
    the accepted words when it is anything else."""
    value = request.query_params.get(name)
    try:
        return parse_boolean(value)
    except ValueError:
        raise ValidationError({name: [boolean_problem(name, value)]}) from None


class BooleanField(forms.Field):
    """The form field of ``BooleanFilter``: the raw text of the parameter (a text widget, not
    Django's ``NullBooleanSelect``, which reads only true/True/false/False/2/3 and every other
    spelling as "no filter"), read by ``parse_boolean``."""

    widget = forms.TextInput

    def __init__(self, *args, param_name: str = "", **kwargs):
        self.param_name = param_name
        super().__init__(*args, **kwargs)

    def to_python(self, value):
        try:
            return parse_boolean(value)
        except ValueError:
            raise forms.ValidationError(boolean_problem(self.param_name or "value", value), code="invalid") from None

    def validate(self, value):
        if value is None and self.required:
            raise forms.ValidationError(self.error_messages["required"], code="required")


class BooleanFilter(df.BooleanFilter):
    """A yes/no filter read by the API's one rule (``parse_boolean``): ``true``/``1``/``yes``/``on``,
    ``false``/``0``/``no``/``off``, any case; anything else is a 400 naming the parameter."""

    field_class = BooleanField

    @property
    def field(self):
        if not hasattr(self, "_field"):
            self.extra.setdefault("param_name", self.field_name)
        return super().field


class ApiFilterSet(df.FilterSet):
    """The base of the API's filter sets: a model's boolean field is filtered by ``BooleanFilter``
    and an integer field by a ``WholeNumberFilter`` over its type's range (django-filter's defaults
    read every spelling but six as "no filter" and truncate fractions). A filter declared on the
    set itself (``gen_u``'s range, ``mine``) uses the same classes."""

    FILTER_DEFAULTS = {
        **df.FilterSet.FILTER_DEFAULTS,
        models.BooleanField: {"filter_class": BooleanFilter},
        models.NullBooleanField: {"filter_class": BooleanFilter},
        **{
            field_class: {"filter_class": WholeNumberFilter, "extra": integer_field_filter}
            for field_class in (
                models.AutoField, models.BigAutoField, models.SmallAutoField, models.IntegerField,
                models.SmallIntegerField, models.BigIntegerField, models.PositiveIntegerField,
                models.PositiveSmallIntegerField, models.PositiveBigIntegerField,
            )
        },
    }


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
    would be every row. A parameter given more than once is refused too: each endpoint reads one
    value of each (the last), so ``?mine=banana&mine=1`` passed while ``?mine=1&mine=banana`` was a
    400, and ``?mine=1&mine=0`` meant 0 without a word."""
    unknown = sorted(set(params) - accepted)
    if unknown:
        listed = ", ".join(sorted(accepted))
        raise ValidationError({
            name: [f"Unknown query parameter {name!r}: this endpoint does not read it. It accepts: {listed}."]
            for name in unknown
        })
    repeated = sorted(name for name in params if len(params.getlist(name)) > 1)
    if repeated:
        raise ValidationError({
            name: [f"Query parameter {name!r} is given {len(params.getlist(name))} times: give it once "
                   "(a list of workers is comma-separated in one value)."]
            for name in repeated
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

    def schema_queryset(self, view):
        """The queryset ``get_valid_fields`` needs to list the terms while the schema is built: none
        when the view names its ``ordering_fields`` (every list of the API does), as the list alone
        gives them; otherwise, on the schema's fake views (drf-spectacular's ``swagger_fake_view``,
        built without a real request to read a user's queryset from), the view's class
        ``queryset`` when it declares one, and ``get_queryset()`` only as the last resort."""
        fields = getattr(view, "ordering_fields", self.ordering_fields)
        if fields is not None and fields != "__all__":
            return None
        if getattr(view, "swagger_fake_view", False) and getattr(view, "queryset", None) is not None:
            return view.queryset.all()
        return view.get_queryset()

    def get_schema_operation_parameters(self, view):
        """DRF documents ``ordering`` as a bare string, so a client learns which terms a list takes
        only from a 400. The schema lists them instead (a comma-separated array of those terms),
        computed by ``get_ordering_terms``, the same source the filter validates against, so the
        documented and the accepted terms cannot drift apart."""
        terms = self.get_ordering_terms(self.schema_queryset(view), view, {"request": getattr(view, "request", None)})
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
