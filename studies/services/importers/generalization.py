"""Generalization questions in the ``generalisation_final_*.json`` shape: one JSON object mapping
an original question's text to a list of ``[question, answer, type]`` rows, with answer
"True"/"False" (stored yes/no) and type rephrase, similar or counterfactual.

Originals are matched to items by question text (see ``normalize_question``), within the split
given or named in the file name when that split has items. Any answer that is not True/False is
a row error: the released dev file has 16 such answers, and they are reported, not guessed.
A question's text may not hold a T5 sentinel token (``textrules.sentinel_problem``, as every item
importer's questions; a row has no id of its own to check). Rows repeated identically are merged.
The same question given twice with different answers (8 times in the released test file) keeps
its first answer, is flagged in its metadata (``conflicting_answers``, ``CONFLICTING_ANSWERS_KEY``)
and listed in the import summary, so a validator can settle it. The flag stays whatever status the question gets (an import's
``validation_status`` marks it valid with the rest): keeping the first answer is our choice, SPEC is
silent, so scoring names it and gives Gen-U and Figure 4 with those questions left out beside it
(``scoring.services.genu.CONFLICTING_RULES``).

A ``validation_status`` given to the import is applied to every question of the file and its
provenance is stored on each question whose status it sets (``metadata["validation"]``: the
status, that an import set it, the file's name and SHA-256, when, and who ran it). A re-import that
changes an existing question's status records it as ``generalization_questions_set_validation`` does
(``studies.services.content.validation_provenance``: the status it replaced, and the judgements
before it in ``history``), and keeps the rest of the question's metadata: the file's own keys
(``original_question``, ``conflicting_answers``) are written only with a new answer (which an open
or closed study's question refuses, ``studies.services.content``), so a re-import changing only the
status changes what the admin's validation actions change, nothing more (its ``origin`` stays
the file or generator that made it). Such a re-import changes the question as the admin's actions do,
so it needs what they need (``studies.services.questions.validation_change_problem``:
``studies.change_generalizationquestion``): without it the whole file is refused, one row error
(field ``validation_status``) for each stored question whose status it would change. The released
``generalisation_final_*.json`` files are taken as the validated set (our reading of SPEC section 4): import them with
``validation_status="valid"`` (``--validation-status valid``), as the README says.

A re-import that changes a stored question's answer grades the question's stored Gen-U predictions
again against the new answer, in the same transaction (``studies.services.grading``: a prediction is
never asked again, as its prompt never showed the answer); the summary counts the questions whose
answer changed (``answers_changed``), not the predictions re-graded (other researchers' answerers'
predictions among them, which a reader of the record may not read). Its judgement was of the old
answer: without a ``validation_status`` a question marked valid or invalid goes back to unvalidated
(``studies.services.content.generalization_questions_validation_reset``, the rule an edit in the admin
follows too; recorded with the file as the cause, ``reason`` "edited after validation: answer", and
counted as ``validation_reset``); with one, the file's status is its judgement of the new answer, and
is recorded so even where it is the status already stored.

The import's record counts and quotes its questions, so it stores their ids
(``summary["question_ids"]``): another researcher reads it only when they may read every one of
them (``studies.selectors.import_records_for_user``: all questions and items, or each one on an item
a study they may see draws), not merely the dataset.
"""
from __future__ import annotations

from pathlib import Path
from typing import IO, Any

from django.db import transaction
from django.utils import timezone

from studies.models import GeneralizationQuestion, ImportRecord, Item
from studies.services.content import (
    generalization_questions_validation_reset,
    validation_import_judge,
    validation_provenance,
)
from studies.services.grading import genu_predictions_regrade
from studies.services.questions import validation_change_problem
from studies.signals import generalization_validation_changed

from .errors import ErrorCollector, ImportValidationError, RowError
from .reading import json_type, parse_json_document, read_import_file
from .rows import KeyedRows, Row
from .upsert import QuestionIndex, bulk_upsert, dataset_get, import_record_create
from .values import check_split, choice_label, sentinel_problem, short, split_from_name, yes_no_label

