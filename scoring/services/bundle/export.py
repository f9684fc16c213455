"""Writing a study bundle: one zip streamed as it is made (``bundle_stream``), never held whole in
memory or on disk. Each table is read in pages by id and written row by row; each file's SHA-256
is computed as it goes out, then ``datapackage.json`` (Frictionless Data Package: every table's
path, fields with types, and hash) and ``SHA256SUMS`` close the archive."""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from annotations.models import (
    Annotation,
    Assignment,
    AttentionCheck,
    Claim,
    FlagReview,
    Participant,
    QualificationGrant,
    QualificationTest,
    Unit,
)
from annotations.selectors import on_hold, study_withdrawals_summary, worker_blocked_in
from lab.api.streaming import DrainSink
from lab.pseudonyms import PseudonymCache
from lab.spreadsheet import exact_csv_writer
from scoring.api.export_annotations import annotation_rows, export_read_settings
from scoring.api.export_units import SCORED_WITH_COLUMNS, SCORED_WITH_READS, ScoredWith, majority_rule_text
from scoring.metrics.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from scoring.metrics.labels import MAJORITY_RULE, MAJORITY_RULES, MAJORITY_SPEC
from scoring.models import ScoreRun, UnitScore
from scoring.provenance import app_version, package_versions
from scoring.reports.intervals import run_bootstrap
from scoring.selectors import (
    LENDER_WITHHELD_ID,
    answerer_withheld,
    bundle_scores,
    lenders_withheld,
    outcome_import_changes,
    outcomes_changed_since,
    provenance_for_reader,
    results_for_reader,
    score_run_latest,
    score_run_read_at,
    study_counting_changed_at,
)
from scoring.services.genu import (
    CONFLICTING_FIRST_KEPT,
    CONFLICTING_RULES,
    CONFLICTING_SPEC,
    UNPARSED_LEFT_OUT,
    UNPARSED_RULES,
    UNPARSED_SPEC,
    gen_u_tie_rule_text,
)
from scoring.services.score import (
    COUNTED,
    SCHEMA_VERSION,
    TASK_ACCURACY_LEFT_OUT,
    TASK_ACCURACY_RULES,
    borrowed_utility,
    borrowed_utility_as_run,
    stale_pairs_of,
    worker_blocks_unknown,
)
from studies.lm import genu as genu_rule
from studies.models import GeneralizationQuestion, GenUPrediction, Rationale, RationaleSource, Study
from studies.selectors import sources_for_user
from studies.services.generation.genu import inputs_recorded

from .tables import (
    CHECKSUMS_FILE,
    DATAPACKAGE_FILE,
    FORMAT_VERSION,
    GENU_INPUT_KEYS,
    GRANT_VOID_KEYS,
    JSON_FILES,
    RESULTS_FILE,
    SETTINGS_FILE,
    STUDY_FILE,
    TABLES,
    Table,
)

PAGE_ROWS = 5_000
FLUSH_BYTES = 1 << 20  # hand the client what the zip has written once it passes 1 MiB
SOURCE_FIELDS = ("name", "kind", "description", "backend", "model_name_or_path", "endpoint_url", "template",
                 "decoding", "demonstrations", "seed", "has_highlights", "training")
# Who a bundle's withheld settings are withheld from (``scoring.selectors.ANSWERER_WITHHELD``, the
# one wording of the rule: study.json's ``answerer_sources`` and results.json's answerers alike).
BUNDLE_READER = "the user who made this bundle"
WITHHELD = answerer_withheld(BUNDLE_READER)


# --- cells ---------------------------------------------------------------------------------------


def cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat() if timezone.is_aware(value) else value.isoformat()
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return str(value)


def _csv_chunks(table: Table, rows: Iterable[Iterable]) -> Iterator[bytes]:
    buf = io.StringIO()
    writer = exact_csv_writer(buf)  # exact: read back by the import (not for a spreadsheet)
    writer.writerow(table.field_names())
    n = 0
    for row in rows:
        writer.writerow([cell(v) for v in row])
        n += 1
        if n % 2000 == 0:
            yield buf.getvalue().encode("utf-8")
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue().encode("utf-8")


def _paged(qs: QuerySet, fields: list[str]) -> Iterator[tuple]:
    """``qs.values_list("id", *fields)`` in pages by id (keyset): flat memory; the id is dropped."""
    last = 0
    qs = qs.order_by("id").values_list("id", *fields)
    while page := list(qs.filter(id__gt=last)[:PAGE_ROWS]):
        for row in page:
            yield row[1:]
        last = page[-1][0]


# --- the JSON files ------------------------------------------------------------------------------


def _source_json(source: RationaleSource) -> dict:
    return {f: getattr(source, f) for f in SOURCE_FIELDS}


def answerer_sources(study: Study) -> list[RationaleSource]:
    """The fine-tuned sources that Gen-U's answerers name (results.json reads their training): the
    source each prediction records as its answerer, and for predictions from before that was
    recorded the sources with their model path (``scoring.services.genu``'s fallback). Not the
    study's sources: a reader of the study may not read them (``answerer_sources_json``)."""
    predictions = GenUPrediction.objects.filter(generalization_question__item__in=study.items.all(),
                                                rationale_source__in=study.sources.all())
    recorded = set(predictions.exclude(answerer_source=None).values_list("answerer_source_id", flat=True).distinct())
    models = set(predictions.filter(answerer_source=None).values_list("answerer_model", flat=True).distinct())
    return list(RationaleSource.objects.filter(Q(pk__in=recorded) | Q(model_name_or_path__in=models))
                .exclude(training={}).exclude(pk__in=study.sources.all()).order_by("id"))


