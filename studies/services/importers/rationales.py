"""Rationales from CSV or JSON lines: which item (by id or by question text), which source,
the rationale, and optionally the source's predicted answer.

``rationale_utility.json`` (the released utility outcomes) imports as three sources, t5large,
t53b and gpt3, of 458 rationales each; its other columns (the gold label and the crowd's
answers) are kept in ``generation_info["extra"]``. A gold-label column, when present, is checked
against the matched item's gold answer, which catches a question matched to the wrong item.
Sources that do not exist yet are created as "imported file" sources.

Highlight sources: a ``highlights`` column holds ``[[start, end], ...]`` character spans over the
question (``highlight_tokens``: ``[[first, last + 1], ...]`` spans of whitespace tokens), and
faithfulness probabilities computed elsewhere come in the columns ``p_full``, ``p_highlight`` and
``p_without`` (p(y_hat | x), p(y_hat | h), p(y_hat | x \\ h), y_hat predicted from the highlight;
optionally ``y_hat``). They are stored where scoring reads them (``Rationale.faithfulness``); a
file with these columns must fill all three on every row, or nothing is imported and the rows
are listed. A file without them leaves stored highlights and probabilities as they are.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from django.db import transaction

from studies.lm import highlights as spans
from studies.models import ImportRecord, Item, Rationale, RationaleSource

from .errors import ErrorCollector, ImportValidationError
from .reading import json_cell, read_import_file, read_records
from .upsert import QuestionIndex, bulk_upsert, dataset_get, import_record_create
from .values import answer_label, as_text, check_split, describe_allowed, short

KIND = "rationales"

CANDIDATES = {
    "item_id": ["item_id", "external_id", "qid", "id"],
    "question": ["question", "question_text"],
    "source": ["source", "source_name", "rationale_source", "model"],
    "rationale": ["rationale", "explanation", "text"],
    "predicted_answer": ["predicted_answer", "predicted_label", "prediction", "model_answer"],
    "gold_answer": ["gold_answer", "ground_truth_label", "gold_label"],
    "highlights": ["highlights", "highlight_spans"],
    "highlight_tokens": ["highlight_tokens"],
    "p_full": ["p_full"],
    "p_highlight": ["p_highlight"],
    "p_without": ["p_without"],
    "y_hat": ["y_hat"],
}
PROBABILITIES = ("p_full", "p_highlight", "p_without")


@dataclass
class RationaleColumns:
    """Column names; None means "find it among the usual names", "" means "not in this file"."""

    item_id: str | None = None
    question: str | None = None
    source: str | None = None
    rationale: str | None = None
    predicted_answer: str | None = None
    gold_answer: str | None = None
    highlights: str | None = None
    highlight_tokens: str | None = None
    p_full: str | None = None
    p_highlight: str | None = None
    p_without: str | None = None
    y_hat: str | None = None

    def resolve(self, header: set[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for role, given in asdict(self).items():
            if given is None:
                found = next((c for c in CANDIDATES[role] if c in header), "")
                out[role] = found
            else:
                out[role] = given
        return out


def rationales_import(
    *,
    file: str | Path | IO | Any,
    dataset_name: str,
    split: str | None = None,
    source_name: str | None = None,
    columns: RationaleColumns | None = None,
    file_format: str | None = None,
    filename: str | None = None,
    user: Any = None,
) -> ImportRecord:
    """Import rationales for items of an existing dataset (optionally only one split, which also
    settles questions that repeat across splits). ``source_name`` puts every row under that
    source; otherwise each row names its source. All or nothing; idempotent."""
    f = read_import_file(file, filename=filename)
    split = check_split(split, filename=f.name)
    dataset = dataset_get(name=dataset_name, filename=f.name)
    source_name = (source_name or "").strip() or None
    records = read_records(f, file_format=file_format)
    header: set[str] = set()
    for _, rec, _ in records:
        header.update(rec)
    cols = (columns or RationaleColumns()).resolve(header)
    problems = []
    if not cols["item_id"] and not cols["question"]:
        problems.append("an item id or a question column")
    if not cols["rationale"]:
        problems.append("a rationale column")
    if not cols["source"] and not source_name:
        problems.append("a source column (or give a source name for the whole file)")
    for role, name in cols.items():
        if name and name not in header and not (role == "source" and source_name):
            problems.append(f"the column {name!r} given for {role.replace('_', ' ')}")
    if problems:
        raise ImportValidationError(
            f"the file lacks {'; '.join(problems)}; its columns are {', '.join(sorted(map(repr, header)))}",
            filename=f.name,
        )
    index = QuestionIndex(dataset, split)
    if not len(index):
        where = f"dataset {dataset.name!r}" + (f" split {split!r}" if split else "")
        raise ImportValidationError(f"{where} has no items: import the questions first", filename=f.name)
    with_probabilities = any(cols[k] for k in PROBABILITIES)
    errors = ErrorCollector()
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    first_line: dict[tuple[int, str], int | None] = {}
    used = {v for v in cols.values() if v}
    merged = 0
    for line, rec, col in records:
        item: Item | None = None
        record = ""
        item_id = as_text(rec.get(cols["item_id"])) if cols["item_id"] else ""
        question = as_text(rec.get(cols["question"])) if cols["question"] else ""
        if item_id:
            record = f"item {short(item_id, 40)!r}"
            item = index.by_external_id.get(item_id)
            if item is None:
                errors.add(line, cols["item_id"], f"no item with id {short(item_id)!r} in {dataset.name!r}"
                           + (f" split {split!r}" if split else ""), column=col)
        elif question:
            item, reason = index.find(question)
            if item is None:
                errors.add(line, cols["question"], reason, column=col)
            else:
                record = f"item {short(item.external_id, 40)!r}"
        else:
            errors.add(line, cols["item_id"] or cols["question"], "neither an item id nor a question text is given",
                       column=col)
        source = source_name or (as_text(rec.get(cols["source"])) if cols["source"] else "")
        if not source:
            errors.add(line, cols["source"], "the source name is empty", column=col, record=record)
        elif len(source) > 200:
            errors.add(line, cols["source"], "the source name is longer than 200 characters", column=col,
                       record=record)
            source = ""
        text = as_text(rec.get(cols["rationale"]))
        if not text:
            errors.add(line, cols["rationale"], "the rationale text is empty", column=col, record=record)
        predicted = ""
        raw_pred = rec.get(cols["predicted_answer"]) if cols["predicted_answer"] else None
        if raw_pred not in (None, ""):
            label = answer_label(dataset, raw_pred)
            if label is None:
                errors.add(line, cols["predicted_answer"],
                           f"the predicted answer {short(raw_pred)!r} is not one of {describe_allowed(dataset)}",
                           column=col, record=record)
            else:
                predicted = label
        raw_gold = rec.get(cols["gold_answer"]) if cols["gold_answer"] else None
        if item is not None and raw_gold not in (None, ""):
            gold = answer_label(dataset, raw_gold)
            if gold is None:
                errors.add(line, cols["gold_answer"],
                           f"the gold label {short(raw_gold)!r} is not one of {describe_allowed(dataset)}",
                           column=col, record=record)
            elif gold != item.gold_answer:
                errors.add(line, cols["gold_answer"],
                           f"the file's gold label {gold!r} disagrees with item {item.external_id!r} "
                           f"(gold answer {item.gold_answer!r}): is the question matched to the wrong item?",
                           column=col, record=record)
        highlight = _highlights(rec, cols, item, errors, line, col, record)
        faithfulness = _probabilities(rec, cols, dataset, errors, line, col, record, f.name) if with_probabilities else None
        if item is None or not source or not text:
            continue
        extra = {k: v for k, v in rec.items() if k not in used}
        values = {
            "text": text,
            "predicted_answer": predicted,
            "prediction_correct": (predicted == item.gold_answer) if predicted else None,
            "generation_info": {"imported_from": f.name, "extra": extra} if extra else {"imported_from": f.name},
        }
        if highlight is not None:
            values["highlights"] = highlight
        if faithfulness is not None:
            values["faithfulness"] = faithfulness
        key = (item.pk, source)
        if key in rows:
            if rows[key] == values:
                merged += 1
                continue
            errors.add(line, cols["rationale"],
                       f"a different rationale for the same item and source {source!r} is on line "
                       f"{first_line[key]}; keep one", column=col, record=record)
            continue
        rows[key] = values
        first_line[key] = line
    errors.raise_if_any(f.name)
    if not rows:
        raise ImportValidationError("the file has no rationales", filename=f.name)
    return _apply(f=f, dataset=dataset, rows=rows, lines=first_line, merged=merged, split=split, user=user)


def _highlights(rec, cols, item, errors, line, col, record) -> list[list[int]] | None:
    """The row's highlight as character spans over its question; None when the file has none."""
    for role in ("highlights", "highlight_tokens"):
        if not cols[role]:
            continue
        raw = rec.get(cols[role])
        if raw in (None, ""):
            return []
        if item is None:
            return None
        try:
            value = json_cell(raw)
            if role == "highlight_tokens":
                value = spans.token_spans_to_chars(value, item.question)
            return [list(span) for span in spans.check_spans(value, item.question)]
        except (ValueError, TypeError) as exc:
            errors.add(line, cols[role], f"{exc}", column=col, record=record)
            return None
    return None


