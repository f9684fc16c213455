"""Items from any CSV, JSON-lines or JSON-list file, given which column holds what.

Yes/no datasets take answers yes/no, true/false or 1/0. Multiple-choice datasets take the
option label (``b``, ``B``, ``(b)``) or the exact text of an option; the choices column holds a
JSON list of ``{"label", "text"}`` objects or of plain strings (labelled a, b, c, ... in order).
Columns not mapped go into the item's metadata.
"""
from __future__ import annotations

import string
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from studies.models import YES_NO_CHOICES, Dataset, ImportRecord, Split

from .errors import ErrorCollector, ImportValidationError
from .items import ItemRows, check_item_values, items_apply
from .reading import json_cell, json_type, read_import_file, read_records
from .upsert import dataset_check
from .values import as_text, check_split, choice_label, short, split_from_name, yes_no_label

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
    for n, option in enumerate(value):
        if isinstance(option, str):
            if n >= len(string.ascii_lowercase):
                return None, "too many options"
            out.append({"label": string.ascii_lowercase[n], "text": option.strip()})
        elif isinstance(option, dict):
            out.append({"label": as_text(option.get("label")).lower(), "text": as_text(option.get("text"))})
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
    default_split = check_split(split, filename=f.name) or split_from_name(f.name) or Split.OTHER
    existing = Dataset.objects.filter(name=(dataset_name or "").strip()).first()
    if task_format is None:
        if existing is None:
            raise ImportValidationError(
                f"dataset {dataset_name!r} does not exist yet: give its task format (yes_no or multiple_choice)",
                filename=f.name,
            )
        task_format = existing.task_format
    if task_format not in Dataset.TaskFormat.values:
        raise ImportValidationError(
            f"unknown task format {task_format!r}: use yes_no or multiple_choice", filename=f.name
        )
    labels = [lbl.strip().lower() for lbl in (choice_labels or []) if lbl.strip()]
    dataset = dataset_check(name=dataset_name, task_format=task_format, choice_labels=labels, filename=f.name)
    if dataset is not None and not labels:
        labels = list(dataset.choice_labels)
    is_mc = task_format == Dataset.TaskFormat.MULTIPLE_CHOICE
    for required in ("id", "question", "answer"):
        if not getattr(columns, required):
            raise ImportValidationError(f"the {required} column must be named", filename=f.name)
    records = read_records(f, file_format=file_format)
    errors = ErrorCollector()
    header = set(records[0][1]) if records else set()
    missing = [c for c in (columns.id, columns.question, columns.answer) if c not in header]
    if is_mc and columns.choices and columns.choices not in header:
        missing.append(columns.choices)
    if missing:
        raise ImportValidationError(
            f"the file has no column(s) {', '.join(repr(m) for m in missing)}; its columns are "
            f"{', '.join(sorted(map(repr, header)))}: map them with the column options",
            filename=f.name,
        )
    rows = ItemRows(errors, id_field=columns.id)
    for line, rec, col in records:
        external_id = as_text(rec.get(columns.id))
        if not external_id:
            errors.add(line, columns.id, "the id is empty", column=col)
            continue
        record = f"id {short(external_id, 40)!r}"
        if not rows.claim(external_id, line=line, column=col):
            continue
        question = as_text(rec.get(columns.question))
        raw_answer = rec.get(columns.answer)
        ok = True
        if is_mc:
            choices, reason = _parse_choices(rec.get(columns.choices))
            if choices is None:
                errors.add(line, columns.choices, reason, column=col, record=record)
                ok = False
                choices = []
            elif len(choices) < 2:
                errors.add(line, columns.choices, "a multiple-choice item needs at least two options", column=col,
                           record=record)
                ok = False
            else:
                row_labels = [c["label"] for c in choices]
                if not labels:
                    labels = row_labels
                if row_labels != labels:
                    errors.add(
                        line, columns.choices, f"the option labels {row_labels} differ from the dataset's {labels}",
                        column=col, record=record,
                    )
                    ok = False
                for c in choices:
                    if not c["text"]:
                        errors.add(line, columns.choices, f"option {c['label']!r} has no text", column=col,
                                   record=record)
                        ok = False
            gold = choice_label(raw_answer, labels) if labels else None
            if gold is None and isinstance(raw_answer, str):
                matches = [c["label"] for c in choices if c["text"] == raw_answer.strip()]
                gold = matches[0] if len(matches) == 1 else None
            allowed = ", ".join(labels) if labels else "an option label"
        else:
            choices = list(YES_NO_CHOICES)
            gold = yes_no_label(raw_answer)
            allowed = "yes/no (or true/false)"
        ok = check_item_values(
            errors=errors, line=line, column=col, record=record, question=question, gold_answer=gold,
            raw_answer=raw_answer, allowed=allowed, answer_field=columns.answer, question_field=columns.question,
        ) and ok
        row_split = default_split
        if columns.split and as_text(rec.get(columns.split)):
            row_split = as_text(rec.get(columns.split)).lower()
            if row_split not in Split.values:
                errors.add(line, columns.split, f"unknown split {short(row_split)!r}: use {', '.join(Split.values)}",
                           column=col, record=record)
                ok = False
        if not ok:
            continue
        rationale = as_text(rec.get(columns.rationale)) if columns.rationale else ""
        metadata = {k: v for k, v in rec.items() if k not in columns.used() and v not in ("", None)}
        rows.add(
            external_id,
            {
                "question": question,
                "choices": choices,
                "gold_answer": gold,
                "gold_rationale": rationale,
                "split": row_split,
                "metadata": metadata,
            },
            line=line,
            column=col,
        )
    rows.raise_if_invalid(f.name, noun="items")
    return items_apply(
        kind=KIND,
        f=f,
        dataset_name=dataset_name,
        task_format=task_format,
        choice_labels=labels if is_mc else [],
        rows=rows,
        user=user,
        extra_summary={"columns": asdict(columns)},
    )
