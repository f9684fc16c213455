"""OpenBookQA: four-option multiple choice, labels stored lower-case ``a`` .. ``d``.

Two shapes are accepted:

* the original release (``train_complete.jsonl`` ...): JSON lines, one object per line with
  ``id``, ``question.stem``, ``question.choices[{text, label}]``, ``answerKey`` and ``fact1``
  (the gold rationale);
* the single-object form (``obqa_dev.jsonl``): one JSON object ``{"0": {...}, "1": {...}}``
  whose records hold ``question`` (the stem followed by ``(a) ... (b) ... (c) ... (d) ...``),
  ``answer`` (``"(b)"``) and ``rationale`` (``"dummy"`` means none). Its keys repeat across
  files, so the item id is ``<split>-<key>``.

Both follow the rules every item importer shares (``items``: ids without bidirectional controls,
no T5 sentinel in a question, an option or a rationale, no two options sharing a label or a text).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import IO, Any

from studies.models import Dataset, ImportRecord

from .errors import ErrorCollector, ImportValidationError, RowError, TooManyRecords
from .items import ItemRows, check_choices, check_item_values, item_values, items_apply
from .reading import ImportFile, json_type, parse_json_document, parse_json_lines, read_import_file
from .rows import Row, parse_rows
from .upsert import dataset_check
from .values import as_text, check_split, choice_label, short, split_from_name

KIND = "openbookqa"
DEFAULT_DATASET = "OpenBookQA"
LABELS = ["a", "b", "c", "d"]
NO_RATIONALE = {"", "dummy"}
_OPTIONS = re.compile(
    r"^(?P<stem>.*)\(a\)(?P<a>.*)\(b\)(?P<b>.*)\(c\)(?P<c>.*)\(d\)(?P<d>.*)$", re.DOTALL | re.IGNORECASE
)


def _records(f: ImportFile) -> tuple[str, list[tuple[int | None, int | None, str, Any]]]:
    """``(shape, [(line, column, key, record), ...])`` with shape ``"original"`` or ``"single"``."""
    text = f.text.strip()
    whole = None
    if text.startswith("{"):
        try:
            whole = parse_json_document(f, depth=1)
        except TooManyRecords:
            raise  # too many for any format: not a reason to try JSON lines
        except ImportValidationError:
            whole = None
    if whole is not None and isinstance(whole.data, dict) and not {"id", "question"} & set(whole.data):
        out = []
        for key, rec in whole.data.items():
            line, col = whole.where(key)
            out.append((line, col, key, rec))
        return "single", out
    if text.startswith("["):
        doc = parse_json_document(f, depth=1)
        if isinstance(doc.data, list):
            out = []
            for i, rec in enumerate(doc.data):
                line, col = doc.where(i)
                out.append((line, col, str(i), rec))
            return "original", out
    if not text.startswith(("{", "[")):
        try:
            json.loads(text.split("\n", 1)[0])
        except json.JSONDecodeError as exc:
            raise ImportValidationError(
                RowError(1, "", f"not valid JSON: {exc.msg}", column=exc.colno), filename=f.name
            ) from None
        raise ImportValidationError(
            RowError(1, "", "expected JSON lines of OpenBookQA questions or one JSON object of them"),
            filename=f.name,
        )
    return "original", [(line, None, str(line), rec) for line, rec in parse_json_lines(f)]


def _original(row: Row, split: str) -> dict[str, Any] | None:
    """An item's values from a record of the original release; None (errors on the row) when it
    has any."""
    question = row.raw("question")
    if not isinstance(question, dict):
        row.error("question", f"expected an object with stem and choices, got a JSON {json_type(question)}")
        return None
    stem = question.get("stem")
    stem = stem.strip() if isinstance(stem, str) else ""
    choices = _original_choices(row, question.get("choices"))
    raw_answer = row.raw("answerKey")
    gold = choice_label(raw_answer, LABELS)
    rationale = _rationale(row.text("fact1"))
    if not check_item_values(errors=row.errors, line=row.line, column=row.column, record=row.record, question=stem,
                             gold_answer=gold, raw_answer=raw_answer, allowed="A, B, C or D", answer_field="answerKey",
                             question_field="question.stem", rationale=rationale, rationale_field="fact1"):
        row.ok = False
    if not row.ok:
        return None
    return item_values(question=stem, choices=choices, gold_answer=gold, gold_rationale=rationale,
                       split=split, metadata=row.others({"id", "question", "answerKey"}))


def _original_choices(row: Row, raw: Any) -> list[dict[str, str]]:
    """The four options of ``question.choices``, sorted by label; errors on the row. Each is checked
    as every item importer's are (``items.check_choices``), then its label must be A, B, C or D."""
    if not isinstance(raw, list) or len(raw) != len(LABELS):
        row.error("", f"expected a list of {len(LABELS)} options, got {short(raw)!r}", field="question.choices")
        return []
    not_objects = [n for n, choice in enumerate(raw) if not isinstance(choice, dict)]
    for n in not_objects:
        row.error("", "expected an object with text and label", field=f"question.choices[{n}]")
    if not_objects:
        return []
    choices = [{"label": as_text(choice.get("label")), "text": as_text(choice.get("text"))} for choice in raw]
    if not check_choices(errors=row.errors, line=row.line, column=row.column, record=row.record, choices=choices,
                         field="question.choices", text_field="{field}[{n}].text"):
        row.ok = False
        return []
    for n, choice in enumerate(choices):  # four letters, each once: A, B, C, D unless one is not among them
        if choice["label"] not in LABELS:
            row.error("", f"the label {short(raw[n].get('label'))!r} is not one of A, B, C, D",
                      field=f"question.choices[{n}].label")
    return sorted(choices, key=lambda c: c["label"])


