"""Import outcomes of a utility study collected elsewhere (e.g. the released
``rationale_utility.json``) as a finished study.

The file goes through the importers (``studies.services.importers``): the same size limit
(``RL_MAX_IMPORT_BYTES``, checked before reading), UTF-8 and JSON-lines reading with every bad line
reported, the same answer labels and question matching, the same row validation and upsert, and
one ``ImportRecord``. Only what is particular to outcomes lives here: the fields of a line and
their checks.

Both services act for ``user`` (None: the operator, e.g. ``manage.py import_outcomes``) and check
their rights here, whoever calls: importing into an existing study needs CHANGE on it
(``studies.selectors.study_user_may``), and the shared content an import adds (sources,
rationales) goes through ``bulk_upsert`` with that user, so a rationale another researcher's study
would show is refused by line (``studies.services.content``). The dataset and the sources an import
uses are only those the user may use in a study (``studies.selectors.datasets_for_design`` /
``sources_for_design``, the rule ``study_insert`` applies to a study's design; a study shared with
them only to view lends nothing): a source named in the
file that the user may not see is treated as one that does not exist here (``usable_by_name``), so
an import never brings another researcher's source, its configuration or its rationales into view,
and never tells its fields."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.db import models, transaction

from scoring.models import UnitScore
from studies.models import Dataset, Item, Rationale, RationaleSource, Study
from studies.selectors import datasets_for_design, sources_for_design
from studies.services.importers import ImportValidationError
from studies.services.importers.errors import ErrorCollector, RowError
from studies.services.importers.reading import ImportFile, parse_json_lines, read_import_file
from studies.services.importers.rows import Row, header_of, parse_rows, resolve_columns
from studies.services.importers.upsert import QuestionIndex, bulk_upsert, import_record_create
from studies.services.importers.values import answer_label, describe_allowed, short
from studies.services.studies import StudyError, study_add_check, study_change_check

REQUIRED_FIELDS = (
    "question",
    "rationale_source",
    "ground_truth_label",
    "human_predicted_label_before_rationale",
    "human_predicted_label_after_rationale",
)
_UNIT_FIELDS = ["before_majority", "after_majority", "before_tie", "after_tie", "reported_utility",
                "n_annotators", "imported"]
# What a score run writes on a row (``scoring.services.score``): a new or changed line clears it, so
# that no row shows the scores (or names the run) of outcomes that run did not see.
UNSCORED = {"before_correct": None, "after_correct": None, "utility": None, "task_correct": None, "gen_u": None,
            "similarity": None, "score_run": None}


class OutcomesStudyNotYours(ImportValidationError):
    """The study to import into exists and the acting user may not change it; nothing was written."""


@dataclass
class _Line:
    line: int
    item: Item
    source: str
    before: str | None  # None: no majority (a tie)
    after: str | None
    reported: int | None
    n_annotators: int | None  # None: the file does not say
    rationale: str
    loose: bool  # the question matched only after the importers' normalisation


class _OutcomeRow:
    """Parses one line of an outcomes file into a ``_Line``; None when the line cannot name its
    item and source. Problems are reported on the row (the line's other checks still run, so that
    every problem of the file is listed)."""

    def __init__(self, study: Study):
        self.study = study
        self.dataset = study.dataset
        self.in_split = QuestionIndex(self.dataset, split=study.split or None)
        self.anywhere = QuestionIndex(self.dataset)

    def __call__(self, row: Row) -> _Line | None:
        missing = row.missing(REQUIRED_FIELDS)
        if missing:
            row.error(missing[0], f"missing field(s) {', '.join(missing)}")
            return None
        item = self.item(row)
        source = row.text("rationale_source") if item is not None else ""
        if item is not None and not source:
            row.error("rationale_source", "empty")
        if item is None or not source:
            return None
        gold = self.label(row, "ground_truth_label", allow_tie=False)
        before = self.label(row, "human_predicted_label_before_rationale", allow_tie=True)
        after = self.label(row, "human_predicted_label_after_rationale", allow_tie=True)
        if gold and gold != item.gold_answer:
            row.error("ground_truth_label",
                      f"{gold!r} disagrees with the item's gold answer {item.gold_answer!r} (item {item.external_id})")
        rationale = row.raw("rationale")
        question = row.raw("question")
        return _Line(row.line, item, source, before, after, self.reported(row), self.n_annotators(row),
                     rationale if isinstance(rationale, str) else "",
                     loose=" ".join(question.split()) != " ".join(item.question.split()))

    def item(self, row: Row) -> Item | None:
        """The item whose question the line gives (the study's split first, then the dataset)."""
        question = row.raw("question")
        if not isinstance(question, str) or not question.strip():
            row.error("question", "must be the question's text")
            return None
        item, reason = self.in_split.find(question)
        if item is None:
            item, reason = self.anywhere.find(question)
        if item is None:
            row.error("question", f"{reason}; import the dataset's items first")
        return item

    def label(self, row: Row, field: str, *, allow_tie: bool) -> str | None:
        """The answer label of ``field``; None for a tie (an empty answer) where one is allowed."""
        if not row.given(field):
            if not allow_tie:
                row.error(field, "missing")
            return None
        value = row.raw(field)
        label = answer_label(self.dataset, value)
        if label is None:
            row.error(field, f"{short(value)!r} is not an answer of this dataset ({describe_allowed(self.dataset)})")
        return label

    def reported(self, row: Row) -> int | None:
        reported = row.raw("rationale_utility")
        if reported is not None and (isinstance(reported, bool) or reported not in (-1, 0, 1)):
            row.error("rationale_utility", f"{short(reported)!r} is not -1, 0 or 1")
        return reported

    def n_annotators(self, row: Row) -> Any:
        """The line's ``n_annotators``; None when it has none (the released file has none): how many
        workers answered is then not known, and never taken from the study's design."""
        n = row.rec.get("n_annotators")
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            row.error("n_annotators", f"{short(n)!r} is not a positive integer")
        return n


def _read_lines(study: Study, f: ImportFile) -> list[_Line]:
    """Every line checked; every problem collected and raised together (nothing written)."""
    records = [(line, rec, None) for line, rec in parse_json_lines(f)]
    resolve_columns(given=dict.fromkeys(REQUIRED_FIELDS), candidates={name: [name] for name in REQUIRED_FIELDS},
                    required=[((name,), f"a {name!r} field") for name in REQUIRED_FIELDS],
                    header=header_of(records), filename=f.name)
    parse = _OutcomeRow(study)
    errors = ErrorCollector()
    out: list[_Line] = []
    seen: dict[tuple[int, str], int] = {}
    for row in parse_rows(records, errors=errors):
        parsed = parse(row)
        if parsed is None:
            continue
        key = (parsed.item.pk, parsed.source)
        if key in seen:
            row.error("", f"duplicate of line {seen[key]} (same question and source)")
            continue
        seen[key] = row.line
        out.append(parsed)
    errors.raise_if_any(f.name)
    if not out:
        raise ImportValidationError("no outcome rows found", filename=f.name)
    return out


@transaction.atomic
def outcomes_import(*, study: Study, file: str | Path | IO | Any, user) -> dict:
    """Import aggregated before/after answers (one JSON object per line, one line per question and
    source, fields as in ``rationale_utility.json``) into ``study``, mark it an imported outcome
    and close it, acting for ``user`` (None: the operator). A user who may not change ``study``
    is refused (``OutcomesStudyNotYours``), and so is a line whose rationale would be shown by
    a study the user may not change (see the module's docstring).

    Items are matched by question text among the study dataset's items (the study's split first),
    as every importer matches them (``importers.values.normalize_question``: case, spacing, escaped
    quotes and debris after the question mark are ignored; such lines are listed in the summary's
    ``loosely_matched_lines``); sources by name among those the user may see (an unknown source,
    or one the user may not see, is created as an imported source; under ``NAME (STUDY)`` when
    another researcher's source holds the name, listed in the summary's ``sources_renamed``:
    ``usable_by_name``). Each line becomes (or updates) a ``UnitScore`` with ``imported=True``; a line's
    ``rationale`` text becomes the source's ``Rationale`` for the item when there is none yet. An
    answer of ``null`` means the original majority was a tie. ``rationale_utility``, when given, is
    kept as ``reported_utility`` so that scoring can check its recomputed utility against it.

    All or nothing: a file over the import limit or with bad lines raises the importers'
    ``ImportValidationError`` listing every problem by line and field, and nothing is written.
    Re-importing the same file changes nothing. Returns a summary."""
    return _import(study=study, file=file, user=user, check_change=True)


def _import(*, study: Study, file, user, check_change: bool) -> dict:
    """``outcomes_import``; ``check_change``: False only where ``outcomes_study_create`` has
    checked the study already (or has just made it for ``user``: creating a study is not changing
    someone's)."""
    study = Study.objects.select_for_update().select_related("dataset").get(pk=study.pk)
    if check_change:
        _check_may_change(study, user)
    _check_may_use_dataset(study.dataset, user)
    if study.units.exists():
        raise ImportValidationError(
            f"study {study.name!r} collects its own answers ({study.units.count()} units); import outcomes "
            "into a new study instead."
        )
    f = read_import_file(file)
    lines = _read_lines(study, f)
    sources, new_names, renamed = _sources(lines, f, user, study)
    result, removed = _unit_scores(study, lines, sources, f, user)
    new_rationales = _rationales(lines, sources, f, user)

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
        "rationales_created": new_rationales,
        "sources_created": new_names,
        "sources_renamed": renamed,
        "sources": sorted({r.source for r in lines}),
        "loosely_matched_lines": [r.line for r in lines if r.loose],
    }
    import_record_create(kind="outcomes", f=f, dataset=study.dataset, result=result,
                         summary={"study": study.pk, **summary}, user=user)
    return summary