KIND = "generalization"
TYPES = {t.value for t in GeneralizationQuestion.Type}
# The metadata key that flags a question the file gave twice with different answers (its first answer
# kept): scoring names the rule and gives the figures with such questions left out beside the default.
CONFLICTING_ANSWERS_KEY = "conflicting_answers"


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
    split, dataset = generalization_target_check(dataset_name=dataset_name, split=split,
                                                 validation_status=validation_status, filename=f.name, user=user)
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
    parsed = _GeneralizationFile(f=f, dataset=dataset, index=index, validation_status=validation_status, user=user)
    for original, entries in doc.data.items():
        parsed.read(doc, original, entries)
    parsed.errors.raise_if_any(f.name)
    if not parsed.kept.rows:
        raise ImportValidationError("the file has no generalization questions", filename=f.name)
    return _apply(f=f, dataset=dataset, split=split, parsed=parsed, user=user)


def generalization_target_check(*, dataset_name: str, split: str | None = None, validation_status: str | None = None,
                                filename: str = "", user: Any = None) -> tuple[str | None, Any]:
    """What a generalization import writes to, refused before its file is read: the split, the
    dataset (``dataset_get``: one ``user`` may import into) and the status given. Returns ``(split,
    dataset)``. A background import (``jobs.import_job_create``) asks it before storing the upload,
    so a large file is refused as a small one is."""
    split = check_split(split, filename=filename)
    dataset = dataset_get(name=dataset_name, user=user, filename=filename)
    if validation_status is not None and validation_status not in GeneralizationQuestion.Validation.values:
        raise ImportValidationError(
            f"unknown validation status {validation_status!r}: use "
            f"{', '.join(GeneralizationQuestion.Validation.values)}",
            filename=filename,
        )
    return split, dataset


class _GeneralizationFile:
    """The rows of a generalization file as they are read: each original question's item, each
    row parsed (``Row`` over ``question``, ``answer``, ``type``), repeats merged, and a question
    given twice with different answers kept with its first answer and flagged."""

    def __init__(self, *, f, dataset, index: QuestionIndex, validation_status: str | None, user: Any = None):
        self.f, self.dataset, self.index, self.validation_status = f, dataset, index, validation_status
        # Who ran the import, named in the provenance it records (None: a management command).
        self.user = user if getattr(user, "is_authenticated", False) else None
        self.provenance, self.at = None, timezone.now()
        if validation_status is not None:
            self.provenance = {"status": validation_status, **validation_import_judge(f), "at": self.at.isoformat()}
            if self.user is not None:
                self.provenance.update(user_id=self.user.pk, username=self.user.get_username())
        self.errors = ErrorCollector()
        self.kept = KeyedRows()
        self.conflicts: list[dict[str, Any]] = []
        self.n_rows = 0
        self.originals: set[int] = set()

    def read(self, doc, original: str, entries: Any) -> None:
        """One original question and its list of rows."""
        line, col = doc.where(original)
        record = f"original {short(original, 50)!r}"
        item, reason = self.index.find(original)
        if item is None:
            self.errors.add(line, "original question", reason, column=col)
        if not isinstance(entries, list):
            self.errors.add(line, "", f"expected a list of [question, answer, type] rows, got a JSON "
                            f"{json_type(entries)}", column=col, record=record)
            return
        for n, entry in enumerate(entries):
            self.n_rows += 1
            eline, ecol = doc.where(original, n)
            if not isinstance(entry, list) or len(entry) != 3:
                self.errors.add(eline, "", f"expected [question, answer, type], got {short(entry)!r}", column=ecol,
                                record=f"{record} row {n + 1}")
                continue
            row = Row(dict(zip(("question", "answer", "type"), entry, strict=True)), line=eline, column=ecol,
                      errors=self.errors, record=f"{record} row {n + 1}")
            self.keep(row, item, original)

    def keep(self, row: Row, item: Item | None, original: str) -> None:
        parsed = self.parse(row)
        if parsed is None or item is None:
            return
        text, answer, qtype = parsed
        self.originals.add(item.pk)
        key = (item.pk, qtype, text)
        values = {"answer": answer, "origin": self.f.name[:200], "metadata": {"original_question": original}}
        if self.provenance is not None:
            values["validation_status"] = self.validation_status
            values["metadata"]["validation"] = dict(self.provenance)
        kept = self.kept.add(key, values, line=row.line, column=row.column, same=lambda a, b: a["answer"] == b["answer"])
        if kept is not None:
            # The released files hold a few of these (8 in the test file): the generator gave the
            # same question twice with opposite answers. Keep the first answer, flag the question
            # for validation, and say so in the summary.
            kept["metadata"][CONFLICTING_ANSWERS_KEY] = sorted({kept["answer"], answer})
            self.conflicts.append({
                "line": row.line, "column": row.column, "original": original, "question": text, "type": qtype,
                "kept": kept["answer"], "dropped": answer, "first_at": self.kept.where(key),
            })

    def parse(self, row: Row) -> tuple[str, str, str] | None:
        """``(question text, answer label, type)``; None when the row has an error."""
        text = row.raw("question")
        if not isinstance(text, str) or not text.strip():
            row.error("question", "the question text is empty")
        elif problem := sentinel_problem(text, what="the question"):
            row.error("question", problem)
        raw_answer = row.raw("answer")
        if self.dataset.is_yes_no:
            answer, allowed = yes_no_label(raw_answer, strict_true_false=True), "True or False"
        else:
            answer = choice_label(raw_answer, self.dataset.allowed_labels())
            allowed = ", ".join(self.dataset.allowed_labels())
        if answer is None:
            row.error("answer", f"the answer {short(raw_answer)!r} is not {allowed}")
        qtype = row.raw("type")
        qtype_key = qtype.strip().lower() if isinstance(qtype, str) else ""
        if qtype_key not in TYPES:
            row.error("type", f"the type {short(qtype)!r} is not one of {', '.join(sorted(TYPES))}")
        return (text.strip(), answer, qtype_key) if row.ok else None


