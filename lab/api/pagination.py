"""The API's default pagination."""
from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from dataclasses import dataclass
from functools import reduce
from operator import and_, or_
from urllib.parse import parse_qs

from django.conf import settings
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db.models import F, Q
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination
from rest_framework.utils.urls import remove_query_param, replace_query_param


@dataclass(frozen=True)
class _Key:
    """One term of a page's order: ``name`` (as ``?ordering=`` gives it, ``pk`` read as the primary
    key), descending or not, the field its values are read and checked with, and whether it may hold
    NULL (read as larger than every value: last ascending, first descending, on every database)."""

    name: str
    descending: bool
    field: object
    nullable: bool

    @property
    def term(self) -> str:
        return f"-{self.name}" if self.descending else self.name


@dataclass(frozen=True)
class _Position:
    """Where a page starts: ``reverse`` (the page before ``values``, as ``previous`` links read) or
    not (the page after them); ``values`` None for the first (forward) or last (reverse) page."""

    reverse: bool
    values: tuple | None


class ApiCursorPagination(CursorPagination):
    """Cursor pagination: pages stay correct while rows are added (no skipped or repeated rows).
    A page is read by position, never by offset: the order is the requested one (``?ordering=``,
    else ``id``) with the primary key added as the last term (in the direction of the first), so no
    two rows tie, and a cursor holds the position of the row it follows (``next``) or precedes
    (``previous``) in all those terms. The next page is the rows strictly after it in that order
    (``(t > v) OR (t = v AND id > i)``, ``<`` for a descending term), the previous one those strictly
    before it, so rows sharing a timestamp (a platform task's ``created_at`` is whole seconds) are
    each read once whichever way the list is walked, and a row added or removed meanwhile moves no
    other. A cursor names the order it was made for.
    A cursor is the client's to send back as given: one made up or edited (not one this pager
    wrote, one for another ``ordering``, or a position that is not a value of the ordering's fields)
    answers 404 "Invalid cursor", as DRF answers a cursor it cannot decode, instead of a 500 from
    the query it would build. ``page_size`` is a whole number from 1 up; one over ``max_page_size``
    is read as it (DRF's cap), and one that is not a whole number of at least 1 (``0``, ``-5``,
    ``ten``) is a 400 naming the parameter and its range, never the default page size in silence
    (DRF's ``get_page_size`` falls back without a word)."""

    ordering = "id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000

    def paginate_queryset(self, queryset, request, view=None):
        try:
            return self._paginate(queryset, request, view)
        except (ValueError, TypeError, OverflowError, ValidationError):
            raise NotFound(self.invalid_cursor_message) from None

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw is not None:
            # ASCII digits only, as every id (``lab.ids.parse_id``): int() also reads "1_000" and other
            # scripts' digits ("٣"), which the documented format is not.
            text = raw.strip()
            digits = text.isascii() and text.isdigit()
            # A larger size is read as the largest (``super().get_page_size``), however many digits.
            size = (int(text) if len(text) <= 9 else self.max_page_size) if digits else 0
            if size < 1:
                raise exceptions.ValidationError({self.page_size_query_param: [
                    f"{raw!r} is not a page size: give a whole number from 1 to {self.max_page_size} (a larger "
                    f"one is read as {self.max_page_size}; without it a page holds {self.page_size} rows)."]})
        return super().get_page_size(request)

    # --- reading a page -------------------------------------------------------------------------

    def _paginate(self, queryset, request, view):
        self.request = request
        self.page_size = self.get_page_size(request)
        if not self.page_size:
            return None
        self.base_url = request.build_absolute_uri()
        self.keys = self._keys(queryset, self.get_ordering(request, queryset, view))
        self.ordering = tuple(key.term for key in self.keys)
        self.cursor = self.decode_cursor(request)
        position = self.cursor or _Position(reverse=False, values=None)

        queryset = queryset.order_by(*self._order_by(reverse=position.reverse))
        if position.values is not None:
            beyond = self._beyond(position.values, reverse=position.reverse)
            queryset = queryset.filter(beyond) if beyond is not None else queryset.none()
        rows = list(queryset[:self.page_size + 1])
        more = len(rows) > self.page_size
        self.page = rows[:self.page_size]
        if position.reverse:
            self.page.reverse()

        # The links: ``None`` for none, ``_FIRST`` for the first page (no cursor), else a position.
        first_row = self._values_of(self.page[0]) if self.page else None
        last_row = self._values_of(self.page[-1]) if self.page else None
        if not position.reverse:
            self._next = _Position(False, last_row) if more else None
            if position.values is None:
                self._previous = None
            else:  # the rows before this page's first; with none after the cursor: the last page
                self._previous = _Position(True, first_row)
        else:
            self._previous = _Position(True, first_row) if more else None
            if position.values is None:
                self._next = None
            elif self.page:
                self._next = _Position(False, last_row)
            else:  # nothing before the cursor: the next page is the first
                self._next = _FIRST
        self.has_next = self._next is not None
        self.has_previous = self._previous is not None
        if (self.has_previous or self.has_next) and self.template is not None:
            self.display_page_controls = True
        return self.page

    def _keys(self, queryset, ordering) -> list[_Key]:
        """The terms of ``ordering`` up to the primary key, then the primary key if not among them."""
        meta = queryset.model._meta
        keys: list[_Key] = []
        for term in ordering:
            name = term.lstrip("-")
            if any(key.name == name for key in keys):
                continue
            keys.append(self._key(queryset, name, term.startswith("-")))
            if keys[-1].field is meta.pk:
                return keys
        keys.append(_Key(name=meta.pk.attname, descending=bool(keys) and keys[0].descending, field=meta.pk,
                         nullable=False))
        return keys

    @staticmethod
    def _key(queryset, name: str, descending: bool) -> _Key:
        meta = queryset.model._meta
        if name == "pk":
            return _Key(name=meta.pk.attname, descending=descending, field=meta.pk, nullable=False)
        annotation = queryset.query.annotations.get(name)
        if annotation is not None:
            return _Key(name=name, descending=descending, field=annotation.output_field, nullable=True)
        try:
            field = meta.get_field(name)
        except FieldDoesNotExist:
            raise ValueError(f"cannot order pages by {name!r}") from None
        if field.is_relation:  # a relation orders by its key, read as the column it is stored in
            name = field.attname
        return _Key(name=name, descending=descending, field=field, nullable=field.null)

    def _order_by(self, *, reverse: bool) -> list:
        terms = []
        for key in self.keys:
            descending = key.descending != reverse
            if key.nullable:  # NULL is the largest value on SQLite and PostgreSQL alike
                terms.append(F(key.name).desc(nulls_first=True) if descending else F(key.name).asc(nulls_last=True))
            else:
                terms.append(f"-{key.name}" if descending else key.name)
        return terms

    def _beyond(self, values: tuple, *, reverse: bool) -> Q | None:
        """The rows strictly after ``values`` in the page order (strictly before them if ``reverse``):
        ``(t1 > v1) OR (t1 = v1 AND t2 > v2) OR ...``, ``<`` for a term read descending; None when
        no row can be."""
        disjuncts = []
        equal_so_far: list[Q] = []
        for key, value in zip(self.keys, values, strict=True):
            after = self._after(key, value, descending=key.descending != reverse)
            if after is not None:
                disjuncts.append(reduce(and_, [*equal_so_far, after]))
            equal_so_far.append(Q(**{f"{key.name}__isnull": True}) if value is None else Q(**{key.name: value}))
        if not disjuncts:
            return None
        beyond = reduce(or_, disjuncts)
        # The first term's bound alone, so the database can read its index from the cursor on.
        head, value = self.keys[0], values[0]
        if len(self.keys) > 1 and value is not None:
            if head.descending != reverse:
                beyond &= Q(**{f"{head.name}__lte": value})
            else:
                bound = Q(**{f"{head.name}__gte": value})
                beyond &= (bound | Q(**{f"{head.name}__isnull": True})) if head.nullable else bound
        return beyond

    @staticmethod
    def _after(key: _Key, value, *, descending: bool) -> Q | None:
        """Rows whose ``key`` comes strictly after ``value`` read ascending or ``descending``, NULL
        being larger than every value; None for none."""
        if value is None:
            return Q(**{f"{key.name}__isnull": False}) if descending else None
        if descending:
            return Q(**{f"{key.name}__lt": value})
        after = Q(**{f"{key.name}__gt": value})
        return after | Q(**{f"{key.name}__isnull": True}) if key.nullable else after

    def _values_of(self, instance) -> tuple:
        if isinstance(instance, dict):
            return tuple(instance[key.name] for key in self.keys)
        return tuple(getattr(instance, key.name) for key in self.keys)

    # --- links and cursors ----------------------------------------------------------------------

    def get_next_link(self):
        return self._link(self._next)

    def get_previous_link(self):
        return self._link(self._previous)

    def _link(self, position):
        if position is None:
            return None
        if position is _FIRST:
            return remove_query_param(self.base_url, self.cursor_query_param)
        return replace_query_param(self.base_url, self.cursor_query_param, self.encode_cursor(position))

    def encode_cursor(self, cursor: _Position) -> str:
        """URL-safe base64 of ``{"o": [order terms], "r": 0|1, "p": [values]}`` (``p`` left out for
        the last page)."""
        body: dict = {"o": list(self.ordering), "r": int(cursor.reverse)}
        if cursor.values is not None:
            body["p"] = [_dumped(value) for value in cursor.values]
        raw = json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode("ascii")
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    def decode_cursor(self, request) -> _Position | None:
        """The position ``?cursor=`` names, None without one; 404 "Invalid cursor" for one this pager
        would not have written for this order: not its encoding, another order's, or a position
        that is not a value of each term's field (in the form ``encode_cursor`` writes it)."""
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        if len(encoded) > MAX_CURSOR_LENGTH:
            raise NotFound(self.invalid_cursor_message)
        try:
            body = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("ascii"))
        except (binascii.Error, UnicodeError, ValueError, RecursionError):
            earlier = self._earlier_cursor(encoded)
            if earlier is None:
                raise NotFound(self.invalid_cursor_message) from None
            return earlier
        if (not isinstance(body, dict) or set(body) - {"o", "r", "p"} or body.get("o") != list(self.ordering)
                or body.get("r") not in (0, 1) or isinstance(body.get("r"), bool)):
            raise NotFound(self.invalid_cursor_message)
        reverse = body["r"] == 1
        if "p" not in body:
            if not reverse:  # the first page has no cursor
                raise NotFound(self.invalid_cursor_message)
            return _Position(reverse=True, values=None)
        raw = body["p"]
        if not isinstance(raw, list) or len(raw) != len(self.keys):
            raise NotFound(self.invalid_cursor_message)
        values = tuple(self._loaded(key, value) for key, value in zip(self.keys, raw, strict=True))
        return _Position(reverse=reverse, values=values)

    def _earlier_cursor(self, encoded: str) -> _Position | None:
        """A cursor the earlier pager (DRF's position and offset: base64 of ``o=&r=&p=``) wrote, read
        where it names a row exactly: a list in id order (``?ordering=id`` or ``-id``, the default),
        whose position is an id and whose offset is 0. A client that saved a ``next`` link before
        this pager shipped goes on from where it was instead of starting again (and reading rows
        twice); any other earlier cursor is None (404 "Invalid cursor"), as it cannot be placed."""
        if len(self.keys) != 1 or not self.keys[0].field.primary_key:
            return None
        try:
            tokens = parse_qs(base64.b64decode(encoded.encode("ascii"), validate=True).decode("ascii"),
                              keep_blank_values=True, strict_parsing=True)
        except (binascii.Error, UnicodeError, ValueError):
            return None
        if set(tokens) - {"o", "r", "p"} or any(len(values) != 1 for values in tokens.values()):
            return None
        offset, reverse, position = (tokens.get(name, [""])[0] for name in ("o", "r", "p"))
        if offset not in ("", "0") or reverse not in ("", "1"):
            return None
        if not position:
            return _Position(reverse=True, values=None) if reverse else None
        if not (position.isascii() and position.isdigit()) or len(position) > 18:
            return None
        return _Position(reverse=bool(reverse), values=(int(position),))

    def _loaded(self, key: _Key, raw):
        """``raw`` read as a value of ``key``'s field, only if ``encode_cursor`` writes that value so."""
        if raw is None:
            if key.nullable:
                return None
            raise NotFound(self.invalid_cursor_message)
        if not isinstance(raw, str | int | float) or isinstance(raw, str) and "\x00" in raw:
            raise NotFound(self.invalid_cursor_message)  # PostgreSQL's text holds no NUL
        try:
            value = key.field.to_python(raw)
            key.field.run_validators(value)
        except (ValidationError, ValueError, TypeError, OverflowError):
            raise NotFound(self.invalid_cursor_message) from None
        written = _dumped(value)
        if value is None or type(written) is not type(raw) or written != raw:
            raise NotFound(self.invalid_cursor_message)
        if isinstance(value, dt.datetime) and settings.USE_TZ and timezone.is_naive(value):
            raise NotFound(self.invalid_cursor_message)
        return value


# A cursor holds a few values of the list's fields; the ones this pager writes are far shorter.
MAX_CURSOR_LENGTH = 4096
_FIRST = object()  # a link to the first page: the list's address without a cursor


def _dumped(value):
    """``value`` as a cursor holds it (JSON): a date or time in ISO 8601, anything else not JSON's as text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    return str(value)  # Decimal, UUID
