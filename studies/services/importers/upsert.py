"""What an import finds and writes in the database: its dataset, the items its questions name, the
bulk upsert that makes a re-import change nothing, and the ``ImportRecord`` of an applied file.

An importer parses and validates the *whole* file first and collects every bad row. If there is
any, it raises one :class:`ImportValidationError` and writes nothing; otherwise it applies the
rows inside ``transaction.atomic`` with bulk operations and records an ``ImportRecord``."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from studies.models import Dataset, ImportRecord, Item
from studies.selectors import datasets_to_import_into
from studies.services.content import content_added_refusals, content_change_problems, content_parent_refusals

from .errors import ErrorCollector, ImportValidationError, RowError
from .reading import ImportFile
from .values import identifier_problem, normalize_question, short


def dataset_get(*, name: str, user: Any = None, filename: str = "") -> Dataset:
    """The dataset an import adds to, among those ``user`` may import into
    (``datasets_to_import_into``). Any other dataset (another researcher's, hidden or read only
    through a view share) gets the same answer as one that does not exist, and the names suggested
    are only those the user may import into."""
    datasets = datasets_to_import_into(user=user)
    try:
        return datasets.get(name=name)
    except Dataset.DoesNotExist:
        known = ", ".join(datasets.order_by("name").values_list("name", flat=True)[:20]) or (
            "none yet" if user is None else "none you may see")
        raise ImportValidationError(
            f"unknown dataset {name!r} (known: {known}); import its items first", filename=filename
        ) from None


def dataset_existing(*, name: str, user: Any = None, filename: str = "") -> Dataset | None:
    """The dataset named ``name`` that an item import adds to, or None when there is none yet. A
    name held by a dataset ``user`` may not import into (``datasets_to_import_into``; None: the
    operator, every dataset), hidden or read only through a view share, is refused alike, saying only
    that the name is taken: names are unique, so such a dataset can be neither made again nor
    answered as a missing one, and nothing of it (its task format, its option labels, its items) is
    read, compared or written."""
    dataset = Dataset.objects.filter(name=(name or "").strip()).first()
    if dataset is None or user is None or datasets_to_import_into(user=user).filter(pk=dataset.pk).exists():
        return dataset
    raise ImportValidationError(
        f"the dataset name {dataset.name!r} is taken by a dataset you may not see: choose another dataset name",
        filename=filename,
    )


def dataset_check(
    *, name: str, task_format: str, choice_labels: list[str] | None = None, filename: str = "", user: Any = None
) -> Dataset | None:
    """The existing dataset of that name (None if new), among those ``user`` may import into
    (``dataset_existing``); refuse a name holding bidirectional controls (``textrules.identifier_problem``)
    and one of another task format. Writes nothing, so importers call it
    before validating rows."""
    name = (name or "").strip()
    if not name:
        raise ImportValidationError("the dataset name is empty", filename=filename)
    problem = identifier_problem(name, what="the dataset name")
    if problem:
        raise ImportValidationError([RowError(None, "dataset", problem)], filename=filename)
    dataset = dataset_existing(name=name, user=user, filename=filename)
    if dataset is None:
        return None
    if dataset.task_format != task_format:
        raise ImportValidationError(
            f"dataset {name!r} exists with task format {dataset.get_task_format_display()!r}; "
            f"this file is {Dataset.TaskFormat(task_format).label!r}: choose another dataset name",
            filename=filename,
        )
    labels = list(choice_labels or [])
    if task_format == Dataset.TaskFormat.MULTIPLE_CHOICE and labels and list(dataset.choice_labels) != labels:
        raise ImportValidationError(
            f"dataset {name!r} has options {dataset.choice_labels}, this file has {labels}", filename=filename
        )
    return dataset


def dataset_get_or_create(
    *, name: str, task_format: str, choice_labels: list[str] | None = None, description: str = "", user: Any = None
) -> tuple[Dataset, bool]:
    """Call inside the import's transaction, after ``dataset_check`` (for the same ``user``)."""
    dataset = dataset_existing(name=name, user=user)
    if dataset is not None:
        return dataset, False
    dataset = Dataset(
        name=name.strip(), task_format=task_format, choice_labels=list(choice_labels or []), description=description
    )
    try:
        dataset.full_clean()
    except ValidationError as exc:
        raise ImportValidationError(
            [RowError(None, name, "; ".join(messages)) for name, messages in exc.message_dict.items()],
        ) from None
    dataset.save()
    return dataset, True


