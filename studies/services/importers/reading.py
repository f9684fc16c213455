"""Reading an import file: the size limit (checked before reading), UTF-8, and JSON / JSON lines /
CSV with the line (and column) of every record.

The file is read whole into memory, up to ``RL_MAX_IMPORT_BYTES``; a larger one is refused
before it is read. Its records are counted as they are parsed: the one after ``RL_IMPORT_MAX_ROWS``
stops the parse and refuses the file (with that record's line), so a file of millions of short
rows never becomes millions of parsed rows. Every reader refuses, with its line and field, text no
database can store (a NUL character, a lone surrogate), a JSON number that is not finite (``NaN``,
``Infinity``, or one too large for a float, ``1e400``: no JSON column holds it, and as text it
would be ``"inf"``) and JSON nested deeper than ``lab.jsontext.MAX_DEPTH``."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from lab.jsontext import MAX_DEPTH, json_path, json_problems, load_json, text_problem

from .errors import ErrorCollector, ImportValidationError, RowError, TooManyRecords


@dataclass
class ImportFile:
    """The decoded text of an uploaded or local file, with its name and content hash."""

    name: str
    text: str
    sha256: str
    size: int


def _human_size(n: int) -> str:
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MB"
    if n >= 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n} bytes"


def _size_of(file: Any) -> int | None:
    if isinstance(file, (str, Path)):
        return os.stat(file).st_size
    size = getattr(file, "size", None)
    if isinstance(size, int):
        return size
    try:
        pos = file.tell()
        file.seek(0, io.SEEK_END)
        end = file.tell()
        file.seek(pos)
        return end - pos
    except (AttributeError, OSError, ValueError):
        return None


def read_import_file(file: str | Path | IO | Any, *, filename: str | None = None) -> ImportFile:
    """Read a path, an uploaded file or a binary file object, refusing files over
    ``settings.RL_MAX_IMPORT_BYTES`` *before* reading them."""
    name = _file_name(file, filename)
    limit = int(settings.RL_MAX_IMPORT_BYTES)
    size = _size_of(file)
    if size is not None and size > limit:
        raise ImportValidationError(
            f"the file is {_human_size(size)}, over the import limit of {_human_size(limit)} "
            "(RL_MAX_IMPORT_BYTES); split it into smaller files or raise the limit",
            filename=name,
        )
    raw = _read_bytes(file, limit)
    if len(raw) > limit:
        raise ImportValidationError(
            f"the file is over the import limit of {_human_size(limit)} (RL_MAX_IMPORT_BYTES)", filename=name
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ImportValidationError(
            RowError(line, "", f"not UTF-8 text (byte {exc.start}); save the file as UTF-8"), filename=name
        ) from None
    return ImportFile(name=name, text=text, sha256=hashlib.sha256(raw).hexdigest(), size=len(raw))


def _file_name(file: Any, filename: str | None) -> str:
    """The name the import reports the file under; a path must exist, a name must be storable."""
    if isinstance(file, (str, Path)):
        name = filename or Path(file).name
        if not Path(file).is_file():
            raise ImportValidationError(f"file not found: {file}", filename=name)
    else:
        name = filename or Path(getattr(file, "name", "") or "upload").name
    reason = text_problem(name)
    if reason:
        raise ImportValidationError(f"the file name {reason}; rename the file", filename=name.replace("\x00", ""))
    return name


def _read_bytes(file: Any, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of a path, an uploaded file (chunk by chunk) or a file object."""
    if isinstance(file, (str, Path)):
        with open(file, "rb") as fh:
            return fh.read(limit + 1)
    if hasattr(file, "seek"):
        try:
            file.seek(0)
        except (OSError, ValueError):
            pass
    if hasattr(file, "chunks"):
        buf = bytearray()
        for chunk in file.chunks():
            buf.extend(chunk)
            if len(buf) > limit:
                break
        return bytes(buf)
    raw = file.read(limit + 1)
    return raw.encode("utf-8") if isinstance(raw, str) else raw


def max_rows() -> int:
    return int(settings.RL_IMPORT_MAX_ROWS)


def too_many_rows(f: ImportFile, line: int | None, column: int | None = None) -> TooManyRecords:
    """The refusal of a file whose record at ``line`` is one over ``RL_IMPORT_MAX_ROWS``."""
    limit = max_rows()
    return TooManyRecords(
        RowError(line, "", f"the file has more than {limit:,} records, the import limit (RL_IMPORT_MAX_ROWS); "
                           f"split it into files of at most {limit:,} records or raise the limit", column=column),
        filename=f.name,
    )


class _TooManyRecords(Exception):
    def __init__(self, pos: int):
        super().__init__(pos)
        self.pos = pos