def answerer_sources_json(study: Study, user) -> list[dict]:
    """``study.json``'s ``answerer_sources``: each with its settings when ``user`` (None: the
    operator) may read it (``sources_for_user``, the rule the API's sources follow), else only the
    model the Gen-U predictions already name and why the rest is withheld: neither the source's
    name nor its endpoint, template or training, which are another researcher's."""
    sources = answerer_sources(study)
    readable = (set(s.pk for s in sources) if user is None else
                set(sources_for_user(user=user).filter(pk__in=[s.pk for s in sources]).values_list("pk", flat=True)))
    return [_source_json(s) if s.pk in readable else {"model_name_or_path": s.model_name_or_path, "withheld": WITHHELD}
            for s in sources]


def study_design(study: Study, user) -> dict:
    """``study.json`` for ``user`` (see ``bundle_stream``)."""
    test = QualificationTest.objects.filter(study=study).first()
    return {
        "bundle_format": FORMAT_VERSION,
        "study": {
            "id": study.pk, "name": study.name, "kind": study.kind, "status": study.status, "split": study.split,
            "item_sample_size": study.item_sample_size, "sample_seed": study.sample_seed,
            "annotators_per_unit": study.annotators_per_unit, "units_per_task": study.units_per_task,
            "reward": str(study.reward), "hourly_pay_floor": str(study.hourly_pay_floor),
            "estimated_minutes_per_task": str(study.estimated_minutes_per_task), "platform": study.platform,
            "consent_text": study.consent_text, "instructions": study.instructions, "example": study.example,
            "faithfulness_enabled": study.faithfulness_enabled, "is_imported_outcome": study.is_imported_outcome,
            "stop_when_decided": study.stop_when_decided, "created_at": cell(study.created_at),
            # What its tasks' deadlines were, fixed when it opened (empty for a draft): the results name them.
            "assignment_minutes": study.assignment_minutes, "first_answer_minutes": study.first_answer_minutes,
        },
        "dataset": {"name": study.dataset.name, "task_format": study.dataset.task_format,
                    "choice_labels": study.dataset.choice_labels, "description": study.dataset.description},
        "sources": [_source_json(s) for s in study.sources.order_by("id")],
        "answerer_sources": answerer_sources_json(study, user),
        "attention_checks": [
            {"id": c.pk, "question": c.question, "choices": c.choices, "correct_answer": c.correct_answer}
            for c in AttentionCheck.objects.filter(study=study).order_by("id")
        ],
        "qualification_test": None if test is None else {
            "pass_mark": test.pass_mark, "instructions": test.instructions,
            "questions": [{"position": q.position, "question": q.question, "choices": q.choices,
                           "correct_answer": q.correct_answer} for q in test.questions.order_by("position", "id")],
        },
    }


def borrowed_utility_part(study: Study, results: dict | None, *, user,
                          reader: str = BUNDLE_READER) -> tuple[list[tuple] | None, dict | None]:
    """The borrowed utility of a study that is not a utility study (``score.borrowed_utility``, the
    table its scoring reads: Figure 4's ``by_utility`` and the properties model of a study without
    utility of its own), as the rows of ``data/borrowed_utility.csv`` (pairs of the study's sources)
    and the ``settings.json`` section that says where it came from: the lending studies with their
    score runs, and whether they are the ones the latest run's results.json names (when not, a
    lending study was scored again since, and the import's re-score says its figures may differ).
    (None, None) for a utility study, which never borrows; no rows when the study has no table to
    give (itself a copy of a bundle without one): the section then says why.

    ``results``: the latest run's results.json as stored, not as ``user`` may read it, so that
    ``same_as_latest_run`` compares the lenders themselves. ``user``: the reader the bundle is made
    for (None: the operator, e.g. the ``study_bundle`` command, who sees every lender). Borrowing
    reads every study the owner owns, so a lender ``user`` may not view (``lenders_withheld``,
    the rule results.json follows for that reader: ``results_for_reader``) keeps the pairs and
    utility it lent, which this study's figures rest on, but not its id, name or score run: the
    section names it ``lender_withheld(reader)`` and its rows' ``study_id`` is
    ``LENDER_WITHHELD_ID``.

    The table is what the latest run borrowed: a lender's unit scores that were stale when it ran
    are left out, and those that have gone stale since (a lender's task rejected, nothing scored
    again) are not (``_as_the_run``), so the copy re-scores to its results.json; the section says how
    many of the pairs it lends are stale now (``pairs_stale_since_run``). Only when the lenders or
    their score runs are no longer the run's is the table today's, marked ``same_as_latest_run``
    false. ``stale_pair_sources`` names the sources of the stale pairs the section lists, so that
    the import maps them onto the copy's items and sources as it maps the table's rows."""
    if study.kind == Study.Kind.UTILITY:
        return None, None
    table, provenance = borrowed_utility(study)
    if provenance.get("unavailable"):
        return None, {"table": None, "unavailable": provenance["unavailable"]}
    names = dict(study.sources.values_list("id", "name"))
    results = results or {}
    recorded = ((results.get("generalization") or {}).get("original_utility_from")
                or (results.get("properties_model") or {}).get("utility_from"))
    same = None if recorded is None else recorded == _as_recorded(provenance, recorded)
    stale_since = 0
    if same is False and (as_run := _as_the_run(study, provenance, recorded)) is not None:
        stale_now = _stale_lent_keys(provenance)
        table, provenance, same = *as_run, True
        stale_since = sum((r["study_id"], r["item_id"], r["source_id"]) in stale_now
                          for r in table.to_dict("records"))
    withheld = lenders_withheld([provenance], user=user)
    rows = sorted((r["item_id"], names[r["source_id"]], r["utility"], r["orig_after_correct"],
                   r["orig_before_correct"], LENDER_WITHHELD_ID if r["study_id"] in withheld else r["study_id"])
                  for r in table.to_dict("records") if r["source_id"] in names)
    provenance = provenance_for_reader(provenance, withheld, reader=reader)
    section = {
        "table": TABLES["borrowed_utility"].path,
        "what": "the utility of the study's original rationales, taken from other studies when the bundle was made "
                "(Figure 4 by the original rationale's utility, the consistency of an item with its counterfactuals, "
                "and the properties model of a study without utility of its own): re-scoring the imported study "
                "reads it, never the importing installation's studies",
        "from": provenance,
        "same_as_latest_run": same,
    }
    if same is False:
        section["note"] = BORROWED_NOT_THE_RUNS
    if provenance.get("pairs_stale"):
        section["stale_note"] = BORROWED_STALE
        section["stale_pair_sources"] = {str(source): names[source] for source in sorted(
            {s for _, s in _stale_lent_keys(provenance, lender=False)} & set(names))}
    if stale_since:
        section.update(pairs_stale_since_run=stale_since, stale_since_note=BORROWED_STALE_SINCE)
    return rows, section


