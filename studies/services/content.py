"""Writes of the shared content studies show their workers and score: datasets, items, rationale
sources, rationales and generalization questions. One rule, owned here, whoever writes (the
admin's change and delete pages and actions, the importers, the LM jobs that write rationales,
questions and Gen-U predictions, which act for the researcher who started them):

- *Only the studies' researchers change what their studies use.* A row used by a study the
  acting user may not change (``studies.selectors.studies_for_user`` with CHANGE: owner, shared,
  or superuser, with ``studies.change_study``) is not theirs to edit or delete, whatever the
  study's status; nor may they add a row such a study would use (a rationale of a source it
  lists for an item it drew, a generalization question of an item a generalization study drew,
  a Gen-U prediction such a study would score: ``gen_u_added_refusals``), nor move a row there
  (an edit of its dataset, item or source: ``content_row_save``): it would be shown to
  that study's workers, or read by its scores, when it opens. Nor is a row theirs to edit or
  delete when it hangs from a dataset, item or source they may not build on (``STORED_PARENT_SELECTORS``,
  the rule a new row goes by, an item judged by its dataset), whatever uses it: a view share reads the
  owner's study, it does not let its reader rewrite, re-mark or delete the owner's questions,
  rationales or items, and a row under an item of the user's own dataset stays theirs whoever's
  study draws the item.
- *A study's content is fixed once it opens.* What workers of an open or closed study see (the
  question, its choices, the rationale text, the generalization question and its answer) and
  what its scores read (gold answers, predicted answers, source names, the dataset's name, task
  format and choice labels) is never changed under it: an edit of those fields
  (``FIXED_FIELDS``), and any deletion, of a row an open or closed study uses is refused, by its
  owner too. Correct content by importing a new dataset or source and copying the study. Other
  fields (a dataset's description, an item's metadata, a source's description and settings, its
  backend and model included, a rationale's faithfulness and highlights, a question's validation
  status) stay editable by the studies' researchers. A change of a question's validation status
  alone (``STATUS_FIELDS``) is judged by the studies that read the status (a generalization
  study, a study whose Gen-U reads the question), not by a question-validation study that draws
  its item (``STATUS_BLIND_KINDS``: its units include invalid questions and its verdicts do not
  depend on the status), so another researcher's validation study does not lock the question's
  owner out of judging it. Whether a source has highlights (``HIGHLIGHTS_FIELDS``) is read only by
  the studies that compute faithfulness (``Study.faithfulness_enabled``): turning it off is
  refused, by the owner too, once such a study using the source opened (``_highlights_readers``);
  turning it on, and any change where no opened study with faithfulness on uses the source, is
  a setting like the others.
- *What an LM job used stays.* A dataset or rationale source an LM job ran on (any job, any status,
  anyone's), a rationale source a job's params name as a Gen-U answerer or that answered Gen-U
  predictions, an item of a dataset a job ran on, a generalization question of an item whose dataset
  a question-generation or Gen-U answers job ran on, a rationale of a source a job ran on, and any
  of these with Gen-U predictions made on or from it (an item with job failures or dropped
  questions too) is not deleted: the jobs, their failures and dropped questions, and the
  predictions would go with it or be left without it (``_job_record_reasons``), as a question
  generator that ran a job stays. A row deleted with its parent (a dataset's items, an item's or a
  source's rationales and questions) is judged by what a job used of it, not by the job's source
  alone: a rationale so deleted stays only where a job ran on its source *and* its item's dataset
  (``_job_record_reasons(cascaded=True)``), so a job on one dataset keeps none of another. For the
  same reason such a row is not moved off what the job used (an item to another dataset, a rationale
  to another item or source, a question to another item: ``_job_move_reasons``): moved, it would be
  judged by its new parent and deleted with it.

Which studies use a row (``_rows_studies``) is ``studies.selectors.content_studies`` (the same
reading of "used" as the reference-data visibility selectors there), and two uses those
selectors do not list: a dataset is used by the studies on it (its name, task format and choice
labels are what scoring, results and exports read); a generalization question is also used by
every study whose Gen-U reads its predictions: one that drew its item and uses the rationale of
that item by a source with Gen-U predictions on the question (the condition
``gen_u_added_refusals`` checks for a new prediction): its text, answer and validation status
(a question marked invalid drops out of Gen-U), and its deletion (its predictions go with it),
change that study's Gen-U. So only that study's researchers mark such a question valid or
invalid (``studies.services.questions``; still theirs to do after it opens), and its fixed
fields and deletion are refused once it opens. A user of ``None`` is the operator (management
commands): only the second rule applies to them."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.contrib.auth.models import AnonymousUser
from django.db import models, transaction
from django.utils import timezone

from studies.choices import normalise_choices, own_choices, predicted_answer_problem
from studies.faithfulness_rules import faithfulness_problem_text, spans_problem, with_spans
from studies.lm.backends import Decoding
from studies.lm.templates import template_problem
from studies.models import (
    Dataset,
    DroppedQuestion,
    GeneralizationQuestion,
    GenerationFailure,
    GenerationJob,
    GenUPrediction,
    Item,
    Rationale,
    RationaleSource,
    Study,
)
from studies.selectors import (
    CHANGE,
    content_studies,
    datasets_to_import_into,
    items_of_datasets_to_build_on,
    items_to_build_on,
    sources_for_design,
    studies_for_user,
)
from studies.services.grading import genu_predictions_regrade, rationales_regrade
from studies.services.model_paths import model_path_stored, source_model_path_problem
from studies.signals import generalization_validation_changed
from studies.textrules import identifier_problem, option_problems, sentinel_problem

# What a study's workers see and its scores read, per model: fixed once a study using the row opens.
FIXED_FIELDS: dict[type[models.Model], frozenset[str]] = {
    Dataset: frozenset({"name", "task_format", "choice_labels"}),
    Item: frozenset({"dataset", "external_id", "question", "choices", "gold_answer", "gold_rationale", "split"}),
    # Its backend and model stay editable: a fine-tuning or Quark job replaces a source's checkpoint
    # by name (``lifecycle.model_source_register``, asked of this rule with ``REGISTERED_FIELDS``),
    # and each rationale records the backend, model and checkpoint it was made with
    # (``generation_info``), whose model and checkpoint the results' ``sources.generation`` rows
    # name. Whether it has highlights is fixed only for the studies that read it (``HIGHLIGHTS_FIELDS``).
    RationaleSource: frozenset({"name", "kind"}),
    Rationale: frozenset({"item", "source", "text", "predicted_answer", "prediction_correct"}),
    GeneralizationQuestion: frozenset({"item", "qtype", "text", "answer", "metadata"}),
}
CONTENT_MODELS = tuple(FIXED_FIELDS)

# A change of these fields of a generalization question alone is a change of its judgement (its
# validation status; the provenance its one writer records with it is written under the same check):
# it is judged by the studies that read the status (``_status_readers``), not by every study that
# uses the question.
STATUS_FIELDS: dict[type[models.Model], frozenset[str]] = {
    GeneralizationQuestion: frozenset({"validation_status"}),
}
# The kinds of study that use a generalization question without reading its validation status: a
# question-validation study asks its workers about every question of its items, invalid ones
# included, and its verdicts do not depend on the status. (A generalization study's Figure 4 and
# units, and a study's Gen-U, read it.)
STATUS_BLIND_KINDS: frozenset[str] = frozenset({Study.Kind.QUESTION_VALIDATION})

# Whether a rationale source has highlights decides whether scoring computes its faithfulness at all
# (``scoring.services.score._faithfulness``), which only a study with faithfulness on
# (``Study.faithfulness_enabled``) computes: turned off, it would drop the source from the sufficiency
# and comprehensiveness such a study published. So turning it off is refused once a study with
# faithfulness on that uses the source opened (``_highlights_readers``), for the owner too. Turning it
# on (a source gains highlights, SPEC §6's opt-in: the figures then add the source, and name it
# until then in ``skipped_sources``), or turning it off where no such study uses the source (a study
# with faithfulness off, a study of imported outcomes, closed as it is imported, reads no highlights),
# is judged as a source's settings are.
HIGHLIGHTS_FIELDS: dict[type[models.Model], frozenset[str]] = {
    RationaleSource: frozenset({"has_highlights"}),
}


class ContentChangeRefused(Exception):
    """An edit or deletion of shared content that the rule refuses; the message names the row,
    the study and what to do. ``problems`` maps each refused row's primary key to its reason."""

    def __init__(self, problems: Mapping[int, str]):
        self.problems = dict(problems)
        super().__init__("; ".join(self.problems.values()))