# Progress of the parse, for a background import (studies.services.importers.jobs): called with the
# records counted so far every PROGRESS_EVERY records, and once more (finished=True) at the end.
_progress: ContextVar[Callable[[int, bool], None] | None] = ContextVar("import_progress", default=None)
PROGRESS_EVERY = 10_000


@contextmanager
def reporting_progress(callback: Callable[[int, bool], None]) -> Iterator[None]:
    """Within the block, every parse calls ``callback(records_so_far, finished)``."""
    token = _progress.set(callback)
    try:
        yield
    finally:
        _progress.reset(token)


class RecordCounter:
    """Counts a file's records as they are parsed: the one after ``RL_IMPORT_MAX_ROWS`` raises
    (the caller says where it is), and progress is reported when a background import listens."""

    def __init__(self) -> None:
        self.limit = max_rows()
        self.seen = 0
        self.report = _progress.get()

    def over(self) -> bool:
        """Count one record; True when it is over the cap."""
        self.seen += 1
        if self.report is not None and self.seen % PROGRESS_EVERY == 0:
            self.report(self.seen, False)
        return self.seen > self.limit

    def finished(self) -> None:
        if self.report is not None:
            self.report(self.seen, True)


def line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class _JSONLocator:
    """Parse a JSON document and record where each container element starts, down to a depth.

    ``positions[path]`` is the character offset of the value at ``path`` (a tuple of list
    indexes and object keys)."""

    def __init__(self, text: str, depth: int, counter: RecordCounter | None = None):
        self.text = text
        self.depth = depth
        self.positions: dict[tuple, int] = {}
        self.counter = counter

    def skip(self, i: int) -> int:
        return _WS.match(self.text, i).end()

    def fail(self, msg: str, i: int):
        raise json.JSONDecodeError(msg, self.text, i)

    def value(self, i: int, path: tuple) -> tuple[Any, int]:
        self.positions[path] = i
        # Every element the locator records (the records, and at depth 2 their parts) counts.
        if self.counter is not None and path and self.counter.over():
            raise _TooManyRecords(i)
        s = self.text
        if len(path) < self.depth and i < len(s) and s[i] in "[{":
            if s[i] == "[":
                return self.array(i, path)
            return self.object(i, path)
        try:
            return _DECODER.raw_decode(s, i)
        except json.JSONDecodeError:
            raise
        except (IndexError, StopIteration):
            self.fail("Expecting value", i)

    def array(self, i: int, path: tuple) -> tuple[list, int]:
        s = self.text
        out: list = []
        i = self.skip(i + 1)
        if i < len(s) and s[i] == "]":
            return out, i + 1
        while True:
            i = self.skip(i)
            if i >= len(s):
                self.fail("Expecting value", i)
            val, i = self.value(i, path + (len(out),))
            out.append(val)
            i = self.skip(i)
            if i < len(s) and s[i] == ",":
                i += 1
                continue
            if i < len(s) and s[i] == "]":
                return out, i + 1
            self.fail("Expecting ',' delimiter", i)

    def object(self, i: int, path: tuple) -> tuple[dict, int]:
        s = self.text
        out: dict = {}
        i = self.skip(i + 1)
        if i < len(s) and s[i] == "}":
            return out, i + 1
        while True:
            i = self.skip(i)
            if i >= len(s) or s[i] != '"':
                self.fail("Expecting property name enclosed in double quotes", i)
            key, i = json.decoder.scanstring(s, i + 1)
            i = self.skip(i)
            if i >= len(s) or s[i] != ":":
                self.fail("Expecting ':' delimiter", i)
            i = self.skip(i + 1)
            if i >= len(s):
                self.fail("Expecting value", i)
            val, i = self.value(i, path + (key,))
            if key in out:
                # Keep the first; callers that care ask duplicate_keys().
                self.duplicates.setdefault(path + (key,), []).append(self.positions[path + (key,)])
            else:
                out[key] = val
            i = self.skip(i)
            if i < len(s) and s[i] == ",":
                i += 1
                continue
            if i < len(s) and s[i] == "}":
                return out, i + 1
            self.fail("Expecting ',' delimiter", i)

    def parse(self) -> Any:
        self.duplicates: dict[tuple, list[int]] = {}
        i = self.skip(0)
        if i >= len(self.text):
            self.fail("Expecting value: the file is empty", i)
        val, end = self.value(i, ())
        end = self.skip(end)
        if end != len(self.text):
            self.fail("Extra data after the JSON document (is this JSON lines? one object per line)", end)
        return val