def _probabilities(rec, cols, dataset, errors, line, col, record, filename) -> dict | None:
    """The row's three faithfulness probabilities (all required when the file has any)."""
    out: dict[str, Any] = {}
    for key in PROBABILITIES:
        name = cols[key] or key
        raw = rec.get(cols[key]) if cols[key] else None
        if raw in (None, ""):
            errors.add(line, name, f"{key} is missing: a file with faithfulness probabilities needs "
                       f"{', '.join(PROBABILITIES)} on every row", column=col, record=record)
            continue
        try:
            value = float(raw)
        except (TypeError, ValueError):
            value = float("nan")
        if not 0.0 <= value <= 1.0:
            errors.add(line, name, f"{key} {short(raw)!r} is not a probability between 0 and 1", column=col,
                       record=record)
            continue
        out[key] = value
    if cols["y_hat"] and rec.get(cols["y_hat"]) not in (None, ""):
        label = answer_label(dataset, rec.get(cols["y_hat"]))
        if label is None:
            errors.add(line, cols["y_hat"], f"y_hat {short(rec.get(cols['y_hat']))!r} is not one of "
                       f"{describe_allowed(dataset)}", column=col, record=record)
        out["y_hat"] = label or ""
    out["imported_from"] = filename
    return out if all(k in out for k in PROBABILITIES) else None


