"""Validated item rows and what every item importer (StrategyQA, OpenBookQA, generic) checks and
applies alike: the one owner of the rules an item's values follow.

* An item id may not hold a bidirectional control (``studies.textrules.identifier_problem``): ``ItemRows.claim``
  refuses one, as it refuses an id given twice.
* No question or gold rationale may hold a T5 sentinel token (``studies.textrules.sentinel_problem``):
  ``check_item_values``, beside the empty question and the unreadable answer.
* A multiple-choice option (``check_choices``) has a label that is one letter, a to z (written ``B``
  or ``(b)`` too, stored ``b``): the label every reader of an answer takes
  (``studies.choices.choice_label``: a rationale's predicted answer, a worker's, a model's); a text,
  without a T5 sentinel; and no label or text (compared without case and extra spaces) an earlier
  option of the item gave, since a worker or a model could not tell the two options apart.

An item, a dataset or a source saved one by one (the admin's forms:
``studies.services.content.content_row_save``) is held to the same rules, asked of these functions
(``studies.textrules.option_problems`` for the options).
"""
from __future__ import annotations

from typing import Any

from django.db import transaction

from studies.models import ImportRecord, Item
from studies.services.content import (
    item_original_changes,
    item_questions_validation_reset,
    validation_import_judge,
)
from studies.services.grading import rationales_regrade
from studies.textrules import LETTERS, label_problem, option_problems  # noqa: F401 (the importers' names)

from .errors import ErrorCollector, ImportValidationError
from .reading import ImportFile
from .upsert import bulk_upsert, dataset_get_or_create, import_record_create
from .values import identifier_problem, sentinel_problem, short

ITEM_FIELDS = ["question", "choices", "gold_answer", "gold_rationale", "split", "metadata"]


def item_values(*, question: str, choices: list[dict[str, str]], gold_answer: str, gold_rationale: str, split: str,
                metadata: dict[str, Any]) -> dict[str, Any]:
    """One validated item row as ``items_apply`` stores it (``ITEM_FIELDS``)."""
    return {"question": question, "choices": choices, "gold_answer": gold_answer, "gold_rationale": gold_rationale,
            "split": split, "metadata": metadata}


class ItemRows:
    """Validated item rows keyed by external id, with the line each came from, so that a
    duplicate id is reported against both lines."""

    def __init__(self, errors: ErrorCollector, *, id_field: str = "id"):
        self.id_field = id_field
        self.rows: dict[str, dict[str, Any]] = {}
        self.lines: dict[str, int | None] = {}
        self.errors = errors

    def claim(self, external_id: str, *, line: int | None, column: int | None = None) -> bool:
        """Register an id as soon as it is read (before its row is validated), so that a
        duplicate is reported even when the first row has other problems. False, reported against
        ``id_field``, if the id holds a bidirectional control (``studies.textrules.identifier_problem``: it
        would read as another id; the reason names it escaped) or is a duplicate."""
        problem = identifier_problem(external_id)
        if problem:
            self.errors.add(line, self.id_field, problem, column=column)
            return False
        if external_id in self.lines:
            self.errors.add(
                line,
                self.id_field,
                f"duplicate id {short(external_id)!r}: already used on line {self.lines[external_id]}; "
                "ids must be unique in a file",
                column=column,
            )
            return False
        self.lines[external_id] = line
        return True

    def add(self, external_id: str, values: dict[str, Any], *, line: int | None, column: int | None = None) -> None:
        """Keep a validated row whose id was claimed."""
        self.rows[external_id] = values

    def __len__(self) -> int:
        return len(self.rows)

    def raise_if_invalid(self, filename: str, *, noun: str) -> None:
        """After the last record: raise every collected error, else raise if no row was kept
        ("the file has no {noun}")."""
        self.errors.raise_if_any(filename)
        if not self.rows:
            raise ImportValidationError(f"the file has no {noun}", filename=filename)


