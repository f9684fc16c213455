"""What every importer shares: the domain error and its row errors, the size limit, reading
JSON / JSON lines / CSV with the line (and column) of every record, question-text matching,
answer normalisation and the bulk upsert that makes imports idempotent.

An importer parses and validates the *whole* file first and collects every bad row. If there is
any, it raises one :class:`ImportValidationError` and writes nothing; otherwise it applies the
rows inside ``transaction.atomic`` with bulk operations and records an ``ImportRecord``.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from lab.jsontext import MAX_DEPTH, json_path, json_problems, load_json, text_problem
from studies.models import Dataset, ImportRecord, Item, Split

# ---------------------------------------------------------------------------------------------
# Errors


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


# ---------------------------------------------------------------------------------------------
# Reading the file


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
    if isinstance(file, (str, Path)):
        name = filename or Path(file).name
        if not Path(file).is_file():
            raise ImportValidationError(f"file not found: {file}", filename=name)
    else:
        name = filename or Path(getattr(file, "name", "") or "upload").name
    reason = text_problem(name)
    if reason:
        raise ImportValidationError(f"the file name {reason}; rename the file", filename=name.replace("\x00", ""))
    limit = int(settings.RL_MAX_IMPORT_BYTES)
    size = _size_of(file)
    if size is not None and size > limit:
        raise ImportValidationError(
            f"the file is {_human_size(size)}, over the import limit of {_human_size(limit)} "
            "(RL_MAX_IMPORT_BYTES); split it into smaller files or raise the limit",
            filename=name,
        )
    if isinstance(file, (str, Path)):
        with open(file, "rb") as fh:
            raw = fh.read(limit + 1)
    else:
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
            raw = bytes(buf)
        else:
            raw = file.read(limit + 1)
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
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

    def __init__(self, text: str, depth: int):
        self.text = text
        self.depth = depth
        self.positions: dict[tuple, int] = {}

    def skip(self, i: int) -> int:
        return _WS.match(self.text, i).end()

    def fail(self, msg: str, i: int):
        raise json.JSONDecodeError(msg, self.text, i)

    def value(self, i: int, path: tuple) -> tuple[Any, int]:
        self.positions[path] = i
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


def parse_json_document(f: ImportFile, *, depth: int = 1) -> JSONDocument:
    """Parse a whole JSON document; a syntax error becomes an ImportValidationError with its line
    and column."""
    loc = _JSONLocator(f.text, depth)
    try:
        data = loc.parse()
    except json.JSONDecodeError as exc:
        raise ImportValidationError(
            RowError(exc.lineno, "", f"not valid JSON: {exc.msg}", column=exc.colno), filename=f.name
        ) from None
    except RecursionError:
        raise ImportValidationError(f"JSON nested more than {MAX_DEPTH} levels deep", filename=f.name) from None
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
    for lineno, line in enumerate(f.text.splitlines(), start=1):
        if not line.strip():
            continue
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
        errors.errors = errors.errors[:1]
        errors.errors[0] = RowError(
            errors.errors[0].line,
            "",
            errors.errors[0].reason + " (no line of the file is a JSON object: is it JSON, CSV, or another format?)",
            errors.errors[0].column,
        )
    errors.raise_if_any(f.name)
    if not rows:
        raise ImportValidationError("the file has no records", filename=f.name)
    return rows


def parse_csv(f: ImportFile) -> list[tuple[int, dict[str, str]]]:
    """Parse CSV with a header row: ``[(line_number, {column: value}), ...]``."""
    try:
        dialect = csv.Sniffer().sniff(f.text[:4096], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(f.text, newline=""), dialect)
    rows: list[tuple[int, dict[str, str]]] = []
    errors = ErrorCollector()
    try:
        header = next(reader)
    except StopIteration:
        raise ImportValidationError("the file is empty", filename=f.name) from None
    except csv.Error as exc:
        raise ImportValidationError(RowError(1, "", f"not valid CSV: {exc}"), filename=f.name) from None
    header = [h.strip() for h in header]
    seen: set[str] = set()
    for n, h in enumerate(header, start=1):
        reason = text_problem(h)
        if reason:
            errors.add(1, f"column {n}", f"the column name {reason}")
        elif h in seen and h:
            errors.add(1, h, "the header names this column twice")
        seen.add(h)
    errors.raise_if_any(f.name)
    while True:
        start = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            errors.add(start, "", f"not valid CSV: {exc}")
            break
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            errors.add(start, "", f"has {len(cells)} cells but the header has {len(header)} columns")
            continue
        problems = [(name, text_problem(cell)) for name, cell in zip(header, cells, strict=True)]
        for name, reason in problems:
            if reason:
                errors.add(start, name, f"the text {reason}")
        if not any(reason for _, reason in problems):
            rows.append((start, dict(zip(header, cells, strict=True))))
    errors.raise_if_any(f.name)
    if not rows:
        raise ImportValidationError("the file has no data rows under its header", filename=f.name)
    return rows


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
    stripped = f.text.lstrip()
    if stripped.startswith("["):
        return "json"
    if stripped.startswith("{"):
        first = stripped.split("\n", 1)[0].strip()
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
        pairs = []
        for i, rec in enumerate(doc.data):
            line, col = doc.where(i)
            pairs.append((line, rec, col))
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


# ---------------------------------------------------------------------------------------------
# Values


def as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def short(value: Any, n: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= n else text[: n - 1] + "…"


_TRUE = {"true", "yes", "y", "1", "t"}
_FALSE = {"false", "no", "n", "0", "f"}


def yes_no_label(value: Any, *, strict_true_false: bool = False) -> str | None:
    """``"yes"`` / ``"no"`` for a boolean-like value, else None.

    ``strict_true_false`` accepts only booleans and the words True / False (any case), as the
    generalization files use."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        return None
    text = str(value).strip().lower()
    if strict_true_false:
        return {"true": "yes", "false": "no"}.get(text)
    if text in _TRUE:
        return "yes"
    if text in _FALSE:
        return "no"
    return None