class ContentNotYours(ContentChangeRefused):
    """The row is used by a study the acting user may not change, or hangs from a parent they may
    not build on (``content_change_problems``)."""


def _may_change_ids(user) -> set[int]:
    """The studies ``user`` may change: the one place this rule asks the access selector, so a
    new access level changes one line."""
    return set(studies_for_user(user=user, access=CHANGE).values_list("pk", flat=True))


def _label(model, pk) -> str:
    return f"{model._meta.verbose_name} {pk}"


def content_change_problems(
    *, user, model: type[models.Model], changes: Mapping[int, Iterable[str] | None], lock: bool = False,
    parents: bool = True,
) -> tuple[dict[int, str], dict[int, str]]:
    """Why each row of ``changes`` (primary key -> names of the fields it changes, or None for a
    deletion) may not change: ``(not_yours, fixed)``, each mapping a refused row to its reason.
    Not ``user``'s: a row used by a study they may not change, and (``parents``) a row hanging from
    a dataset, item or rationale source they may not build on (``content_parent_refusals``, the
    rule a new row goes by: a question or rationale of an item, a rationale of a source, an item of
    a dataset read only through a view share, or not at all, is the owner's, whatever uses it).
    ``parents`` is False only for rows just added (``content_added_refusals``), whose parents their
    writers check apart. Rows of models other than the content models, and rows of the user's no
    study uses, are never refused, but for the deletion of a row an LM job used
    (``_job_record_reasons``, in ``fixed``). A deletion is also judged by the content rows it would
    delete with the row (``_with_cascades``: an item's rationales and generalization questions, a
    source's rationales, a dataset's items and theirs): a row another researcher's content depends on
    is not the user's to delete, as the admin's delete page answers. ``lock``: take a row lock on the
    studies using the rows (call inside the transaction that writes), so that none of them opens
    between this check and the write."""
    if model not in FIXED_FIELDS or not changes:
        return {}, {}
    problems = _own_problems(user=user, model=model, changes=changes, lock=lock, parents=parents)
    return _with_cascades(user=user, model=model, changes=changes, lock=lock, parents=parents, problems=problems)


def _own_problems(
    *, user, model: type[models.Model], changes: Mapping[int, Iterable[str] | None], lock: bool, parents: bool,
    cascaded: bool = False,
) -> tuple[dict[int, str], dict[int, str]]:
    """``content_change_problems`` for the rows of ``changes`` themselves, not what their deletion
    would take with it. ``cascaded``: the rows are deleted with a parent (``_with_cascades``), and
    an LM job keeps only those it used (``_job_record_reasons``); every other clause is the same."""
    not_yours: dict[int, str] = {}
    if parents:
        not_yours = {pk: _not_yours_parent_reason(model, pk, reason)
                     for pk, reason in content_parent_refusals(user=user, model=model, pks=changes).items()}
    records = _job_record_reasons(model=model, pks=[pk for pk, fields in changes.items() if fields is None],
                                  lock=lock, cascaded=cascaded)
    records.update(_job_move_reasons(model=model, changes=changes, lock=lock))
    found = _studies_using(model=model, pks=list(changes), lock=lock)
    if found is None:
        return not_yours, {pk: reason for pk, reason in records.items() if pk not in not_yours}
    uses, by_id = found
    allowed = _may_change_ids(user) if user is not None else None
    turned_off = _highlights_turned_off(model, changes)
    fixed: dict[int, str] = {}
    for pk, fields in changes.items():
        if pk in not_yours:
            continue
        using = _status_readers(model, fields, [by_id[s] for s in sorted(uses.get(pk, ())) if s in by_id])
        if using and allowed is not None and any(s.pk not in allowed for s in using):
            not_yours[pk] = _not_yours_reason(model, pk)
            continue
        reason = (_fixed_reason(model, pk, fields, using, highlights_off=pk in turned_off) if using else ""
                  ) or records.get(pk, "")
        if reason:
            fixed[pk] = reason
    return not_yours, fixed


def _status_readers(model: type[models.Model], fields: Iterable[str] | None, using: list[Study]) -> list[Study]:
    """The studies of ``using`` that judge a change of ``fields`` (None: a deletion) of a row of
    ``model``: all of them, but for a change of its status alone (``STATUS_FIELDS``), which only the
    studies that read the status judge (not those of ``STATUS_BLIND_KINDS``): another researcher's
    question-validation study on a dataset locks no researcher out of judging their own questions."""
    status_fields = STATUS_FIELDS.get(model)
    if fields is None or not status_fields:
        return using
    fields = set(fields)
    if not fields or not fields <= status_fields:
        return using
    return [s for s in using if s.kind not in STATUS_BLIND_KINDS]


def _highlights_turned_off(model: type[models.Model], changes: Mapping[int, Iterable[str] | None]) -> set[int]:
    """The rows of ``changes`` whose edit turns a ``HIGHLIGHTS_FIELDS`` flag off: it is among the
    fields the edit changes and the row stores it on (a change of a flag stored on is one to off;
    the rule is asked before the write). One query, and none for another model."""
    flags = HIGHLIGHTS_FIELDS.get(model)
    if not flags:
        return set()
    asked = [pk for pk, fields in changes.items() if fields is not None and flags & set(fields)]
    if not asked:
        return set()
    on = models.Q()
    for flag in sorted(flags):
        on |= models.Q(**{flag: True})
    turned = set()
    for start in range(0, len(asked), CHUNK):
        turned.update(model.objects.filter(on, pk__in=asked[start:start + CHUNK]).values_list("pk", flat=True))
    return turned


def _highlights_readers(studies: list[Study]) -> list[Study]:
    """The studies of ``studies`` that read whether a source has highlights: those that compute
    faithfulness (``Study.faithfulness_enabled``; ``scoring.services.score._faithfulness``)."""
    return [s for s in studies if s.faithfulness_enabled]


def _with_cascades(
    *, user, model: type[models.Model], changes: Mapping[int, Iterable[str] | None], lock: bool, parents: bool,
    problems: tuple[dict[int, str], dict[int, str]],
) -> tuple[dict[int, str], dict[int, str]]:
    """``problems`` (``content_change_problems``' answer for the rows themselves), with the rows
    each deleted row would take with it (``_cascaded``: the items of a dataset, the rationales and
    generalization questions of an item, the rationales of a source) judged as deletions of their
    own (but for the LM-job clause, which keeps a cascaded row only where a job used that row:
    ``_job_record_reasons(cascaded=True)``): a row whose deletion would delete one the user may not
    delete is refused as well. One
    another researcher's content depends on is not the user's to delete (``not_yours``), and the
    answer names that content no more than the admin's delete page does; one whose cascaded rows
    stay for the rule's other reasons (a study opened, an LM job's record) cannot be deleted
    (``fixed``), with the first such row's reason."""
    not_yours, fixed = problems
    deleted = [pk for pk, fields in changes.items() if fields is None and pk not in not_yours and pk not in fixed]
    for child, roots in _cascaded(model, deleted).items():
        child_not_yours, child_fixed = _own_problems(user=user, model=child, changes=dict.fromkeys(roots),
                                                     lock=lock, parents=parents, cascaded=True)
        for child_pk in sorted(child_not_yours):
            pk = roots[child_pk]
            not_yours.setdefault(pk, _not_yours_cascade_reason(model, pk))
        for child_pk in sorted(child_fixed):
            pk = roots[child_pk]
            if pk not in not_yours and pk not in fixed:
                fixed[pk] = f"{_label(model, pk)} cannot be deleted with what depends on it: {child_fixed[child_pk]}"
    return not_yours, fixed


def _cascaded(model: type[models.Model], pks: list[int]) -> dict[type[models.Model], dict[int, int]]:
    """The content rows the deletion of ``pks`` of ``model`` would delete with them (a foreign key
    to a deleted row with ``on_delete=CASCADE``, and so on down), per model: each row's primary key
    -> the row of ``pks`` it goes with. A bounded number of queries for every 5,000 rows."""
    out: dict[type[models.Model], dict[int, int]] = {}
    frontier: list[tuple[type[models.Model], dict[int, int]]] = [(model, {pk: pk for pk in pks})]
    while frontier:
        parent, roots = frontier.pop()
        for relation in parent._meta.related_objects:
            child = relation.related_model
            if child not in FIXED_FIELDS or getattr(relation, "on_delete", None) is not models.CASCADE:
                continue
            field = relation.field.attname
            seen = out.setdefault(child, {})
            found = {pk: roots[parent_id] for pk, parent_id in _in_chunks(
                child._default_manager, field, sorted(roots), ("pk", field)) if pk not in seen}
            if found:
                seen.update(found)
                frontier.append((child, found))
    return {child: rows for child, rows in out.items() if rows}