def _check_may_change(study: Study, user) -> None:
    """Refuse ``user`` (None: the operator, never refused) an existing study they may not change
    (``study_change_check``), as an import error on the study's name, which the user gave."""
    try:
        study_change_check(study=study, user=user)
    except StudyError:
        raise OutcomesStudyNotYours(RowError(
            None, "study", f"study {study.name!r} exists and you may not change it (studies.change_study on a "
                           "study you own or that is shared with you): import into a study of another name")) from None


def _check_may_use_dataset(dataset: Dataset, user) -> None:
    """Refuse ``user`` (None: the operator, never refused) a dataset they may not use in a study
    (``datasets_for_design``: what ``study_insert`` lets a study use; a study shared with them only
    to view lends nothing), with the answer a missing dataset would get: by id only, never its name."""
    if user is not None and not datasets_for_design(user=user).filter(pk=dataset.pk).exists():
        raise ImportValidationError(RowError(
            None, "dataset", f"dataset {dataset.pk}: not found or not yours to use (it needs studies.view_dataset, or "
                             "a study you may change that uses it)"))


def _check_may_add(user) -> None:
    """Refuse ``user`` a new study unless they may create studies (``study_add_check``)."""
    try:
        study_add_check(user=user)
    except StudyError as exc:
        raise ImportValidationError(RowError(None, "study", str(exc))) from None