_PAREN_LABEL = re.compile(r"^\(?\s*([A-Za-z])\s*\)?\.?$")


def choice_label(value: Any, labels: Iterable[str]) -> str | None:
    """The lower-case option label for ``"b"``, ``"B"``, ``"(b)"``, ``"b)"``; None if not one of
    ``labels``."""
    if not isinstance(value, str):
        return None
    m = _PAREN_LABEL.match(value.strip())
    if not m:
        return None
    label = m.group(1).lower()
    return label if label in set(labels) else None


def answer_label(dataset: Dataset, value: Any) -> str | None:
    if dataset.is_yes_no:
        return yes_no_label(value)
    return choice_label(value, dataset.allowed_labels())


def describe_allowed(dataset: Dataset) -> str:
    if dataset.is_yes_no:
        return "yes/no (or True/False)"
    return ", ".join(dataset.allowed_labels())


_BACKSLASH_QUOTE = re.compile(r"\\+(['\"])")
_TRAILING_NOISE = re.compile(r"\?[\s,'\"]+$")
_SPACES = re.compile(r"\s+")


def normalize_question(text: str) -> str:
    """The key under which question texts are matched across files.

    Real files disagree on small things: trailing spaces (``"...significance? "``), escaped
    quotes (``Alice\\'s``), a stray ``" ,"`` or ``'`` after the question mark, double spaces.
    None of those change the question, so they are ignored; letters and words are not."""
    text = _BACKSLASH_QUOTE.sub(r"\1", text or "")
    text = _SPACES.sub(" ", text).strip()
    text = _TRAILING_NOISE.sub("?", text)
    return text.casefold()


def split_from_name(name: str) -> str | None:
    """Guess the split from a file name: ``strategyqa_processed_test.json`` is test."""
    stem = Path(name).stem.lower()
    tokens = re.split(r"[^a-z]+", stem)
    for token in reversed(tokens):
        if token in {"train", "training"}:
            return Split.TRAIN.value
        if token in {"dev", "val", "valid", "validation"}:
            return Split.DEV.value
        if token == "test":
            return Split.TEST.value
    return None


def check_split(value: str | None, *, filename: str) -> str | None:
    if value in (None, ""):
        return None
    value = str(value).strip().lower()
    if value not in Split.values:
        raise ImportValidationError(
            f"unknown split {value!r}: use one of {', '.join(Split.values)}", filename=filename
        )
    return value


def dataset_get(*, name: str, filename: str = "") -> Dataset:
    try:
        return Dataset.objects.get(name=name)
    except Dataset.DoesNotExist:
        known = ", ".join(Dataset.objects.values_list("name", flat=True)[:20]) or "none yet"
        raise ImportValidationError(
            f"unknown dataset {name!r} (known: {known}); import its items first", filename=filename
        ) from None


def dataset_check(
    *, name: str, task_format: str, choice_labels: list[str] | None = None, filename: str = ""
) -> Dataset | None:
    """The existing dataset of that name (None if new); refuse one of another task format.
    Writes nothing, so importers call it before validating rows."""
    name = (name or "").strip()
    if not name:
        raise ImportValidationError("the dataset name is empty", filename=filename)
    dataset = Dataset.objects.filter(name=name).first()
    if dataset is None:
        return None
    if dataset.task_format != task_format:
        raise ImportValidationError(
            f"dataset {name!r} exists with task format {dataset.get_task_format_display()!r}; "
            f"this file is {Dataset.TaskFormat(task_format).label!r}: choose another dataset name",
            filename=filename,
        )
    labels = list(choice_labels or [])
    if task_format == Dataset.TaskFormat.MULTIPLE_CHOICE and labels and list(dataset.choice_labels) != labels:
        raise ImportValidationError(
            f"dataset {name!r} has options {dataset.choice_labels}, this file has {labels}", filename=filename
        )
    return dataset