def _existing_values(question: GeneralizationQuestion, values: dict[str, Any], parsed: _GeneralizationFile) -> None:
    """Turn the file's ``values`` for an existing ``question`` into what a re-import writes: its stored
    metadata kept, the file's own keys replacing theirs only with a new answer (the question itself
    changes: its ``origin`` becomes the file too), and a status change recorded by
    ``validation_provenance`` (who, when, the status replaced, the earlier judgements in its history),
    as is the status the file gives with a new answer (its judgement of the new question), even the
    status already stored. A new answer without a status is ``_apply``'s (``validation_reset``)."""
    metadata = dict(question.metadata) if isinstance(question.metadata, dict) else {}
    given = values["metadata"]
    if values["answer"] != question.answer:
        metadata["original_question"] = given["original_question"]
        metadata.pop(CONFLICTING_ANSWERS_KEY, None)
        if CONFLICTING_ANSWERS_KEY in given:
            metadata[CONFLICTING_ANSWERS_KEY] = given[CONFLICTING_ANSWERS_KEY]
    else:
        del values["origin"]
    status = values.get("validation_status")
    # A status given with a new answer is the file's judgement of the new question: recorded even where
    # it is the status already stored, whose record judged the old answer.
    if status is not None and (status != question.validation_status or values["answer"] != question.answer):
        metadata = validation_provenance(
            metadata, status=status, previous=question.validation_status, user=parsed.user,
            at=parsed.at, by=validation_import_judge(parsed.f))
    values["metadata"] = metadata