def _stale_lent_keys(provenance: dict, *, lender: bool = True) -> set[tuple]:
    """The (lender id, item id, source id) unit scores a borrowed utility's ``provenance`` names stale
    (each lender's ``stale_pairs``); (item id, source id) with ``lender`` False."""
    return {(entry.get("id"), i, s) if lender else (i, s) for entry in provenance.get("studies") or []
            if isinstance(entry, dict) for i, s in stale_pairs_of(entry)}


def _as_the_run(study: Study, provenance: dict, recorded) -> tuple | None:
    """The borrowed utility (table, provenance) of ``study`` as the run that recorded ``recorded``
    borrowed it (``score.borrowed_utility_as_run``: the unit scores it named stale left out, no
    other), when that gives the very provenance it recorded: the same lenders and score runs, and so
    the same table. None when it does not (a lender was scored again since, or another one lends
    now), or for a bundle's copy (``provenance`` read from its bundle: the table is the bundle's)."""
    if not isinstance(recorded, dict) or provenance.get("read_from"):
        return None
    table, as_run = borrowed_utility_as_run(study, recorded)
    return (table, as_run) if recorded == _as_recorded(as_run, recorded) else None


# The keys a borrowed utility's provenance gained with the staleness of lent unit scores
# (``score._utility_lookup``): a run from before records none of them, nor needs to when none was stale.
STALE_PROVENANCE_KEYS = ("stale_rule", "pairs_stale", "pairs_stale_left_out")


def _as_recorded(provenance: dict, recorded) -> dict:
    """``provenance`` as a run from before ``STALE_PROVENANCE_KEYS`` would have recorded it, when
    ``recorded`` lacks them and no lent pair is stale (so such a run is not called another one's)."""
    if not isinstance(recorded, dict) or provenance.get("pairs_stale") or any(
            k in recorded for k in STALE_PROVENANCE_KEYS):
        return provenance
    return {k: v for k, v in provenance.items() if k not in STALE_PROVENANCE_KEYS}


# Why a bundle's borrowed utility leaves pairs out: their lender's unit scores are stale.
BORROWED_STALE = (
    "data/borrowed_utility.csv leaves out the pairs whose lending study's unit scores are stale (the answers that "
    "count there changed since it was scored; from.studies names them, with stale_pairs, and from.stale_rule the "
    "rule): score the lending study again, then this study, then export it, for a bundle that counts them")


# Why a bundle's borrowed utility lends pairs whose lender's unit scores are stale now.
BORROWED_STALE_SINCE = (
    "pairs_stale_since_run of the pairs data/borrowed_utility.csv lends are stale now where they were scored (the "
    "answers that count there changed after this study's latest run borrowed them; nothing was scored again since): "
    "the table is what that run borrowed, so re-scoring the copy gives its results.json; score the lending study "
    "again, then this study, then export it, for a bundle that leaves them out")


# Why a bundle's borrowed utility may not be the one its results.json was scored with.
BORROWED_NOT_THE_RUNS = (
    "the borrowed utility in this bundle is not the one its results.json was scored with (the latest run names other "
    "lending studies or score runs: one was scored again since, or the run predates their recording); score the "
    "study again, then export it, for a bundle that reproduces it")


# Why a bundle's scores may not be the ones its own answers give (settings.json ``scores_stale``).
SCORES_STALE_NOTE = (
    "the answers that count changed after the latest run read them (a participant withdrew: withdrawn_since_run; or "
    "work was submitted, rejected, put on hold or cleared since; or, in a generalization study, a question's "
    "validation status changed): results.json and data/unit_scores.csv are that run's, and stale_units of their "
    "units (none for a study kind without unit scores: its whole run is stale) no longer match this bundle's "
    "answers, so re-scoring it, here or after importing it, will not give those numbers. Score the study again, "
    "then export it, for a bundle that reproduces its results")
# Why a study of imported outcomes no longer matches its latest run (``scores_stale.outcomes_reimported_since_run``).
OUTCOMES_REIMPORTED_NOTE = (
    "outcomes were imported again after the run read them (outcomes_reimported_since_run: that import created, "
    "updated or removed outcome rows): results.json and the report are that run's, from the outcomes it read, and "
    "the rows it changed hold no scores until the study is scored again. Score the study again, then export it, "
    "for figures of the outcomes it holds now")
# Where the rule comes from: the one the API's ``stale`` column follows, and the study-level one.
SCORES_STALE_RULE = ("a unit's scores are stale by the rule of the `stale` column of GET /api/v1/scores/ and the "
                     "unit-score export: the answers that count for it changed after the run that scored it "
                     "began reading them (its read_at; its finished_at for a run from before that was recorded); "
                     "a run of a study kind without unit scores (generalization, question validation, properties) is "
                     "stale when work that counted or could have counted (submitted, rejected, put on hold or "
                     "cleared; never active, returned or expired work) changed after the run began reading its "
                     "answers, or a generalization question's validation status changed since; a study of imported "
                     "outcomes is stale when outcomes were imported again after the run began reading them and "
                     "that import created, updated or removed outcome rows (a re-import of the same file changes "
                     "none); a copy imported from a study bundle and not scored here is stale too where that bundle "
                     "said so")


