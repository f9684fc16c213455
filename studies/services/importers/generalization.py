"""Generalization questions in the ``generalisation_final_*.json`` shape: one JSON object mapping
an original question's text to a list of ``[question, answer, type]`` rows, with answer
"True"/"False" (stored yes/no) and type rephrase, similar or counterfactual.

Originals are matched to items by question text (see ``normalize_question``), within the split
given or named in the file name when that split has items. Any answer that is not True/False is
a row error: the released dev file has 16 such answers, and they are reported, not guessed.
Rows repeated identically are merged. The same question given twice with different answers
(8 times in the released test file) keeps its first answer, is flagged in its metadata
(``conflicting_answers``) and listed in the import summary, so a validator can settle it.

A ``validation_status`` given to the import is applied to every question of the file and its
provenance is stored on each question whose status it sets (``metadata["validation"]``: the
status, that an import set it, the file's name and SHA-256, and when). The released
``generalisation_final_*.json`` files are the authors' validated set: import them with
``validation_status="valid"`` (``--validation-status valid``), as the README says.
"""
from __future__ import annotations

from pathlib import Path
from typing import IO, Any

from django.db import transaction
from django.utils import timezone

from studies.models import GeneralizationQuestion, ImportRecord, Item

from .errors import ErrorCollector, ImportValidationError, RowError
from .reading import json_type, parse_json_document, read_import_file
from .upsert import QuestionIndex, bulk_upsert, dataset_get, import_record_create
from .values import check_split, choice_label, short, split_from_name, yes_no_label

KIND = "generalization"
TYPES = {t.value for t in GeneralizationQuestion.Type}


