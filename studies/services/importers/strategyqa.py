"""StrategyQA: a JSON list of yes/no questions.

Accepts the official release (``qid``, ``term``, ``description``, ``question``, ``answer``,
``facts``, ``decomposition``, ``evidence``) and the processed form that adds ``rationale`` (the
facts joined), as in ``strategyqa_processed_{train,dev,test}.json``. ``answer`` may be a JSON
boolean or the string "True"/"False"; ``facts`` may be a list or a stringified list. The gold
rationale is ``rationale`` when present, else the facts joined with spaces.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import IO, Any

from studies.models import YES_NO_CHOICES, Dataset, ImportRecord

from .errors import ErrorCollector, ImportValidationError, RowError
from .items import ItemRows, check_item_values, items_apply
from .reading import json_type, parse_json_document, read_import_file
from .upsert import dataset_check
from .values import as_text, check_split, short, split_from_name, yes_no_label

KIND = "strategyqa"
DEFAULT_DATASET = "StrategyQA"


def _string_list(value: Any) -> list[str] | None:
    """A list of strings from a list or a stringified list; None when it is neither."""
    if value is None or value == "":
        return []
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return [v.strip() for v in value if v.strip()]
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                parsed = ast.literal_eval(text)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None
            return _string_list(parsed) if isinstance(parsed, list) else None
        return [text]
    return None


def items_import_strategyqa(
    *,
    file: str | Path | IO | Any,
    dataset_name: str = DEFAULT_DATASET,
    split: str | None = None,
    filename: str | None = None,
    user: Any = None,
) -> ImportRecord:
    """Import (or re-import) StrategyQA items into a yes/no dataset. All or nothing; idempotent.

    ``split`` defaults to the one named in the file name (``..._test.json``), else "other".
    Raises ImportValidationError listing every bad record."""
    f = read_import_file(file, filename=filename)
    split = check_split(split, filename=f.name) or split_from_name(f.name) or "other"
    dataset_check(name=dataset_name, task_format=Dataset.TaskFormat.YES_NO, filename=f.name)
    doc = parse_json_document(f, depth=1)
    if not isinstance(doc.data, list):
        hint = ""
        if isinstance(doc.data, dict):
            hint = " (a generalization file maps questions to lists: use the generalization import)"
        raise ImportValidationError(
            RowError(1, "", f"expected a JSON list of StrategyQA questions, got a JSON {json_type(doc.data)}{hint}"),
            filename=f.name,
        )
    errors = ErrorCollector()
    rows = ItemRows(errors, id_field="qid")
    for index, rec in enumerate(doc.data):
        line, col = doc.where(index)
        record = f"record {index + 1}"
        if not isinstance(rec, dict):
            errors.add(line, "", f"expected a JSON object, got a JSON {json_type(rec)}", column=col, record=record)
            continue
        external_id = as_text(rec.get("qid"))
        if not external_id:
            errors.add(line, "qid", "the question id is missing or empty", column=col, record=record)
            continue
        record = f"qid {short(external_id, 40)!r}"
        if not rows.claim(external_id, line=line, column=col):
            continue
        question = rec.get("question")
        if question is not None and not isinstance(question, str):
            errors.add(line, "question", f"expected text, got a JSON {json_type(question)}", column=col, record=record)
            continue
        question = (question or "").strip()
        raw_answer = rec.get("answer")
        gold = yes_no_label(raw_answer) if raw_answer is not None else None
        ok = check_item_values(
            errors=errors, line=line, column=col, record=record, question=question,
            gold_answer=gold, raw_answer=raw_answer, allowed="true/false",
        )
        facts = _string_list(rec.get("facts"))
        if facts is None:
            errors.add(line, "facts", "expected a list of sentences (or a stringified list)", column=col, record=record)
            ok = False
        decomposition = _string_list(rec.get("decomposition"))
        if decomposition is None:
            errors.add(line, "decomposition", "expected a list of sub-questions", column=col, record=record)
            ok = False
        rationale = rec.get("rationale")
        if rationale is not None and not isinstance(rationale, str):
            errors.add(line, "rationale", f"expected text, got a JSON {json_type(rationale)}", column=col, record=record)
            ok = False
        if not ok:
            continue
        gold_rationale = (rationale or "").strip() or " ".join(facts or [])
        metadata = {
            key: value
            for key, value in (
                ("term", as_text(rec.get("term"))),
                ("description", as_text(rec.get("description"))),
                ("facts", facts),
                ("decomposition", decomposition),
            )
            if value
        }
        rows.add(
            external_id,
            {
                "question": question,
                "choices": list(YES_NO_CHOICES),
                "gold_answer": gold,
                "gold_rationale": gold_rationale,
                "split": split,
                "metadata": metadata,
            },
            line=line,
            column=col,
        )
    rows.raise_if_invalid(f.name, noun="questions")
    return items_apply(
        kind=KIND,
        f=f,
        dataset_name=dataset_name,
        task_format=Dataset.TaskFormat.YES_NO,
        dataset_description="StrategyQA (Geva et al. 2021): yes/no questions that need implicit reasoning steps.",
        rows=rows,
        user=user,
        extra_summary={"split": split},
    )
