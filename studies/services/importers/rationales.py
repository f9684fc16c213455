"""Rationales from CSV or JSON lines: which item (by id or by question text), which source,
the rationale, and optionally the source's predicted answer.

``rationale_utility.json`` (the released utility outcomes) imports as three sources, t5large,
t53b and gpt3, of 458 rationales each; its other columns (the gold label and the crowd's
answers) are kept in ``generation_info["extra"]``. A gold-label column, when present, is checked
against the matched item's gold answer, which catches a question matched to the wrong item.
Sources that do not exist yet are created as "imported file" sources. A source name may not hold
bidirectional controls (``textrules.identifier_problem``), nor a rationale a T5 sentinel token
(``textrules.sentinel_problem``).

Highlight sources: a ``highlights`` column holds ``[[start, end], ...]`` character spans over the
question (``highlight_tokens``: ``[[first, last + 1], ...]`` spans of whitespace tokens), and
faithfulness probabilities computed elsewhere come in the columns ``p_full``, ``p_highlight`` and
``p_without`` (p(y_hat | x), p(y_hat | h), p(y_hat | x \\ h), y_hat predicted from the highlight;
optionally ``y_hat``, and ``y_hat_from``: ``highlight`` or ``full``, the rule that chose y_hat, as the
faithfulness job names it). They are stored where scoring reads them (``Rationale.faithfulness``),
checked by ``studies.faithfulness_rules`` (numbers in [0, 1]), with the highlight spans they were
computed on (the row's, or the stored ones when the file has no highlights column), so that scoring
leaves them out once the highlight changes; without a ``y_hat_from`` the rule is stored as assumed
(``highlight``, marked ``y_hat_from_assumed``), which scoring names. A file with these columns must
fill all three on every row, or nothing is imported and the rows are listed. A file without them
leaves stored highlights and probabilities as they are (new highlights on such a file leave the old
probabilities to the old spans: scoring leaves them out until they are computed again).

A source is looked up among those the importing user may build on (``sources_for_design``: every
source with ``studies.view_rationalesource``, else those a study of their own or one they may change
lists; None: the operator, every source), as the dataset is (``upsert.datasets_to_import_into``): a
source read only through a study shared with them to view is not theirs to write rationales of.
Names are unique, so a name held by any other source (hidden, or read through a view share) can be
neither created again nor answered as a missing one: each row naming it is refused alike, saying
only that the name is taken (as ``upsert.dataset_existing`` answers for a dataset), before anything
of that source (its rationales, its highlights flag) is read, compared or written.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from django.db import transaction

from studies.faithfulness_rules import (
    ASSUMED_KEY,
    PROBABILITIES,
    SPANS_KEY,
    Y_HAT_FROM_ASSUMED,
    probability_read,
    with_spans,
    y_hat_from_problem,
)
from studies.lm import highlights as spans
from studies.models import ImportRecord, Item, Rationale, RationaleSource
from studies.selectors import sources_for_design
from studies.services.content import content_change_problems
from studies.services.grading import prediction_correct

from .errors import ErrorCollector, ImportValidationError, RowError
from .reading import json_cell, read_import_file, read_records
from .rows import KeyedRows, Required, Row, header_of, parse_rows, resolve_columns
from .upsert import QuestionIndex, bulk_upsert, dataset_get, import_record_create
from .values import answer_label, check_split, describe_allowed, identifier_problem, sentinel_problem, short

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
    "y_hat_from": ["y_hat_from"],
}


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
    y_hat_from: str | None = None

    def resolve(self, header: set[str], *, filename: str = "", source_name: str | None = None) -> dict[str, str]:
        """``{role: column}`` for this file (``resolve_columns``); with ``source_name`` the file
        needs no source column (one it has is still not kept as an extra field)."""
        given = asdict(self)
        candidates = dict(CANDIDATES)
        if source_name:
            candidates["source"] = [given["source"]] if given["source"] else CANDIDATES["source"]
            given["source"] = None
        required: list[Required] = [(("item_id", "question"), "an item id or a question column"),
                                    (("rationale",), "a rationale column")]
        if not source_name:
            required.append((("source",), "a source column (or give a source name for the whole file)"))
        return resolve_columns(given=given, header=header, filename=filename, candidates=candidates,
                               required=required)


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
    split, dataset, source_name, sources = rationales_target_check(
        dataset_name=dataset_name, split=split, source_name=source_name, filename=f.name, user=user)
    records = read_records(f, file_format=file_format)
    cols = (columns or RationaleColumns()).resolve(header_of(records), filename=f.name, source_name=source_name)
    index = QuestionIndex(dataset, split)
    if not len(index):
        where = f"dataset {dataset.name!r}" + (f" split {split!r}" if split else "")
        raise ImportValidationError(f"{where} has no items: import the questions first", filename=f.name)
    parse = _RationaleRow(f=f, dataset=dataset, index=index, cols=cols, source_name=source_name, sources=sources)
    errors = ErrorCollector()
    kept = KeyedRows()
    for row in parse_rows(records, columns=cols, errors=errors):
        parsed = parse(row)
        if parsed is not None and kept.add(parsed[0], parsed[1], line=row.line) is not None:
            row.error("rationale", f"a different rationale for the same item and source {parsed[0][1]!r} is on "
                                   f"line {kept.lines[parsed[0]]}; keep one")
    errors.raise_if_any(f.name)
    if not kept.rows:
        raise ImportValidationError("the file has no rationales", filename=f.name)
    return _apply(f=f, dataset=dataset, rows=kept.rows, lines=kept.lines, merged=kept.merged, split=split, user=user,
                  names_of=sources)


def rationales_target_check(*, dataset_name: str, split: str | None = None, source_name: str | None = None,
                            filename: str = "", user: Any = None) -> tuple[str | None, Any, str | None, _SourceNames]:
    """What a rationales import writes to, refused before its file is read: the split, the dataset
    (``dataset_get``: one ``user`` may import into) and the file's one source name, if given (no
    bidirectional controls, not taken by a source ``user`` may not build on). Returns ``(split,
    dataset, source name or None, the source names rule)``. A background import
    (``jobs.import_job_create``) asks it before storing the upload, so a large file is refused as a
    small one is."""
    split = check_split(split, filename=filename)
    dataset = dataset_get(name=dataset_name, user=user, filename=filename)
    source_name = (source_name or "").strip() or None
    sources = _SourceNames(user)
    problem = identifier_problem(source_name, what="the source name") if source_name else None
    if problem:
        raise ImportValidationError([RowError(None, "source", problem)], filename=filename)
    if source_name and sources.hidden(source_name):
        raise ImportValidationError([RowError(None, "source", sources.taken(source_name))], filename=filename)
    return split, dataset, source_name, sources


class _SourceNames:
    """The sources an import may name, for ``user`` (None: the operator, every source): a name held
    by a source the user may not build on (``sources_for_design``), whether they may not see it or
    read it only through a view share, is refused, only as taken."""

    def __init__(self, user: Any):
        self.user = user
        self.visible = RationaleSource.objects.all() if user is None else sources_for_design(user=user)
        self._hidden: dict[str, bool] = {}

    def hidden(self, name: str) -> bool:
        if self.user is None:
            return False
        if name not in self._hidden:
            self._hidden[name] = RationaleSource.objects.filter(name=name).exclude(
                pk__in=self.visible.values("pk")).exists()
        return self._hidden[name]

    @staticmethod
    def taken(name: str) -> str:
        return (f"the source name {short(name)!r} is taken by a source you may not see: "
                "choose another source name")


class _RationaleRow:
    """Parses one row of a rationales file: ``((item id, source name), values)``, or None when
    the row has an error (reported on the row)."""

    def __init__(self, *, f, dataset, index: QuestionIndex, cols: dict[str, str], source_name: str | None,
                 sources: _SourceNames):
        self.f, self.dataset, self.index, self.cols, self.source_name = f, dataset, index, cols, source_name
        self.sources = sources
        self.with_probabilities = any(cols[k] for k in PROBABILITIES)
        self.used = {v for v in cols.values() if v}

    def __call__(self, row: Row) -> tuple[tuple[int, str], dict[str, Any]] | None:
        item = self.item(row)
        source = self.source(row)
        text = row.text("rationale")
        problem = sentinel_problem(text, what="the rationale")
        if not text:
            row.error("rationale", "the rationale text is empty")
        elif problem:
            row.error("rationale", problem)
            text = ""
        predicted = self.predicted(row)
        self.check_gold(row, item)
        highlight = _highlights(row, item)
        faithfulness = _probabilities(row, self.dataset, self.f.name) if self.with_probabilities else None
        if not self.with_probabilities and row.has("y_hat_from") and row.given("y_hat_from"):
            row.error("y_hat_from", "y_hat_from is given but the file has no faithfulness probabilities ("
                                    f"{', '.join(PROBABILITIES)}) for it to describe")
        if item is None or not source or not text:
            return None
        extra = row.others(self.used)
        values = {
            "text": text,
            "predicted_answer": predicted,
            "prediction_correct": prediction_correct(predicted, item.gold_answer),
            "generation_info": {"imported_from": self.f.name, "extra": extra} if extra else {"imported_from": self.f.name},
        }
        if highlight is not None:
            values["highlights"] = highlight
        if faithfulness is not None:
            # the spans they were computed on: the row's, else the stored ones (``_apply``)
            values["faithfulness"] = faithfulness if highlight is None else with_spans(faithfulness, highlight)
        return (item.pk, source), values

    def item(self, row: Row) -> Item | None:
        """The row's item, by id or else by question text; names it in the row's record."""
        item_id = row.text("item_id") if row.has("item_id") else ""
        if item_id:
            item = self.index.by_external_id.get(item_id)
            if item is None:
                row.error("item_id", f"no item with id {short(item_id)!r} in {self.dataset.name!r}"
                          + (f" split {self.index.split!r}" if self.index.split else ""))
            row.record = f"item {short(item_id, 40)!r}"  # the row's later errors name it
            return item
        question = row.text("question") if row.has("question") else ""
        if not question:
            row.error("item_id", "neither an item id nor a question text is given",
                      field=self.cols["item_id"] or self.cols["question"])
            return None
        item, reason = self.index.find(question)
        if item is None:
            row.error("question", reason)
        else:
            row.record = f"item {short(item.external_id, 40)!r}"
        return item

    def source(self, row: Row) -> str:
        source = self.source_name or (row.text("source") if row.has("source") else "")
        if not source:
            row.error("source", "the source name is empty")
        elif len(source) > 200:
            row.error("source", "the source name is longer than 200 characters")
            return ""
        elif problem := identifier_problem(source, what="the source name"):
            row.error("source", problem)
            return ""
        elif self.sources.hidden(source):
            row.error("source", self.sources.taken(source), field=self.cols["source"] or "source")
            return ""
        return source

    def predicted(self, row: Row) -> str:
        if not row.has("predicted_answer") or not row.given("predicted_answer"):
            return ""
        raw = row.raw("predicted_answer")
        label = answer_label(self.dataset, raw)
        if label is None:
            row.error("predicted_answer",
                      f"the predicted answer {short(raw)!r} is not one of {describe_allowed(self.dataset)}")
            return ""
        return label

    def check_gold(self, row: Row, item: Item | None) -> None:
        """A gold label in the file must be the matched item's: a question matched to the wrong
        item shows here."""
        if item is None or not row.has("gold_answer") or not row.given("gold_answer"):
            return
        raw = row.raw("gold_answer")
        gold = answer_label(self.dataset, raw)
        if gold is None:
            row.error("gold_answer", f"the gold label {short(raw)!r} is not one of {describe_allowed(self.dataset)}")
        elif gold != item.gold_answer:
            row.error("gold_answer", f"the file's gold label {gold!r} disagrees with item {item.external_id!r} "
                                     f"(gold answer {item.gold_answer!r}): is the question matched to the wrong item?")


def _highlights(row: Row, item: Item | None) -> list[list[int]] | None:
    """The row's highlight as character spans over its question; None when the file has none."""
    for role in ("highlights", "highlight_tokens"):
        if not row.has(role):
            continue
        if not row.given(role):
            return []
        if item is None:
            return None
        try:
            value = json_cell(row.raw(role))
            if role == "highlight_tokens":
                value = spans.token_spans_to_chars(value, item.question)
            return [list(span) for span in spans.check_spans(value, item.question)]
        except (ValueError, TypeError) as exc:
            row.error(role, f"{exc}")
            return None
    return None


