"""Cells that a spreadsheet will not run: text starting with ``=``, ``+``, ``-``, ``@``, a tab or
a carriage return is read as a formula by Excel, LibreOffice and Google Sheets ("CSV injection"),
so such text gets a leading apostrophe (OWASP's rule). Numbers, booleans and None pass unchanged.

Every CSV the app writes goes through :func:`csv_writer` (the API's streamed exports, the
``score_study`` folder, the report's zip); JSON lines, Parquet and ``results.json`` stay exact."""
from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Sequence
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value):
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


_BOOL_TEXT = {True: "true", False: "false"}
_FORMULA_AT_A_LINE_START = re.compile("^[" + re.escape("".join(FORMULA_STARTS)) + "]", re.MULTILINE)


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
        if self._kinds is None:
            self._writer.writerows([self._cells(row) for row in rows])
            return
        self._writer.writerows(self._batch_cells(rows))

    def _batch_cells(self, rows: Iterable[Iterable[Any]]) -> Iterable[Sequence[Any]]:
        """What :meth:`_cells` makes of each row, worked out a column at a time: on the streamed
        exports (a million rows of 29 cells) a Python step per cell cost about a fifth of the
        CSV's time. A text column is looked at cell by cell only when its cells, joined by line
        feeds, show a formula start at the start of a line: every cell that starts with one does,
        and a false alarm (a line feed inside a cell, or a number such as -1 in a text column)
        only costs the cell-by-cell pass, which is exact."""
        columns: list[Any] = list(zip(*rows, strict=True))
        if not columns:
            return []
        for i in self._text:
            try:
                joined = "\n".join(filter(None, columns[i]))  # None and "" cannot start a formula
            except TypeError:  # a number in a text column
                joined = "\n".join(map(str, filter(None, columns[i])))
            if _FORMULA_AT_A_LINE_START.search(joined):
                columns[i] = [spreadsheet_safe(value) for value in columns[i]]
        for i in self._bools:
            columns[i] = map(_BOOL_TEXT.get, columns[i])
        for i in self._dates:  # datetimes, or already their ISO text
            if not set(map(type, columns[i])) <= {str, type(None)}:
                columns[i] = [v if v is None or v.__class__ is str else v.isoformat() for v in columns[i]]
        return zip(*columns, strict=True)


def csv_writer(fh: Any, *, kinds: Sequence[str] | None = None) -> SafeCSVWriter:
    return SafeCSVWriter(fh, kinds=kinds)


def exact_csv_writer(fh: Any) -> Any:
    """A ``csv.writer`` that writes every cell exactly (rows end with CRLF, as in :func:`csv_writer`),
    for CSV that programs read back and must get to the character: the study bundle's tables, a
    Frictionless data package that another installation imports to re-score the study. Nothing is
    neutralised, so such a file is data for tools, not for a spreadsheet; its package says so."""
    return csv.writer(fh, lineterminator="\r\n")