@dataclass
class JSONDocument:
    """A parsed JSON document that knows the line and column of its elements."""

    text: str
    data: Any
    positions: dict[tuple, int]
    duplicates: dict[tuple, list[int]] = field(default_factory=dict)

    def where(self, *path: Any) -> tuple[int | None, int | None]:
        pos = self.positions.get(tuple(path))
        if pos is None:
            return None, None
        return line_col(self.text, pos)

    def records(self) -> Iterator[tuple[int | None, Any, int | None]]:
        """A JSON list's elements as ``(line, element, column)``, as ``read_records`` gives them."""
        for i, rec in enumerate(self.data):
            line, col = self.where(i)
            yield line, rec, col


def parse_json_document(f: ImportFile, *, depth: int = 1) -> JSONDocument:
    """Parse a whole JSON document; a syntax error becomes an ImportValidationError with its line
    and column."""
    counter = RecordCounter()
    loc = _JSONLocator(f.text, depth, counter)
    try:
        data = loc.parse()
    except _TooManyRecords as exc:
        raise too_many_rows(f, *line_col(f.text, exc.pos)) from None
    except json.JSONDecodeError as exc:
        raise ImportValidationError(
            RowError(exc.lineno, "", f"not valid JSON: {exc.msg}", column=exc.colno), filename=f.name
        ) from None
    except RecursionError:
        raise ImportValidationError(f"JSON nested more than {MAX_DEPTH} levels deep", filename=f.name) from None
    counter.finished()
    doc = JSONDocument(text=f.text, data=data, positions=loc.positions, duplicates=loc.duplicates)
    errors = ErrorCollector()
    for path, reason in json_problems(data):
        located = path
        while located and located not in doc.positions:
            located = located[:-1]
        line, col = doc.where(*located)
        errors.add(line, json_path(path[len(located):]) if path != located else _last_key(path), reason, column=col)
    errors.raise_if_any(f.name)
    return doc


def _last_key(path: tuple) -> str:
    return str(path[-1]) if path and isinstance(path[-1], str) else ""


def parse_json_lines(f: ImportFile) -> list[tuple[int, Any]]:
    """Parse JSON lines: ``[(line_number, value), ...]``; blank lines are skipped. Every bad line
    is reported, not only the first."""
    rows: list[tuple[int, Any]] = []
    errors = ErrorCollector()
    counter = RecordCounter()
    for lineno, line in enumerate(_lines(f.text), start=1):
        if not line.strip():
            continue
        if counter.over():
            raise too_many_rows(f, lineno)
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.add(lineno, "", f"not valid JSON: {exc.msg}", column=exc.colno)
            continue
        except RecursionError:
            errors.add(lineno, "", f"JSON nested more than {MAX_DEPTH} levels deep")
            continue
        problems = list(json_problems(value))
        for path, reason in problems:
            errors.add(lineno, json_path(path) if path else "", reason)
        if not problems:
            rows.append((lineno, value))
    if len(errors.errors) > 50 and not rows:
        errors.unlisted = 0
        errors.errors = errors.errors[:1]
        errors.errors[0] = RowError(
            errors.errors[0].line,
            "",
            errors.errors[0].reason + " (no line of the file is a JSON object: is it JSON, CSV, or another format?)",
            errors.errors[0].column,
        )
    counter.finished()
    errors.raise_if_any(f.name)
    if not rows:
        raise ImportValidationError("the file has no records", filename=f.name)
    return rows


_NEWLINE = re.compile(r"\r\n?|\n")


def _lines(text: str):
    """The lines of ``text`` one at a time, each with its ending (``\n``, ``\r\n`` or ``\r``), as
    ``open(newline="")`` gives them. Neither ``str.splitlines`` (every line at once) nor
    ``io.StringIO`` (a copy of the text at four bytes a character) is used: a 100 MB file stays one
    100 MB string while its records are parsed."""
    pos = 0
    for match in _NEWLINE.finditer(text):
        yield text[pos:match.end()]
        pos = match.end()
    if pos < len(text):
        yield text[pos:]


def parse_csv(f: ImportFile) -> list[tuple[int, dict[str, str]]]:
    """Parse CSV with a header row: ``[(line_number, {column: value}), ...]``. Fields are quoted
    with ``"`` only, a quote inside doubled (RFC 4180): an apostrophe is text."""
    delimiter, skipinitialspace = _csv_delimiter(f)
    reader = csv.reader(_lines(f.text), delimiter=delimiter, skipinitialspace=skipinitialspace,
                        quotechar='"', doublequote=True)
    header = _csv_header(f, reader)
    rows: list[tuple[int, dict[str, str]]] = []
    errors = ErrorCollector()
    counter = RecordCounter()
    for start, cells in _csv_records(reader, errors):
        if counter.over():
            raise too_many_rows(f, start)
        if len(cells) != len(header):
            errors.add(start, "", f"has {len(cells)} cells but the header has {len(header)} columns")
            continue
        problems = [(name, text_problem(cell)) for name, cell in zip(header, cells, strict=True)]
        for name, reason in problems:
            if reason:
                errors.add(start, name, f"the text {reason}")
        if not any(reason for _, reason in problems):
            rows.append((start, dict(zip(header, cells, strict=True))))
    counter.finished()
    errors.raise_if_any(f.name)
    if not rows:
        raise ImportValidationError("the file has no data rows under its header", filename=f.name)
    return rows


