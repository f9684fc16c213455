"""Per-study access in the admin: every admin of something that belongs to a study mixes in
``StudyScopedAdmin``, and every admin that shows crowdworkers mixes in ``RawWorkerIdsAdmin``.

Both read the one definition in ``studies.selectors`` (``studies_for_user``,
``user_may_see_raw_worker_ids``): lists hold only rows of studies the user may see, a change page
of another researcher's study answers 404 (as if it did not exist), changing and deleting need
CHANGE access to the row's study, study choices in forms and list filters offer only those
studies, and raw platform worker ids appear only for holders of ``studies.view_raw_worker_ids``.
Django's own model permissions still apply on top. Both, and every other admin base of the apps,
are ``LookupGuardAdmin``s: a list's address filters only by what its filters offer, so that it
cannot be asked about rows, relations or raw ids the user may not read."""
from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.exceptions import NotRegistered
from django.contrib.admin.utils import NotRelationField, get_fields_from_path
from django.core.exceptions import BadRequest, FieldDoesNotExist, ValidationError
from django.db import models
from django.db.models.constants import LOOKUP_SEP

from lab.ids import MAX_ID, parse_id
from studies.models import Study
from studies.selectors import CHANGE, VIEW, studies_for_user, user_may_see_raw_worker_ids


class LookupGuardAdmin(admin.ModelAdmin):
    """What a list's query string may filter on (``lookup_allowed``, asked by Django for every
    parameter of a changelist's address). Django accepts any lookup on a row's own fields and any
    one-relation lookup, reverse ones included, so an address was an oracle into rows the user may
    not read: ``?external_id__startswith=`` spelled out raw worker ids, ``?assignments__gt=`` and
    ``?blocks__isnull=`` told what a worker did in other researchers' studies, ``?studies=`` what a
    hidden study draws. Allowed here, and nothing else (a refusal is a 400 naming the lookup and why):

    - a relation only where the list filters by it: a ``list_filter`` entry, the ``date_hierarchy``,
      or ``linked_lookups`` (the relations the app's own pages link to, e.g. ``?study__id__exact=``);
      a related row is reached by its id, never by another of its fields unless that is a filter;
    - no field that holds raw worker ids (``raw_worker_id_fields``, here or on the field's own
      model's admin) unless the user may see them (``user_may_see_raw_worker_ids``);
    - the lookups ``exact``, ``in``, ``isnull``; ``gt``/``gte``/``lt``/``lte`` on a date;
      ``has_key`` on a JSON field; the date hierarchy's ``__year``/``__month``/``__day``: no
      ``startswith``, ``contains``, ``regex``, ``iexact`` or transform;
    - values the field can hold: a whole number within ``lab.ids.MAX_ID`` for an integer or an id
      (a longer one was a 500), a date for a date;
    - a ``SimpleListFilter``'s own parameter, whose class reads the value."""

    raw_worker_id_fields: tuple[str, ...] = ()
    linked_lookups: tuple[str, ...] = ()

    def lookup_allowed(self, lookup, value, request=None):
        reason = self.lookup_refusal(lookup, value, request)
        if reason:
            shown = lookup if len(lookup) <= 80 else lookup[:80] + "…"
            raise BadRequest(f"The list of {self.model._meta.verbose_name_plural} cannot be filtered by "
                             f"{shown!r}: {reason}.")
        return super().lookup_allowed(lookup, value, request)

    def _filter_names(self, request) -> tuple[set[str], set[str]]:
        """(the field paths the list filters by, the parameters of its own filter classes)."""
        paths, parameters = {*self.linked_lookups}, set()
        if self.date_hierarchy:
            paths.add(self.date_hierarchy)
        for entry in self.get_list_filter(request) if request is not None else self.list_filter:
            if isinstance(entry, (list, tuple)):
                paths.add(entry[0])
            elif isinstance(entry, str):
                paths.add(entry)
            elif getattr(entry, "parameter_name", None):
                parameters.add(entry.parameter_name)
        return paths, parameters

    def lookup_refusal(self, lookup: str, value: str, request) -> str | None:
        """Why ``?lookup=value`` may not filter this list for ``request``'s user, or None."""
        paths, parameters = self._filter_names(request)
        if lookup in parameters:
            return None
        hierarchy = self.date_hierarchy
        if hierarchy and lookup.startswith(hierarchy + LOOKUP_SEP) and lookup.rsplit(LOOKUP_SEP, 1)[1] in DATE_PARTS:
            part = lookup.rsplit(LOOKUP_SEP, 1)[1]
            low, high = DATE_PARTS[part]
            number = parse_id(value)
            return None if number is not None and low <= number <= high else (
                f"a {part} is a whole number from {low} to {high}")
        fields, names, rest = _walk(self.model, lookup)
        if not fields:
            return "it names no field of this list"
        raw = next((f for f in fields if not f.is_relation and f.name in self._raw_fields(f.model)), None)
        if raw is not None and not (request is not None and user_may_see_raw_worker_ids(request.user)):
            return (f"{raw.model._meta.verbose_name}.{raw.name} holds raw platform worker ids, which only "
                    f"holders of studies.view_raw_worker_ids may filter by")
        if any(f.is_relation for f in fields):
            relation = LOOKUP_SEP.join(names)
            if relation not in paths:
                kind = "a reverse or many-to-many relation" if _to_many(fields) else "a relation"
                return (f"{relation!r} follows {kind} this list does not filter by "
                        f"(its filters: {', '.join(sorted(paths)) or 'none'})")
        if len(rest) > 1:
            return f"{LOOKUP_SEP.join(rest)!r} is not a lookup a list filter uses"
        kind = rest[0] if rest else "exact"
        leaf = fields[-1]
        if kind == "isnull" or (kind == "has_key" and isinstance(leaf, models.JSONField)):
            return None
        if kind in ("gt", "gte", "lt", "lte") and not isinstance(leaf, models.DateField):
            return f"{kind!r} compares dates only ({leaf.name} is no date)"
        if kind not in ("exact", "in", "gt", "gte", "lt", "lte"):
            return f"{kind!r} is not a lookup a list filter uses (exact, in, isnull, a date's gt/gte/lt/lte, has_key)"
        for text in value.split(",") if kind == "in" else [value]:
            problem = _value_refusal(leaf, text)
            if problem:
                return problem
        return None

    def _raw_fields(self, model) -> set[str]:
        """The raw worker id fields of ``model``: this admin's, and those its own admin declares."""
        try:
            declared = getattr(self.admin_site.get_model_admin(model), "raw_worker_id_fields", ())
        except NotRegistered:
            declared = ()
        return {*self.raw_worker_id_fields, *declared}