def scores_staleness(study: Study, run: ScoreRun | None, *, user) -> dict | None:
    """settings.json's ``scores_stale``, and the one study-level staleness rule: GET
    /api/v1/studies/<id>/results/ carries this very section under ``scores_stale`` and /summary/ its
    per-source ``stale``, ``stale_units`` and ``withdrawn_since_run`` (``cockpit.api.views``), so a
    figure read there is marked stale just as the bundle's is. Whether the unit scores this bundle carries (its
    data/unit_scores.csv, and the latest run's results.json) still match its answers, by the rule
    the API's ``stale`` column follows (``export_units.ScoredWith``, its one owner, for each row and
    its own run), with the stale units by the keys of data/unit_scores.csv (item_id, source), and
    the withdrawals recorded after the latest run began reading its answers (``score_run_read_at``;
    its finish for a run from before that was recorded: ``Withdrawal`` rows, as
    ``study_withdrawals_summary``: participants, answers erased, of which counted), which took answers out
    of the bundle that the run had scored. ``note`` says to score again when any unit is stale.
    ``score_run`` and ``finished_at`` name that run. A run of a study kind that writes no unit scores
    (generalization, question validation, properties: ``scored_units`` 0) has no unit to say so: it
    is stale when the answers that count, or a generalization study's questions, changed after it
    began reading them (``study_counting_changed_at``, one query, against ``score_run_read_at``: a
    task submitted while the run computed is dated before it finished, yet the run left it out).
    Imported outcomes have no answers and their rows are never stale by that rule (a re-import clears
    the scores of the rows it changes): the run is stale when an outcomes import into the study that
    created, updated or removed rows was recorded after it began reading them
    (``scoring.selectors.outcomes_changed_since``), named under ``outcomes_reimported_since_run``
    (None when there is none) with ``OUTCOMES_REIMPORTED_NOTE``: its results.json still counts the
    outcomes it read. A re-import of the same file changes nothing and leaves it as it was.
    ``whole_run_stale`` says the run is stale as a whole with no unit to name (outcomes imported
    again, a kind without unit scores whose answers changed, a copy its bundle called stale at study
    level): every source's figures are then stale (/summary/), not only those of the stale units.

    A copy imported from a study bundle and not scored here (no run of its own) carries the scores
    of the run that scored them where that bundle was made (``scoring.selectors.bundle_scores``):
    the same rule answers for them (``ScoredWith``: stale where that bundle said so, or where the
    answers changed since; a copy without unit scores, of a kind that writes none, is stale where the
    bundle called its scores stale at study level), ``score_run`` and ``finished_at`` are that run's
    (so a copy of this copy keeps naming it) and ``scores_from`` says where they came from. None
    without a finished run and without imported scores (nothing scored to be stale)."""
    origin = bundle_scores(study=study) if run is None else None
    if run is None and origin is None:
        return None
    names = dict(RationaleSource.objects.filter(pk__in=study.sources.all()).values_list("id", "name"))
    scored_with = ScoredWith(study.pk, user=user)
    at = list(SCORED_WITH_COLUMNS).index("stale")
    rows = (UnitScore.objects.filter(study=study).order_by("item_id", "source_id")
            .values_list(*SCORED_WITH_READS).iterator(chunk_size=PAGE_ROWS))
    n_scored, stale_units = 0, []
    for row in rows:
        n_scored += 1
        if scored_with.values(*row)[at]:
            item_id, source_id = row[1], row[2]
            stale_units.append({"item_id": item_id,
                                "source": names.get(source_id) or RationaleSource.objects.get(pk=source_id).name})
    # A copy's withdrawals are all recorded after its import, so after the run its scores came from.
    finished_at = run.finished_at if run is not None else origin.finished_at
    # A change after the run began reading may be missing from it though dated before it finished.
    read_at = score_run_read_at(run) if run is not None else finished_at
    withdrawn = study_withdrawals_summary(
        study=study, since=read_at if run is not None or read_at is not None else origin.imported_at)
    # A run of a kind that writes no unit scores (generalization, question validation, properties)
    # has no unit to say so: its scores are stale when the answers that count changed after it read them.
    changed_at = (study_counting_changed_at(study=study)
                  if run is not None and study.kind != Study.Kind.UTILITY else None)
    # Imported outcomes changed by a later import: the run's results.json counts the ones it read.
    reimported = (outcomes_changed_since(study=study, since=read_at if run is not None else origin.imported_at)
                  if study.is_imported_outcome else None)
    # Stale as a whole with no unit row to name: outcomes imported again, a kind without unit scores
    # whose answers changed, a copy its bundle called stale at study level (every source then is).
    whole_run_stale = (reimported is not None
                       or (changed_at is not None and (read_at is None or changed_at > read_at))
                       # imported outcomes have no answers: a bundle calls them stale at study level only
                       or (run is None and (not n_scored or study.is_imported_outcome) and bool(origin.stale)))
    section = {
        "score_run": run.pk if run is not None else origin.score_run,
        "finished_at": cell(finished_at) or None,
        **({"scores_from": origin.origin()} if origin is not None else {}),
        # what that run scored them with (the bundle of a copy has no results.json to say it)
        **({"scored_with": origin.scored_with} if origin is not None else {}),
        # stale too when answers that counted were withdrawn since the run even though no unit row is
        # left to say so (a later run that found nothing to score removed them: score.NothingScored)
        # and a copy not scored here with no unit to say so: stale where its bundle said so
        "stale": bool(stale_units) or withdrawn.counted_answers > 0 or whole_run_stale,
        "whole_run_stale": whole_run_stale,
        "rule": SCORES_STALE_RULE,
        "scored_units": n_scored,
        "stale_units": len(stale_units),
        "units": stale_units,
        "withdrawn_since_run": withdrawn.as_dict(),
        "outcomes_reimported_since_run": _outcomes_reimported(reimported),
    }
    if section["stale"]:
        section["note"] = OUTCOMES_REIMPORTED_NOTE if reimported is not None else SCORES_STALE_NOTE
    return section


def _outcomes_reimported(record) -> dict | None:
    """``scores_stale.outcomes_reimported_since_run``: the latest outcomes import that changed the
    study's outcomes after its run read them (``outcomes_changed_since``), or None."""
    if record is None:
        return None
    return {"imported_at": cell(record.imported_at) or None, "filename": record.filename,
            **outcome_import_changes(record)}


