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

    def __init__(self, errors: list[RowError] | RowError | str, *, filename: str = ""):
        if isinstance(errors, str):
            errors = [RowError(None, "", errors)]
        elif isinstance(errors, RowError):
            errors = [errors]
        self.errors: list[RowError] = list(errors)
        self.filename = filename
        super().__init__(self.summary())

    def summary(self) -> str:
        name = f"{self.filename}: " if self.filename else ""
        n = len(self.errors)
        if n == 1:
            return f"{name}nothing imported: {self.errors[0]}"
        return f"{name}nothing imported: {n} problems; first: {self.errors[0]}"

    def lines(self) -> list[str]:
        return [str(e) for e in self.errors]


class TooManyRecords(ImportValidationError):
    """The file has more records than ``RL_IMPORT_MAX_ROWS``: refused whatever format is tried next."""


class ErrorCollector:
    """Collects row errors while an importer walks a file."""

    def __init__(self) -> None:
        self.errors: list[RowError] = []

    def add(
        self, line: int | None, field: str, reason: str, *, column: int | None = None, record: str = ""
    ) -> None:
        self.errors.append(RowError(line, field, reason, column, record))

    def __bool__(self) -> bool:
        return bool(self.errors)

    def raise_if_any(self, filename: str = "") -> None:
        if self.errors:
            raise ImportValidationError(self.errors, filename=filename)
