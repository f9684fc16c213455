"""Import outcomes of a utility study collected elsewhere (e.g. the released
``rationale_utility.json``) as a finished study.

The file goes through the importers (``studies.services.importers``): the same size limit
(``RL_MAX_IMPORT_BYTES``, checked before reading), UTF-8 and JSON-lines reading with every bad line
reported, the same answer labels and question matching, the same row validation and upsert, and
one ``ImportRecord``. Only what is particular to outcomes lives here: the fields of a line and
their checks."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.db import transaction

from scoring.models import UnitScore
from studies.models import Dataset, Item, Rationale, RationaleSource, Study
from studies.services.importers import ImportValidationError
from studies.services.importers.errors import ErrorCollector
from studies.services.importers.reading import ImportFile, parse_json_lines, read_import_file
from studies.services.importers.upsert import QuestionIndex, bulk_upsert, import_record_create
from studies.services.importers.values import answer_label, as_text, describe_allowed, short

REQUIRED_FIELDS = (
    "question",
    "rationale_source",
    "ground_truth_label",
    "human_predicted_label_before_rationale",
    "human_predicted_label_after_rationale",
)
_UNIT_FIELDS = ["before_majority", "after_majority", "before_tie", "after_tie", "reported_utility",
                "n_annotators", "imported"]


@dataclass
class _Line:
    line: int
    item: Item
    source: str
    before: str | None  # None: no majority (a tie)
    after: str | None
    reported: int | None
    n_annotators: int
    rationale: str
    loose: bool  # the question matched only after the importers' normalisation


def _label(dataset: Dataset, row: dict, field: str, line: int, errors: ErrorCollector, *, allow_tie: bool):
    value = row[field]
    if value is None or value == "":
        if not allow_tie:
            errors.add(line, field, "missing")
        return None
    label = answer_label(dataset, value)
    if label is None:
        errors.add(line, field, f"{short(value)!r} is not an answer of this dataset ({describe_allowed(dataset)})")
    return label


def _read_lines(study: Study, f: ImportFile) -> list[_Line]:
    """Every line checked; every problem collected and raised together (nothing written)."""
    dataset = study.dataset
    in_split, anywhere = QuestionIndex(dataset, split=study.split or None), QuestionIndex(dataset)
    errors = ErrorCollector()
    out: list[_Line] = []
    seen: dict[tuple[int, str], int] = {}
    for line, row in parse_json_lines(f):
        if not isinstance(row, dict):
            errors.add(line, "", "expected a JSON object")
            continue
        missing = [name for name in REQUIRED_FIELDS if name not in row]
        if missing:
            errors.add(line, missing[0], f"missing field(s) {', '.join(missing)}")
            continue
        if not isinstance(row["question"], str) or not row["question"].strip():
            errors.add(line, "question", "must be the question's text")
            continue
        question = row["question"]
        item, reason = in_split.find(question)
        if item is None:
            item, reason = anywhere.find(question)
        if item is None:
            errors.add(line, "question", f"{reason}; import the dataset's items first")
            continue
        source = as_text(row["rationale_source"])
        if not source:
            errors.add(line, "rationale_source", "empty")
            continue
        gold = _label(dataset, row, "ground_truth_label", line, errors, allow_tie=False)
        before = _label(dataset, row, "human_predicted_label_before_rationale", line, errors, allow_tie=True)
        after = _label(dataset, row, "human_predicted_label_after_rationale", line, errors, allow_tie=True)
        if gold and gold != item.gold_answer:
            errors.add(line, "ground_truth_label",
                       f"{gold!r} disagrees with the item's gold answer {item.gold_answer!r} (item {item.external_id})")
        reported = row.get("rationale_utility")
        if reported is not None and (isinstance(reported, bool) or reported not in (-1, 0, 1)):
            errors.add(line, "rationale_utility", f"{short(reported)!r} is not -1, 0 or 1")
        n_annotators = row.get("n_annotators", study.annotators_per_unit)
        if not isinstance(n_annotators, int) or isinstance(n_annotators, bool) or n_annotators < 1:
            errors.add(line, "n_annotators", f"{short(n_annotators)!r} is not a positive integer")
        key = (item.pk, source)
        if key in seen:
            errors.add(line, "", f"duplicate of line {seen[key]} (same question and source)")
            continue
        seen[key] = line
        rationale = row.get("rationale")
        out.append(_Line(line, item, source, before, after, reported, n_annotators,
                         rationale if isinstance(rationale, str) else "",
                         loose=" ".join(question.split()) != " ".join(item.question.split())))
    errors.raise_if_any(f.name)
    if not out:
        raise ImportValidationError("no outcome rows found", filename=f.name)
    return out


@transaction.atomic
def outcomes_import(*, study: Study, file: str | Path | IO | Any) -> dict:
    """Import aggregated before/after answers (one JSON object per line, one line per question and
    source, fields as in ``rationale_utility.json``) into ``study``, mark it an imported outcome
    and close it.

    Items are matched by question text among the study dataset's items (the study's split first),
    as every importer matches them (``importers.values.normalize_question``: case, spacing, escaped
    quotes and debris after the question mark are ignored; such lines are listed in the summary's
    ``loosely_matched_lines``); sources by name (an unknown source is created as an imported
    source). Each line becomes (or updates) a ``UnitScore`` with ``imported=True``; a line's
    ``rationale`` text becomes the source's ``Rationale`` for the item when there is none yet. An
    answer of ``null`` means the original majority was a tie. ``rationale_utility``, when given, is
    kept as ``reported_utility`` so that scoring can check its recomputed utility against it.

    All or nothing: a file over the import limit or with bad lines raises the importers'
    ``ImportValidationError`` listing every problem by line and field, and nothing is written.
    Re-importing the same file changes nothing. Returns a summary."""
    study = Study.objects.select_for_update().select_related("dataset").get(pk=study.pk)
    if study.units.exists():
        raise ImportValidationError(
            f"study {study.name!r} collects its own answers ({study.units.count()} units); import outcomes "
            "into a new study instead."
        )
    f = read_import_file(file)
    lines = _read_lines(study, f)

    sources = {s.name: s for s in RationaleSource.objects.filter(name__in={r.source for r in lines})}
    new_names = sorted({r.source for r in lines} - set(sources))
    _, created_sources = bulk_upsert(
        model=RationaleSource, existing={}, compare_fields=[], filename=f.name,
        rows={name: {"kind": RationaleSource.Kind.IMPORTED,
                     "description": f"Created by the outcomes import of {f.name}."} for name in new_names},
        build=lambda name, values: RationaleSource(name=name, **values),
    )
    sources.update({s.name: s for s in created_sources})

    rows = {
        (r.item.pk, sources[r.source].pk): {
            "before_majority": r.before or "", "after_majority": r.after or "", "before_tie": r.before is None,
            "after_tie": r.after is None, "reported_utility": r.reported, "n_annotators": r.n_annotators,
            "imported": True,
        }
        for r in lines
    }
    existing = {(u.item_id, u.source_id): u for u in UnitScore.objects.filter(study=study)}
    result, _ = bulk_upsert(
        model=UnitScore, existing=existing, rows=rows, compare_fields=_UNIT_FIELDS, filename=f.name,
        lines={(r.item.pk, sources[r.source].pk): r.line for r in lines},
        build=lambda key, values: UnitScore(study=study, item_id=key[0], source_id=key[1], **values),
    )
    gone = [u.pk for key, u in existing.items() if key not in rows]
    removed = UnitScore.objects.filter(pk__in=gone).delete()[0] if gone else 0

    with_text = {(r.item.pk, sources[r.source].pk): r for r in lines if r.rationale.strip()}
    have = {
        (i, s): None for i, s in Rationale.objects.filter(item_id__in={k[0] for k in with_text})
        .values_list("item_id", "source_id")
    }
    _, new_rationales = bulk_upsert(
        model=Rationale, existing=have, compare_fields=[], filename=f.name,
        rows={key: {"text": r.rationale} for key, r in with_text.items() if key not in have},
        lines={key: r.line for key, r in with_text.items()},
        build=lambda key, values: Rationale(item_id=key[0], source_id=key[1], text=values["text"],
                                            generation_info={"import": f.name, "kind": "outcomes"}),
    )

    if not study.is_imported_outcome:
        study.is_imported_outcome = True
        study.save(update_fields=["is_imported_outcome", "updated_at"])
    Study.STATUS.move(study, Study.Status.CLOSED)
    study.items.add(*{r.item.pk for r in lines})
    study.sources.add(*{sources[r.source].pk for r in lines})

    summary = {
        "rows": len(lines),
        "created": result.created,
        "updated": result.updated,
        "unchanged": result.unchanged,
        "removed": removed,
        "rationales_created": len(new_rationales),
        "sources_created": new_names,
        "sources": sorted({r.source for r in lines}),
        "loosely_matched_lines": [r.line for r in lines if r.loose],
    }
    import_record_create(kind="outcomes", f=f, dataset=study.dataset, result=result,
                         summary={"study": study.pk, **summary})
    return summary


@transaction.atomic
def outcomes_study_create(
    *, name: str, dataset: Dataset, file: str | Path | IO, split: str = "test", owner=None
) -> tuple[Study, dict]:
    """Create a finished utility study named ``name`` from an outcomes file (see
    ``outcomes_import``): the study, its sources and its unit scores appear together or not at all.
    Importing again into an existing study of that name is idempotent."""
    study = Study.objects.filter(name=name).first()
    if study is None:
        study = Study(
            name=name, kind=Study.Kind.UTILITY, dataset=dataset, split=split, owner=owner,
            is_imported_outcome=True, status=Study.Status.CLOSED,
        )
        study.full_clean()
        study.save()
    elif study.dataset_id != dataset.pk:
        raise ImportValidationError(
            f"study {name!r} exists already with dataset {study.dataset.name!r}, not {dataset.name!r}; "
            "choose another study name."
        )
    return study, outcomes_import(study=study, file=file)
