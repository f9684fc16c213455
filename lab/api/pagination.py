"""The API's default pagination."""
from __future__ import annotations

from rest_framework.pagination import CursorPagination


class ApiCursorPagination(CursorPagination):
    """Cursor pagination: pages stay correct while rows are added (no skipped or repeated rows)."""

    ordering = "id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000