def _csv_delimiter(f: ImportFile) -> tuple[str, bool]:
    """(delimiter, whether a space after it is skipped): a tab for a ``.tsv`` file; otherwise the
    one of ``,``, ``;`` and tab the start of the file is split by (``,`` when none stands out), as
    the sniffer finds it. Its guess of a quote character is not taken: a file whose cells start
    with an apostrophe (``'Frozen' water is ice?``) made it guess ``'`` and drop the apostrophes."""
    if f.name.lower().endswith(".tsv"):
        return "\t", False
    try:
        sniffed = csv.Sniffer().sniff(f.text[:4096], delimiters=",;\t")
    except csv.Error:
        return ",", False
    return sniffed.delimiter, sniffed.skipinitialspace


def _csv_header(f: ImportFile, reader) -> list[str]:
    """The header row's column names, each storable and named once."""
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise ImportValidationError("the file is empty", filename=f.name) from None
    except csv.Error as exc:
        raise ImportValidationError(RowError(1, "", f"not valid CSV: {exc}"), filename=f.name) from None
    errors = ErrorCollector()
    seen: set[str] = set()
    for n, h in enumerate(header, start=1):
        reason = text_problem(h)
        if reason:
            errors.add(1, f"column {n}", f"the column name {reason}")
        elif h in seen and h:
            errors.add(1, h, "the header names this column twice")
        seen.add(h)
    errors.raise_if_any(f.name)
    return header


def _csv_records(reader, errors: ErrorCollector) -> Iterator[tuple[int, list[str]]]:
    """The non-blank records after the header with the line each starts on; a CSV syntax error
    is reported and ends the file."""
    while True:
        start = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            errors.add(start, "", f"not valid CSV: {exc}")
            return
        if any(c.strip() for c in cells):
            yield start, cells


def detect_format(f: ImportFile, requested: str | None = None) -> str:
    """``csv``, ``jsonl`` or ``json`` from the argument, the extension, or the first character."""
    if requested:
        requested = requested.lower()
        if requested not in {"csv", "jsonl", "json"}:
            raise ImportValidationError(f"unknown file format {requested!r}: use csv, jsonl or json", filename=f.name)
        return requested
    lower = f.name.lower()
    if lower.endswith((".csv", ".tsv")):
        return "csv"
    if lower.endswith(".jsonl"):
        return "jsonl"
    start = _WS.match(f.text).end()  # the first character that is not blank, without copying the text
    if f.text.startswith("[", start):
        return "json"
    if f.text.startswith("{", start):
        end = f.text.find("\n", start)
        first = f.text[start:end if end != -1 else len(f.text)].strip()
        try:
            json.loads(first)
            return "jsonl"
        except json.JSONDecodeError:
            return "json"
        except RecursionError:
            return "jsonl"  # one line of JSON too deep: parse_json_lines says so with its line
    return "csv"


def read_records(f: ImportFile, *, file_format: str | None = None) -> list[tuple[int, dict, int | None]]:
    """Records of a CSV, JSON-lines or JSON-list file as ``[(line, record, column), ...]``.
    Non-object records are reported."""
    fmt = detect_format(f, file_format)
    errors = ErrorCollector()
    out: list[tuple[int, dict, int | None]] = []
    if fmt == "csv":
        return [(line, rec, None) for line, rec in parse_csv(f)]
    if fmt == "jsonl":
        pairs = [(line, rec, None) for line, rec in parse_json_lines(f)]
    else:
        doc = parse_json_document(f, depth=1)
        if not isinstance(doc.data, list):
            raise ImportValidationError(
                RowError(1, "", f"expected a JSON list of records, got a JSON {json_type(doc.data)}"),
                filename=f.name,
            )
        pairs = list(doc.records())
    for line, rec, col in pairs:
        if not isinstance(rec, dict):
            errors.add(line, "", f"expected a JSON object, got a JSON {json_type(rec)}", column=col)
        else:
            out.append((line, rec, col))
    errors.raise_if_any(f.name)
    return out


def json_cell(value: Any) -> Any:
    """A cell that holds JSON (a CSV cell's text, or the value itself in a JSON file); ``None``
    for an empty cell. Bad JSON, nesting too deep or unstorable text: ValueError saying so."""
    if isinstance(value, str):
        return load_json(value) if value.strip() else None
    return value


def json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if value is None:
        return "null"
    return type(value).__name__
