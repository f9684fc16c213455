"""The unit-score export (one row per scored (item, source) unit) and the per-source summaries."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import itemgetter

from django.db.models import Avg, Case, CharField, Count, Expression, Q, QuerySet, Value, When

from annotations.models import Unit
from lab.api.streaming import Column
from scoring.metrics.labels import UTILITY_NAMES
from scoring.models import ScoreRun, UnitScore
from scoring.selectors import (
    BundleScores,
    bundle_scores,
    results_for_reader,
    score_run_latest,
    score_run_read_at,
    unit_counting_changes,
    unit_score_stale,
)
from scoring.services.genu import gen_u_method_text
from scoring.services.score import study_sources
from scoring.similarity import recorded_model_label
from studies.models import Study


def utility_label() -> Case:
    """The utility's name (``UTILITY_NAMES``; empty when there is none), made by the database."""
    return Case(*(When(utility=value, then=Value(name)) for value, name in UTILITY_NAMES.items()),
                default=Value(""), output_field=CharField())


# A run from before results.json recorded its majority rule (``majority_readings``) says so.
MAJORITY_NOT_RECORDED = "not recorded"
# The tie rule every reading of the majority shares (SPEC section 2; ``studies.majority``).
MAJORITY_TIE_RULE = "a tie is no majority answer and counts as wrong"


def majority_rule_text(results: dict) -> str:
    """The majority rule a run's results (results.json) record: its ``majority_readings`` default
    reading with the run's own words for it, the tie rule, and the other readings it gives beside
    it; a run that recorded none says so (never today's ``MAJORITY_RULE`` in its place)."""
    majority = results.get("majority_readings")
    rules = (majority.get("rules") if isinstance(majority, dict) else None) or {}
    default = majority.get("default") if isinstance(majority, dict) else None
    if not isinstance(rules, dict) or default not in rules:
        return (f"{MAJORITY_NOT_RECORDED}: this run's results.json has no majority_readings (it was scored before "
                "the majority rule was recorded; score the study again to record it)")
    words = str(rules[default])
    for name in (f"{default}: ", f"{default.replace('_', ' ')}: "):  # "plurality: the label ..." -> "the label ..."
        if words.startswith(name):
            words = words[len(name):]
            break
    text = f"{default} ({words}); {MAJORITY_TIE_RULE}"
    others = [str(rule) for rule in rules if rule != default]
    if others:
        text += f"; results.json majority_readings gives {', '.join(others)} beside it"
    return text


# A run from before results.json recorded which answers it counted (``counted_answers``) says so;
# a study of imported outcomes counted none here.
COUNTED_NOT_RECORDED = "not recorded"
COUNTED_IMPORTED = "none counted here"


def counted_answers_text(results: dict) -> str | None:
    """Which answers a run counted, as its results.json ``counted_answers`` records it: the rule,
    the approved and not-yet-reviewed tasks it counted and the attention-check rule (never today's
    ``score.COUNTED`` for a run that recorded none: that one says so). None without results."""
    if not results:
        return None
    counted = results.get("counted_answers")
    if not isinstance(counted, dict) or not counted.get("rule"):
        if (results.get("study") or {}).get("is_imported_outcome"):
            return (f"{COUNTED_IMPORTED}: imported outcomes, the answers were aggregated where the study was run "
                    "(its file gives the majorities)")
        return (f"{COUNTED_NOT_RECORDED}: this run's results.json has no counted_answers (it was scored before "
                "which answers count was recorded; score the study again to record it)")
    text = (f"{counted['rule']}: {counted.get('tasks_approved', 0)} approved tasks and "
            f"{counted.get('tasks_not_reviewed', 0)} submitted, not yet reviewed")
    if counted.get("attention_check_rule"):
        text += f"; attention checks: {counted['attention_check_rule']}"
    return text


def counted_failing_checks(results: dict) -> int | None:
    """How many counted tasks of the run failed an attention check (``counted_answers``), None
    when it recorded none."""
    value = (results.get("counted_answers") or {}).get("tasks_failing_an_attention_check") if results else None
    return int(value) if isinstance(value, int | float) else None