def _job_record_reasons(*, model: type[models.Model], pks: list[int], lock: bool,
                        cascaded: bool = False) -> dict[int, str]:
    """Of the content rows ``pks`` to delete, those an LM job used (any job, any status, anyone's),
    or whose deletion would take Gen-U predictions, with why each stays: the records of what was
    generated would go with it or be left without it, a queued or running job's included (a
    question generator that ran a job stays, for the same reason).

    - a dataset or rationale source a job ran on (``GenerationJob.dataset`` / ``.source`` cascade,
      the job's failures and dropped questions with it), a dataset whose questions, or a source
      whose rationales, Gen-U predictions were made from;
    - a rationale source a job's params name as a Gen-U answerer (``GenerationJob.SOURCE_PARAMS``:
      the job would stop without it), or that answered Gen-U predictions
      (``GenUPrediction.answerer_source``, set null: they would lose which source answered);
    - an item of a dataset a job ran on, or with job failures or dropped questions
      (``GenerationFailure.item`` / ``DroppedQuestion.item`` cascade) or Gen-U predictions on its
      generalization questions (which cascade with them);
    - a generalization question with Gen-U predictions (``GenUPrediction.generalization_question``
      cascades), or of an item whose dataset a job that writes or answers generalization questions
      (question generation, Gen-U answers) ran on: what that job wrote or answered;
    - a rationale of a source a job ran on (each kind with a source writes or reads its
      rationales), or with Gen-U predictions made from it (F^IR, its source's, on its item's
      questions), which would be left without the rationale they answered with.

    ``cascaded``: the rows go with a deleted parent (``_with_cascades``), and only what a job used of
    them keeps them. The clauses above that name the row's own records (failures, dropped questions,
    Gen-U predictions) and the dataset a job ran on are that already: a job reads the items of its
    dataset (``GenerationJob.item_ids`` are among them) and nothing of another. The rationale clause
    is not: a job on (source, dataset) reads that source's rationales of that dataset's items only, so
    a rationale deleted with its item or dataset stays only where a job ran on its source and its
    item's dataset (or on its source with no dataset); the source's rationales of other datasets,
    which no job read, go with their dataset or item. A direct deletion of a rationale keeps the
    broader clause.
    ``lock``: lock the rows first, and the datasets and sources a job on them would name (call
    inside the transaction that deletes), so that no job or record is created on one between this
    check and the deletion (a record by its foreign key check; a job that names a source only in
    its params holds no key to it, and is refused once the source is gone)."""
    what, tail = _job_records(model=model, pks=pks, lock=lock, cascaded=cascaded)
    return {pk: f"{_label(model, pk)} cannot be deleted: {' and '.join(what[pk])}, {tail}"
            for pk in pks if what.get(pk)}


def _job_records(*, model: type[models.Model], pks: list[int], lock: bool,
                 cascaded: bool) -> tuple[dict[int, list[str]], str]:
    """``_job_record_reasons``' findings: each row's records of what an LM job used (row -> what
    was recorded), and why such a row stays."""
    if model not in FIXED_FIELDS or not pks:
        return {}, ""
    if lock:
        with transaction.atomic():  # the locks last until the caller's transaction ends
            list(model._default_manager.select_for_update().filter(pk__in=pks).values_list("pk", flat=True))
    what: dict[int, list[str]] = {}
    tail = ("and deleting it would delete those records or leave them without it (a queued or running job's too): "
            "an item, generalization question or rationale an LM job used stays, as its dataset and source do")
    if model in (Dataset, RationaleSource):
        field = "dataset_id" if model is Dataset else "source_id"
        ran_on = _jobs_on(field, pks)
        for pk, ids in ran_on.items():
            what.setdefault(pk, []).append(f"{_jobs(ids)} ran on it")
        if model is Dataset:
            counted = _counts(GenUPrediction.objects, "generalization_question__item__dataset_id", pks)
            made = "made on its generalization questions"
        else:
            counted = _counts(GenUPrediction.objects, "rationale_source_id", pks)
            made = "made from its rationales"
        for pk, n in counted.items():
            what.setdefault(pk, []).append(f"{_predictions(n)} {made}")
        tail = ("and deleting it would delete those records (a queued or running job too, with its failures and "
                "dropped questions): a dataset or source an LM job used stays, as a question generator that ran a "
                "job does")
        if model is RationaleSource:
            for pk, ids in _answerer_jobs(pks).items():
                ids = [i for i in ids if i not in ran_on.get(pk, ())]
                if ids:
                    what.setdefault(pk, []).append(f"{_jobs(ids)} used it as a Gen-U answerer")
            for pk, n in _counts(GenUPrediction.objects, "answerer_source_id", pks).items():
                what.setdefault(pk, []).append(f"{_predictions(n)} made by it as the answerer")
            tail = ("and deleting it would delete those records or leave them without it (a queued or running job "
                    "too, with its failures and dropped questions): a dataset or source an LM job used stays, as a "
                    "question generator that ran a job does")
    elif model is Item:
        parent = _parents(Item, "dataset_id", pks, Dataset, lock)
        jobs = _jobs_on("dataset_id", sorted(set(parent.values())))
        for pk in pks:
            if parent.get(pk) in jobs:
                what.setdefault(pk, []).append(f"{_jobs(jobs[parent[pk]])} ran on its dataset")
        failures = _counts(GenerationFailure.objects, "item_id", pks)
        dropped = _counts(DroppedQuestion.objects, "item_id", pks)
        for pk in pks:
            records = [f"{n} failure{'s' if n > 1 else ''}" for n in [failures.get(pk)] if n] + [
                f"{n} dropped question{'s' if n > 1 else ''}" for n in [dropped.get(pk)] if n]
            if records:
                n = failures.get(pk, 0) + dropped.get(pk, 0)
                what.setdefault(pk, []).append(f"{' and '.join(records)} of LM jobs {'are' if n > 1 else 'is'} "
                                               "recorded for it")
        for pk, n in _counts(GenUPrediction.objects, "generalization_question__item_id", pks).items():
            what.setdefault(pk, []).append(f"{_predictions(n)} made on its generalization questions")
    elif model is GeneralizationQuestion:
        items = dict(_in_chunks(GeneralizationQuestion.objects, "pk", pks, ("pk", "item_id")))
        parent = _parents(Item, "dataset_id", sorted(set(items.values())), Dataset, lock)
        kinds = (GenerationJob.Kind.GENERALIZATION_QUESTIONS, GenerationJob.Kind.GENU_ANSWERS)
        jobs = _jobs_on("dataset_id", sorted(set(parent.values())), kind__in=kinds)
        for pk in pks:
            dataset_id = parent.get(items.get(pk))
            if dataset_id in jobs:
                what.setdefault(pk, []).append(
                    f"{_jobs(jobs[dataset_id])}, which {'write' if len(jobs[dataset_id]) > 1 else 'writes'} or "
                    f"{'answer' if len(jobs[dataset_id]) > 1 else 'answers'} generalization questions, ran on its "
                    "item's dataset")
        for pk, n in _counts(GenUPrediction.objects, "generalization_question_id", pks).items():
            what.setdefault(pk, []).append(f"{_predictions(n)} made on it")
    elif model is Rationale:
        columns = _in_chunks(Rationale.objects, "pk", pks, ("pk", "item_id", "source_id", "item__dataset_id"))
        rows = {pk: (item_id, source_id) for pk, item_id, source_id, _ in columns}
        if lock:
            _lock(RationaleSource, sorted({source_id for _, source_id in rows.values()}))
        source_ids = sorted({source_id for _, source_id in rows.values()})
        if cascaded:
            used = _jobs_on_pairs(source_ids)
            for pk, _, source_id, dataset_id in columns:
                ids = sorted({*used.get((source_id, dataset_id), ()), *used.get((source_id, None), ())})
                if ids:
                    what.setdefault(pk, []).append(f"{_jobs(ids)} ran on its source and its item's dataset")
        else:
            jobs = _jobs_on("source_id", source_ids)
            for pk in pks:
                if pk in rows and rows[pk][1] in jobs:
                    what.setdefault(pk, []).append(f"{_jobs(jobs[rows[pk][1]])} ran on its source")
        made: dict[tuple[int, int], int] = {}
        for start in range(0, len(pks), CHUNK):
            chunk = [rows[pk] for pk in pks[start:start + CHUNK] if pk in rows]
            if not chunk:
                continue
            pairs = set(chunk)
            for item_id, source_id, n in GenUPrediction.objects.filter(
                answerer=GenUPrediction.Answerer.IR, generalization_question__item_id__in={p[0] for p in pairs},
                rationale_source_id__in={p[1] for p in pairs},
            ).order_by().values("generalization_question__item_id", "rationale_source_id").annotate(
                    n=models.Count("pk")).values_list("generalization_question__item_id", "rationale_source_id", "n"):
                if (item_id, source_id) in pairs:
                    made[(item_id, source_id)] = n
        for pk in pks:
            if made.get(rows.get(pk)):
                what.setdefault(pk, []).append(f"{_predictions(made[rows[pk]])} made from it (F^IR)")
    return what, tail


