"""Cells that a spreadsheet will not run: text starting with ``=``, ``+``, ``-``, ``@``, a tab or
a carriage return is read as a formula by Excel, LibreOffice and Google Sheets ("CSV injection"),
so such text gets a leading apostrophe (OWASP's rule). Numbers, booleans and None pass unchanged.

Every CSV the app writes goes through :func:`csv_writer` (the API's streamed exports, the
``score_study`` folder, the report's zip); JSON lines, Parquet and ``results.json`` stay exact."""
from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value):
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


_BOOL_TEXT = {True: "true", False: "false"}


class SafeCSVWriter:
    """``csv.writer`` whose every text cell is :func:`spreadsheet_safe`. Rows end with CRLF (RFC
    4180), so a carriage return or line feed inside a cell is quoted and cannot break a row (with a
    bare ``\\n`` terminator Python's writer leaves a lone ``\\r`` unquoted).

    ``kinds`` (one per column: ``str``, ``int``, ``float``, ``bool``, ``datetime``) lets the writer
    touch only the cells that need it: text is neutralised, booleans written ``true`` / ``false``,
    datetimes in ISO 8601, numbers as they are. Without ``kinds`` every cell is checked."""

    def __init__(self, fh: Any, *, kinds: Sequence[str] | None = None):
        self._writer = csv.writer(fh, lineterminator="\r\n")
        self._kinds = kinds
        if kinds is not None:
            self._text = [i for i, kind in enumerate(kinds) if kind == "str"]
            self._bools = [i for i, kind in enumerate(kinds) if kind == "bool"]
            self._dates = [i for i, kind in enumerate(kinds) if kind == "datetime"]

    def _cells(self, row: Iterable[Any]) -> list[Any]:
        if self._kinds is None:
            return [spreadsheet_safe(value) for value in row]
        cells = list(row)
        for i in self._text:
            value = cells[i]
            if value.__class__ is str and value.startswith(FORMULA_STARTS):
                cells[i] = "'" + value
        for i in self._bools:
            cells[i] = _BOOL_TEXT.get(cells[i])
        for i in self._dates:  # datetimes, or already their ISO text
            if cells[i] is not None and cells[i].__class__ is not str:
                cells[i] = cells[i].isoformat()
        return cells

    def writeheader(self, names: Iterable[str]) -> None:
        self._writer.writerow([spreadsheet_safe(name) for name in names])

    def writerow(self, row: Iterable[Any]) -> None:
        self._writer.writerow(self._cells(row))

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        self._writer.writerows([self._cells(row) for row in rows])


def csv_writer(fh: Any, *, kinds: Sequence[str] | None = None) -> SafeCSVWriter:
    return SafeCSVWriter(fh, kinds=kinds)