def other_readings_text(results: dict) -> str | None:
    """Where the other readings of which answers count are and what each gives over all sources
    (results.json ``counted_answers.other_readings``: answers left out, units scored, utility shares;
    a generalization study's readings give their Figure 4 there). None when the run recorded none."""
    readings = (results.get("counted_answers") or {}).get("other_readings") if results else None
    if not isinstance(readings, dict) or not readings:
        return None
    said = []
    for name, row in readings.items():
        row = row if isinstance(row, dict) else {}
        if row.get("identical_to") == "published":
            said.append(f"{name}: the published figures (no answer left out)")
            continue
        text = f"{name}: {row.get('answers_left_out', 0)} answers left out"
        if row.get("n_units_scored") is not None:
            text += f", {row['n_units_scored']} units scored"
        shares = ((row.get("utility_shares") or {}).get("all")) or {}
        if shares:
            text += ", " + ", ".join(
                f"{label} {shares[key]:.3f}" if shares.get(key) is not None else f"{label} n/a"
                for key, label in (("useful", "useful"), ("unsure", "unsure"), ("not_useful", "not useful")))
        elif row.get("note"):
            text += f" ({row['note']})"
        said.append(text)
    return "results.json counted_answers.other_readings gives " + "; ".join(said)


class _ScoredWith:
    """Marks a column whose value is what the row's own score run computed it with, or whether that
    run's scores are stale (``ScoredWith``, under the column's name): read once per run and per
    study, never per row."""

    def __repr__(self) -> str:
        return "SCORED_WITH"


SCORED_WITH = _ScoredWith()
# What a row's ``utility``, ``gen_u`` and ``similarity`` rest on: the run that wrote them (the row's
# own, ``UnitScore.score_run``), that run's settings, whether the answers changed since it
# (``stale``) and the majority rule it aggregated the answers by (``majority_rule``, appended last:
# columns are only ever appended); the unit-score and the annotation exports both carry them.
SCORED_WITH_COLUMNS: dict[str, Column] = {column.name: column for column in [
    Column("score_run", "int", "The scoring run that wrote this row's scores (its results.json: "
           "/api/v1/studies/{id}/results/ for the latest); empty: not scored here (outcomes imported, or changed by a "
           "re-import, and not scored since; or imported with a copy of a study bundle, scored where the bundle was "
           "made: the API's `scores_from` names the bundle and its run, `stale` says whether the bundle called "
           "them stale, and the other scored-with columns give what that run recorded it scored them with)."),
    Column("similarity_model", "str", "The model, layer and method `similarity` was computed with by that run "
           "(e.g. \"mini, layer 6, files sha256:0123456789ab; BERTScore F1 against the gold rationale, no baseline "
           "rescaling\": rescaling changes the values a lot; the sha256 is the start of the model folder's "
           "fingerprint, results.json similarity.fingerprint, which tells other weights in the same folder apart; "
           "a run that recorded no method, or no fingerprint, gives model and layer only); empty: that run "
           "computed no similarity."),
    Column("gen_u_method", "str", "What `gen_u` rests on: the question filter, the tie rule and the answerers "
           "with their training; empty: that run computed no Gen-U."),
    Column("stale", "bool", "The answers that count for this unit changed after `score_run` began reading them "
           "(results.json `run.read_at`; its `finished_at` for a run from before that was recorded: a change while "
           "the run computed is dated before it finished, yet missing from it): a task was "
           "submitted or rejected since, sync put a task on hold or lifted its hold since, or a researcher cleared "
           "a hold since (even when the count stayed the same: one task held and another cleared), or the number "
           "of counting answers differs from what the run aggregated (work rejected, withdrawn, put on hold or "
           "cleared); the scores are that run's, so score the study again. A copy of a study bundle not scored here "
           "(empty `score_run`): stale when the bundle's settings.json `scores_stale` named the unit, or by the same "
           "rule against the run that scored it where the bundle was made (the API's `stale_reason` says which). "
           "Empty: not scored. Imported outcomes are never stale: re-importing them clears the scores they "
           "change."),
    Column("majority_rule", "str", "The majority rule `score_run` aggregated each unit's answers by, which "
           "`before_majority`/`after_majority`, the ties, correctness and `utility` rest on, as that run's "
           "results.json `majority_readings` records it: its default reading, then the tie rule, e.g. \"plurality "
           "(the label more annotators gave than any other; our reading of SPEC section 2); a tie is no majority "
           "answer and counts as wrong; results.json majority_readings gives strict_majority beside it\". With "
           "three or more choices a strict majority (more than half of the annotators) gives other utilities. "
           f"\"{MAJORITY_NOT_RECORDED}...\": that run recorded no rule. Empty: not scored."),
    # Which answers `score_run` counted (results.json ``counted_answers``): the published figures keep
    # tasks that failed an attention check and tasks nobody reviewed; the other readings leave them out.
    Column("counted_answers", "str", "Which answers `score_run` counted, as its results.json `counted_answers` "
           "records it: the rule, then how many approved and not-yet-reviewed tasks it counted and what failing an "
           "attention check means (e.g. \"the answers of completed questions in submitted or approved tasks; ...: 1 "
           "approved tasks and 2 submitted, not yet reviewed; attention checks: ...\"). The figures count tasks "
           "that failed a check (`counted_tasks_failing_a_check`); `other_readings` says where the figures without "
           f"them are. \"{COUNTED_NOT_RECORDED}...\": that run recorded none; \"{COUNTED_IMPORTED}...\": imported "
           "outcomes, aggregated where the study was run. Empty: not scored."),
    Column("counted_tasks_failing_a_check", "int", "How many of the tasks `score_run` counted failed an attention "
           "check (results.json `counted_answers.tasks_failing_an_attention_check`): their answers are in the "
           "figures. Empty: not scored, imported outcomes, or a run that recorded none."),
    Column("other_readings", "str", "Where the figures under the other readings of which answers count are "
           "(results.json `counted_answers.other_readings`, /api/v1/studies/{id}/results/ for the latest run), each "
           "with the answers it leaves out and its utility shares over all sources (e.g. \"without_tasks_failing_"
           "any_check: 4 answers left out, 1 units scored, useful 0.000, unsure 0.000, not useful 1.000\"); a "
           "reading that keeps every answer says it gives the published figures. Empty: not scored, imported "
           "outcomes, or a run that recorded none."),
]}
# What ``ScoredWith.values`` reads from a unit-score row, in this order.
SCORED_WITH_READS = ("score_run_id", "item_id", "source_id", "n_annotators", "imported")