def _apply(*, f, dataset, rows: dict[tuple[int, str], dict[str, Any]], lines: dict[tuple[int, str], int | None],
           merged: int, split, user) -> ImportRecord:
    with transaction.atomic():
        names = sorted({name for _, name in rows})
        sources = {s.name: s for s in RationaleSource.objects.filter(name__in=names)}
        created_sources = []
        for name in names:
            if name not in sources:
                source = RationaleSource(
                    name=name, kind=RationaleSource.Kind.IMPORTED, description=f"Imported from {f.name}."
                )
                source.full_clean()
                source.save()
                sources[name] = source
                created_sources.append(name)
        keyed = {(item_id, sources[name].pk): values for (item_id, name), values in rows.items()}
        keyed_lines = {(item_id, sources[name].pk): line for (item_id, name), line in lines.items()}
        existing = {
            (r.item_id, r.source_id): r
            for r in Rationale.objects.filter(source__in=sources.values(), item__dataset=dataset)
        }

        def build(key: tuple[int, int], values: dict[str, Any]) -> Rationale:
            return Rationale(item_id=key[0], source_id=key[1], **values)

        result, _ = bulk_upsert(
            model=Rationale, existing=existing, rows=keyed, build=build,
            compare_fields=["text", "predicted_answer", "prediction_correct", "generation_info", "highlights",
                            "faithfulness"],
            lines=keyed_lines, filename=f.name, user=user,
        )
        with_highlights = sorted({name for (_, name), values in rows.items() if values.get("highlights")})
        RationaleSource.objects.filter(name__in=with_highlights, has_highlights=False).update(has_highlights=True)
        per_source: dict[str, int] = {}
        for _, name in rows:
            per_source[name] = per_source.get(name, 0) + 1
        summary = {
            "dataset": dataset.name,
            "split": split,
            "rows": len(rows),
            "identical_duplicates_merged": merged,
            "per_source": per_source,
            "sources_created": created_sources,
            "sources_with_highlights": with_highlights,
            "rows_with_faithfulness_probabilities": sum(1 for values in rows.values() if "faithfulness" in values),
        }
        return import_record_create(
            kind=KIND, f=f, dataset=dataset, result=result, summary=summary, user=user
        )