def _probabilities(row: Row, dataset, filename: str) -> dict | None:
    """The row's three faithfulness probabilities (all required when the file has any)."""
    out: dict[str, Any] = {}
    for key in PROBABILITIES:
        value = _probability(row, key)
        if value is not None:
            out[key] = value
    if row.has("y_hat") and row.given("y_hat"):
        label = answer_label(dataset, row.raw("y_hat"))
        if label is None:
            row.error("y_hat", f"y_hat {short(row.raw('y_hat'))!r} is not one of {describe_allowed(dataset)}")
        out["y_hat"] = label or ""
    if row.has("y_hat_from") and row.given("y_hat_from"):
        rule = row.raw("y_hat_from")
        rule = rule.strip() if isinstance(rule, str) else rule
        if problem := y_hat_from_problem(rule):
            row.error("y_hat_from", problem)
        else:
            out["y_hat_from"] = rule
    else:  # the import format's rule, assumed: scoring names it (``faithfulness_rules.ASSUMPTION``)
        out["y_hat_from"], out[ASSUMED_KEY] = Y_HAT_FROM_ASSUMED, True
    out["imported_from"] = filename
    return out if all(k in out for k in PROBABILITIES) else None


def _probability(row: Row, key: str) -> float | None:
    field = row.name(key) or key
    raw = row.raw(key)
    if raw in (None, ""):
        row.error(key, f"{key} is missing: a file with faithfulness probabilities needs {', '.join(PROBABILITIES)} "
                       "on every row", field=field)
        return None
    value, problem = probability_read(raw, key=key)  # the one rule (``studies.faithfulness_rules``)
    if problem:
        row.error(key, problem, field=field)
    return value