def _job_move_reasons(*, model: type[models.Model], changes: Mapping[int, Iterable[str] | None],
                      lock: bool) -> dict[int, str]:
    """Of the edits in ``changes`` that move a row to another parent (an item's dataset, a
    rationale's item or source, a generalization question's item: ``_parent_fields``), those of a
    row an LM job used where it hangs now, with why each stays there: what keeps the row from being
    deleted with its parent (``_job_record_reasons(cascaded=True)``: for an item, a job on its
    dataset, whose ``item_ids`` are among that dataset's items; for a rationale, a job on its source
    and its item's dataset) is judged by where the row hangs, so a row moved off what the job read
    would be deleted with its new parent, the job's record of it with it. Refused as an edit, as a
    study's fixed fields are: import the row anew under the other parent instead."""
    names = {name for field, _ in _parent_fields(model) for name in (field.name, field.attname)}
    moved = sorted(pk for pk, fields in changes.items() if fields is not None and names & set(fields))
    what, _ = _job_records(model=model, pks=moved, lock=lock, cascaded=True)
    out: dict[int, str] = {}
    for pk in moved:
        if not what.get(pk):
            continue
        why = " and ".join(what[pk])
        touched = sorted({field.name for field, _ in _parent_fields(model)
                          if {field.name, field.attname} & set(changes[pk])})
        out[pk] = (f"{', '.join(touched)} of {_label(model, pk)} cannot change: {why}, and what an LM job used "
                   "stays where the job found it (moved, it would be deleted with its new parent, the job's "
                   "record with it). Import it under the other parent as a new row instead")
    return out


def _in_chunks(manager, field: str, pks: list[int], columns: tuple[str, ...]) -> list[tuple]:
    """``columns`` of the rows whose ``field`` is one of ``pks``, in bounded IN lists."""
    out: list[tuple] = []
    for start in range(0, len(pks), CHUNK):
        out.extend(manager.filter(**{f"{field}__in": pks[start:start + CHUNK]}).order_by().values_list(*columns))
    return out


def _lock(model: type[models.Model], pks: list[int]) -> None:
    """Lock ``pks`` of ``model`` until the caller's transaction ends: a new job or record naming
    one waits (its foreign key check)."""
    with transaction.atomic():
        for start in range(0, len(pks), CHUNK):
            list(model._default_manager.select_for_update().filter(pk__in=pks[start:start + CHUNK]).values_list(
                "pk", flat=True))


def _parents(model: type[models.Model], field: str, pks: list[int], parent: type[models.Model],
             lock: bool) -> dict[int, int]:
    """Each row's parent id (``field``), the parents locked when ``lock``."""
    out = dict(_in_chunks(model._default_manager, "pk", pks, ("pk", field)))
    if lock:
        _lock(parent, sorted(set(out.values())))
    return out


def _jobs_on(field: str, pks: list[int], **where) -> dict[int, list[int]]:
    """The ids of the LM jobs (any status, anyone's) whose ``field`` is each of ``pks``, oldest first."""
    jobs: dict[int, list[int]] = {}
    for start in range(0, len(pks), CHUNK):
        for row_id, job_id in GenerationJob.objects.filter(
                **{f"{field}__in": pks[start:start + CHUNK]}, **where).order_by("pk").values_list(field, "pk"):
            jobs.setdefault(row_id, []).append(job_id)
    return jobs


def _jobs_on_pairs(source_ids: list[int]) -> dict[tuple[int, int | None], list[int]]:
    """The ids of the LM jobs (any status, anyone's) on each of ``source_ids``, by (source, dataset)
    (the dataset None for a job that names none), oldest first: what a job read of a source."""
    jobs: dict[tuple[int, int | None], list[int]] = {}
    for start in range(0, len(source_ids), CHUNK):
        for source_id, dataset_id, job_id in GenerationJob.objects.filter(
                source_id__in=source_ids[start:start + CHUNK]).order_by("pk").values_list(
                "source_id", "dataset_id", "pk"):
            jobs.setdefault((source_id, dataset_id), []).append(job_id)
    return jobs


def _answerer_jobs(pks: list[int]) -> dict[int, list[int]]:
    """The ids of the LM jobs (any status, anyone's) whose params name each source of ``pks`` as a
    Gen-U answerer (a key of ``GenerationJob.SOURCE_PARAMS``: Gen-U answers jobs, Quark jobs
    with the Gen-U reward), oldest first. The job's create path stores the id as a number; its text
    is matched too, as the job's own lookups (``inputs._id_or_none``) read either."""
    found: dict[int, set[int]] = {}
    for key in GenerationJob.SOURCE_PARAMS:
        for start in range(0, len(pks), CHUNK):
            chunk = pks[start:start + CHUNK]
            for value, job_id in GenerationJob.objects.filter(
                    **{f"params__{key}__in": [*chunk, *map(str, chunk)]}).order_by().values_list(
                    f"params__{key}", "pk"):
                found.setdefault(int(value), set()).add(job_id)
    return {pk: sorted(ids) for pk, ids in found.items()}


def _counts(manager, field: str, pks: list[int]) -> dict[int, int]:
    """How many rows of ``manager`` have ``field`` each of ``pks`` (those with none left out)."""
    out: dict[int, int] = {}
    for start in range(0, len(pks), CHUNK):
        for row_id, n in manager.filter(**{f"{field}__in": pks[start:start + CHUNK]}).order_by().values(
                field).annotate(n=models.Count("pk")).values_list(field, "n"):
            out[row_id] = n
    return out


def _jobs(ids: list[int]) -> str:
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    return f"LM job{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids[:5]))}{more}"


def _predictions(n: int) -> str:
    return f"{n} Gen-U prediction{'s' if n > 1 else ''} {'were' if n > 1 else 'was'}"


def _studies_using(
    *, model: type[models.Model], pks: list[int], lock: bool
) -> tuple[dict[int, set[int]], dict[int, Study]] | None:
    """Which studies use each row (``_rows_studies``) and those studies by primary key, locked
    when ``lock``; None when no study uses any of the rows."""
    uses = _rows_studies(model, pks)
    study_ids = set().union(*uses.values()) if uses else set()
    if not study_ids:
        return None
    studies = Study.objects.filter(pk__in=study_ids).order_by("pk").only(
        "pk", "name", "status", "kind", "faithfulness_enabled")
    with transaction.atomic():  # the locks last until the caller's transaction ends
        by_id = {s.pk: s for s in (studies.select_for_update() if lock else studies)}
    return uses, by_id


CHUNK = 5000  # bounded IN lists (SQLite's and PostgreSQL's parameter limits), as content_studies


def _rows_studies(model: type[models.Model], pks: list[int]) -> dict[int, set[int]]:
    """The ids of the studies that use each row (rows no study uses are left out): see the module's
    docstring. A bounded number of queries for every 5,000 rows, whatever the number of studies."""
    if model is Dataset:
        out: dict[int, set[int]] = {}
        for start in range(0, len(pks), CHUNK):
            for dataset_id, study_id in Study.objects.filter(dataset_id__in=pks[start:start + CHUNK]).order_by(
            ).values_list("dataset_id", "pk"):
                out.setdefault(dataset_id, set()).add(study_id)
        return out
    uses = content_studies(model=model, pks=pks)
    if model is GeneralizationQuestion:
        for pk, study_ids in _gen_u_studies(pks).items():
            uses.setdefault(pk, set()).update(study_ids)
    return uses


