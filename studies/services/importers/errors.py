"""The importers' domain error: every problem of a file, each with where it is (line, column,
record), which field, and why. An importer collects them while it walks the whole file and raises
one :class:`ImportValidationError`; nothing is written then."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RowError:
    """One problem with one record: where it is, which field, and why."""

    line: int | None
    field: str
    reason: str
    column: int | None = None
    record: str = ""

    def location(self) -> str:
        parts = []
        if self.line is not None:
            parts.append(f"line {self.line}")
            if self.column is not None:
                parts.append(f"column {self.column}")
        if self.record:
            parts.append(self.record)
        return ", ".join(parts) or "file"

    def __str__(self) -> str:
        where = self.location()
        if self.field:
            return f"{where}: field '{self.field}': {self.reason}"
        return f"{where}: {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "column": self.column,
            "record": self.record,
            "field": self.field,
            "reason": self.reason,
        }


class ImportValidationError(Exception):
    """The file cannot be imported; nothing was written. ``errors`` lists every problem found."""

    def __init__(self, errors: list[RowError] | RowError | str, *, filename: str = "", unlisted: int = 0):
        if isinstance(errors, str):
            errors = [RowError(None, "", errors)]
        elif isinstance(errors, RowError):
            errors = [errors]
        self.errors: list[RowError] = list(errors)
        self.filename = filename
        self.unlisted = unlisted  # problems found past MAX_LISTED_ERRORS, counted only
        super().__init__(self.summary())

    def summary(self) -> str:
        name = f"{self.filename}: " if self.filename else ""
        n = len(self.errors) + self.unlisted
        if n == 1:
            return f"{name}nothing imported: {self.errors[0]}"
        more = f" (the first {len(self.errors):,} are listed)" if self.unlisted else ""
        return f"{name}nothing imported: {n:,} problems{more}; first: {self.errors[0]}"

    def lines(self) -> list[str]:
        return [str(e) for e in self.errors]


class TooManyRecords(ImportValidationError):
    """The file has more records than ``RL_IMPORT_MAX_ROWS``: refused whatever format is tried next."""


# A file can have a problem on each of its RL_IMPORT_MAX_ROWS records: the first this many are
# kept (and answered) with their line, field and reason, the rest only counted.
MAX_LISTED_ERRORS = 1000


class ErrorCollector:
    """Collects row errors while an importer walks a file (the first ``MAX_LISTED_ERRORS``; the
    rest are counted)."""

    def __init__(self) -> None:
        self.errors: list[RowError] = []
        self.unlisted = 0

    def add(
        self, line: int | None, field: str, reason: str, *, column: int | None = None, record: str = ""
    ) -> None:
        if len(self.errors) >= MAX_LISTED_ERRORS:
            self.unlisted += 1
            return
        self.errors.append(RowError(line, field, reason, column, record))

    def __bool__(self) -> bool:
        return bool(self.errors)

    def raise_if_any(self, filename: str = "") -> None:
        if self.errors:
            raise ImportValidationError(self.errors, filename=filename, unlisted=self.unlisted)
