"""OpenBookQA: four-option multiple choice, labels stored lower-case ``a`` .. ``d``.

Two shapes are accepted:

* the original release (``train_complete.jsonl`` ...): JSON lines, one object per line with
  ``id``, ``question.stem``, ``question.choices[{text, label}]``, ``answerKey`` and ``fact1``
  (the gold rationale);
* the single-object form (``obqa_dev.jsonl``): one JSON object ``{"0": {...}, "1": {...}}``
  whose records hold ``question`` (the stem followed by ``(a) ... (b) ... (c) ... (d) ...``),
  ``answer`` (``"(b)"``) and ``rationale`` (``"dummy"`` means none). Its keys repeat across
  files, so the item id is ``<split>-<key>``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import IO, Any

from studies.models import Dataset, ImportRecord

from .errors import ErrorCollector, ImportValidationError, RowError, TooManyRecords
from .items import ItemRows, check_item_values, items_apply
from .reading import ImportFile, json_type, parse_json_document, parse_json_lines, read_import_file
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


def _original(
    rec: dict, *, line: int | None, col: int | None, split: str, errors: ErrorCollector, rows: ItemRows
) -> None:
    external_id = as_text(rec.get("id"))
    record = f"id {short(external_id, 40)!r}" if external_id else ""
    if not external_id:
        errors.add(line, "id", "the question id is missing or empty", column=col)
        return
    if not rows.claim(external_id, line=line, column=col):
        return
    question = rec.get("question")
    if not isinstance(question, dict):
        errors.add(
            line, "question", f"expected an object with stem and choices, got a JSON {json_type(question)}",
            column=col, record=record,
        )
        return
    stem = question.get("stem")
    stem = stem.strip() if isinstance(stem, str) else ""
    choices_raw = question.get("choices")
    ok = True
    choices: list[dict[str, str]] = []
    if not isinstance(choices_raw, list) or len(choices_raw) != len(LABELS):
        errors.add(
            line, "question.choices",
            f"expected a list of {len(LABELS)} options, got {short(choices_raw)!r}", column=col, record=record,
        )
        ok = False
    else:
        for n, choice in enumerate(choices_raw):
            field = f"question.choices[{n}]"
            if not isinstance(choice, dict):
                errors.add(line, field, "expected an object with text and label", column=col, record=record)
                ok = False
                continue
            label = as_text(choice.get("label")).lower()
            text = as_text(choice.get("text"))
            if label not in LABELS:
                errors.add(
                    line, f"{field}.label", f"the label {short(choice.get('label'))!r} is not one of A, B, C, D",
                    column=col, record=record,
                )
                ok = False
            if not text:
                errors.add(line, f"{field}.text", "the option text is empty", column=col, record=record)
                ok = False
            choices.append({"label": label, "text": text})
        labels = [c["label"] for c in choices]
        if ok and sorted(labels) != LABELS:
            errors.add(
                line, "question.choices", f"the labels {labels} must be A, B, C, D, each once",
                column=col, record=record,
            )
            ok = False
        choices.sort(key=lambda c: c["label"])
    raw_answer = rec.get("answerKey")
    gold = choice_label(raw_answer, LABELS)
    ok = check_item_values(
        errors=errors, line=line, column=col, record=record, question=stem, gold_answer=gold,
        raw_answer=raw_answer, allowed="A, B, C or D", answer_field="answerKey", question_field="question.stem",
    ) and ok
    if not ok:
        return
    fact = as_text(rec.get("fact1"))
    metadata = {k: v for k, v in rec.items() if k not in {"id", "question", "answerKey"}}
    rows.add(
        external_id,
        {
            "question": stem,
            "choices": choices,
            "gold_answer": gold,
            "gold_rationale": "" if fact.lower() in NO_RATIONALE else fact,
            "split": split,
            "metadata": metadata,
        },
        line=line,
        column=col,
    )


def _single(
    key: str, rec: dict, *, line: int | None, col: int | None, split: str, errors: ErrorCollector, rows: ItemRows
) -> None:
    record = f"key {short(key, 20)!r}"
    if not rows.claim(f"{split}-{key}", line=line, column=col):
        return
    text = rec.get("question")
    if not isinstance(text, str) or not text.strip():
        errors.add(line, "question", "the question text is empty", column=col, record=record)
        return
    m = _OPTIONS.match(text.strip())
    ok = True
    choices: list[dict[str, str]] = []
    stem = text.strip()
    if not m:
        errors.add(
            line, "question", "expected the four options in the text as (a) ... (b) ... (c) ... (d) ...",
            column=col, record=record,
        )
        ok = False
    else:
        stem = m.group("stem").strip()
        for label in LABELS:
            option = m.group(label).strip()
            if not option:
                errors.add(line, "question", f"option ({label}) is empty", column=col, record=record)
                ok = False
            choices.append({"label": label, "text": option})
    raw_answer = rec.get("answer")
    gold = choice_label(raw_answer, LABELS)
    ok = check_item_values(
        errors=errors, line=line, column=col, record=record, question=stem, gold_answer=gold,
        raw_answer=raw_answer, allowed="(a), (b), (c) or (d)",
    ) and ok
    rationale = rec.get("rationale")
    if rationale is not None and not isinstance(rationale, str):
        errors.add(line, "rationale", f"expected text, got a JSON {json_type(rationale)}", column=col, record=record)
        ok = False
    if not ok:
        return
    rationale = (rationale or "").strip()
    metadata = {"source_key": key}
    rows.add(
        f"{split}-{key}",
        {
            "question": stem,
            "choices": choices,
            "gold_answer": gold,
            "gold_rationale": "" if rationale.lower() in NO_RATIONALE else rationale,
            "split": split,
            "metadata": metadata,
        },
        line=line,
        column=col,
    )


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
    split = check_split(split, filename=f.name) or split_from_name(f.name) or "other"
    dataset_check(
        name=dataset_name, task_format=Dataset.TaskFormat.MULTIPLE_CHOICE, choice_labels=LABELS, filename=f.name
    )
    shape, records = _records(f)
    errors = ErrorCollector()
    rows = ItemRows(errors, id_field="id" if shape == "original" else "key")
    for line, col, key, rec in records:
        if not isinstance(rec, dict):
            errors.add(line, "", f"expected a JSON object, got a JSON {json_type(rec)}", column=col)
            continue
        if shape == "single":
            _single(key, rec, line=line, col=col, split=split, errors=errors, rows=rows)
        else:
            _original(rec, line=line, col=col, split=split, errors=errors, rows=rows)
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
