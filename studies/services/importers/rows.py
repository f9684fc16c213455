"""How every importer reads the records of a file: one column-resolution step (which of the file's
columns holds each *role*: the item id, the question, the answer, ...) and one per-row parser
(:class:`Row`: a record's cells by role, where it is, and the errors found in it).

An importer resolves its columns once (:func:`resolve_columns`: a missing one refuses the file
before any row is read, naming the file's columns), then walks the records as rows
(:func:`parse_rows`), reads each cell by role (``row.text("question")``) and reports a problem by
role (``row.error("answer", reason)``): the error carries the record's line, column and
description, and the field's name as the file spells it. Rows repeated under one key (an item and
a source, say) are kept once in :class:`KeyedRows`."""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from .errors import ErrorCollector, ImportValidationError
from .reading import json_type
from .values import as_text

# A required role: (roles of which one must have a column, what the file lacks otherwise).
Required = tuple[Sequence[str], str]


def header_of(records: Iterable[tuple[Any, Any, Any]]) -> set[str]:
    """Every field name used by the records (``(line, record, column)`` triples): a JSON-lines file
    may leave a field out of some records."""
    header: set[str] = set()
    for _, rec, _ in records:
        if isinstance(rec, dict):
            header.update(rec)
    return header


def resolve_columns(
    *,
    given: Mapping[str, str | None],
    header: Collection[str],
    filename: str,
    candidates: Mapping[str, Sequence[str]] | None = None,
    required: Sequence[Required] = (),
    hint: str = "",
) -> dict[str, str]:
    """``{role: column name}`` for every role of ``given``, ``""`` where the file has none.

    ``given[role]`` is a column name the user chose (it must be in ``header``), ``""`` for "not in
    this file", or None: the first of ``candidates[role]`` in ``header`` (else ``""``). Every
    ``required`` group needs one of its roles resolved. One ImportValidationError names every
    group the file lacks and every column given that it has not, with the file's columns (and
    ``hint``)."""
    candidates = candidates or {}
    columns: dict[str, str] = {}
    for role, name in given.items():
        if name is None:
            name = next((c for c in candidates.get(role, ()) if c in header), "")
        columns[role] = name
    lacking = [what for roles, what in required if not any(columns.get(r) for r in roles)]
    absent = list(dict.fromkeys(name for name in columns.values() if name and name not in header))
    if lacking or absent:
        raise ImportValidationError(_columns_problem(lacking, absent, header) + hint, filename=filename)
    return columns


def _columns_problem(lacking: list[str], absent: list[str], header: Collection[str]) -> str:
    problems = []
    if lacking:
        problems.append(f"the file lacks {'; '.join(lacking)}")
    if absent:
        problems.append(f"the file has no column(s) {', '.join(map(repr, absent))}")
    return f"{'; '.join(problems)}; its columns are {', '.join(sorted(map(repr, header))) or 'none'}"


class Row:
    """One record being parsed: its cells by role (``columns``: role -> the file's column name; a
    role not mapped is read under its own name), where it is (line, column, a short description of
    the record, its position), and whether an error was found in it."""

    def __init__(self, rec: Mapping[str, Any], *, line: int | None, errors: ErrorCollector,
                 column: int | None = None, columns: Mapping[str, str] | None = None, record: str = "",
                 index: int = 0):
        self.rec = rec
        self.index = index  # the record's position among the file's records
        self.line = line
        self.column = column
        self.columns = columns or {}
        self.errors = errors
        self.record = record
        self.ok = True

    def name(self, role: str) -> str:
        """The file's name for ``role`` (``""``: the file has no such column)."""
        return self.columns.get(role, role)

    def has(self, role: str) -> bool:
        return bool(self.name(role))

    def raw(self, role: str) -> Any:
        name = self.name(role)
        return self.rec.get(name) if name else None

    def given(self, role: str) -> bool:
        """The cell holds something (not missing, null or empty text)."""
        return self.raw(role) not in (None, "")

    def text(self, role: str) -> str:
        return as_text(self.raw(role))

    def error(self, role: str, reason: str, *, field: str | None = None) -> None:
        """Report ``reason`` against the field of ``role`` (or the ``field`` named); the row is
        then not ok."""
        self.errors.add(self.line, self.name(role) if field is None else field, reason, column=self.column,
                        record=self.record)
        self.ok = False

    def missing(self, roles: Iterable[str]) -> list[str]:
        """The file's names of ``roles`` this record leaves out."""
        return [self.name(r) for r in roles if self.name(r) not in self.rec]

    def others(self, used: Collection[str]) -> dict[str, Any]:
        """The record's fields not in ``used``."""
        return {k: v for k, v in self.rec.items() if k not in used}


def parse_rows(records: Iterable[tuple[int | None, Any, int | None]], *, errors: ErrorCollector,
               columns: Mapping[str, str] | None = None,
               record: Callable[[int, Any], str] | None = None) -> Iterator[Row]:
    """The records (``(line, record, column)``, as ``read_records`` gives them) as rows; a record
    that is not a JSON object is reported (``record(index, rec)`` describes one) and skipped."""
    for n, (line, rec, col) in enumerate(records):
        described = record(n, rec) if record is not None else ""
        if not isinstance(rec, dict):
            errors.add(line, "", f"expected a JSON object, got a JSON {json_type(rec)}", column=col, record=described)
            continue
        yield Row(rec, line=line, column=col, columns=columns, errors=errors, record=described, index=n)


class KeyedRows:
    """Validated rows by key, each with the line it came from; a row repeated identically is
    merged (counted in ``merged``)."""

    def __init__(self) -> None:
        self.rows: dict[Any, Any] = {}
        self.lines: dict[Any, int | None] = {}
        self.columns: dict[Any, int | None] = {}
        self.merged = 0

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, key: Any, values: Any, *, line: int | None, column: int | None = None,
            same: Callable[[Any, Any], bool] | None = None) -> Any:
        """Keep ``values`` under ``key`` and return None; a repeat that is the ``same`` (equal by
        default) is merged and returns None too. A different repeat is not kept: the values kept
        first are returned, for the caller to report or settle."""
        if key not in self.rows:
            self.rows[key] = values
            self.lines[key] = line
            self.columns[key] = column
            return None
        kept = self.rows[key]
        if (same or (lambda a, b: a == b))(kept, values):
            self.merged += 1
            return None
        return kept

    def where(self, key: Any) -> str:
        """Where the row kept under ``key`` came from: ``line 3`` or ``line 3, column 5``."""
        column = self.columns.get(key)
        return f"line {self.lines[key]}" + (f", column {column}" if column else "")