def check_item_values(
    *,
    errors: ErrorCollector,
    line: int | None,
    column: int | None,
    record: str,
    question: str,
    gold_answer: str | None,
    raw_answer: Any,
    allowed: str,
    answer_field: str = "answer",
    question_field: str = "question",
    rationale: str = "",
    rationale_field: str = "rationale",
) -> bool:
    """Report what an item's question, gold answer and gold rationale may not be: an empty
    question, an answer not among ``allowed``, a T5 sentinel token in the question or the
    rationale (``studies.textrules.sentinel_problem``). False when any was reported."""
    ok = True
    if not question:
        errors.add(line, question_field, "the question text is empty", column=column, record=record)
        ok = False
    for field, text, what in ((question_field, question, "the question"), (rationale_field, rationale, "the rationale")):
        problem = sentinel_problem(text, what=what)
        if problem:
            errors.add(line, field, problem, column=column, record=record)
            ok = False
    if gold_answer is None:
        if raw_answer in (None, ""):
            reason = f"the answer is missing; expected {allowed}"
        else:
            reason = f"the answer {short(raw_answer)!r} is not one of {allowed}"
        errors.add(line, answer_field, reason, column=column, record=record)
        ok = False
    return ok


def check_choices(
    *,
    errors: ErrorCollector,
    line: int | None,
    column: int | None,
    record: str,
    choices: list[dict[str, str]],
    field: str = "choices",
    text_field: str = "{field}[{n}]",
    label_field: str = "{field}[{n}].label",
) -> bool:
    """Check each option of a multiple-choice item by ``studies.textrules.option_problems`` (a
    label read as one letter, stored as that letter in place; a text, without a T5 sentinel; no
    label or text twice), each problem reported on the option's text or label field as the file
    names it (``text_field``, ``label_field``). False when any was reported."""
    problems = option_problems(choices, field=field, text_field=text_field, label_field=label_field)
    for where, reason in problems:
        errors.add(line, where, reason, column=column, record=record)
    return not problems


def items_apply(
    *,
    kind: str,
    f: ImportFile,
    dataset_name: str,
    task_format: str,
    choice_labels: list[str] | None = None,
    dataset_description: str = "",
    rows: ItemRows,
    user: Any = None,
    extra_summary: dict[str, Any] | None = None,
) -> ImportRecord:
    """Create the dataset if new, upsert the validated rows by (dataset, external id) and record
    the import, all in one transaction. Call only after every row has been validated. A corrected
    gold answer re-grades the rationales of its item (``grading.rationales_regrade``) in the same
    transaction; the summary counts the items whose gold answer changed (``gold_answers_changed``),
    not the rationales re-graded: those include other researchers' sources' rationales, which a
    reader of the record may not read (nor learn how many there are)."""
    with transaction.atomic():
        dataset, dataset_created = dataset_get_or_create(
            name=dataset_name, task_format=task_format, choice_labels=choice_labels, description=dataset_description,
            user=user,
        )
        existing = {item.external_id: item for item in Item.objects.filter(dataset=dataset)}
        # Read before ``bulk_upsert`` sets the file's values on the existing items.
        regold = [existing[key].pk for key, values in rows.rows.items()
                  if key in existing and existing[key].gold_answer != values["gold_answer"]]
        # Items whose question or choices the file changes: their judged generalization questions
        # were judged beside the old ones (``content.item_original_changes``, the admin edit's rule).
        originals = {existing[key].pk: item_original_changes(
            {"question": existing[key].question, "choices": existing[key].choices},
            {name: values[name] for name in ("question", "choices") if name in values})
            for key, values in rows.rows.items() if key in existing}

        def build(external_id: str, values: dict[str, Any]) -> Item:
            return Item(dataset=dataset, external_id=external_id, **values)

        result, _ = bulk_upsert(
            model=Item, existing=existing, rows=rows.rows, build=build, compare_fields=ITEM_FIELDS,
            lines=rows.lines, filename=f.name, user=user, key_field="external_id",
        )
        rationales_regrade(item_ids=regold)
        reset = item_questions_validation_reset(changes=originals, user=user, by=validation_import_judge(f))
        splits: dict[str, int] = {}
        for values in rows.rows.values():
            splits[values["split"]] = splits.get(values["split"], 0) + 1
        summary = {
            "dataset": dataset.name,
            "dataset_created": dataset_created,
            "rows": len(rows),
            "splits": splits,
            "gold_answers_changed": len(regold),
            # Generalization questions judged beside an original question (or choices) the file changed:
            # sent back to unvalidated. Counted, not named (other researchers' questions included).
            "validation_reset": len(reset),
            **(extra_summary or {}),
        }
        return import_record_create(kind=kind, f=f, dataset=dataset, result=result, summary=summary, user=user)
