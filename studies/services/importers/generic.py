"""Items from any CSV, JSON-lines or JSON-list file, given which column holds what.

Yes/no datasets take answers yes/no, true/false or 1/0. Multiple-choice datasets take the
option label (``b``, ``B``, ``(b)``) or the exact text of an option; the choices column holds a
JSON list of ``{"label", "text"}`` objects or of plain strings (labelled a, b, c, ... in order).
Ids, questions, options and rationales follow the rules every item importer shares (``items``: an
option label is one letter, a to z, no two options of a row share a label or a text, no id holds a
bidirectional control, no text a T5 sentinel); the dataset name may not hold a bidirectional control
either (``textrules.identifier_problem``).
Columns not mapped go into the item's metadata.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from studies.models import YES_NO_CHOICES, Dataset, ImportRecord, Split

from .errors import ErrorCollector, ImportValidationError, RowError
from .items import (
    LETTERS,
    ItemRows,
    check_choices,
    check_item_values,
    item_values,
    items_apply,
    label_problem,
)
from .reading import json_cell, json_type, read_import_file, read_records
from .rows import Row, header_of, parse_rows, resolve_columns
from .upsert import dataset_check, dataset_existing
from .values import (
    as_text,
    check_split,
    choice_label,
    short,
    split_from_name,
    yes_no_label,
)

KIND = "items"


@dataclass
class ItemColumns:
    """Which column holds what; empty means "not in this file" (only id, question and answer
    are required)."""

    id: str = "id"
    question: str = "question"
    answer: str = "answer"
    choices: str = "choices"
    rationale: str = "rationale"
    split: str = "split"

    def used(self) -> set[str]:
        return {v for v in asdict(self).values() if v}

    def resolve(self, header: set[str], *, filename: str = "", multiple_choice: bool = False) -> dict[str, str]:
        """``{role: column}`` for this file (``resolve_columns``): id, question and answer (and
        choices for multiple choice) must be named and in the file; a rationale or split column
        named but absent is read as empty."""
        named = asdict(self)
        needed = ["id", "question", "answer"] + (["choices"] if multiple_choice else [])
        return resolve_columns(
            given={role: name if role in needed else None for role, name in named.items()},
            candidates={role: [name] for role, name in named.items() if name},
            required=[((role,), f"a named {role} column") for role in needed],
            header=header, filename=filename, hint=": map them with the column options",
        )


def _parse_choices(value: Any) -> tuple[list[dict[str, str]] | None, str]:
    if isinstance(value, str) and not value.strip():
        return [], ""
    try:
        value = json_cell(value)
    except ValueError as exc:
        return None, f"expected a JSON list of options, e.g. [\"first\", \"second\"] ({exc})"
    if not isinstance(value, list):
        return None, f"expected a list of options, got a JSON {json_type(value)}"
    out: list[dict[str, str]] = []
    if len(value) > len(LETTERS):
        return None, f"{len(value)} options: at most {len(LETTERS)}, labelled a to z"
    for n, option in enumerate(value):
        if isinstance(option, str):
            out.append({"label": LETTERS[n], "text": option.strip()})
        elif isinstance(option, dict):
            out.append({"label": as_text(option.get("label")), "text": as_text(option.get("text"))})
        else:
            return None, f"option {n + 1} is a JSON {json_type(option)}, expected text or an object"
    return out, ""


def items_import_table(
    *,
    file: str | Path | IO | Any,
    dataset_name: str,
    task_format: str | None = None,
    choice_labels: list[str] | None = None,
    columns: ItemColumns | None = None,
    split: str | None = None,
    file_format: str | None = None,
    filename: str | None = None,
    user: Any = None,
) -> ImportRecord:
    """Import items from a table file into a dataset (created when new: ``task_format`` then
    required). All or nothing; idempotent. A row's split column wins over ``split``, which wins
    over the split named in the file name."""
    f = read_import_file(file, filename=filename)
    columns = columns or ItemColumns()
    default_split, task_format, labels, dataset = items_table_target_check(
        dataset_name=dataset_name, task_format=task_format, choice_labels=choice_labels, split=split,
        filename=f.name, user=user)
    is_mc = task_format == Dataset.TaskFormat.MULTIPLE_CHOICE
    if dataset is not None and not labels:
        labels = list(dataset.choice_labels)
    records = read_records(f, file_format=file_format)
    cols = columns.resolve(header_of(records), filename=f.name, multiple_choice=is_mc)
    errors = ErrorCollector()
    rows = ItemRows(errors, id_field=columns.id)
    parse = _ItemRow(labels=labels, multiple_choice=is_mc, default_split=default_split, used=columns.used())
    for row in parse_rows(records, columns=cols, errors=errors):
        external_id = row.text("id")
        if not external_id:
            row.error("id", "the id is empty")
            continue
        if rows.claim(external_id, line=row.line, column=row.column):
            row.record = f"id {short(external_id, 40)!r}"
            values = parse(row)
            if row.ok:
                rows.add(external_id, values, line=row.line, column=row.column)
    rows.raise_if_invalid(f.name, noun="items")
    return items_apply(
        kind=KIND,
        f=f,
        dataset_name=dataset_name,
        task_format=task_format,
        choice_labels=parse.labels if is_mc else [],
        rows=rows,
        user=user,
        extra_summary={"columns": asdict(columns)},
    )


def items_table_target_check(*, dataset_name: str, task_format: str | None = None,
                             choice_labels: list[str] | None = None, split: str | None = None, filename: str = "",
                             user: Any = None) -> tuple[str, str, list[str], Dataset | None]:
    """What an items table import writes to, refused before its file is read: the split, the task
    format, the option labels and the dataset (``dataset_check``: new, or one ``user`` may import
    into, of that format). Returns ``(default split, task format, labels, existing dataset or
    None)``. A background import (``jobs.import_job_create``) asks it before storing the upload, so a
    large file is refused as a small one is."""
    default_split = check_split(split, filename=filename) or split_from_name(filename) or Split.OTHER
    task_format = _task_format(dataset_name, task_format, filename, user=user)
    labels = [lbl.strip() for lbl in (choice_labels or []) if lbl.strip()]
    if task_format == Dataset.TaskFormat.MULTIPLE_CHOICE:
        unreadable = [lbl for lbl in labels if choice_label(lbl, LETTERS) is None]
        if unreadable:
            raise ImportValidationError([RowError(None, "choice_labels", label_problem(lbl)) for lbl in unreadable],
                                        filename=filename)
        labels = [choice_label(lbl, LETTERS) or lbl for lbl in labels]
    else:
        labels = [lbl.lower() for lbl in labels]
    dataset = dataset_check(name=dataset_name, task_format=task_format, choice_labels=labels, filename=filename,
                            user=user)
    return default_split, task_format, labels, dataset


def _task_format(dataset_name: str, task_format: str | None, filename: str, *, user: Any = None) -> str:
    """The task format asked for, else the existing dataset's (one ``user`` may import into:
    ``dataset_existing``); refused when neither says."""
    if task_format is None:
        existing = dataset_existing(name=dataset_name, user=user, filename=filename)
        if existing is None:
            raise ImportValidationError(
                f"dataset {dataset_name!r} does not exist yet: give its task format (yes_no or multiple_choice)",
                filename=filename,
            )
        task_format = existing.task_format
    if task_format not in Dataset.TaskFormat.values:
        raise ImportValidationError(f"unknown task format {task_format!r}: use yes_no or multiple_choice",
                                    filename=filename)
    return task_format


class _ItemRow:
    """Parses one row of an items table into an item's values; errors are reported on the row.
    The first row's option labels become the dataset's when it has none yet."""

    def __init__(self, *, labels: list[str], multiple_choice: bool, default_split: str, used: set[str]):
        self.labels, self.multiple_choice, self.default_split, self.used = labels, multiple_choice, default_split, used

    def __call__(self, row: Row) -> dict[str, Any]:
        question = row.text("question")
        raw_answer = row.raw("answer")
        if self.multiple_choice:
            choices = self.choices(row)
            gold, allowed = self.option(raw_answer, choices), ", ".join(self.labels) or "an option label"
        else:
            choices, gold, allowed = list(YES_NO_CHOICES), yes_no_label(raw_answer), "yes/no (or true/false)"
        rationale = row.text("rationale") if row.has("rationale") else ""
        if not check_item_values(errors=row.errors, line=row.line, column=row.column, record=row.record,
                                 question=question, gold_answer=gold, raw_answer=raw_answer, allowed=allowed,
                                 answer_field=row.name("answer"), question_field=row.name("question"),
                                 rationale=rationale, rationale_field=row.name("rationale")):
            row.ok = False
        return item_values(question=question, choices=choices, gold_answer=gold, gold_rationale=rationale,
                           split=self.split(row),
                           metadata={k: v for k, v in row.others(self.used).items() if v not in ("", None)})

    def choices(self, row: Row) -> list[dict[str, str]]:
        choices, reason = _parse_choices(row.raw("choices"))
        if choices is None:
            row.error("choices", reason)
            return []
        if len(choices) < 2:
            row.error("choices", "a multiple-choice item needs at least two options")
            return choices
        if not check_choices(errors=row.errors, line=row.line, column=row.column, record=row.record, choices=choices,
                             field=row.name("choices")):
            row.ok = False
            return choices
        row_labels = [c["label"] for c in choices]
        if not self.labels:
            self.labels = row_labels
        if row_labels != self.labels:
            row.error("choices", f"the option labels {row_labels} differ from the dataset's {self.labels}")
        return choices

    def option(self, raw_answer: Any, choices: list[dict[str, str]]) -> str | None:
        """The answer's option label: a label (``b``, ``(B)``) or the exact text of one option.
        The row's own labels are read when the dataset has none yet (its first row was refused)."""
        labels = self.labels or [c["label"] for c in choices]
        gold = choice_label(raw_answer, labels) if labels else None
        if gold is None and isinstance(raw_answer, str):
            matches = [c["label"] for c in choices if c["text"] == raw_answer.strip()]
            gold = matches[0] if len(matches) == 1 else None
        return gold

    def split(self, row: Row) -> str:
        if not row.has("split") or not row.text("split"):
            return self.default_split
        value = row.text("split").lower()
        if value not in Split.values:
            row.error("split", f"unknown split {short(value)!r}: use {', '.join(Split.values)}")
        return value