class ScoredWith:
    """The ``SCORED_WITH_COLUMNS`` values of one study's unit-score rows: each row's own run, read
    once per run (its settings and when it began reading its answers, ``score_run_read_at``), and
    its staleness against the study's counting answers, read once for the study
    (``unit_counting_changes``, lazily: a study without scored rows never reads it). No query per
    row. ``user``: the reader (``scored_with_run``)."""

    def __init__(self, study_id: int, *, user) -> None:
        self.study = Study(pk=study_id)
        self.user = user
        self.runs: dict[int, tuple[tuple, object]] = {}
        self.changes: dict | None = None
        self._bundle: list[BundleScores | None] = []  # read once, when a row without a run asks

    def bundle(self) -> BundleScores | None:
        """Where the study's unit scores without a run came from when it is a copy of a study bundle
        (``bundle_scores``), read once."""
        if not self._bundle:
            self._bundle.append(bundle_scores(study=self.study.pk))
        return self._bundle[0]

    def run(self, run_id: int) -> tuple[tuple, object]:
        found = self.runs.get(run_id)
        if found is None:
            run = (ScoreRun.objects.filter(pk=run_id)
                   .only("results", "finished_at", "study_id", "requested_by_id").first())
            used = scored_with_run(run, user=self.user)
            found = self.runs[run_id] = (used, score_run_read_at(run) if run is not None else None)
        return found

    def values(self, run_id: int | None, item_id: int, source_id: int, n_annotators: int | None,
               imported: bool) -> tuple:
        """The ``SCORED_WITH_COLUMNS`` of a row, in their order (score_run, similarity_model,
        gen_u_method, stale, majority_rule, ...). A row without a run: all empty, but for a copy of a
        study bundle not scored here, whose ``stale`` is the bundle's (``stale_reason``) and whose
        other columns but ``score_run`` are what the run that scored it where the bundle was made
        recorded (``BundleScores.scored_with``)."""
        reason = self.stale_reason(run_id, item_id, source_id, n_annotators, imported)
        if run_id is None:
            # A copy's imported scores: what the run that scored them recorded (None where it said nothing).
            said = self.bundle().scored_with if reason is not None else {}
            return tuple((bool(reason) if name == "stale" else said.get(name)) if reason is not None else None
                         for name in SCORED_WITH_COLUMNS)
        used, _ = self.run(run_id)
        return tuple(bool(reason) if name == "stale" else used[name] for name in SCORED_WITH_COLUMNS)

    def stale_reason(self, run_id: int | None, item_id: int, source_id: int, n_annotators: int | None,
                     imported: bool) -> str | None:
        """Why the row's scores are stale ('' when they are not; ``unit_score_stale``), None when
        nothing says (not scored: no run, and not imported from a study bundle)."""
        bundle = self.bundle() if run_id is None else None
        if run_id is None and bundle is None:
            return None
        read_at = self.run(run_id)[1] if run_id is not None else bundle.finished_at
        if self.changes is None:
            self.changes = unit_counting_changes(study=self.study)
        return unit_score_stale(n_annotators=n_annotators, imported=imported, read_at=read_at,
                                change=self.changes.get((item_id, source_id)), bundle=bundle,
                                unit=(item_id, source_id))

    def scores_from(self, run_id: int | None) -> str | None:
        """Where the row's scores came from when no run here wrote them and the study is a copy of a
        study bundle (``BundleScores.origin``); None otherwise (``score_run`` names the run)."""
        bundle = self.bundle() if run_id is None else None
        return bundle.origin() if bundle is not None else None


