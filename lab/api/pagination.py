"""The API's default pagination."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from rest_framework import exceptions
from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination


class ApiCursorPagination(CursorPagination):
    """Cursor pagination: pages stay correct while rows are added (no skipped or repeated rows).
    A cursor is the client's to send back as given: one made up or edited (a position that is not
    a value of the ordering's field) answers 404 "Invalid cursor", as DRF answers a cursor it cannot
    decode, instead of a 500 from the query it would build. ``page_size`` is a whole number from 1
    up; one over ``max_page_size`` is read as it (DRF's cap), and one that is not a whole number of
    at least 1 (``0``, ``-5``, ``ten``) is a 400 naming the parameter and its range, never the
    default page size in silence (DRF's ``get_page_size`` falls back without a word)."""

    ordering = "id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000

    def paginate_queryset(self, queryset, request, view=None):
        try:
            return super().paginate_queryset(queryset, request, view)
        except (ValueError, TypeError, OverflowError, ValidationError):
            raise NotFound(self.invalid_cursor_message) from None

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw is not None:
            try:
                size = int(raw)
            except ValueError:
                size = 0
            if size < 1:
                raise exceptions.ValidationError({self.page_size_query_param: [
                    f"{raw!r} is not a page size: give a whole number from 1 to {self.max_page_size} (a larger "
                    f"one is read as {self.max_page_size}; without it a page holds {self.page_size} rows)."]})
        return super().get_page_size(request)