def dataset_get_or_create(
    *, name: str, task_format: str, choice_labels: list[str] | None = None, description: str = ""
) -> tuple[Dataset, bool]:
    """Call inside the import's transaction, after ``dataset_check``."""
    dataset = Dataset.objects.filter(name=name.strip()).first()
    if dataset is not None:
        return dataset, False
    dataset = Dataset(
        name=name.strip(), task_format=task_format, choice_labels=list(choice_labels or []), description=description
    )
    try:
        dataset.full_clean()
    except ValidationError as exc:
        raise ImportValidationError(
            [RowError(None, name, "; ".join(messages)) for name, messages in exc.message_dict.items()],
        ) from None
    dataset.save()
    return dataset, True


class QuestionIndex:
    """Finds items of a dataset (optionally one split) by normalised question text."""

    def __init__(self, dataset: Dataset, split: str | None = None):
        qs = Item.objects.filter(dataset=dataset)
        if split:
            qs = qs.filter(split=split)
        self.by_key: dict[str, list[Item]] = {}
        self.by_external_id: dict[str, Item] = {}
        for item in qs.only("id", "external_id", "question", "gold_answer", "split", "dataset_id"):
            self.by_key.setdefault(normalize_question(item.question), []).append(item)
            self.by_external_id[item.external_id] = item
        self.split = split
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.by_external_id)

    def find(self, question: str) -> tuple[Item | None, str]:
        """``(item, "")`` or ``(None, reason)``."""
        found = self.by_key.get(normalize_question(question), [])
        if len(found) == 1:
            return found[0], ""
        where = f"dataset {self.dataset.name!r}" + (f", split {self.split!r}" if self.split else "")
        if not found:
            return None, f"no item of {where} has the question {short(question)!r}"
        ids = ", ".join(sorted(i.external_id for i in found))
        return None, f"the question {short(question)!r} matches several items ({ids}); choose a split"


# ---------------------------------------------------------------------------------------------
# Applying


@dataclass
class UpsertResult:
    created: int = 0
    updated: int = 0
    unchanged: int = 0


def bulk_upsert(
    *,
    model: type[models.Model],
    existing: dict[Any, models.Model],
    rows: dict[Any, dict[str, Any]],
    build: Callable[[Any, dict[str, Any]], models.Model],
    compare_fields: list[str],
    lines: dict[Any, int | None] | None = None,
    filename: str = "",
    batch_size: int = 500,
) -> tuple[UpsertResult, list[models.Model]]:
    """Create the rows whose key is new, update those whose ``compare_fields`` differ, count the
    rest as unchanged. ``existing`` maps key -> instance; ``rows`` maps key -> field values.
    Returns the counts and the created instances. Every new or changed instance is
    ``full_clean``-ed, except for uniqueness, which the caller has already settled; a row the
    model refuses (an id longer than its column, ...) is reported with its line (``lines`` maps
    key -> line) and field, every one of them, before anything is written."""
    result = UpsertResult()
    errors = ErrorCollector()

    def clean(obj: models.Model, key: Any) -> None:
        try:
            obj.full_clean(exclude=exclude, validate_unique=False, validate_constraints=False)
        except ValidationError as exc:
            line = (lines or {}).get(key)
            for name, messages in exc.message_dict.items():
                field_name = "" if name == "__all__" else name
                for message in messages:
                    errors.add(line, field_name, message.rstrip("."),
                               record=f"id {short(key, 40)!r}" if isinstance(key, str) else "")

    to_create: list[models.Model] = []
    to_update: list[models.Model] = []
    changed_fields: set[str] = set()
    # Foreign keys were resolved by the importer; validating them again costs a query per row.
    exclude = [f.name for f in model._meta.concrete_fields if f.is_relation]
    for key, values in rows.items():
        obj = existing.get(key)
        if obj is None:
            new = build(key, values)
            clean(new, key)
            to_create.append(new)
            continue
        diff = [f for f in compare_fields if f in values and getattr(obj, f) != values[f]]
        if diff:
            for f, v in values.items():
                setattr(obj, f, v)
            changed_fields.update(values)
            clean(obj, key)
            to_update.append(obj)
        else:
            result.unchanged += 1
    errors.raise_if_any(filename)
    created = model.objects.bulk_create(to_create, batch_size=batch_size)
    if to_update:
        update_fields = sorted(changed_fields)
        if any(f.name == "updated_at" for f in model._meta.concrete_fields):
            from django.utils import timezone

            now = timezone.now()
            for obj in to_update:
                obj.updated_at = now
            update_fields.append("updated_at")
        model.objects.bulk_update(to_update, update_fields, batch_size=batch_size)
    result.created = len(to_create)
    result.updated = len(to_update)
    return result, created


def import_record_create(
    *,
    kind: str,
    f: ImportFile,
    dataset: Dataset | None,
    result: UpsertResult,
    summary: dict[str, Any],
    user: Any = None,
) -> ImportRecord:
    user = user if getattr(user, "is_authenticated", False) else None
    return ImportRecord.objects.create(
        kind=kind,
        filename=f.name[:500],
        sha256=f.sha256,
        dataset=dataset,
        created=result.created,
        updated=result.updated,
        unchanged=result.unchanged,
        summary=summary,
        imported_by=user,
    )


def iter_chunks(seq: list, n: int) -> Iterator[list]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]