# One declaration per column: its name, type, meaning and the ``UnitScore`` field path (or the
# expression) its value is read from, or ``SCORED_WITH``. The query, CSV, JSON lines and Parquet
# all follow it.
SCORE_SPEC: list[tuple[Column, str | Callable[[], Expression] | _ScoredWith]] = [
    (Column("study_id", "int", "Study id."), "study_id"),
    (Column("item_id", "int", "Item id."), "item_id"),
    (Column("item_external_id", "str", "Item id in its dataset (e.g. StrategyQA qid)."), "item__external_id"),
    (Column("split", "str", "Split of the item."), "item__split"),
    (Column("source_id", "int", "Rationale source id."), "source_id"),
    (Column("source_name", "str", "Rationale source name."), "source__name"),
    (Column("gold_answer", "str", "The item's correct answer label."), "item__gold_answer"),
    (Column("n_annotators", "int", "Annotators whose answers were aggregated; empty: not known (imported outcomes "
            "whose file does not say)."), "n_annotators"),
    (Column("before_majority", "str", "Majority answer before the rationale; empty on a tie."), "before_majority"),
    (Column("after_majority", "str", "Majority answer after the rationale; empty on a tie."), "after_majority"),
    (Column("before_tie", "bool", "No majority before the rationale (counted as wrong)."), "before_tie"),
    (Column("after_tie", "bool", "No majority after the rationale (counted as wrong)."), "after_tie"),
    (Column("before_correct", "bool", "Majority before the rationale is the gold answer."), "before_correct"),
    (Column("after_correct", "bool", "Majority after the rationale is the gold answer."), "after_correct"),
    (Column("utility", "int", "1 useful (wrong then right), -1 not useful (wrong after), 0 unsure (right, right)."),
     "utility"),
    (Column("utility_label", "str", "useful, unsure or not_useful."), utility_label),
    (Column("task_correct", "bool", "The source's own predicted answer was correct (task accuracy)."), "task_correct"),
    (Column("gen_u", "int", "Gen-U of the rationale (-1, 0, 1), when computed."), "gen_u"),
    (Column("similarity", "float", "Similarity to the gold rationale, when computed; the model, layer and method "
            "it was computed with are `similarity_model`."), "similarity"),
    (Column("imported", "bool", "The aggregated answers were imported (study run elsewhere)."), "imported"),
    (Column("updated_at", "datetime", "When the score was computed (UTC)."), "updated_at"),
    (Column("reported_utility", "int", "Imported outcome studies: the utility the imported file stated."),
     "reported_utility"),
    *((column, SCORED_WITH) for column in SCORED_WITH_COLUMNS.values()),
]
SCORE_COLUMNS: list[Column] = [column for column, _ in SCORE_SPEC]