# Why settings.json names this installation's rule rather than the run's.
NOT_IN_RUN = "not in the latest run's results: it computed no such figure, or ran before the rule was recorded"
NO_RUN = "no finished score run"


def _readings_rule(blocks: list[dict | None], *, run_id: int | None, default: str,
                   rules: dict[str, str]) -> tuple[str, bool]:
    """The rule a readings block of the run's results (``{default, rules}``: the published figures'
    reading) names as its figures', from the first of ``blocks`` that records one: the run's own,
    never today's default for a run that recorded another. Today's ``rules[default]``, saying so,
    where no block records it (no run, or a run from before it was recorded). With whether the run
    recorded it (and so gives the figures under the other reading)."""
    for block in blocks:
        if isinstance(block, dict) and isinstance(block.get("rules"), dict):
            text = block["rules"].get(block.get("default"))
            if isinstance(text, str) and text:
                return text, True
    return f"{rules[default]} ({NOT_IN_RUN if run_id is not None else NO_RUN}: this installation's default)", False


def score_settings(results: dict | None, *, run_id: int | None = None, borrowed: dict | None = None,
                   stale: dict | None = None) -> dict:
    """The app's version and every setting a score depends on, as the latest finished run (``run_id``,
    whose results.json is ``results``) used them: its bootstrap (method, confidence, resamples,
    seed), whether it computed similarity and with which model, Gen-U's question filter, tie rule
    and answerers with their fine-tuning presets. The similarity settings of this installation's
    environment are kept apart, labelled as read when the bundle was made: the run may have been
    told otherwise (``--no-similarity``) or scored before they changed. ``borrowed``: where the
    borrowed utility came from (``borrowed_utility_part``), under ``borrowed_utility``. ``stale``:
    whether the run's scores still match the bundle's answers (``scores_staleness``), under
    ``scores_stale``."""
    results = results or {}
    gen_u = results.get("gen_u") or {}
    # A copy not scored here carries the unit scores of the run that scored them where its bundle was made.
    imported = ((stale or {}).get("scored_with") or {}) if run_id is None else {}
    imported_majority, imported_gen_u = imported.get("majority_rule"), imported.get("gen_u_method")
    conflicting = _readings_rule([gen_u.get("conflicting_answers"),
                                           (results.get("generalization") or {}).get("conflicting_answers")],
                                 run_id=run_id, default=CONFLICTING_FIRST_KEPT, rules=CONFLICTING_RULES)
    unparsed = _readings_rule([gen_u.get("unparsed_rules")], run_id=run_id, default=UNPARSED_LEFT_OUT,
                              rules=UNPARSED_RULES)
    task_accuracy = _readings_rule([results.get("task_accuracy_readings")], run_id=run_id,
                                   default=TASK_ACCURACY_LEFT_OUT, rules=TASK_ACCURACY_RULES)
    # Where results.json gives the unparsed outputs' other reading (the blocks the run has).
    unparsed_others = [key for key, recorded in (("task_accuracy_readings", task_accuracy[1]),
                                                 ("gen_u.unparsed_rules", unparsed[1])) if recorded]
    counted_rule = (results.get("counted_answers") or {}).get("rule")
    if results.get("bootstrap"):
        bootstrap = {**results["bootstrap"], "read_from": "the latest run's results.json"}
    elif run_id is not None:  # a run from before it was recorded: what runs drew with then (one owner)
        bootstrap = {"method": "percentile", **run_bootstrap(results)[0],
                     "read_from": "not recorded by the latest run: what runs drew with before it was recorded"}
    else:
        bootstrap = {"method": "percentile", "confidence": 0.95, "n_resamples": DEFAULT_RESAMPLES,
                     "seed": DEFAULT_SEED, "read_from": "this installation's defaults: no finished score run"}
    return {
        "bundle_format": FORMAT_VERSION,
        "app": app_version(),
        "packages": package_versions(),
        "results_schema_version": results.get("schema_version", SCHEMA_VERSION),
        "settings_read_at_export": {
            "note": "this installation's environment when the bundle was made, not necessarily what the latest "
                    "run used: that is latest_run",
            "values": {
                "RL_SCORING_SIMILARITY": bool(settings.RL_SCORING_SIMILARITY),
                "RL_SIMILARITY_MODEL": settings.RL_SIMILARITY_MODEL,
                "RL_SIMILARITY_NUM_LAYERS": settings.RL_SIMILARITY_NUM_LAYERS,
            },
        },
        "rules": {
            # The run's own rules where there is a run (``majority_rule_text``, ``gen_u_tie_rule_text``:
            # never today's default for a run that recorded another, or none); today's without one.
            "majority": (majority_rule_text(results) if run_id is not None else
                         f"{imported_majority} (the run that scored the imported unit scores, where the bundle "
                         "they came with was made: scores_stale.scored_with)" if imported_majority else
                         f"{MAJORITY_RULES[MAJORITY_RULE]} ({MAJORITY_SPEC}; no finished score run: this "
                         "installation's default)"),
            "majority_tie": "a tie counts as wrong (no majority)",
            # The run's own readings (its results' ``default`` of each block), as ``majority`` above.
            "conflicting_answers": f"{conflicting[0]} ({CONFLICTING_SPEC}"
                                   + ("; results.json gives the figures under the other reading: gen_u.conflicting_answers, "
                                      "generalization.conflicting_answers)" if conflicting[1] else ")"),
            "gen_u_tie_rule": gen_u_tie_rule_text(gen_u) if gen_u else (
                f"{genu_rule.TIE_RULE_TEXT} (this installation's rule: no finished score run"
                + ("; scores_stale.scored_with.gen_u_method names the rule of the run that scored the imported "
                   "unit scores)" if imported_gen_u else ")")),
            "unparsed_outputs": f"{unparsed[0]}; task accuracy: {task_accuracy[0]} ({UNPARSED_SPEC}"
                                + (f"; results.json gives {'both' if len(unparsed_others) == 2 else 'it'} under the "
                                   f"other reading: {', '.join(unparsed_others)})" if unparsed_others else ")"),
            "bootstrap": bootstrap,
            "what_counts": (f"{counted_rule} (the latest run's counted_answers)" if isinstance(counted_rule, str)
                            and counted_rule else f"{COUNTED} (annotations.selectors.claims_that_count; "
                            f"{NOT_IN_RUN if run_id is not None else NO_RUN}: this installation's rule)"),
        },
        "latest_run": {
            "score_run": run_id,
            # None when no run or one that computed no similarity (not asked, or the model was not there:
            # results.json's warnings say which)
            "similarity_computed": bool(results.get("similarity")) if results else None,
            "similarity_model": results.get("similarity_model"),
            "similarity": results.get("similarity"),
            "gen_u": {k: gen_u.get(k) for k in ("question_filter", "tie_rule", "answerers", "method") if k in gen_u},
            "counted_answers": results.get("counted_answers"),
            "faithfulness_y_hat_from": (results.get("faithfulness") or {}).get("y_hat_from"),
        },
        **({"borrowed_utility": borrowed} if borrowed is not None else {}),
        **({"scores_stale": stale} if stale is not None else {}),
    }


