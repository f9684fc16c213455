"""The API's default pagination."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination


class ApiCursorPagination(CursorPagination):
    """Cursor pagination: pages stay correct while rows are added (no skipped or repeated rows).
    A cursor is the client's to send back as given: one made up or edited (a position that is not
    a value of the ordering's field) answers 404 "Invalid cursor", as DRF answers a cursor it cannot
    decode, instead of a 500 from the query it would build."""

    ordering = "id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000

    def paginate_queryset(self, queryset, request, view=None):
        try:
            return super().paginate_queryset(queryset, request, view)
        except (ValueError, TypeError, OverflowError, ValidationError):
            raise NotFound(self.invalid_cursor_message) from None