def score_rows(queryset: QuerySet[UnitScore], *, user, chunk_size: int = 5000) -> Iterator[tuple]:
    """Rows in ``SCORE_COLUMNS`` order, streamed. The ``SCORED_WITH`` columns are each row's own
    run's (``ScoredWith``: read once per run and per study, never per row), as ``user`` may read
    them (``scored_with_run``)."""
    read = [value if isinstance(value, str) else value() for _, value in SCORE_SPEC if value is not SCORED_WITH]
    order = list(SCORED_WITH_COLUMNS)
    extra = [name for name in ("study_id", *SCORED_WITH_READS) if name not in read]
    read += extra
    study_at = read.index("study_id")
    reads = itemgetter(*(read.index(name) for name in SCORED_WITH_READS))
    n_read = len(read)
    positions, taken = [], 0
    for column, value in SCORE_SPEC:
        if value is SCORED_WITH:
            positions.append(n_read + order.index(column.name))  # after the values read
        else:
            positions.append(taken)
            taken += 1
    pick = itemgetter(*positions)
    rows = queryset.order_by("item_id", "source_id").values_list(*read).iterator(chunk_size=chunk_size)
    per_study: dict[int, ScoredWith] = {}
    for row in rows:
        study_id = row[study_at]
        runs = per_study.get(study_id)
        if runs is None:
            runs = per_study[study_id] = ScoredWith(study_id, user=user)
        yield pick(row + runs.values(*reads(row)))


def _share(n: int, total: int) -> float | None:
    return round(n / total, 6) if total else None


def scored_with_run(run: ScoreRun | None, *, user) -> dict:
    """What ``run`` computed with: its id, its similarity model, layer and method (results.json
    ``similarity.method``, ``SimilarityModel.method``: baseline rescaling changes the values a lot)
    and its Gen-U method (question filter, tie rule, answerers), so that a mean Gen-U or similarity
    is never read without the setting that made it. A run that recorded no similarity method gives
    model and layer only, as it always did. And the majority rule it aggregated the answers by
    (``majority_rule_text``: as the run recorded it; "not recorded" for a run that recorded none).
    And which answers it counted (``counted_answers_text``), how many counted tasks failed an
    attention check and where the figures without them are (``other_readings_text``), as the run
    recorded them. The Gen-U method is the one the run recorded (``gen_u.method``; rebuilt by
    ``results_for_reader`` for a reader it withholds answerers from), and for a run that recorded
    none ``gen_u_method_text`` of what it did record, never today's constants in its place.
    All None for no run. As ``user`` may read them (``results_for_reader``: the Gen-U method names
    no settings of an answerer source the reader may not read; None: the operator, everything)."""
    if run is None:
        return dict.fromkeys(SCORED_WITH_RUN_KEYS)
    return {"score_run": run.pk, **scored_with_results(results_for_reader(run, user=user))}


def scored_with_results(results: dict) -> dict:
    """``scored_with_run`` but the run's id, from its results.json ``results`` itself: what a copy
    of a study bundle keeps of the run that scored its imported unit scores where the bundle was
    made (``bundle.importing``, ``BundleScores.scored_with``)."""
    gen_u = results.get("gen_u")
    return {
        "similarity_model": similarity_model_text(results.get("similarity") or {}),
        "gen_u_method": (gen_u.get("method") or gen_u_method_text(gen_u)) if isinstance(gen_u, dict) and gen_u
        else None,
        "majority_rule": majority_rule_text(results),
        "counted_answers": counted_answers_text(results),
        "counted_tasks_failing_a_check": counted_failing_checks(results),
        "other_readings": other_readings_text(results),
    }


# What ``scored_with_run`` gives, in ``SCORED_WITH_COLUMNS``' order (the stale column aside: it is a
# row's, not a run's).
SCORED_WITH_RUN_KEYS = tuple(name for name in SCORED_WITH_COLUMNS if name != "stale")


def similarity_model_text(similarity: dict) -> str | None:
    """A run's results.json ``similarity`` as the exports give it: "name, layer N, files
    sha256:<12 hex>; method" (``recorded_model_label``: the folder's name does not say which weights
    it held; without the fingerprint, or "; method", for a run that recorded none); None when the
    run computed no similarity."""
    if not similarity.get("name"):
        return None
    text = recorded_model_label(similarity)
    return f"{text}; {similarity['method']}" if similarity.get("method") else text


def short_units_of_source(results: dict, source_name: str) -> dict:
    """A summary row's short units, as the run's results.json ``short_units`` records them
    (``scoring.metrics.pipeline.short_units``): ``n_short``, the source's units scored short of
    annotators on the answers they have (the published shares and accuracies include them);
    ``full_units_rule``, the other reading in the run's words; ``full_units_only``, the source's
    utility shares under it (None when no unit was short: they are the published ones). All None
    when the run recorded no short units (imported outcomes, or a run from before they were
    recorded): never a made-up zero."""
    short = results.get("short_units")
    if not isinstance(short, dict):
        return {"n_short": None, "full_units_rule": None, "full_units_only": None}
    full = short.get("utility_shares_full_units_only")
    return {"n_short": (short.get("n_short_by_source") or {}).get(source_name),
            "full_units_rule": short.get("full_units_rule"),
            "full_units_only": full.get(source_name) if isinstance(full, dict) else None}


