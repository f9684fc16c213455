"""A report table: named columns, typed cells, rendered as HTML on the report page and written
as CSV in the download (one definition for both, so the page and the file never disagree).

A ``ci`` column reads ``<key>_low`` and ``<key>_high`` from each row: one cell "[lo, hi]" on the
page, two columns in the CSV."""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    kind: str = "text"  # text | int | float | ci
    digits: int = 3


@dataclass
class Table:
    name: str  # the CSV file's stem
    title: str
    columns: list[Column]
    rows: list[dict]
    note: str = ""

    def header(self) -> list[str]:
        out = []
        for col in self.columns:
            out += [f"{col.key}_low", f"{col.key}_high"] if col.kind == "ci" else [col.key]
        return out

    def csv_rows(self) -> list[list]:
        """Raw values (floats unrounded, None as empty) in ``header()`` order."""
        out = []
        for row in self.rows:
            line = []
            for col in self.columns:
                keys = [f"{col.key}_low", f"{col.key}_high"] if col.kind == "ci" else [col.key]
                line += ["" if _missing(row.get(k)) else row.get(k) for k in keys]
            out.append(line)
        return out

    def html_rows(self) -> list[list[tuple[str, bool]]]:
        """(text, numeric) cells for the page."""
        return [[(_cell(row, col), col.kind != "text") for col in self.columns] for row in self.rows]


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _number(value, col: Column) -> str:
    if _missing(value):
        return "n/a"
    if col.kind == "int":
        return f"{int(value):,}"
    return f"{float(value):.{col.digits}f}"


def _cell(row: dict, col: Column) -> str:
    if col.kind == "ci":
        low, high = row.get(f"{col.key}_low"), row.get(f"{col.key}_high")
        if _missing(low) or _missing(high):
            return "n/a"
        return f"[{_number(low, col)}, {_number(high, col)}]"
    if col.kind == "text":
        value = row.get(col.key)
        return "" if value is None else str(value)
    return _number(row.get(col.key), col)


@dataclass
class Section:
    key: str
    title: str
    tables: list[Table] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    absent: str = ""  # why the study's data does not support this section
