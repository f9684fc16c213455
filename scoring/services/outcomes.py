"""Import outcomes of a utility study collected elsewhere (e.g. the released
``rationale_utility.json``) as a finished study."""
from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path
from typing import IO

from django.db import transaction

from scoring.errors import OutcomesImportError
from scoring.models import UnitScore
from studies.models import Dataset, ImportRecord, Item, Rationale, RationaleSource, Study

REQUIRED_FIELDS = (
    "question",
    "rationale_source",
    "ground_truth_label",
    "human_predicted_label_before_rationale",
    "human_predicted_label_after_rationale",
)
_TRUE = {"true", "yes", "1"}
_FALSE = {"false", "no", "0"}


def _normalise_question(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _loose_question(text: str) -> str:
    """A forgiving key for question text: released files carry prompt-parsing debris (the
    released GPT-3 rows have a trailing " ," or "'", and backslash-escaped quotes)."""
    text = _normalise_question(text).replace("\\'", "'").replace('\\"', '"')
    return re.sub(r"[\s,'\"`]+$", "", text).lower()


def _label(dataset: Dataset, value, field: str, line: int, problems: list[str], *, allow_tie: bool) -> str | None:
    """A file's answer as the dataset's choice label; ``None`` means no majority (a tie)."""
    if value is None or value == "":
        if allow_tie:
            return None
        problems.append(f"line {line}: {field}: missing")
        return ""
    if dataset.is_yes_no:
        if isinstance(value, bool):
            return "yes" if value else "no"
        text = str(value).strip().lower()
        if text in _TRUE:
            return "yes"
        if text in _FALSE:
            return "no"
        problems.append(f"line {line}: {field}: {value!r} is not a yes/no answer (true/false or yes/no)")
        return ""
    text = str(value).strip().lower().strip("()")
    allowed = dataset.allowed_labels()
    if text not in allowed:
        problems.append(f"line {line}: {field}: {value!r} is not one of the options {allowed}")
        return ""
    return text


def _read(file) -> tuple[str, bytes]:
    if isinstance(file, (str, Path)):
        path = Path(file)
        return path.name, path.read_bytes()
    name = getattr(file, "name", "upload")
    data = file.read()
    if isinstance(data, str):
        data = data.encode("utf-8")
    return Path(str(name)).name, data


@transaction.atomic
def outcomes_import(*, study: Study, file: str | Path | IO) -> dict:
    """Import aggregated before/after answers (one JSON object per line, one line per question and
    source, fields as in ``rationale_utility.json``) into ``study`` and mark it an imported outcome.

    Items are matched by question text (whitespace-normalised) among the study dataset's items,
    preferring the study's split; a question that matches nothing exactly is retried ignoring case,
    trailing commas/quotes and backslash-escaped quotes (debris the released GPT-3 rows carry), and
    those lines are listed in the summary (``loosely_matched_lines``); sources by name (an unknown source is created as an imported
    source). Each line becomes (or updates) a ``UnitScore`` with ``imported=True``; a line's
    ``rationale`` text becomes the source's ``Rationale`` for the item when there is none yet. An
    answer of ``null`` means the original majority was a tie. ``rationale_utility``, when given, is
    kept as ``reported_utility`` so that scoring can check its recomputed utility against it.

    All or nothing: any bad line raises ``OutcomesImportError`` listing every problem by line and
    field, and nothing is written. Re-importing the same file changes nothing. Returns a summary."""
    study = Study.objects.select_for_update().select_related("dataset").get(pk=study.pk)
    if study.units.exists():
        raise OutcomesImportError(
            f"Study {study.name!r} collects its own answers ({study.units.count()} units); import outcomes "
            "into a new study instead."
        )
    dataset = study.dataset
    filename, data = _read(file)
    problems: list[str] = []

    by_question: dict[str, list[Item]] = {}
    by_loose: dict[str, list[Item]] = {}
    for item in Item.objects.filter(dataset=dataset).only("id", "question", "gold_answer", "split"):
        by_question.setdefault(_normalise_question(item.question), []).append(item)
        by_loose.setdefault(_loose_question(item.question), []).append(item)
    loose_matches: list[int] = []
    sources = {s.name: s for s in RationaleSource.objects.all()}

    rows = []
    seen: dict[tuple[int, str], int] = {}
    text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="strict")
    try:
        lines = list(enumerate(text, start=1))
    except UnicodeDecodeError as exc:
        raise OutcomesImportError(f"{filename} is not UTF-8 text ({exc.reason}).") from exc
    for line_no, line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"line {line_no}: not valid JSON ({exc.msg})")
            continue
        if not isinstance(row, dict):
            problems.append(f"line {line_no}: expected a JSON object")
            continue
        missing = [f for f in REQUIRED_FIELDS if f not in row]
        if missing:
            problems.append(f"line {line_no}: missing field(s) {', '.join(missing)}")
            continue
        question = _normalise_question(str(row["question"]))
        candidates = by_question.get(question, [])
        if not candidates:
            candidates = by_loose.get(_loose_question(question), [])
            if candidates:
                loose_matches.append(line_no)
        if len(candidates) > 1:
            in_split = [i for i in candidates if i.split == study.split]
            candidates = in_split if in_split else candidates
        if not candidates:
            problems.append(
                f"line {line_no}: question: {question[:80]!r} is not an item of dataset {dataset.name!r}; "
                "import the dataset's items first"
            )
            continue
        if len(candidates) > 1:
            problems.append(f"line {line_no}: question: matches {len(candidates)} items of {dataset.name!r}")
            continue
        item = candidates[0]
        source_name = str(row["rationale_source"]).strip()
        if not source_name:
            problems.append(f"line {line_no}: rationale_source: empty")
            continue
        gold = _label(dataset, row["ground_truth_label"], "ground_truth_label", line_no, problems, allow_tie=False)
        before = _label(dataset, row["human_predicted_label_before_rationale"],
                        "human_predicted_label_before_rationale", line_no, problems, allow_tie=True)
        after = _label(dataset, row["human_predicted_label_after_rationale"],
                       "human_predicted_label_after_rationale", line_no, problems, allow_tie=True)
        if gold and gold != item.gold_answer:
            problems.append(
                f"line {line_no}: ground_truth_label: {gold!r} disagrees with the item's gold answer "
                f"{item.gold_answer!r} (item {item.pk})"
            )
        reported = row.get("rationale_utility")
        if reported is not None and reported not in (-1, 0, 1):
            problems.append(f"line {line_no}: rationale_utility: {reported!r} is not -1, 0 or 1")
        n_annotators = row.get("n_annotators", study.annotators_per_unit)
        if not isinstance(n_annotators, int) or isinstance(n_annotators, bool) or n_annotators < 1:
            problems.append(f"line {line_no}: n_annotators: {n_annotators!r} is not a positive integer")
        key = (item.pk, source_name)
        if key in seen:
            problems.append(f"line {line_no}: duplicate of line {seen[key]} (same question and source)")
            continue
        seen[key] = line_no
        rationale = row.get("rationale")
        rows.append((line_no, item, source_name, before, after, reported, n_annotators,
                     rationale if isinstance(rationale, str) else ""))

    if problems:
        raise OutcomesImportError(f"{filename}: {len(problems)} problem(s); nothing was imported.", problems)
    if not rows:
        raise OutcomesImportError(f"{filename}: no outcome rows found; nothing was imported.")

    created_sources = []
    for name in sorted({r[2] for r in rows} - set(sources)):
        src = RationaleSource(name=name, kind=RationaleSource.Kind.IMPORTED,
                              description=f"Created by the outcomes import of {filename}.")
        src.full_clean()
        src.save()
        sources[name] = src
        created_sources.append(name)

    existing = {
        (u.item_id, u.source_id): u for u in UnitScore.objects.filter(study=study)
    }
    existing_rationales = set(
        Rationale.objects.filter(item_id__in={r[1].pk for r in rows}).values_list("item_id", "source_id")
    )
    created = updated = unchanged = rationales_created = 0
    new_scores, changed_scores, new_rationales = [], [], []
    for _line, item, source_name, before, after, reported, n_annotators, rationale in rows:
        source = sources[source_name]
        values = {
            "before_majority": before or "",
            "after_majority": after or "",
            "before_tie": before is None,
            "after_tie": after is None,
            "reported_utility": reported,
            "n_annotators": n_annotators,
            "imported": True,
        }
        current = existing.pop((item.pk, source.pk), None)
        if current is None:
            new_scores.append(UnitScore(study=study, item=item, source=source, **values))
            created += 1
        elif any(getattr(current, k) != v for k, v in values.items()):
            for k, v in values.items():
                setattr(current, k, v)
            changed_scores.append(current)
            updated += 1
        else:
            unchanged += 1
        if rationale.strip() and (item.pk, source.pk) not in existing_rationales:
            new_rationales.append(Rationale(
                item=item, source=source, text=rationale,
                generation_info={"import": filename, "kind": "outcomes"},
            ))
            existing_rationales.add((item.pk, source.pk))
            rationales_created += 1
    UnitScore.objects.bulk_create(new_scores, batch_size=1000)
    if changed_scores:
        UnitScore.objects.bulk_update(changed_scores, list(values), batch_size=1000)
    Rationale.objects.bulk_create(new_rationales, batch_size=1000)
    removed = 0
    if existing:
        removed, _ = UnitScore.objects.filter(pk__in=[u.pk for u in existing.values()]).delete()

    study.is_imported_outcome = True
    study.status = Study.Status.CLOSED
    study.save(update_fields=["is_imported_outcome", "status", "updated_at"])
    study.items.add(*{r[1].pk for r in rows})
    study.sources.add(*{sources[r[2]].pk for r in rows})

    summary = {
        "rows": len(rows),
        "created": created,
        "updated": updated,
        "unchanged": unchanged,
        "removed": removed,
        "rationales_created": rationales_created,
        "sources_created": created_sources,
        "sources": sorted({r[2] for r in rows}),
        # Lines whose question matched only after dropping trailing punctuation and quote escapes.
        "loosely_matched_lines": loose_matches,
    }
    ImportRecord.objects.create(
        kind="outcomes", filename=filename, sha256=hashlib.sha256(data).hexdigest(), dataset=dataset,
        created=created, updated=updated, unchanged=unchanged, summary={"study": study.pk, **summary},
    )
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
        raise OutcomesImportError(
            f"Study {name!r} exists already with dataset {study.dataset.name!r}, not {dataset.name!r}; "
            "choose another study name."
        )
    return study, outcomes_import(study=study, file=file)