def generalization_questions_import(
    *,
    file: str | Path | IO | Any,
    dataset_name: str,
    split: str | None = None,
    validation_status: str | None = None,
    filename: str | None = None,
    user: Any = None,
) -> ImportRecord:
    """Import generalization questions for items of an existing dataset. All or nothing;
    idempotent. ``validation_status`` (unvalidated / valid / invalid) is applied to every
    question of the file; None leaves existing questions as they are and makes new ones
    unvalidated."""
    f = read_import_file(file, filename=filename)
    split = check_split(split, filename=f.name)
    dataset = dataset_get(name=dataset_name, filename=f.name)
    if validation_status is not None and validation_status not in GeneralizationQuestion.Validation.values:
        raise ImportValidationError(
            f"unknown validation status {validation_status!r}: use "
            f"{', '.join(GeneralizationQuestion.Validation.values)}",
            filename=f.name,
        )
    if split is None:
        guessed = split_from_name(f.name)
        if guessed and Item.objects.filter(dataset=dataset, split=guessed).exists():
            split = guessed
    index = QuestionIndex(dataset, split)
    if not len(index):
        raise ImportValidationError(
            f"dataset {dataset.name!r}{f' split {split!r}' if split else ''} has no items: import the questions first",
            filename=f.name,
        )
    doc = parse_json_document(f, depth=2)
    if not isinstance(doc.data, dict):
        raise ImportValidationError(
            RowError(1, "", "expected one JSON object mapping each original question to a list of "
                            f"[question, answer, type] rows, got a JSON {json_type(doc.data)}"),
            filename=f.name,
        )
    provenance = None
    if validation_status is not None:
        provenance = {"status": validation_status, "set_by": "import", "file": f.name[:200], "sha256": f.sha256,
                      "at": timezone.now().isoformat()}
    errors = ErrorCollector()
    rows: dict[tuple[int, str, str], dict[str, Any]] = {}
    first: dict[tuple[int, str, str], str] = {}
    lines: dict[tuple[int, str, str], int | None] = {}
    merged = 0
    conflicts: list[dict[str, Any]] = []
    n_rows = 0
    originals: set[int] = set()
    for original, entries in doc.data.items():
        line, col = doc.where(original)
        record = f"original {short(original, 50)!r}"
        item, reason = index.find(original)
        if item is None:
            errors.add(line, "original question", reason, column=col)
        if not isinstance(entries, list):
            errors.add(line, "", f"expected a list of [question, answer, type] rows, got a JSON {json_type(entries)}",
                       column=col, record=record)
            continue
        for n, entry in enumerate(entries):
            n_rows += 1
            eline, ecol = doc.where(original, n)
            erecord = f"{record} row {n + 1}"
            if not isinstance(entry, list) or len(entry) != 3:
                errors.add(eline, "", f"expected [question, answer, type], got {short(entry)!r}", column=ecol,
                           record=erecord)
                continue
            text, raw_answer, qtype = entry
            ok = True
            if not isinstance(text, str) or not text.strip():
                errors.add(eline, "question", "the question text is empty", column=ecol, record=erecord)
                ok = False
            if dataset.is_yes_no:
                answer = yes_no_label(raw_answer, strict_true_false=True)
                allowed = "True or False"
            else:
                answer = choice_label(raw_answer, dataset.allowed_labels())
                allowed = ", ".join(dataset.allowed_labels())
            if answer is None:
                errors.add(eline, "answer", f"the answer {short(raw_answer)!r} is not {allowed}", column=ecol,
                           record=erecord)
                ok = False
            qtype_key = qtype.strip().lower() if isinstance(qtype, str) else ""
            if qtype_key not in TYPES:
                errors.add(eline, "type", f"the type {short(qtype)!r} is not one of {', '.join(sorted(TYPES))}",
                           column=ecol, record=erecord)
                ok = False
            if not ok or item is None:
                continue
            originals.add(item.pk)
            key = (item.pk, qtype_key, text.strip())
            values = {"answer": answer, "origin": f.name[:200], "metadata": {"original_question": original}}
            if provenance is not None:
                values["validation_status"] = validation_status
                values["metadata"]["validation"] = dict(provenance)
            if key in rows:
                if rows[key]["answer"] == answer:
                    merged += 1
                    continue
                # The released files hold a few of these (8 in the test file): the generator gave
                # the same question twice with opposite answers. Keep the first answer, flag the
                # question for validation, and say so in the summary.
                kept = rows[key]
                kept["metadata"]["conflicting_answers"] = sorted({kept["answer"], answer})
                conflicts.append({
                    "line": eline, "column": ecol, "original": original, "question": text.strip(), "type": qtype_key,
                    "kept": kept["answer"], "dropped": answer, "first_at": first[key],
                })
                continue
            rows[key] = values
            lines[key] = eline
            first[key] = f"line {eline}" + (f", column {ecol}" if ecol else "")
    errors.raise_if_any(f.name)
    if not rows:
        raise ImportValidationError("the file has no generalization questions", filename=f.name)
    with transaction.atomic():
        existing = {
            (g.item_id, g.qtype, g.text): g
            for g in GeneralizationQuestion.objects.filter(item__dataset=dataset)
        }

        def build(key: tuple[int, str, str], values: dict[str, Any]) -> GeneralizationQuestion:
            return GeneralizationQuestion(item_id=key[0], qtype=key[1], text=key[2], **values)

        compare = ["answer"] + (["validation_status"] if validation_status is not None else [])
        result, _ = bulk_upsert(
            model=GeneralizationQuestion, existing=existing, rows=rows, build=build, compare_fields=compare,
            lines=lines, filename=f.name, user=user,
        )
        per_type: dict[str, int] = {}
        for _, qtype, _ in rows:
            per_type[qtype] = per_type.get(qtype, 0) + 1
        summary = {
            "dataset": dataset.name,
            "split": split,
            "rows_in_file": n_rows,
            "questions": len(rows),
            "identical_duplicates_merged": merged,
            "originals": len(originals),
            "per_type": per_type,
            "conflicting_answers": conflicts,
            "validation_status_set": validation_status,
        }
        return import_record_create(kind=KIND, f=f, dataset=dataset, result=result, summary=summary, user=user)