def _single(key: str, row: Row, split: str) -> dict[str, Any] | None:
    """An item's values from a record of the single-object form; None (errors on the row) when it
    has any."""
    text = row.raw("question")
    if not isinstance(text, str) or not text.strip():
        row.error("question", "the question text is empty")
        return None
    stem, choices = _single_options(row, text.strip())
    if row.ok and not check_choices(errors=row.errors, line=row.line, column=row.column, record=row.record,
                                    choices=choices, field="question", text_field="{field} ({label})"):
        row.ok = False
    raw_answer = row.raw("answer")
    gold = choice_label(raw_answer, LABELS)
    rationale = row.raw("rationale")
    if rationale is not None and not isinstance(rationale, str):
        row.error("rationale", f"expected text, got a JSON {json_type(rationale)}")
        rationale = ""
    rationale = _rationale(rationale or "")
    if not check_item_values(errors=row.errors, line=row.line, column=row.column, record=row.record, question=stem,
                             gold_answer=gold, raw_answer=raw_answer, allowed="(a), (b), (c) or (d)",
                             rationale=rationale):
        row.ok = False
    if not row.ok:
        return None
    return item_values(question=stem, choices=choices, gold_answer=gold, gold_rationale=rationale,
                       split=split, metadata={"source_key": key})


def _rationale(text: str) -> str:
    """The gold rationale: the file's text, or none for an empty one or ``dummy``."""
    text = text.strip()
    return "" if text.lower() in NO_RATIONALE else text


def _single_options(row: Row, text: str) -> tuple[str, list[dict[str, str]]]:
    """The stem and the four options written into the question text as (a) ... (d) ...."""
    m = _OPTIONS.match(text)
    if not m:
        row.error("question", "expected the four options in the text as (a) ... (b) ... (c) ... (d) ...")
        return text, []
    choices = []
    for label in LABELS:
        option = m.group(label).strip()
        if not option:
            row.error("question", f"option ({label}) is empty")
        choices.append({"label": label, "text": option})
    return m.group("stem").strip(), choices


def _read(row: Row, key: str, *, shape: str, split: str, rows: ItemRows) -> None:
    """Claim the record's item id and keep its values when it has no error."""
    if shape == "single":
        external_id = f"{split}-{key}"
        row.record = f"key {short(key, 20)!r}"
    else:
        external_id = row.text("id")
        if not external_id:
            row.error("id", "the question id is missing or empty")
            return
        row.record = f"id {short(external_id, 40)!r}"
    if not rows.claim(external_id, line=row.line, column=row.column):
        return
    values = _single(key, row, split) if shape == "single" else _original(row, split)
    if values is not None:
        rows.add(external_id, values, line=row.line, column=row.column)


def openbookqa_target_check(*, dataset_name: str = DEFAULT_DATASET, split: str | None = None, filename: str = "",
                            user: Any = None) -> str:
    """What an OpenBookQA import writes to, refused before its file is read: the split (else the one
    in the file name, else "other"), returned, and the dataset (``dataset_check``: new, or a
    four-option one ``user`` may import into). A background import (``jobs.import_job_create``) asks
    it before storing the upload, so a large file is refused as a small one is."""
    split = check_split(split, filename=filename) or split_from_name(filename) or "other"
    dataset_check(name=dataset_name, task_format=Dataset.TaskFormat.MULTIPLE_CHOICE, choice_labels=LABELS,
                  filename=filename, user=user)
    return split


def items_import_openbookqa(
    *,
    file: str | Path | IO | Any,
    dataset_name: str = DEFAULT_DATASET,
    split: str | None = None,
    filename: str | None = None,
    user: Any = None,
) -> ImportRecord:
    """Import OpenBookQA items (either shape) into a four-option dataset. All or nothing;
    idempotent. ``split`` defaults to the one in the file name, else "other"."""
    f = read_import_file(file, filename=filename)
    split = openbookqa_target_check(dataset_name=dataset_name, split=split, filename=f.name, user=user)
    shape, records = _records(f)
    errors = ErrorCollector()
    rows = ItemRows(errors, id_field="id" if shape == "original" else "key")
    keys = [key for _, _, key, _ in records]
    for row in parse_rows(((line, rec, col) for line, col, _, rec in records), errors=errors):
        _read(row, keys[row.index], shape=shape, split=split, rows=rows)
    rows.raise_if_invalid(f.name, noun="questions")
    return items_apply(
        kind=KIND,
        f=f,
        dataset_name=dataset_name,
        task_format=Dataset.TaskFormat.MULTIPLE_CHOICE,
        choice_labels=LABELS,
        dataset_description="OpenBookQA (Mihaylov et al. 2018): four-option science questions.",
        rows=rows,
        user=user,
        extra_summary={"split": split, "shape": shape},
    )
