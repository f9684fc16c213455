"""Cells that a spreadsheet will not run: text starting with ``=``, ``+``, ``-``, ``@``, a tab or
a carriage return is read as a formula by Excel, LibreOffice and Google Sheets ("CSV injection"),
so such text gets a leading apostrophe (OWASP's rule). Numbers, booleans and None pass unchanged.

Every CSV the app writes goes through :func:`csv_writer` (the API's streamed exports, the
``score_study`` folder, the report's zip); JSON lines, Parquet and ``results.json`` stay exact."""
from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value):
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


class SafeCSVWriter:
    """``csv.writer`` whose every cell is :func:`spreadsheet_safe`. Rows end with CRLF (RFC 4180),
    so a carriage return or line feed inside a cell is quoted and cannot break a row (with a bare
    ``\\n`` terminator Python's writer leaves a lone ``\\r`` unquoted)."""

    def __init__(self, fh: Any):
        self._writer = csv.writer(fh, lineterminator="\r\n")

    def writerow(self, row: Iterable[Any]) -> None:
        self._writer.writerow([spreadsheet_safe(value) for value in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        self._writer.writerows([spreadsheet_safe(value) for value in row] for row in rows)


def csv_writer(fh: Any) -> SafeCSVWriter:
    return SafeCSVWriter(fh)