def usable_by_name(*, model: type[models.Model], visible: models.QuerySet, name: str, tag: str,
                   taken: set[str]) -> tuple[models.Model | None, str]:
    """The row of ``model`` (a dataset, a rationale source: names unique here) that an import naming
    ``name`` uses for the acting user: one of ``visible``, what the user may use in a study (the
    selectors' ``datasets_for_design`` / ``sources_for_design``), else None and the name a new row of theirs takes.

    A name held by a row the user may not see gets the answer a missing one gets: a new row is made,
    under ``name (tag)`` (then ``name (tag 2)``, ...) since the name is taken. Nothing of the hidden
    row is read or compared, so the import tells nothing of its fields and never uses it. A
    candidate the user may see is used (importing the same file again finds what the first import
    made). ``taken``: the names this import has given already (updated), so two names never meet."""
    max_length = model._meta.get_field("name").max_length
    tag = " ".join(tag.split())[:60]
    for n in itertools.count(1):
        suffix = "" if n == 1 else f" ({tag})" if n == 2 else f" ({tag} {n - 1})"
        candidate = name if n == 1 else name[: max_length - len(suffix)] + suffix
        if candidate in taken:
            continue
        found = visible.filter(name=candidate).first()
        if found is not None or not model.objects.filter(name=candidate).exists():
            taken.add(candidate)
            return found, candidate
    raise AssertionError("unreachable")  # pragma: no cover


def _sources(lines: list[_Line], f: ImportFile, user, study: Study
             ) -> tuple[dict[str, RationaleSource], list[str], dict[str, str]]:
    """The lines' sources by the file's names: those the user may see (``usable_by_name``), the
    others created as imported sources, under another name when another researcher's source holds
    the file's. Returns them, the names created and {file's name: name created} where they differ."""
    visible = RationaleSource.objects.all() if user is None else sources_for_design(user=user)
    sources: dict[str, RationaleSource] = {}
    new: dict[str, str] = {}  # name created -> the file's name
    taken: set[str] = set()
    for name in sorted({r.source for r in lines}):
        found, usable = usable_by_name(model=RationaleSource, visible=visible, name=name, tag=study.name, taken=taken)
        if found is not None:
            sources[name] = found
        else:
            new[usable] = name
    _, created = bulk_upsert(
        model=RationaleSource, existing={}, compare_fields=[], filename=f.name,
        rows={usable: {"kind": RationaleSource.Kind.IMPORTED,
                       "description": f"Created by the outcomes import of {f.name}."} for usable in new},
        build=lambda name, values: RationaleSource(name=name, **values), user=user,
    )
    sources.update({new[s.name]: s for s in created})
    return sources, sorted(new), {name: usable for usable, name in sorted(new.items()) if usable != name}