class QuestionIndex:
    """Finds items of a dataset (optionally one split) by normalised question text."""

    def __init__(self, dataset: Dataset, split: str | None = None):
        qs = Item.objects.filter(dataset=dataset)
        if split:
            qs = qs.filter(split=split)
        self.by_key: dict[str, list[Item]] = {}
        self.by_external_id: dict[str, Item] = {}
        for item in qs.only("id", "external_id", "question", "gold_answer", "split", "dataset_id"):
            self.by_key.setdefault(normalize_question(item.question), []).append(item)
            self.by_external_id[item.external_id] = item
        self.split = split
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.by_external_id)

    def find(self, question: str) -> tuple[Item | None, str]:
        """``(item, "")`` or ``(None, reason)``."""
        found = self.by_key.get(normalize_question(question), [])
        if len(found) == 1:
            return found[0], ""
        where = f"dataset {self.dataset.name!r}" + (f", split {self.split!r}" if self.split else "")
        if not found:
            return None, f"no item of {where} has the question {short(question)!r}"
        ids = ", ".join(sorted(i.external_id for i in found))
        return None, f"the question {short(question)!r} matches several items ({ids}); choose a split"


@dataclass
class UpsertResult:
    created: int = 0
    updated: int = 0
    unchanged: int = 0


def bulk_upsert(
    *,
    model: type[models.Model],
    existing: dict[Any, models.Model],
    rows: dict[Any, dict[str, Any]],
    build: Callable[[Any, dict[str, Any]], models.Model],
    compare_fields: list[str],
    lines: dict[Any, int | None] | None = None,
    filename: str = "",
    batch_size: int = 500,
    user: Any = None,
    key_field: str = "",
) -> tuple[UpsertResult, list[models.Model]]:
    """Create the rows whose key is new, update those whose ``compare_fields`` differ, count the
    rest as unchanged. ``existing`` maps key -> instance; ``rows`` maps key -> field values.
    Returns the counts and the created instances. Every new or changed instance is
    ``full_clean``-ed, except for uniqueness, which the caller has already settled; a row the
    model refuses (an id longer than its column, ...) is reported with its line (``lines`` maps
    key -> line) and field, every one of them, before anything is written.

    Shared content (items, sources, rationales, generalization questions) changes only as
    ``studies.services.content`` allows ``user`` (None: the operator): a row used by a study the
    user may not change (or would use, for a new row), and a changed field of what an open or
    closed study shows, are reported by line too. A row refused as not the user's is reported by
    its line and ``key_field`` (the field that names the row) only, never which of its fields
    differ from the stored row or the row's id (``_Upsert.report_not_yours``). Call inside the
    import's transaction (the studies using the rows are locked; new rows refused are rolled back)."""
    upsert = _Upsert(model=model, compare_fields=compare_fields, lines=lines or {}, key_field=key_field)
    upsert.plan(existing, rows, build)
    upsert.refuse_changes_not_allowed(existing, user)
    upsert.errors.raise_if_any(filename)
    created = model.objects.bulk_create(upsert.to_create, batch_size=batch_size)
    if created and user is not None:
        upsert.refuse_created_not_allowed(created, user)
    upsert.report_not_yours()
    upsert.errors.raise_if_any(filename)
    upsert.update(batch_size)
    upsert.result.created = len(upsert.to_create)
    upsert.result.updated = len(upsert.to_update)
    return upsert.result, created