def source_summaries(*, study: Study, user) -> list[dict]:
    """Per rationale source: counts and shares of useful / unsure / not useful units, majority ties,
    accuracies before and after the rationale, task accuracy over the units with the source's
    predicted answer (``n_task_known``, beside it: the others are left out, ``TASK_ACCURACY_RULES``),
    mean Gen-U and similarity, with what they were computed with (``scored_with_run``: the run, its
    similarity model, its Gen-U method and its majority rule, as ``user`` may read them), and the
    units that run scored short of annotators with the shares over full units only
    (``short_units_of_source``). One row per source of the study (``score.study_sources``: its
    design's, and any its units or unit scores name), by name, scored or not: ``n_units`` is the
    source's units in the study (imported outcomes: its rows), so a source with nothing scored has
    ``n_scored`` 0 and null shares, accuracies and means, never a missing row. A study of another
    kind (generalization, question validation, rationale properties) scores no unit's utility: none."""
    run = score_run_latest(study=study)
    settings_used = scored_with_run(run, user=user)
    if run is None and (bundle := bundle_scores(study=study)) is not None:
        settings_used.update({key: bundle.scored_with.get(key) for key in SCORED_WITH_RUN_KEYS if key != "score_run"})
    results = results_for_reader(run, user=user) if run is not None else {}
    scored = {r["source_id"]: r for r in (
        UnitScore.objects.filter(study=study)
        .values("source_id")
        .annotate(
            n_imported=Count("id", filter=Q(imported=True)),
            n_scored=Count("id", filter=Q(utility__isnull=False)),
            n_useful=Count("id", filter=Q(utility=1)),
            n_unsure=Count("id", filter=Q(utility=0)),
            n_not_useful=Count("id", filter=Q(utility=-1)),
            n_before_ties=Count("id", filter=Q(before_tie=True)),
            n_after_ties=Count("id", filter=Q(after_tie=True)),
            # over the scored units (``n_scored``): an unscored one has no correctness yet
            n_before_correct=Count("id", filter=Q(before_correct=True, utility__isnull=False)),
            n_after_correct=Count("id", filter=Q(after_correct=True, utility__isnull=False)),
            n_task_known=Count("id", filter=Q(task_correct__isnull=False)),
            n_task_correct=Count("id", filter=Q(task_correct=True)),
            mean_gen_u=Avg("gen_u"),
            mean_similarity=Avg("similarity"),
        )
        .order_by()
    )}
    # the study's units of each source: its collected units, and its imported outcomes' rows (no unit of theirs)
    units = dict(Unit.objects.filter(study=study)
                 .values("source_id").annotate(n=Count("id")).order_by().values_list("source_id", "n"))
    # Utility is scored per unit only in a utility study (collected or imported outcomes); the other
    # kinds store no unit scores, so they have no per-source utility row to give.
    sources = study_sources(study) if study.kind == Study.Kind.UTILITY else []
    out = []
    for source in sources:
        r = scored.get(source.pk) or {}
        n = r.get("n_scored", 0)
        out.append(
            {
                "source": source.pk,
                "source_name": source.name,
                "n_units": units.get(source.pk, 0) + r.get("n_imported", 0),
                "n_scored": n,
                "n_useful": r.get("n_useful", 0),
                "n_unsure": r.get("n_unsure", 0),
                "n_not_useful": r.get("n_not_useful", 0),
                "share_useful": _share(r.get("n_useful", 0), n),
                "share_unsure": _share(r.get("n_unsure", 0), n),
                "share_not_useful": _share(r.get("n_not_useful", 0), n),
                "n_before_ties": r.get("n_before_ties", 0),
                "n_after_ties": r.get("n_after_ties", 0),
                "accuracy_before": _share(r.get("n_before_correct", 0), n),
                "accuracy_after": _share(r.get("n_after_correct", 0), n),
                "n_task_known": r.get("n_task_known", 0),
                "task_accuracy": _share(r.get("n_task_correct", 0), r.get("n_task_known", 0)),
                "mean_gen_u": r.get("mean_gen_u"),
                "mean_similarity": r.get("mean_similarity"),
                **settings_used,
                **short_units_of_source(results, source.name),
            }
        )
    return out