def _gen_u_rationales(pairs: set[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """The rationale of each (item, source) pair that has one: a study's Gen-U reads the
    predictions of a pair whose rationale it uses (``_gen_u_studies``, ``gen_u_added_refusals``)."""
    if not pairs:
        return {}
    rows = Rationale.objects.filter(
        item_id__in={p[0] for p in pairs}, source_id__in={p[1] for p in pairs}
    ).order_by().values_list("pk", "item_id", "source_id")
    return {(item_id, source_id): pk for pk, item_id, source_id in rows if (item_id, source_id) in pairs}


def _gen_u_studies(pks: list[int]) -> dict[int, set[int]]:
    """For generalization questions, the ids of the studies whose Gen-U reads their predictions:
    those that use the rationale of the question's item by a source with a prediction on the
    question (``content_studies`` of that rationale). Questions without predictions are left out."""
    out: dict[int, set[int]] = {}
    for start in range(0, len(pks), CHUNK):
        pairs_of: dict[int, set[tuple[int, int]]] = {}
        for pk, item_id, source_id in GenUPrediction.objects.filter(
            generalization_question_id__in=pks[start:start + CHUNK]
        ).order_by().values_list("generalization_question_id", "generalization_question__item_id",
                                 "rationale_source_id").distinct():
            pairs_of.setdefault(pk, set()).add((item_id, source_id))
        if not pairs_of:
            continue
        rationales = _gen_u_rationales(set().union(*pairs_of.values()))
        uses = content_studies(model=Rationale, pks=sorted(set(rationales.values())))
        for pk, pairs in pairs_of.items():
            studies = set().union(*(uses.get(rationales[p], set()) for p in pairs if p in rationales))
            if studies:
                out[pk] = studies
    return out


def _not_yours_reason(model: type[models.Model], pk: int) -> str:
    # Not named: another researcher's study name is theirs (issue 20 item 11).
    return (
        f"{_label(model, pk)} is used by a study you may not change: only that study's researchers "
        "may edit or delete it, or add to what it shows"
    )


def _not_yours_cascade_reason(model: type[models.Model], pk: int) -> str:
    # What depends on it is not named: those rows, and whose they are, are another researcher's.
    return (
        f"{_label(model, pk)} is not yours to delete: another researcher's content depends on it, which you may "
        "not edit or delete and which would be deleted with it"
    )


def _not_yours_parent_reason(model: type[models.Model], pk: int, parent: str) -> str:
    # The parent is named as ``content_parent_problems`` answers a missing one: nothing of it is told.
    return f"{_label(model, pk)} is not yours to edit or delete ({parent})"


def _fixed_reason(model: type[models.Model], pk: int, fields: Iterable[str] | None, using: list[Study], *,
                  highlights_off: bool = False) -> str:
    """Why the change (``fields``, None for a deletion) of a row that ``using`` use is refused
    because one of them was opened; empty when it is not. ``highlights_off``: the change turns the
    row's ``HIGHLIGHTS_FIELDS`` flag off (``_highlights_turned_off``), refused only when an opened
    study of ``using`` reads it (``_highlights_readers``)."""
    started = [s for s in using if s.status != Study.Status.DRAFT]
    if not started:
        return ""
    if fields is None:
        return (
            f"{_label(model, pk)} cannot be deleted: {_names(started)} "
            f"{'uses' if len(started) == 1 else 'use'} it and {_opened(started)}"
        )
    reasons = []
    touched = sorted(set(fields) & FIXED_FIELDS[model])
    if touched:
        reasons.append(
            f"{', '.join(touched)} of {_label(model, pk)} cannot change: {_names(started)} "
            f"{'uses' if len(started) == 1 else 'use'} it and {_opened(started)}, so what its "
            "workers saw and its scores stay as they were. Import the corrected content as a new dataset "
            "or source and copy the study"
        )
    readers = _highlights_readers(started) if highlights_off else []
    if readers:
        flags = ", ".join(sorted(set(fields) & HIGHLIGHTS_FIELDS[model]))
        reasons.append(
            f"{flags} of {_label(model, pk)} cannot be turned off: {_names(readers)} "
            f"{'uses' if len(readers) == 1 else 'use'} it with faithfulness on and {_opened(readers)}, so "
            f"{'its' if len(readers) == 1 else 'their'} sufficiency and comprehensiveness keep the source. "
            "Import its rationales without highlights as a new source and copy the study"
        )
    return "; ".join(reasons)


def _names(studies: list[Study]) -> str:
    names = ", ".join(repr(s.name) for s in studies[:3])
    more = f" and {len(studies) - 3} more" if len(studies) > 3 else ""
    return f"{'study' if len(studies) == 1 else 'studies'} {names}{more}"


def _opened(studies: list[Study]) -> str:
    return "was opened" if len(studies) == 1 else "were opened"


def job_acts_for(*, created_by, by_operator: bool = False):
    """Who a background job (an LM job, an import) writes for under this rule: the researcher who
    started it; the operator (``None``) for a job a command started; for a job whose researcher's
    account was deleted meanwhile (``created_by`` set to NULL), nobody: an anonymous user, who may
    add nothing a study shows, never the operator, whom the "not yours" clause does not bind."""
    if created_by is not None:
        return created_by
    return None if by_operator else AnonymousUser()


def content_added_refusals(*, user, model: type[models.Model], pks: Iterable[int]) -> dict[int, str]:
    """Of rows just added (``pks``, written in the caller's transaction), those ``user`` may not add
    because a study they may not change would show them (the rule's first clause; its studies are
    locked until the transaction ends). The caller deletes them, or rolls back, before it commits:
    what an importer, an LM job or any later writer adds gets the same answer.

    The rows' parents are checked apart (:func:`content_parent_refusals`), by the writers whose
    parents existed before they wrote: an LM job that writes under items
    (``generation.common.job_added_refusals``), whose researcher's share may have been lowered
    since it was created. The importers and the bundle import check each parent before they write
    (``datasets_to_import_into``, ``sources_for_design``, ``datasets_for_design``) and may create a
    new dataset or source in the same transaction, which those selectors count only once a study
    uses it, so they ask only this."""
    not_yours, _ = content_change_problems(user=user, model=model, changes={pk: () for pk in pks}, lock=True,
                                           parents=False)
    return not_yours


def content_parent_refusals(*, user, model: type[models.Model], pks: Iterable[int]) -> dict[int, str]:
    """Of stored rows ``pks`` of ``model``, those hanging from a parent ``user`` may not build on
    (``STORED_PARENT_SELECTORS``: a rationale of an item or source, a question of an item, that is not
    theirs to add to; an item judged by its dataset), each with ``content_parent_problems``' answer:
    that rule, for rows already written, in a bounded number of queries for every 5,000 rows. The
    operator (None) may name any."""
    pks = list(pks)
    fields = list(_parent_fields(model, STORED_PARENT_SELECTORS))
    if user is None or not pks or not fields:
        return {}
    rows = _in_chunks(model._default_manager, "pk", pks, ("pk", *(field.attname for field, _ in fields)))
    problems: dict[int, list[str]] = {}
    for index, (field, selector) in enumerate(fields, start=1):
        parent_ids = sorted({row[index] for row in rows if row[index] is not None})
        allowed: set[int] = set()
        for start in range(0, len(parent_ids), CHUNK):
            allowed.update(selector(user=user).filter(pk__in=parent_ids[start:start + CHUNK]).values_list(
                "pk", flat=True))
        for row in rows:
            if row[index] is not None and row[index] not in allowed:
                problems.setdefault(row[0], []).append(_parent_refused(field))
    return {pk: "; ".join(reasons) for pk, reasons in problems.items()}


def gen_u_parent_refusals(*, user, pairs: Iterable[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """Of the (item, source) pairs a writer would add Gen-U predictions for, those whose item or
    source ``user`` may not build on (``content_parent_refusals`` of the pair's rationale, its item
    judged by its dataset), with the reason. The predictions hang from the item's questions and the
    source: one prediction is kept per question, source and answerer role, and the owner's studies
    score those, so a reader of a view share may not add them, as they may not add a rationale or a
    question there. A pair with no rationale has no prediction to add."""
    rationales = _gen_u_rationales(set(pairs))
    refused = content_parent_refusals(user=user, model=Rationale, pks=rationales.values())
    return {pair: refused[pk] for pair, pk in rationales.items() if pk in refused}


def gen_u_added_refusals(*, user, pairs: Iterable[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """Of the (item, source) pairs a writer would add Gen-U predictions for (an LM job, a bundle
    import), those ``user`` may not add, with the reason: a study they may not change uses that
    source's rationale of the item, and its Gen-U score reads those predictions. Checked as a
    change of the rationale (its studies locked until the caller's transaction ends); a pair with
    no rationale is read by no study."""
    rationales = _gen_u_rationales(set(pairs))
    if not rationales:
        return {}
    not_yours, _ = content_change_problems(user=user, model=Rationale, changes=dict.fromkeys(rationales.values(), ()),
                                           lock=True, parents=False)
    return {pair: not_yours[pk] for pair, pk in rationales.items() if pk in not_yours}


def content_change_check(
    *, user, model: type[models.Model], changes: Mapping[int, Iterable[str] | None], lock: bool = False
) -> None:
    """Raise ``ContentNotYours`` or ``ContentChangeRefused`` when any row of ``changes`` may not
    change (see ``content_change_problems``)."""
    not_yours, fixed = content_change_problems(user=user, model=model, changes=changes, lock=lock)
    if not_yours:
        raise ContentNotYours(not_yours)
    if fixed:
        raise ContentChangeRefused(fixed)


# The rows a content row hangs from, and who may hang a row from them: a new row, or an edit that
# moves one, names only a parent the user may build on (``content_parent_problems``), the rule an
# import writes by: a dataset they may import into, a source they may use in a study design, an item
# of such a dataset. Reading a parent is not enough: a view share reads the owner's study, and a row
# hung from its dataset or source would be drawn or shown by the owner's next study.
PARENT_SELECTORS = {
    Dataset: datasets_to_import_into,
    Item: items_to_build_on,
    RationaleSource: sources_for_design,
}
# Whether a row already written still hangs from a parent the user may build on (its edit, deletion,
# a job's rows as they are stored: ``content_parent_refusals``): the same rule, but an item is judged by
# its dataset alone (``items_of_datasets_to_build_on``), as an import finds its items: the row is not
# being hung from a parent picked by id, so reading the item is not asked. A row under an item of the
# user's own dataset stays theirs whoever's study draws the item (an import of it creates and updates
# alike); one under an item of a dataset read only through a view share never is.
STORED_PARENT_SELECTORS = {**PARENT_SELECTORS, Item: items_of_datasets_to_build_on}


def _parent_fields(model: type[models.Model], selectors=PARENT_SELECTORS):
    """The fields of ``model`` that name a parent (a relation to a model of ``selectors``,
    ``PARENT_SELECTORS`` by default), each with the selector of the parents a user may build on."""
    for field in model._meta.concrete_fields:
        selector = selectors.get(field.related_model) if field.is_relation else None
        if selector is not None:
            yield field, selector


def _parent_refused(field) -> str:
    """Why a row may not hang from the parent ``field`` names: answered as a missing parent would be."""
    return f"{field.name}: there is no such {field.related_model._meta.verbose_name} you may use"


def content_parent_problems(*, user, obj: models.Model, changed: Iterable[str] | None = None) -> dict[str, str]:
    """Why ``obj`` may not hang from the parents it names (its dataset, item or rationale source):
    field name -> reason, for each parent ``user`` may not build on (``PARENT_SELECTORS``; one they
    read only through a view share included). A new row is checked on every parent, an edit only on
    the parents ``changed`` names. The operator (None) may name any. A refused parent is answered as
    a missing one would be, so the answer confirms nothing of another researcher's content."""
    if user is None:
        return {}
    changed = None if obj.pk is None or changed is None else set(changed)
    problems: dict[str, str] = {}
    for field, selector in _parent_fields(type(obj)):
        if changed is not None and not {field.name, field.attname} & changed:
            continue
        parent_id = getattr(obj, field.attname)
        if parent_id is not None and not selector(user=user).filter(pk=parent_id).exists():
            problems[field.name] = _parent_refused(field)
    return problems


def content_row_save(*, user, obj: models.Model, changed: Iterable[str]) -> models.Model:
    """Save a content row, new or edited (``changed``: the names of the fields an edit changes),
    checking the rule under a lock on the studies that use it. A new row, or an edit that moves a
    row to another parent, names only a dataset, item or source the user may build on
    (``content_parent_problems``; refused, ``ContentChangeRefused``, before anything is written).
    An edit is checked against the studies that use the row before it is written. A new row, and an
    edit that moves a row to another parent, is checked again once written, inside the same
    transaction, against the studies that use it where it now hangs: refused (``ContentNotYours``),
    it is rolled back, so a row is moved into another researcher's study no more than it is added
    there. Its values follow the rules every import follows (``content_row_value_problems``: no
    bidirectional control in a name or an item id, no T5 sentinel in a text, an item's options as an
    import checks them, a rationale's faithfulness as ``studies.faithfulness_rules`` has it), refused
    before anything is written, each reason after its field's name. Faithfulness probabilities typed
    (new or changed) are stored with the row's highlights recorded as the spans they were computed on;
    an edit of the highlights alone leaves them on their old spans, which scoring then leaves out.
    An edit of what a generalization question's validation judged (``VALIDATION_JUDGED_FIELDS``: its
    item, type, text, answer or own choices; its item's question or choices, an edit of the item)
    sends a question marked valid or invalid back to
    unvalidated, recorded (``generalization_questions_validation_reset``); an edit of its origin or
    of the rest of its metadata keeps its status."""
    changed = set(changed)
    with transaction.atomic():
        new = obj.pk is None
        moved = not new and any({f.name, f.attname} & changed for f, _ in _parent_fields(type(obj)))
        parents = content_parent_problems(user=user, obj=obj, changed=None if new else changed)
        if parents:
            raise ContentChangeRefused({obj.pk or 0: "; ".join(parents.values())})
        if not new:
            content_change_check(user=user, model=type(obj), changes={obj.pk: changed}, lock=True)
        if isinstance(obj, RationaleSource) and (new or "model_name_or_path" in changed):
            problem = source_model_path_problem(user=user, path=obj.model_name_or_path)
            if problem:
                raise ContentChangeRefused({obj.pk or 0: problem})
            # A folder under RL_MODEL_DIR typed as its absolute path is kept relative to it.
            obj.model_name_or_path = model_path_stored(obj.model_name_or_path)
        if isinstance(obj, RationaleSource):
            problem = _source_prompt_problem(obj, new=new, changed=changed)
            if problem:
                raise ContentChangeRefused({obj.pk or 0: problem})
        if isinstance(obj, Rationale):
            problem = _predicted_answer_problem(obj, new=new, changed=changed)
            if problem:
                raise ContentChangeRefused({obj.pk or 0: problem})
        judged: list[str] = []
        if isinstance(obj, GeneralizationQuestion):
            judged = [] if new else _judged_edit(obj, changed=changed)
            _validation_record_kept(obj, new=new)
        values = content_row_value_problems(obj=obj, changed=None if new else changed)
        if values:
            raise ContentChangeRefused({obj.pk or 0: "; ".join(f"{field}: {reason}" for field, reason in values.items())})
        if isinstance(obj, Item) and not new:  # compared once its choices are stored as an import stores them
            judged = _original_edit(obj, changed=changed)
        if isinstance(obj, Rationale) and (new or "faithfulness" in changed) and obj.faithfulness:
            # Typed probabilities were computed on the highlights typed with them: recorded so, as
            # the job and the importer record theirs (``faithfulness_rules.SPANS_KEY``).
            obj.faithfulness = with_spans(obj.faithfulness, obj.highlights)
        obj.full_clean()
        obj.save()
        _grades_kept(obj, new=new, changed=changed)
        if judged and isinstance(obj, Item):  # its questions' judges read another original question
            item_questions_validation_reset(changes={obj.pk: judged}, user=user)
        elif judged:  # a judgement of what the edit changed judged another question: unvalidated again
            for question in generalization_questions_validation_reset(changes={obj.pk: judged}, user=user):
                obj.validation_status, obj.metadata = question.validation_status, question.metadata
        if new or moved:
            content_change_check(user=user, model=type(obj), changes={obj.pk: ()}, lock=True)
    return obj


def content_row_value_problems(*, obj: models.Model, changed: Iterable[str] | None = None) -> dict[str, str]:
    """Why ``obj``'s values break the rules an import of the row follows, field name -> reason; empty
    when none. The rules every import follows (``studies.textrules``, their one owner), asked here
    for a row saved one by one (``content_row_save``) so that a form does not store what an import
    refuses: a dataset's, a source's name and an item's id may hold no bidirectional control
    (``studies.textrules.identifier_problem``); an item's question and gold rationale, a rationale's
    text and a generalization question's, no T5 sentinel token (``textrules.sentinel_problem``); a
    rationale's faithfulness, probabilities in [0, 1] and the rest of ``faithfulness_rules``'s rule,
    recordable with its highlights (``faithfulness_rules.spans_problem``); a multiple-choice item's options follow
    ``textrules.option_problems``, as every import's (one letter a to z per label, stored lower
    case in ``obj.choices``; a text without a sentinel; no label or text twice). A new row
    (``changed`` None) is checked on every field, an edit on the fields ``changed`` names (an item
    moved to another dataset: its options too), so a row stored before these checks is refused by
    its next edit of such a field, not of another."""
    def asked(*fields: str) -> bool:
        return changed is None or bool(set(fields) & set(changed))

    problems: dict[str, str] = {}

    def add(field: str, problem: str | None) -> None:
        if problem:
            problems[field] = problem

    if isinstance(obj, Dataset | RationaleSource) and asked("name"):
        add("name", identifier_problem(obj.name or "",
                                       what="the dataset name" if isinstance(obj, Dataset) else "the source name"))
    elif isinstance(obj, Item):
        if asked("external_id"):
            add("external_id", identifier_problem(obj.external_id or ""))
        if asked("question"):
            add("question", sentinel_problem(obj.question, what="the question"))
        if asked("gold_rationale"):
            add("gold_rationale", sentinel_problem(obj.gold_rationale, what="the rationale"))
        if asked("choices", "dataset", "dataset_id") and obj.choices and Dataset.objects.filter(
                pk=obj.dataset_id, task_format=Dataset.TaskFormat.MULTIPLE_CHOICE).exists():
            try:
                choices = normalise_choices(obj.choices)
            except ValueError as exc:
                add("choices", str(exc))
            else:
                found = option_problems(choices)
                if found:
                    add("choices", "; ".join(f"{where}: {reason}" for where, reason in found))
                else:
                    obj.choices = choices
    elif isinstance(obj, Rationale):
        if asked("text"):
            add("text", sentinel_problem(obj.text, what="the rationale"))
        if asked("faithfulness"):
            add("faithfulness", faithfulness_problem_text(obj.faithfulness))
            if isinstance(obj.faithfulness, dict) and obj.faithfulness and "faithfulness" not in problems:
                add("highlights", spans_problem(obj.highlights))
    elif isinstance(obj, GeneralizationQuestion) and asked("text"):
        add("text", sentinel_problem(obj.text, what="the question"))
    return problems


def _grades_kept(obj: models.Model, *, new: bool, changed: set[str]) -> None:
    """An edit that changes what a stored prediction is graded against (an item's gold answer, a
    question's answer) or the prediction itself (a rationale's predicted answer or item) grades it
    again (``grading``), in the edit's transaction, as a re-import does."""
    if isinstance(obj, Item) and "gold_answer" in changed:
        rationales_regrade(item_ids=[obj.pk])
    elif isinstance(obj, GeneralizationQuestion) and "answer" in changed:
        genu_predictions_regrade(question_ids=[obj.pk])
    elif isinstance(obj, Rationale) and (new or changed & {"predicted_answer", "item", "item_id"}):
        rationales_regrade(item_ids=[obj.item_id])


def _source_prompt_problem(source: RationaleSource, *, new: bool, changed: set[str]) -> str:
    """Why a language model source, new or with its template, decoding, kind or backend changed,
    would fail every job on it: its own template (``templates.template_problem``) or its decoding
    settings (``Decoding.from_json``, what each job reads them with); "" when neither. A source
    stored before these checks is refused by its next job, not by an edit of its other fields."""
    if not (new or changed & {"template", "decoding", "kind", "backend"}):
        return ""
    problem = next(iter(source_prompt_problems(source).values()), "")
    return f"rationale source {source.name!r}: {problem}" if problem else ""


def source_prompt_problems(source: RationaleSource) -> dict[str, str]:
    """The rule a language model source is saved by (here and by the study bundle import):
    ``{"template": ..., "decoding": ...}``, each field's problem, template first; empty when none
    (or not a language model source). Its own template (``templates.template_problem``) and its
    decoding settings (``Decoding.from_json``, what each job reads them with)."""
    if source.kind != RationaleSource.Kind.LM:
        return {}
    problems = {}
    problem = template_problem(source.template or "")
    if problem:
        problems["template"] = problem
    try:
        Decoding.from_json(source.decoding)
    except ValueError as exc:
        problems["decoding"] = str(exc)  # it names the field: decoding.<name>
    return problems


def _predicted_answer_problem(rationale: Rationale, *, new: bool, changed: set[str]) -> str:
    """Why a rationale, new or with its predicted answer or item changed, cannot be stored: its
    predicted answer is not one of its item's dataset's choice labels (``choices.predicted_answer_problem``,
    as the rationale import checks), which ``prediction_correct`` would grade wrong, silently; "" when it
    can. A row stored before this check is refused by its next such edit, not by an edit of its text."""
    if rationale.item_id is None or not (new or changed & {"predicted_answer", "item", "item_id"}):
        return ""  # no item: the model's own check (``full_clean``) names it
    item = Item.objects.select_related("dataset").filter(pk=rationale.item_id).first()
    if item is None:
        return ""  # as above
    problem = predicted_answer_problem(item.dataset, rationale.predicted_answer)
    row = f"rationale {rationale.pk}" if rationale.pk else "a new rationale"
    return f"{row} of item {item.external_id!r}: predicted_answer {problem}" if problem else ""


def _validation_record_kept(question: GeneralizationQuestion, *, new: bool) -> None:
    """A question's ``metadata["validation"]`` (who judged it, when, the judgements before) is
    written only by whoever sets its validation status: ``questions.generalization_questions_set_validation``,
    the imports and, once an edit of a judged field is written, ``generalization_questions_validation_reset``. An edit of the rest of ``metadata`` (its choices) keeps the stored record
    whatever the form sent, and a new row starts with none, so the record cannot be forged."""
    stored = None if new else GeneralizationQuestion.objects.filter(pk=question.pk).values_list(
        "metadata", flat=True).first()
    record = stored.get("validation") if isinstance(stored, dict) else None
    if not isinstance(question.metadata, dict):
        return  # refused by the model's own check (``GeneralizationQuestion.clean``)
    metadata = {key: value for key, value in question.metadata.items() if key != "validation"}
    if record is not None:
        metadata["validation"] = record
    question.metadata = metadata


def _judged_edit(question: GeneralizationQuestion, *, changed: set[str]) -> list[str]:
    """The fields of ``changed`` (a stored question's edit) that a validation judged and the edit
    really changes, compared with the stored row (``validation_judged_changes``: its own choices, not
    the rest of its metadata); read before ``_validation_record_kept`` puts the stored record back."""
    fields = ("item_id", "qtype", "text", "answer", "metadata")
    asked = {"item_id" if name == "item" else name for name in changed}
    if not asked & set(fields):
        return []
    stored = GeneralizationQuestion.objects.filter(pk=question.pk).values(*fields).first()
    if stored is None:
        return []
    differ = {name for name in fields if stored[name] != getattr(question, name)}
    return validation_judged_changes(differ & asked, metadata_before=stored["metadata"],
                                     metadata_after=question.metadata)


def _original_edit(item: Item, *, changed: set[str]) -> list[str]:
    """What of a stored item's edit its generalization questions' validation judged, as
    ``VALIDATION_JUDGED_FIELDS`` names it: its question (``original question``: a judge reads the
    generalization question beside it) and its choices (``original choices``: offered to a question
    without its own), where the edit really changes them, compared with the stored row."""
    if not {"question", "choices"} & changed:
        return []
    stored = Item.objects.filter(pk=item.pk).values("question", "choices").first()
    if stored is None:
        return []
    return item_original_changes(stored, {name: getattr(item, name) for name in ("question", "choices")
                                          if name in changed})


def _choices_compared(choices):
    """An item's choices as ``normalise_choices`` stores them, to compare an edit with the stored row
    (``(b)`` and ``B`` are the label ``b``); as given where they are not choices at all."""
    try:
        return normalise_choices(choices)
    except (ValueError, TypeError):
        return choices


def item_original_changes(stored: Mapping, written: Mapping) -> list[str]:
    """What a write of an item (``written``: its ``question`` and ``choices`` where the write gives
    them) changes of what its generalization questions' judges read beside them (``stored``: the
    item's stored values), as ``VALIDATION_JUDGED_FIELDS`` names it: ``original question``,
    ``original choices`` (compared as stored, ``_choices_compared``). The rule of the admin's edit
    (``content_row_save``) and of a re-import of items (``importers.items``)."""
    changes = []
    if "question" in written and written["question"] != stored.get("question"):
        changes.append("original question")
    if "choices" in written and _choices_compared(written["choices"]) != _choices_compared(stored.get("choices")):
        changes.append("original choices")
    return changes


def item_questions_validation_reset(*, changes: Mapping[int, Iterable[str]], user=None, by: dict | None = None,
                                    at=None) -> list[GeneralizationQuestion]:
    """The generalization questions judged (valid or invalid) of each item of ``changes`` (item id
    -> ``item_original_changes``) sent back to unvalidated (``generalization_questions_validation_reset``):
    their judges read them beside another original question."""
    changes = {pk: list(names) for pk, names in changes.items() if names}
    if not changes:
        return []
    questions = GeneralizationQuestion.objects.filter(item_id__in=changes).exclude(
        validation_status=GeneralizationQuestion.Validation.UNVALIDATED).values_list("pk", "item_id")
    return generalization_questions_validation_reset(
        changes={pk: changes[item_id] for pk, item_id in questions}, user=user, by=by, at=at)


# --- A generalization question's validation record -------------------------------------------------
# Kept here, below ``content_row_save`` (an edit of a judged field is a change of the status) and
# below ``studies.services.questions`` (the researchers' own changes of it), which writes through it.

# How many earlier judgements of a question ``metadata["validation"]["history"]`` keeps (oldest dropped).
VALIDATION_HISTORY_MAX = 20

# What a validation judges of a question, what its judges read: its item (the original question), its
# type, its text, its answer and its own choices (``metadata["choices"]``, named ``choices``). A change
# of any of them leaves the judgement about another question (``generalization_questions_validation_reset``).
VALIDATION_JUDGED_FIELDS = ("item", "qtype", "text", "answer", "choices", "original question", "original choices")


def validation_import_judge(f) -> dict[str, str]:
    """How a question's validation record names an import (``f``: its ``ImportFile``) as the writer
    (``set_by``, the file's name and SHA-256), for ``validation_provenance``'s ``by``: a
    generalization file that judges or resets a question, an items file that resets its judged ones."""
    return {"set_by": "import", "file": f.name[:200], "sha256": f.sha256}


def validation_provenance(metadata, *, status: str, previous: str, user, at, by: dict | None = None,
                          reason: str = "") -> dict:
    """``metadata`` with ``"validation"`` saying who set ``status`` and when: ``{"status",
    "previous", "set_by": "user" (with "user_id", "username") or "operator" (None: a management
    command), "at" (ISO 8601), "history"}``, where ``history`` lists the judgements it replaces
    (the import's ``{"set_by": "import", "file", "sha256", ...}`` included), oldest first, each
    without its own history, the last ``VALIDATION_HISTORY_MAX`` kept. The rest of ``metadata``
    (a question's own choices, its original question) is kept as it is.

    ``by`` names a writer other than a person's action (a re-import of a generalization file that
    changes the status: ``{"set_by": "import", "file", "sha256"}``, ``importers.generalization``):
    it replaces ``set_by`` and ``user``, when given, is still named beside it (who ran the import).
    ``reason``, when given, says why the status changed (``"reason"``: "edited after validation:
    <fields>", ``generalization_questions_validation_reset``)."""
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    before = metadata.get("validation")
    history: list = []
    if isinstance(before, dict):
        history = [entry for entry in before.get("history") or [] if isinstance(entry, dict)]
        history.append({key: value for key, value in before.items() if key != "history"})
    elif before is not None:
        history.append({"value": before})
    record: dict = {"status": status, "previous": previous, "at": at.isoformat()}
    if by:
        record.update(by)
    else:
        record["set_by"] = "operator" if user is None else "user"
    if user is not None:
        record.update(user_id=user.pk, username=user.get_username())
    if reason:
        record["reason"] = reason
    record["history"] = history[-VALIDATION_HISTORY_MAX:]
    metadata["validation"] = record
    return metadata


def generalization_questions_validation_move(
    ids: Iterable[int], *, status: str, user, at, by: dict | None = None, reason: Mapping[int, str] | None = None
) -> list[GeneralizationQuestion]:
    """Move the questions of ``ids`` (locked here, in id order) to ``status``: the one write of a stored
    question's ``validation_status``. Each change is recorded (:func:`validation_provenance`, with its
    ``reason`` by id when given) and announced, in the caller's transaction, by
    ``studies.signals.generalization_validation_changed``; a question already there is left as it is,
    nothing recorded. Returns the questions moved, as saved. The caller checks who may
    (``questions.generalization_questions_set_validation``, :func:`generalization_questions_validation_reset`)."""
    changed: list[GeneralizationQuestion] = []
    reason = reason or {}
    for question in GeneralizationQuestion.objects.select_for_update().filter(pk__in=list(ids)).order_by("pk"):
        if not GeneralizationQuestion.STATUS.can(question.validation_status, status):
            continue  # already there: no change, nothing recorded
        metadata = validation_provenance(question.metadata, status=status, previous=question.validation_status,
                                         user=user, at=at, by=by, reason=reason.get(question.pk, ""))
        GeneralizationQuestion.STATUS.move(question, status, metadata=metadata)
        changed.append(question)
    if changed:
        generalization_validation_changed.send(sender=GeneralizationQuestion, question_ids=[q.pk for q in changed])
    return changed


def validation_judged_changes(changed: Iterable[str], *, metadata_before=None, metadata_after=None) -> list[str]:
    """Which of ``changed`` (the names of the fields an edit of a stored question changes; ``item_id``
    for ``item`` too) a validation judged (``VALIDATION_JUDGED_FIELDS``), in that order. ``metadata``
    counts, as ``choices``, only when the question's own choices differ between ``metadata_before`` (as
    stored) and ``metadata_after`` (as written): its other keys (a note, the validation record) are
    not what a judge read."""
    changed = {"item" if name == "item_id" else name for name in changed}
    if "metadata" in changed and own_choices(metadata_before) != own_choices(metadata_after):
        changed.add("choices")
    return [name for name in VALIDATION_JUDGED_FIELDS if name in changed]


def generalization_questions_validation_reset(
    *, changes: Mapping[int, Iterable[str]], user=None, by: dict | None = None, at=None
) -> list[GeneralizationQuestion]:
    """The one rule of a judged question edited: each question of ``changes`` (its id -> the judged
    fields its edit changed, :func:`validation_judged_changes`) marked valid or invalid goes back to
    unvalidated, since that judgement was of another question (Figure 4's validated questions, the
    Gen-U job's and Gen-U's valid questions would count an unjudged one as judged, and its record
    would name a judge, a file and its SHA-256, that never saw it). Written by the one move
    (:func:`generalization_questions_validation_move`: who, when, the status and record replaced kept
    in the history, the signal sent), with ``reason`` "edited after validation: <fields>". ``by`` names
    the writer as :func:`validation_provenance` takes it (a re-import: ``{"set_by": "import", "file",
    "sha256"}``); ``user`` (None: the operator) who made the edit. Returns the questions moved, as saved.

    Called inside the edit's transaction, once the edit is written, by both writers of a stored
    question's judged fields: :func:`content_row_save` (the admin's change form) and a re-import of a
    generalization file that changes an answer and gives no validation status
    (``importers.generalization``; one that gives a status gives the file's judgement of the new
    content instead). It asks no permission of its own: its writer checked the edit
    (:func:`content_change_check`), and it takes back a judgement, it makes none. An edit of a field
    no validation judged (``origin``, a note in ``metadata``) keeps the status."""
    reason = {}
    for pk, names in changes.items():
        fields = [name for name in VALIDATION_JUDGED_FIELDS if name in set(names)]
        if fields:
            reason[pk] = f"edited after validation: {', '.join(fields)}"
    if not reason:
        return []
    with transaction.atomic():
        return generalization_questions_validation_move(
            reason, status=GeneralizationQuestion.Validation.UNVALIDATED, user=user, at=at or timezone.now(), by=by,
            reason=reason)


def content_rows_delete(*, user, model: type[models.Model], pks: Iterable[int]) -> int:
    """Delete content rows after checking the rule for each (a row an open or closed study uses is
    never deleted: its units and answers would go with it; nor a row an LM job used: its jobs and
    their records, or its Gen-U predictions, would go with it or lose it, ``_job_record_reasons``).
    Returns how many rows were deleted, cascades included."""
    pks = list(pks)
    with transaction.atomic():
        content_change_check(user=user, model=model, changes=dict.fromkeys(pks), lock=True)
        return model._default_manager.filter(pk__in=pks).delete()[0]