# --- the tables ----------------------------------------------------------------------------------


def _table_rows(study: Study, user, *, snapshot: str | None = None) -> dict[str, Callable[[], Iterable[tuple]]]:
    """Each table's rows, read when its file is written. ``snapshot``: the bundle's transaction's
    exported snapshot (``bundle_snapshot``), which the answers' pages read ahead are read from."""
    items = study.items.all()
    sources = study.sources.all()
    names = dict(RationaleSource.objects.values_list("id", "name").filter(pk__in=sources))
    pseudonyms = PseudonymCache()

    def rationales():
        for item_id, source_id, *rest in _paged(
            Rationale.objects.filter(item__in=items, source__in=sources),
            ["item_id", "source_id", "text", "predicted_answer", "prediction_correct", "highlights", "faithfulness",
             "raw_output", "generation_info"],
        ):
            yield (item_id, names[source_id], *rest)

    def genu():
        for genq, source_id, *rest in _paged(
            GenUPrediction.objects.filter(generalization_question__item__in=items, rationale_source__in=sources),
            ["generalization_question_id", "rationale_source_id", "answerer", "answerer_model", "predicted_answer",
             "correct", "raw_output", "inputs"],
        ):
            *rest, inputs = rest
            yield (genq, names[source_id], *rest, genu_inputs_cell(inputs))

    def units():
        for pk, item_id, source_id, genq, rationale_id, *rest in _paged(
            Unit.objects.filter(study=study),
            ["id", "item_id", "source_id", "generalization_question_id", "rationale_id", "question_key", "quota",
             "n_claimed", "n_completed", "decided_at"],
        ):
            yield (pk, item_id, names.get(source_id), genq, rationale_id is not None, *rest)

    def tasks():
        # A withdrawn participant's task is kept only as the trace of money paid (it holds no answer):
        # it never leaves the installation, nor does its pseudonym.
        qs = (Assignment.objects.filter(study=study).exclude(status=Assignment.Status.WITHDRAWN)
              .annotate(held=on_hold("pk")))
        for pk, participant_id, platform, external_id, *rest in _paged(qs, [
            "id", "participant_id", "participant__platform", "participant__external_id", "status", "held",
            "created_at", "consented_at", "expires_at", "submitted_at", "reviewed_at",
        ]):
            yield (pk, pseudonyms.get(participant_id, platform, external_id), platform, *rest)

    def claims():
        # An attention check's key is written as the live app writes it (``assignment``'s
        # ``attn:<check>``, or ``attn:<check>:<task>`` for a check given again: the stored key's shape
        # says which), with the ids this bundle writes: a copy imported before the import rebuilt
        # the keys stored its bundle's verbatim (the origin's ids). A unit's key is written as stored.
        for pk, task, participant_id, platform, external_id, position, unit, check, key, *rest in _paged(
            Claim.objects.filter(study=study),
            ["id", "assignment_id", "participant_id", "participant__platform", "participant__external_id",
             "position", "unit_id", "attention_check_id", "question_key", "completed_at", "released"],
        ):
            if check is not None:
                key = Claim.attention_key(check, task if Claim.attention_key_names_task(key) else None)
            yield (pk, task, pseudonyms.get(participant_id, platform, external_id), position, unit, check, key, *rest)

    def flags():
        return _paged(FlagReview.objects.filter(annotation__claim__study=study), [
            "annotation_id", "annotation__claim__assignment_id", "annotation__claim__position", "annotation__step",
            "decision", "decided_at"])

    def grants():
        test = QualificationTest.objects.filter(study=study).first()
        position = {str(q.pk): str(i) for i, q in enumerate(test.questions.order_by("position", "id"))} if test else {}
        for participant_id, platform, external_id, passed, score, answers, voids, task_id in _paged(
            QualificationGrant.objects.filter(study=study),
            ["participant_id", "participant__platform", "participant__external_id", "passed", "score", "answers",
             "voids", "assignment_id"],
        ):
            if QualificationGrant(passed=passed, voids=voids, assignment_id=task_id).set_aside:
                # Its retake not graded yet: the last void is the row's own attempt, given once, by the row.
                voids = voids[:-1]
            yield (pseudonyms.get(participant_id, platform, external_id), platform, passed, score,
                   {position.get(k, k): v for k, v in (answers or {}).items()},
                   grant_voids_cell(study, voids, position))

    def unit_scores():
        for item_id, source_id, *rest in _paged(UnitScore.objects.filter(study=study), [
            "item_id", "source_id", "n_annotators", "before_majority", "after_majority", "before_tie", "after_tie",
            "before_correct", "after_correct", "utility", "task_correct", "gen_u", "similarity", "imported",
            "reported_utility",
        ]):
            yield (item_id, names.get(source_id) or RationaleSource.objects.get(pk=source_id).name, *rest)

    return {
        "items": lambda: _paged(items, ["id", "external_id", "split", "question", "choices", "gold_answer",
                                        "gold_rationale", "metadata"]),
        "rationales": rationales,
        "generalization_questions": lambda: _paged(
            GeneralizationQuestion.objects.filter(item__in=items),
            ["id", "item_id", "qtype", "text", "answer", "origin", "validation_status", "metadata"]),
        "genu_predictions": genu,
        "units": units,
        "tasks": tasks,
        "claims": claims,
        "annotations": lambda: annotation_rows(Annotation.objects.filter(claim__study=study), study=study, user=user,
                                               raw_worker_ids=False, snapshot=snapshot),
        "flag_reviews": flags,
        "qualification_grants": grants,
        "unit_scores": unit_scores,
    }


