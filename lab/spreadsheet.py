"""Cells that a spreadsheet will not run: text starting with ``=``, ``+``, ``-``, ``@``, a tab or
a carriage return is read as a formula by Excel, LibreOffice and Google Sheets ("CSV injection"),
so such text gets a leading apostrophe. Numbers, booleans and None pass unchanged."""
from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value):
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value