def _unit_scores(study: Study, lines: list[_Line], sources: dict[str, RationaleSource], f: ImportFile, user):
    """One imported ``UnitScore`` per line (created or updated); the study's unit scores of no line
    are removed. A new or changed row is unscored (``UNSCORED``: its scores and ``score_run``
    cleared) until the study is scored again; an unchanged row keeps its scores. Returns the
    upsert's result and how many were removed."""
    rows = {
        (r.item.pk, sources[r.source].pk): {
            "before_majority": r.before or "", "after_majority": r.after or "", "before_tie": r.before is None,
            "after_tie": r.after is None, "reported_utility": r.reported, "n_annotators": r.n_annotators,
            "imported": True, **UNSCORED,
        }
        for r in lines
    }
    existing = {(u.item_id, u.source_id): u for u in UnitScore.objects.filter(study=study)}
    result, _ = bulk_upsert(
        model=UnitScore, existing=existing, rows=rows, compare_fields=_UNIT_FIELDS, filename=f.name,
        lines={(r.item.pk, sources[r.source].pk): r.line for r in lines},
        build=lambda key, values: UnitScore(study=study, item_id=key[0], source_id=key[1], **values), user=user,
    )
    gone = [u.pk for key, u in existing.items() if key not in rows]
    removed = UnitScore.objects.filter(pk__in=gone).delete()[0] if gone else 0
    return result, removed


def _rationales(lines: list[_Line], sources: dict[str, RationaleSource], f: ImportFile, user) -> int:
    """A line's rationale text becomes its source's ``Rationale`` for the item when there is none
    yet; returns how many were created."""
    with_text = {(r.item.pk, sources[r.source].pk): r for r in lines if r.rationale.strip()}
    have = {
        (i, s): None for i, s in Rationale.objects.filter(item_id__in={k[0] for k in with_text})
        .values_list("item_id", "source_id")
    }
    _, created = bulk_upsert(
        model=Rationale, existing=have, compare_fields=[], filename=f.name,
        rows={key: {"text": r.rationale} for key, r in with_text.items() if key not in have},
        lines={key: r.line for key, r in with_text.items()},
        build=lambda key, values: Rationale(item_id=key[0], source_id=key[1], text=values["text"],
                                            generation_info={"import": f.name, "kind": "outcomes"}),
        user=user,
    )
    return len(created)


@transaction.atomic
def outcomes_study_create(
    *, name: str, dataset: Dataset, file: str | Path | IO, user, split: str = "test", owner=None
) -> tuple[Study, dict]:
    """Create a finished utility study named ``name`` from an outcomes file (see
    ``outcomes_import``), acting for ``user`` (None: the operator): the study, its sources and its
    unit scores appear together or not at all. Creating the study needs ``studies.add_study``;
    importing again into an existing study of that name is idempotent, and needs CHANGE on it
    (``OutcomesStudyNotYours`` otherwise); an existing study of that name is used only when it is a
    utility study of imported outcomes (an earlier import), never one run here, which the import
    would close for good."""
    study = Study.objects.filter(name=name).first()
    if study is None:
        _check_may_add(user)
        _check_may_use_dataset(dataset, user)
        study = Study(
            name=name, kind=Study.Kind.UTILITY, dataset=dataset, split=split, owner=owner,
            is_imported_outcome=True, status=Study.Status.CLOSED,
        )
        study.full_clean()
        study.save()
    else:
        _check_may_change(study, user)  # before anything is said of it
        _check_may_use_dataset(dataset, user)  # before its name is
        if study.dataset_id != dataset.pk:
            raise ImportValidationError(
                f"study {name!r} exists already with dataset {study.dataset.name!r}, not {dataset.name!r}; "
                "choose another study name."
            )
        if study.kind != Study.Kind.UTILITY or not study.is_imported_outcome:
            # importing would make it an imported outcome and close it for good: only an earlier
            # import of outcomes is imported into again, never a study run here (a draft included)
            raise ImportValidationError(RowError(
                None, "study", f"study {name!r} exists already as a {study.kind} study "
                               f"{'of imported outcomes' if study.is_imported_outcome else 'run here'} "
                               f"({study.status}); outcomes are imported only into a utility study made by an "
                               "earlier import of outcomes: choose another study name."))
    # checked above: an existing study needs CHANGE, one just made for the user is theirs
    return study, _import(study=study, file=file, user=user, check_change=False)