def grant_voids_cell(study: Study, voids: list | None, position: dict[str, str]) -> list[dict]:
    """A qualification grant's ``voids`` cell (data/qualification_grants.csv): each failed attempt
    set aside before its latest one (``QualificationGrant.voids``, oldest first), with the keys
    ``tables.GRANT_VOID_KEYS`` only, its answers keyed by question position as the row's are
    (``position``: question id -> position), and its tasks (``task``, ``retake_task``) by their
    data/tasks.csv id, null for a task the bundle does not hold (a withdrawn one, or one gone). A
    void holds no worker identifier: who took the attempt is the row's pseudonym. One read for a
    grant with voids (they are few: at most ``participants.RETAKES_MAX`` a grant), none without."""
    if not voids:
        return []
    named = {v.get(key) for v in voids for key in ("task", "retake_task")} - {None}
    held = set(Assignment.objects.filter(study=study, pk__in=[t for t in named if isinstance(t, int)])
               .exclude(status=Assignment.Status.WITHDRAWN).values_list("pk", flat=True))
    out = []
    for void in voids:
        cell = {key: void.get(key) for key in GRANT_VOID_KEYS}
        cell["answers"] = {position.get(k, k): v for k, v in (void.get("answers") or {}).items()}
        for key in ("task", "retake_task"):
            cell[key] = cell[key] if cell[key] in held else None
        out.append(cell)
    return out


def genu_inputs_cell(inputs) -> dict:
    """A Gen-U prediction's ``inputs`` cell (data/genu_predictions.csv): of what its Gen-U job recorded
    (``GenUPrediction.inputs``) the keys ``tables.GENU_INPUT_KEYS`` only, the fingerprints of the
    question asked and of the rationale F^IR was shown, by which the copy's scoring leaves out what
    the original's leaves out. Not its checkpoint or training record (``GENU_INPUT_KEYS`` says why):
    neither holds a worker identifier, but the training record holds the answerer's settings. {} for
    a prediction that records none (stored before they were recorded, or itself imported)."""
    if not inputs_recorded(inputs):
        return {}
    return {key: inputs[key] for key in GENU_INPUT_KEYS if key in inputs}


def worker_block_rows(study: Study) -> Iterator[tuple] | None:
    """The rows of ``data/worker_blocks.csv``: each worker of the bundle's tasks (data/tasks.csv: a
    withdrawn participant's are not there, nor is their pseudonym here) who is blocked in ``study``
    by the rule its scoring reads (``annotations.selectors.worker_blocked_in``), as (pseudonym,
    platform). A blocked worker's submitted and approved work counts, and the results count it
    (``counted_answers.tasks_of_blocked_workers``, ``other_readings.without_blocked_workers``): the
    copy the import makes re-scores to them only if it knows which workers were blocked. The block
    itself (who made it, why) does not travel. None for a copy that does not know its workers'
    blocks (``score.worker_blocks_unknown``): the table is left out, so a copy of it says so too."""
    if worker_blocks_unknown(study):
        return None
    tasks = (Assignment.objects.filter(study=study, participant_id=OuterRef("pk"))
             .exclude(status=Assignment.Status.WITHDRAWN))
    blocked = Participant.objects.filter(Exists(tasks), worker_blocked_in(study=study, participant_ref="pk"))
    pseudonyms = PseudonymCache()
    return ((pseudonyms.get(pk, platform, external_id), platform)
            for pk, platform, external_id in _paged(blocked, ["id", "platform", "external_id"]))


# --- the archive ---------------------------------------------------------------------------------


def bundle_filename(study: Study) -> str:
    return f"study-{study.pk}-bundle.zip"


@contextmanager
def bundle_snapshot(using: str = DEFAULT_DB_ALIAS) -> Iterator[str | None]:
    """One transaction that every read of a bundle is made in, so its files agree with each other
    whatever is written meanwhile (a task started, a run stored, a participant withdrawn between two
    tables: the import refused a bundle whose claims named a task its tasks.csv did not hold).

    PostgreSQL: REPEATABLE READ, READ ONLY (nothing a bundle reads writes), its snapshot exported
    (yielded: ``pg_export_snapshot()``) for the answers' pages read ahead on a second connection
    (``export_annotations.keyset_pages``), and ``export_read_settings`` (SET LOCAL: behind
    PgBouncer in transaction mode the transaction keeps one server connection and its settings end
    with it). SQLite (the development database, no snapshot beside a writer): no transaction, each
    table read as it is, as before: a transaction there takes the database's one write lock
    (``transaction_mode`` IMMEDIATE) and would hold every worker's answer until the download ends,
    then fail it at the busy timeout. Inside a transaction of the caller's (a test's) its reads are
    that transaction's: nothing is set and None is yielded."""
    connection = connections[using]
    if connection.in_atomic_block or connection.vendor != "postgresql":
        yield None
        return
    with transaction.atomic(using=using):
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")  # its first statement
            export_read_settings(cursor)
            cursor.execute("SELECT pg_export_snapshot()")
            snapshot = cursor.fetchone()[0]
        yield snapshot