# The date hierarchy's parts and their ranges (Django builds a datetime from them: a year past 9999 was a 500).
DATE_PARTS = {"year": (1, 9999), "month": (1, 12), "day": (1, 31)}


def _walk(model, lookup: str) -> tuple[list, list[str], list[str]]:
    """The fields ``lookup`` names from ``model`` on, the names of those a filter must list (a related
    row's own id left out: ``study__id`` is the filter ``study``), and the lookup parts after them."""
    parts = lookup.split(LOOKUP_SEP)
    fields, names = [], []
    opts = model._meta
    for i, part in enumerate(parts):
        try:
            field = opts.pk if part == "pk" else opts.get_field(part)
        except FieldDoesNotExist:
            return fields, names, parts[i:]
        if not (fields and fields[-1].is_relation and not field.is_relation and field.primary_key):
            names.append(part)
        fields.append(field)
        if not field.is_relation:
            return fields, names, parts[i + 1:]
        if field.related_model is None:  # a generic relation: nothing here filters through one
            return fields, names, ["generic"]
        opts = field.related_model._meta
    return fields, names, []


def _to_many(fields) -> bool:
    return any(f.is_relation and (f.auto_created or f.many_to_many) for f in fields)


def _value_refusal(field, text: str) -> str | None:
    """Why ``text`` is no value of ``field`` (a relation: of the related row's id), or None."""
    if field.is_relation:
        field = field.related_model._meta.pk
    if isinstance(field, models.IntegerField):
        if parse_id(text.strip().removeprefix("-")) is None:
            return f"{field.name} is a whole number up to {MAX_ID}"
        return None
    try:
        field.to_python(text)
    except (ValidationError, ValueError, TypeError):
        return f"the value is not a valid {field.name}"
    return None


class StudyScopedAdmin(LookupGuardAdmin):
    """``study_path``: the lookup from this model to its study (``"study"``, ``"claim__study"``;
    ``"pk"`` for the Study admin itself)."""

    study_path = "study"

    def _studies(self, request, access: str = VIEW):
        return studies_for_user(user=request.user, access=access)

    def _in_studies(self, request, access: str = VIEW) -> dict:
        """The filter "belongs to a study the user may reach", as a subquery on ids so that a
        path through a to-many relation (a participant's assignments) repeats no row."""
        rows = self.model._default_manager.filter(**{f"{self.study_path}__in": self._studies(request, access)})
        return {"pk__in": rows.values("pk")}

    def get_queryset(self, request):
        return super().get_queryset(request).filter(**self._in_studies(request))

    def _row_in(self, request, obj, access: str) -> bool:
        return self.model._default_manager.filter(
            **{f"{self.study_path}__in": self._studies(request, access)}, pk=obj.pk
        ).exists()

    def has_view_permission(self, request, obj=None):
        allowed = super().has_view_permission(request, obj)
        return allowed and (obj is None or self._row_in(request, obj, VIEW))

    def has_change_permission(self, request, obj=None):
        allowed = super().has_change_permission(request, obj)
        return allowed and (obj is None or self._row_in(request, obj, CHANGE))

    def has_delete_permission(self, request, obj=None):
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or self._row_in(request, obj, CHANGE))

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.related_model is Study:
            kwargs["queryset"] = self._studies(request, CHANGE)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_list_filter(self, request):
        """Relation filters list only the values present in the rows the user may see (a plain
        filter on ``study`` would list every study's name)."""
        out = []
        for entry in super().get_list_filter(request):
            if isinstance(entry, str) and _is_relation(self.model, entry):
                entry = (entry, admin.RelatedOnlyFieldListFilter)
            out.append(entry)
        return out


def _is_relation(model, path: str) -> bool:
    try:
        return get_fields_from_path(model, path)[-1].is_relation
    except (FieldDoesNotExist, NotRelationField):
        return False


class RawWorkerIdsAdmin(LookupGuardAdmin):
    """``raw_worker_id_fields``: fields holding raw platform worker ids; shown, searched, listed
    and filtered by (``LookupGuardAdmin``) only for users who may see raw worker ids."""

    raw_worker_id_fields: tuple[str, ...] = ()

    def _hide(self, request, names):
        if user_may_see_raw_worker_ids(request.user):
            return list(names)
        raw = set(self.raw_worker_id_fields)
        return [n for n in names if not isinstance(n, str) or (n not in raw and n.split("__")[-1] not in raw)]

    def get_list_display(self, request):
        return self._hide(request, super().get_list_display(request))

    def get_search_fields(self, request):
        return self._hide(request, super().get_search_fields(request))

    def get_fields(self, request, obj=None):
        return self._hide(request, super().get_fields(request, obj))

    def get_readonly_fields(self, request, obj=None):
        return self._hide(request, super().get_readonly_fields(request, obj))