class _Upsert:
    """One ``bulk_upsert``: the rows sorted into new, changed and unchanged, and every problem found
    with its line."""

    def __init__(self, *, model: type[models.Model], compare_fields: list[str], lines: dict[Any, int | None],
                 key_field: str = ""):
        self.model, self.compare_fields, self.lines, self.key_field = model, compare_fields, lines, key_field
        self.result = UpsertResult()
        self.errors = ErrorCollector()
        self.to_create: list[models.Model] = []
        self.created_keys: list[Any] = []  # the key of each row of to_create
        self.to_update: list[models.Model] = []
        self.changed_fields: set[str] = set()
        self.diffs: dict[Any, list[str]] = {}  # primary key -> the fields the row changes
        self.refused: list[Any] = []  # the keys of rows that are not the user's (``report_not_yours``)
        # Foreign keys were resolved by the importer; validating them again costs a query per row.
        self.exclude = [f.name for f in model._meta.concrete_fields if f.is_relation]

    def error(self, key: Any, field: str, reason: str) -> None:
        self.errors.add(self.lines.get(key), field, reason,
                        record=f"id {short(key, 40)!r}" if isinstance(key, str) else "")

    def clean(self, obj: models.Model, key: Any) -> None:
        try:
            obj.full_clean(exclude=self.exclude, validate_unique=False, validate_constraints=False)
        except ValidationError as exc:
            for name, messages in exc.message_dict.items():
                for message in messages:
                    self.error(key, "" if name == "__all__" else name, message.rstrip("."))

    def plan(self, existing: dict[Any, models.Model], rows: dict[Any, dict[str, Any]],
             build: Callable[[Any, dict[str, Any]], models.Model]) -> None:
        for key, values in rows.items():
            obj = existing.get(key)
            if obj is None:
                new = build(key, values)
                self.clean(new, key)
                self.to_create.append(new)
                self.created_keys.append(key)
                continue
            diff = [f for f in self.compare_fields if f in values and getattr(obj, f) != values[f]]
            if not diff:
                self.result.unchanged += 1
                continue
            self.diffs[obj.pk] = diff
            for f, v in values.items():
                setattr(obj, f, v)
            self.changed_fields.update(values)
            self.clean(obj, key)
            self.to_update.append(obj)

    def refuse_changes_not_allowed(self, existing: dict[Any, models.Model], user: Any) -> None:
        """Changed rows that ``user`` may not change, or that an open or closed study shows. A row
        hanging from a parent they may not build on (``content_parent_refusals``: an importer finds
        its rows under a dataset and source it has checked, so only a row whose source, say, is no
        longer theirs) is told so, by its line and ``key_field``, never as used by a study."""
        if not self.diffs:
            return
        parents = content_parent_refusals(user=user, model=self.model, pks=self.diffs)
        not_yours, fixed = content_change_problems(
            user=user, model=self.model, changes={pk: diff for pk, diff in self.diffs.items() if pk not in parents},
            lock=True, parents=False)
        key_of = {obj.pk: key for key, obj in existing.items() if obj is not None and obj.pk in self.diffs}
        what = self.model._meta.verbose_name
        for pk, reason in parents.items():
            self.error(key_of[pk], self.key_field,
                       f"this {what} is not yours to change: it hangs from a parent you may not build on ({reason})")
        self.refused.extend(key_of[pk] for pk in not_yours)
        for pk, reason in fixed.items():  # the user may change every study using the row: theirs to read
            self.error(key_of[pk], ", ".join(self.diffs[pk]), reason)

    def refuse_created_not_allowed(self, created: list[models.Model], user: Any) -> None:
        """New rows that a study the user may not change would use (bulk_create set their keys on
        PostgreSQL and SQLite): refused by line, and the caller's transaction rolls the file back."""
        not_yours = content_added_refusals(user=user, model=self.model, pks=[obj.pk for obj in created])
        for key, obj in zip(self.created_keys, created, strict=True):
            if obj.pk in not_yours:
                self.refused.append(key)

    def report_not_yours(self) -> None:
        """Rows used (or, new, that would be used) by a study the user may not change: one answer
        whether the row exists and whatever it holds, so it says nothing of another researcher's
        content. Not the fields that differ (they would tell the stored row field by field), not the
        row's id, not the study; reported after the new rows are checked and in line order, so neither
        when nor where a row is reported tells whether it existed."""
        reason = (f"this {self.model._meta.verbose_name} is used by a study you may not change: only that "
                  "study's researchers may edit it or add to what it shows")
        for key in sorted(self.refused, key=lambda key: self.lines.get(key) or 0):
            self.error(key, self.key_field, reason)

    def update(self, batch_size: int) -> None:
        if not self.to_update:
            return
        update_fields = sorted(self.changed_fields)
        if any(f.name == "updated_at" for f in self.model._meta.concrete_fields):
            now = timezone.now()
            for obj in self.to_update:
                obj.updated_at = now
            update_fields.append("updated_at")
        self.model.objects.bulk_update(self.to_update, update_fields, batch_size=batch_size)


def import_record_create(
    *,
    kind: str,
    f: ImportFile,
    dataset: Dataset | None,
    result: UpsertResult,
    summary: dict[str, Any],
    user: Any = None,
) -> ImportRecord:
    user = user if getattr(user, "is_authenticated", False) else None
    return ImportRecord.objects.create(
        kind=kind,
        filename=f.name[:500],
        sha256=f.sha256,
        dataset=dataset,
        created=result.created,
        updated=result.updated,
        unchanged=result.unchanged,
        summary=summary,
        imported_by=user,
    )