def _remarking_check(keys: list[tuple[int, str, str]], *, parsed: _GeneralizationFile, user) -> None:
    """Refuse the whole file when it judges a stored question (``keys``: its status changes, or its answer with a status given) and
    ``user`` may not (``questions.validation_change_problem``, the rule of the admin's validation
    actions and the service): one error per such row, by its line, field ``validation_status``.
    Asked after ``bulk_upsert`` has refused the rows that are not the user's (so this answer tells
    nothing of those) and inside the import's transaction, which the error rolls back."""
    problem = validation_change_problem(user) if keys else ""
    if not problem:
        return
    errors = ErrorCollector()
    for key in sorted(keys, key=lambda key: parsed.kept.lines.get(key) or 0):
        errors.add(parsed.kept.lines.get(key), "validation_status",
                   f"the file would judge this stored question {str(parsed.validation_status)!r} (its status "
                   f"changes, or its answer does with a status given), and {problem}; nothing of the file "
                   "was imported",
                   column=parsed.kept.columns.get(key), record=f"question {short(key[2], 50)!r}")
    errors.raise_if_any(parsed.f.name)


def _apply(*, f, dataset, split, parsed: _GeneralizationFile, user) -> ImportRecord:
    rows, validation_status = parsed.kept.rows, parsed.validation_status
    with transaction.atomic():
        existing = {
            (g.item_id, g.qtype, g.text): g
            for g in GeneralizationQuestion.objects.filter(item__dataset=dataset)
        }
        # Stored questions the file judges, read before ``bulk_upsert`` sets the file's values: their status
        # changes, or their answer does with a status given (the file's judgement of the new question).
        judged = [key for key, values in rows.items() if key in existing
                  and values.get("validation_status") is not None
                  and (values["validation_status"] != existing[key].validation_status
                       or values["answer"] != existing[key].answer)]
        remarked = [key for key in judged if rows[key]["validation_status"] != existing[key].validation_status]
        # Stored questions whose answer the file changes: their Gen-U predictions are graded again.
        reanswered = [existing[key].pk for key, values in rows.items()
                      if key in existing and values["answer"] != existing[key].answer]
        for key, values in rows.items():
            if key in existing:
                _existing_values(existing[key], values, parsed)

        def build(key: tuple[int, str, str], values: dict[str, Any]) -> GeneralizationQuestion:
            return GeneralizationQuestion(item_id=key[0], qtype=key[1], text=key[2], **values)

        compare = ["answer"] + (["validation_status"] if validation_status is not None else [])
        result, created = bulk_upsert(
            model=GeneralizationQuestion, existing=existing, rows=rows, build=build, compare_fields=compare,
            lines=parsed.kept.lines, filename=f.name, user=user, key_field="item",
        )
        _remarking_check(judged, parsed=parsed, user=user)
        if remarked:  # as the one writer of a status announces it: open studies' units follow it
            generalization_validation_changed.send(sender=GeneralizationQuestion,
                                                   question_ids=[existing[key].pk for key in remarked])
        # A new answer the file does not judge: the stored judgement was of the old one (``content``'s rule).
        reset = [] if validation_status is not None else generalization_questions_validation_reset(
            changes={pk: ["answer"] for pk in reanswered}, user=parsed.user, by=validation_import_judge(f), at=parsed.at)
        genu_predictions_regrade(question_ids=reanswered)
        per_type: dict[str, int] = {}
        for _, qtype, _ in rows:
            per_type[qtype] = per_type.get(qtype, 0) + 1
        summary = {
            "dataset": dataset.name,
            "split": split,
            "rows_in_file": parsed.n_rows,
            "questions": len(rows),
            "identical_duplicates_merged": parsed.kept.merged,
            "originals": len(parsed.originals),
            "per_type": per_type,
            "conflicting_answers": parsed.conflicts,
            "validation_status_set": validation_status,
            # A changed answer re-grades the question's stored Gen-U predictions (``grading``).
            "answers_changed": len(reanswered),
            # Of those, the questions judged (valid or invalid) sent back to unvalidated: no status given.
            "validation_reset": len(reset),
            # Who reads this record beyond its importer reads these questions (``import_records_for_user``):
            # every question of the file, new, changed or unchanged.
            "question_ids": sorted([existing[key].pk for key in rows if key in existing]
                                   + [question.pk for question in created]),
        }
        return import_record_create(kind=KIND, f=f, dataset=dataset, result=result, summary=summary, user=user)
