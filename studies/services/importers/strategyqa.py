"""StrategyQA: a JSON list of yes/no questions.

Accepts the official release (``qid``, ``term``, ``description``, ``question``, ``answer``,
``facts``, ``decomposition``, ``evidence``) and the processed form that adds ``rationale`` (the
facts joined), as in ``strategyqa_processed_{train,dev,test}.json``. ``answer`` may be a JSON
boolean or the string "True"/"False"; ``facts`` may be a list or a stringified list. The gold
rationale is ``rationale`` when present, else the facts joined with spaces. Ids, questions and
rationales follow the rules every item importer shares (``items``: no bidirectional control in a
``qid``, no T5 sentinel in a question or a rationale).
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import IO, Any

from studies.models import YES_NO_CHOICES, Dataset, ImportRecord

from .errors import ErrorCollector, ImportValidationError, RowError
from .items import ItemRows, check_item_values, item_values, items_apply
from .reading import json_type, parse_json_document, read_import_file
from .rows import Row, parse_rows
from .upsert import dataset_check
from .values import check_split, short, split_from_name, yes_no_label

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


def _values(row: Row, split: str) -> dict[str, Any] | None:
    """The item's values from one StrategyQA record; None (errors on the row) when it has any."""
    question = row.raw("question")
    if question is not None and not isinstance(question, str):
        row.error("question", f"expected text, got a JSON {json_type(question)}")
        return None
    question = (question or "").strip()
    raw_answer = row.raw("answer")
    gold = yes_no_label(raw_answer) if raw_answer is not None else None
    facts, decomposition, rationale = _reasoning(row)
    # The gold rationale: the record's rationale, else its facts joined (a sentinel is named in the field it is in).
    rationale_field = "rationale" if rationale else "facts"
    rationale = rationale or " ".join(facts or [])
    if not check_item_values(errors=row.errors, line=row.line, column=row.column, record=row.record,
                             question=question, gold_answer=gold, raw_answer=raw_answer, allowed="true/false",
                             rationale=rationale, rationale_field=rationale_field):
        row.ok = False
    if not row.ok:
        return None
    described = (("term", row.text("term")), ("description", row.text("description")), ("facts", facts),
                 ("decomposition", decomposition))
    return item_values(question=question, choices=list(YES_NO_CHOICES), gold_answer=gold,
                       gold_rationale=rationale, split=split,
                       metadata={key: value for key, value in described if value})


def _reasoning(row: Row) -> tuple[list[str] | None, list[str] | None, str]:
    """The record's facts, decomposition and rationale text, each checked."""
    facts = _string_list(row.raw("facts"))
    if facts is None:
        row.error("facts", "expected a list of sentences (or a stringified list)")
    decomposition = _string_list(row.raw("decomposition"))
    if decomposition is None:
        row.error("decomposition", "expected a list of sub-questions")
    rationale = row.raw("rationale")
    if rationale is not None and not isinstance(rationale, str):
        row.error("rationale", f"expected text, got a JSON {json_type(rationale)}")
        return facts, decomposition, ""
    return facts, decomposition, (rationale or "").strip()


def strategyqa_target_check(*, dataset_name: str = DEFAULT_DATASET, split: str | None = None, filename: str = "",
                            user: Any = None) -> str:
    """What a StrategyQA import writes to, refused before its file is read: the split (else the one
    in the file name, else "other"), returned, and the dataset (``dataset_check``: new, or a yes/no
    one ``user`` may import into). A background import (``jobs.import_job_create``) asks it before
    storing the upload, so a large file is refused as a small one is."""
    split = check_split(split, filename=filename) or split_from_name(filename) or "other"
    dataset_check(name=dataset_name, task_format=Dataset.TaskFormat.YES_NO, filename=filename, user=user)
    return split


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
    split = strategyqa_target_check(dataset_name=dataset_name, split=split, filename=f.name, user=user)
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
    for row in parse_rows(doc.records(), errors=errors, record=lambda n, _rec: f"record {n + 1}"):
        external_id = row.text("qid")
        if not external_id:
            row.error("qid", "the question id is missing or empty")
            continue
        row.record = f"qid {short(external_id, 40)!r}"
        if rows.claim(external_id, line=row.line, column=row.column):
            values = _values(row, split)
            if values is not None:
                rows.add(external_id, values, line=row.line, column=row.column)
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