def _highlights_flag_check(flips, *, rows: dict[tuple[int, str], dict[str, Any]],
                           lines: dict[tuple[int, str], int | None], user, filename: str) -> None:
    """Marking a source as having highlights changes it (scoring computes its faithfulness, a
    faithfulness job may start on it), so it is asked of the content rule as any change to the
    source is (``content_change_problems``, under a lock on the studies using it): a source a study
    the importer may not change uses, or whose flag is fixed, refuses each of its rows that carries
    highlights, by line; the caller's transaction then writes nothing."""
    by_pk = {source.pk: source.name for source in flips}
    not_yours, fixed = content_change_problems(user=user, model=RationaleSource,
                                               changes={pk: {"has_highlights"} for pk in by_pk}, lock=True)
    reasons = {by_pk[pk]: reason for pk, reason in {**fixed, **not_yours}.items()}
    if reasons:
        refused = sorted(((lines.get(key), reasons[key[1]]) for key, values in rows.items()
                          if key[1] in reasons and values.get("highlights")), key=lambda t: t[0] or 0)
        raise ImportValidationError([RowError(line, "highlights", reason) for line, reason in refused],
                                    filename=filename)


def _apply(*, f, dataset, rows: dict[tuple[int, str], dict[str, Any]], lines: dict[tuple[int, str], int | None],
           merged: int, split, user, names_of: _SourceNames) -> ImportRecord:
    with transaction.atomic():
        names = sorted({name for _, name in rows})
        sources = {s.name: s for s in names_of.visible.filter(name__in=names)}
        # A name another researcher's source took since the rows were read: refused as the rows are.
        taken = set(RationaleSource.objects.filter(name__in=set(names) - set(sources)).values_list("name", flat=True))
        if taken:
            refused = sorted(((lines.get(key), key[1]) for key in rows if key[1] in taken), key=lambda t: t[0] or 0)
            raise ImportValidationError([RowError(line, "source", names_of.taken(name)) for line, name in refused],
                                        filename=f.name)
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

        for key, values in keyed.items():  # probabilities of a file without highlights: on the stored spans
            if "faithfulness" in values and SPANS_KEY not in values["faithfulness"]:
                stored = existing.get(key)
                values["faithfulness"] = with_spans(values["faithfulness"], stored.highlights if stored else [])

        def build(key: tuple[int, int], values: dict[str, Any]) -> Rationale:
            return Rationale(item_id=key[0], source_id=key[1], **values)

        result, _ = bulk_upsert(
            model=Rationale, existing=existing, rows=keyed, build=build,
            compare_fields=["text", "predicted_answer", "prediction_correct", "generation_info", "highlights",
                            "faithfulness"],
            lines=keyed_lines, filename=f.name, user=user, key_field="source",
        )
        with_highlights = sorted({name for (_, name), values in rows.items() if values.get("highlights")})
        flips = RationaleSource.objects.filter(pk__in=[sources[name].pk for name in with_highlights],
                                               has_highlights=False)
        _highlights_flag_check(flips, rows=rows, lines=lines, user=user, filename=f.name)
        flips.update(has_highlights=True)
        per_source: dict[str, int] = {}
        for _, name in rows:
            per_source[name] = per_source.get(name, 0) + 1
        summary = {
            "dataset": dataset.name,
            "split": split,
            "rows": len(rows),
            "identical_duplicates_merged": merged,
            "per_source": per_source,
            # Who reads this record beyond its importer reads these sources (``import_records_for_user``).
            "source_ids": sorted(source.pk for source in sources.values()),
            "sources_created": created_sources,
            "sources_with_highlights": with_highlights,
            "rows_with_faithfulness_probabilities": sum(1 for values in rows.values() if "faithfulness" in values),
            "rows_with_y_hat_from_assumed": sum(1 for values in rows.values()
                                                if (values.get("faithfulness") or {}).get(ASSUMED_KEY)),
        }
        return import_record_create(
            kind=KIND, f=f, dataset=dataset, result=result, summary=summary, user=user
        )