def bundle_stream(*, study: Study, user) -> Iterator[bytes]:
    """The bundle of ``study`` as a zip for ``user``, who may see the study (the caller checked it),
    in chunks as it is made. Every file is read in one transaction (``bundle_snapshot``), begun
    when the first chunk is asked for and ended with the last (or when the client goes away), so
    the bundle is one state of the database even when work, a run or a withdrawal lands while it
    downloads; call it outside a transaction (a caller's transaction is read as it is). Reads the
    current database: what was erased (a withdrawn participant) is not there. What the study uses
    without showing it (Gen-U's fine-tuned answerer sources) is written whole only when ``user``
    may read it (``answerer_sources_json``; None: the operator, everything). The same reader decides what ``results.json`` and ``settings.json`` name of those answerers
    (``results_for_reader``: the results were computed with the study owner's rights).
    Every caller names its reader: a default reader would decide what a bundle holds far from
    the page that hands it out. Scores that no longer match the answers the bundle holds (work
    withdrawn, rejected or put on hold after the latest run) still go out as that run's, and
    settings.json ``scores_stale`` and datapackage.json's description say so (``scores_staleness``)."""
    with bundle_snapshot() as snapshot:
        yield from _bundle_chunks(study=study, user=user, snapshot=snapshot)


def _bundle_chunks(*, study: Study, user, snapshot: str | None) -> Iterator[bytes]:
    """``bundle_stream``'s zip, read in the transaction it opened (``snapshot``: its exported id)."""
    study = Study.objects.select_related("dataset").get(pk=study.pk)
    run = score_run_latest(study=study)
    results = results_for_reader(run, user=user, reader=BUNDLE_READER) if run is not None else None
    sink = DrainSink()  # no seek: each member's sizes follow its data, nothing is revisited
    archive = zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6)
    written: dict[str, tuple[str, int]] = {}  # path -> (sha256, bytes)
    handed = [0]  # the archive's size when its bytes were last handed on

    def member(path: str, chunks: Iterable[bytes]) -> Iterator[bytes]:
        digest, size = hashlib.sha256(), 0
        with archive.open(path, "w", force_zip64=True) as out:
            for chunk in chunks:
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
                if sink.tell() - handed[0] >= FLUSH_BYTES:
                    handed[0] = sink.tell()
                    yield sink.drain()
        written[path] = (digest.hexdigest(), size)
        handed[0] = sink.tell()
        yield sink.drain()

    def json_bytes(data) -> list[bytes]:
        return [json.dumps(data, ensure_ascii=False, indent=2, sort_keys=True).encode("utf-8") + b"\n"]

    borrowed_rows, borrowed = borrowed_utility_part(study, run.results if run is not None else None, user=user)
    stale = scores_staleness(study, run, user=user)
    yield from member(STUDY_FILE, json_bytes(study_design(study, user)))
    yield from member(SETTINGS_FILE, json_bytes(score_settings(results, run_id=run.pk if run is not None else None,
                                                               borrowed=borrowed, stale=stale)))
    if results is not None:
        yield from member(RESULTS_FILE, json_bytes(results))
    for name, rows in _table_rows(study, user, snapshot=snapshot).items():
        yield from member(TABLES[name].path, _csv_chunks(TABLES[name], rows()))
    if borrowed_rows is not None:
        table = TABLES["borrowed_utility"]
        yield from member(table.path, _csv_chunks(table, borrowed_rows))
    if (blocked_rows := worker_block_rows(study)) is not None:
        table = TABLES["worker_blocks"]
        yield from member(table.path, _csv_chunks(table, blocked_rows))
    yield from member(DATAPACKAGE_FILE, json_bytes(datapackage(study, written, stale=stale)))
    sums = "".join(f"{digest}  {path}\n" for path, (digest, _) in sorted(written.items()))
    yield from member(CHECKSUMS_FILE, [sums.encode("ascii")])
    archive.close()
    yield sink.drain()


def datapackage(study: Study, written: dict[str, tuple[str, int]], *, stale: dict | None = None) -> dict:
    """``datapackage.json``: every file written with its hash, and the tables' schemas. Its
    description says when the scores are stale (``scores_staleness``) and to score again."""
    resources = []
    for path, description in JSON_FILES.items():
        if path in written:
            digest, size = written[path]
            resources.append({"name": path.removesuffix(".json").replace("_", "-"), "path": path, "format": "json",
                              "mediatype": "application/json", "encoding": "utf-8", "bytes": size,
                              "hash": f"sha256:{digest}", "description": description})
    for table in TABLES.values():
        if table.optional and table.path not in written:
            continue
        digest, size = written[table.path]
        schema = {"fields": [f.as_json() for f in table.fields], "missingValues": [""]}
        if table.primary_key:
            schema["primaryKey"] = list(table.primary_key)
        resources.append({
            "name": table.name.replace("_", "-"), "path": table.path, "profile": "tabular-data-resource",
            "format": "csv", "mediatype": "text/csv", "encoding": "utf-8", "bytes": size, "hash": f"sha256:{digest}",
            "description": table.description, "dialect": {"delimiter": ",", "header": True, "lineTerminator": "\r\n"},
            "schema": schema,
        })
    return {
        "profile": "tabular-data-package",
        "name": f"rationale-lab-study-{study.pk}",
        "title": study.name,
        "created": cell(timezone.now()),
        "version": str(FORMAT_VERSION),
        "description": "A Rationale Lab study bundle: re-import it into Rationale Lab to re-score the study, or "
                       "read its tables with any Frictionless tool. Workers are pseudonyms. Cells are exact: text that "
                       "a spreadsheet would run as a formula is not neutralised, so open the tables with a data "
                       "tool, not a spreadsheet." + (
                           f" The scores are stale: {stale['stale_units']} of the {stale['scored_units']} units in "
                           "results.json and data/unit_scores.csv no longer match this bundle's answers "
                           "(settings.json scores_stale says why); score the study again, then export it, for "
                           "a bundle that reproduces its results." if stale and stale["stale"] else ""),
        "resources": resources,
    }
