"""Reads of the scoring app."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime

from django.core.cache import cache
from django.db.models import Count, Exists, Max, OuterRef, Q

from annotations.models import Assignment, Claim, PlatformSubmission, Unit
from annotations.selectors import COUNTING_ASSIGNMENT_STATUSES, HOLDING_FLAGS, claim_counts, on_hold
from scoring.metrics import pipeline, planning
from scoring.models import ScoreRun, UnitScore
from studies.models import GeneralizationQuestion, ImportRecord, Study
from studies.selectors import sources_for_user, studies_for_user, study_outcome_imports


def score_run_latest(*, study: Study) -> ScoreRun | None:
    """The study's latest finished run: of its done runs, the one asked for last (by creation, not
    by when it finished: a run that finishes after a run asked for later is refused where it would
    store, ``runs.score_run_store_lock``, so this run's unit scores are the study's)."""
    return ScoreRun.objects.filter(study=study, status=ScoreRun.Status.DONE).order_by("-created_at", "-pk").first()


# --- results as a reader may read them ------------------------------------------------------------

# Why an answerer's fine-tuning and answering settings are left out of what a reader gets: the one
# wording of the rule, for the bundle's study.json (``bundle.export.answerer_sources_json``) and for
# every copy of results.json a reader is handed (``results_for_reader``). ``{reader}``: who may not.
ANSWERER_WITHHELD = ("the settings of the source fine-tuned as this answerer are withheld: {reader} may not read "
                     "that source (studies.view_rationalesource, or a study they may see that uses it)")
RESULTS_READER = "the user reading these results"
# ... and for a run from before results.json recorded which source an answerer's settings came from.
ANSWERER_WITHHELD_UNRECORDED = (
    "the settings of the source fine-tuned as this answerer are withheld: this run did not record which source "
    "they were read from (scored before that was recorded), so only the user who asked for the run and a reader "
    "who may read a fine-tuned source with these very settings see them; score the study again to record it")
# What of a Gen-U answerer entry (``genu._gen_u_method``) a reader who may not read its source keeps:
# the model path (the Gen-U predictions name it already) and how its settings were found.
ANSWERER_KEPT = ("model", "matched_by")


def answerer_withheld(reader: str = RESULTS_READER) -> str:
    """``ANSWERER_WITHHELD`` naming ``reader``."""
    return ANSWERER_WITHHELD.format(reader=reader)


def results_for_reader(run: ScoreRun | None, *, user, reader: str = RESULTS_READER) -> dict:
    """``run``'s results.json as ``user`` may read it: the Gen-U answerers whose source ``user``
    may not read are withheld (``_answerers_for_reader``), and so is every study that lent this
    study utility which ``user`` may not view (``lenders_for_reader``). The operator (``user``
    None) and superusers get the results unchanged; {} for no run."""
    results = (run.results or {}) if run is not None else {}
    if user is None or user.is_superuser:
        return results
    return lenders_for_reader(_answerers_for_reader(run, results, user=user, reader=reader), user=user,
                              reader=reader)


def _answerers_for_reader(run: ScoreRun | None, results: dict, *, user, reader: str) -> dict:
    """``results_for_reader``'s Gen-U answerers. Results are computed with the study owner's
    rights (``genu.answerer_sources_readable``), so they may name the fine-tuning and answering
    settings of a Gen-U answerer source that another reader of the study (a share, or an owner it
    was handed to after the run) may not read (``sources_for_user``, asked of every reader, the
    study's owner and the run's requester too): for such a reader each of those answerer entries
    keeps only ``ANSWERER_KEPT`` and says why the rest is withheld (``answerer_withheld(reader)``),
    and ``gen_u.method`` is rebuilt from what is left (``gen_u_method_text``). An entry of a run from
    before the source was recorded (no ``answerer_source``) names settings read with the rights of
    whoever owned the study then, which the run does not record: it is kept for the run's requester
    and for a reader who may read a fine-tuned source with that model path and those very settings
    (what the run's fallback matched by, ``genu._gen_u_method``), so an owner who still reads the
    source keeps it and one it was handed to who may not does not; withheld from anyone else
    (``ANSWERER_WITHHELD_UNRECORDED``). ``results`` unchanged when nothing is withheld."""
    gen_u = results.get("gen_u") if isinstance(results, dict) else None
    answerers = (gen_u or {}).get("answerers") if isinstance(gen_u, dict) else None
    if not answerers:
        return results
    # No shortcut for the study's owner: it may be one the study was handed to after the run.
    entries = [e for role in answerers.values() for e in (role or []) if isinstance(e, dict)]
    ids = {e["answerer_source"] for e in entries if e.get("answerer_source") is not None}
    readable = set(sources_for_user(user=user).filter(pk__in=ids).values_list("pk", flat=True)) if ids else set()
    requester = run.requested_by_id is not None and run.requested_by_id == user.pk
    models = {str(e.get("model")) for e in entries if "answerer_source" not in e}
    settings_readable = ([] if requester or not models else
                         list(sources_for_user(user=user).filter(model_name_or_path__in=models).exclude(training={})
                              .values_list("model_name_or_path", "training")))

    def why(entry: dict) -> str | None:
        if "answerer_source" not in entry:
            readable_here = (str(entry.get("model")), entry.get("training")) in settings_readable
            return None if requester or readable_here else ANSWERER_WITHHELD_UNRECORDED
        source = entry["answerer_source"]
        return None if source is None or source in readable else answerer_withheld(reader)

    if all(why(e) is None for e in entries):
        return results
    shown = {role: [entry if not isinstance(entry, dict) or why(entry) is None else
                    {**{k: entry[k] for k in ANSWERER_KEPT if k in entry}, "withheld": why(entry)}
                    for entry in (role_entries or [])]
             for role, role_entries in answerers.items()}
    gen_u = {**gen_u, "answerers": shown}
    if "method" in gen_u:
        from scoring.services.genu import gen_u_method_text  # here: scoring.services reads these selectors

        gen_u["method"] = gen_u_method_text(gen_u)
    return {**results, "gen_u": gen_u}


def warnings_for_reader(run: ScoreRun, *, user) -> list[str]:
    """``run``'s warnings as ``user`` may read them: those of ``results_for_reader`` (a warning may
    quote a lending study ``user`` may not view), for every page and field that lists them apart
    from results.json (the API's score run, the admin's run page). A run without results has its
    own (none but a finished run's)."""
    if not run.results:
        return list(run.warnings or [])
    return list(results_for_reader(run, user=user).get("warnings", run.warnings or []))


# What a reader who may not view a study that lent this study utility (``score.borrowed_utility``:
# borrowing reads every study the owner owns) gets in place of its id, name and score run,
# wherever results.json or a bundle names it; the utility it lent stays, this study's figures rest
# on it. ``{reader}``: who may not.
LENDER_WITHHELD = "withheld: a study {reader} may not view"
# Where results.json names lending studies: (block, key) of a provenance (``studies``,
# ``other_lenders``, ``not_scored_here``) and of Figure 4 with each other lender's utility.
LENDER_PROVENANCE = (("generalization", "original_utility_from"), ("properties_model", "utility_from"))
LENDER_BREAKDOWN = ("generalization", "by_utility_other_lenders")
LENDER_LISTS = ("studies", "other_lenders", "not_scored_here")
# A lender's fields that name it: the id, the name and its score run.
LENDER_NAMING = {"id": None, "score_run": None}
# ``data/borrowed_utility.csv``'s ``study_id`` of a withheld lender: never a study's id, and not
# empty, which the import refuses (the column is required).
LENDER_WITHHELD_ID = 0


def lender_withheld(reader: str = RESULTS_READER) -> str:
    """``LENDER_WITHHELD`` naming ``reader``."""
    return LENDER_WITHHELD.format(reader=reader)


def _lender_entries(provenance) -> list[dict]:
    """The lenders a borrowed utility's provenance names (``score.borrowed_utility``); none for one
    read from a bundle (``read_from``): its ids are the studies of the installation that made the
    bundle, not this one's, and the bundle already named them as its maker could see them."""
    if not isinstance(provenance, dict) or provenance.get("read_from"):
        return []
    return [e for key in LENDER_LISTS for e in (provenance.get(key) or []) if isinstance(e, dict)]


def lenders_withheld(provenances, *, user) -> dict[int, str]:
    """The one rule of which lending studies ``user`` may not see: id -> name of each study the
    ``provenances`` (``score.borrowed_utility``'s, or lists of its lender entries) name that
    ``user`` may not view (``studies_for_user``). Borrowing reads every study the borrowing study's
    owner owns, so a share of the borrowing study, or an owner it was handed to, may not view
    them all. None of them for the operator (``user`` None)."""
    entries = [e for p in provenances
               for e in (_lender_entries(p) if isinstance(p, dict) else [x for x in p or [] if isinstance(x, dict)])]
    named = {int(e["id"]): str(e.get("name") or "") for e in entries if isinstance(e.get("id"), int)}
    if user is None or not named:
        return {}
    seen = set(studies_for_user(user=user).filter(pk__in=named).values_list("pk", flat=True))
    return {pk: name for pk, name in named.items() if pk not in seen}


def _lender_shown(entry, withheld: dict[int, str], marker: str):
    if not isinstance(entry, dict) or entry.get("id") not in withheld:
        return entry
    return {**entry, **{k: v for k, v in LENDER_NAMING.items() if k in entry}, "name": marker}


def provenance_for_reader(provenance, withheld: dict[int, str], *, reader: str = RESULTS_READER):
    """A borrowed utility's ``provenance`` with each lender in ``withheld`` (``lenders_withheld``)
    named by ``lender_withheld(reader)`` only: id and score run None, the pairs and utility it lent
    kept. ``provenance`` itself when nothing is withheld, or when it was read from a bundle."""
    if not withheld or not _lender_entries(provenance):
        return provenance
    marker = lender_withheld(reader)
    return {**provenance, **{key: [_lender_shown(e, withheld, marker) for e in provenance[key]]
                             for key in LENDER_LISTS if isinstance(provenance.get(key), list)}}


def _text_for_reader(text, withheld: dict[int, str], marker: str):
    """A warning that names a withheld lender (``score._other_lenders_named``: its name quoted;
    ``not_scored_here``: its name quoted and its id) with ``marker`` in its place."""
    if not isinstance(text, str):
        return text
    for pk, name in withheld.items():
        if name:
            text = text.replace(f"{name!r} (id {pk})", repr(marker)).replace(repr(name), repr(marker))
    return text


def lenders_for_reader(results: dict, *, user, reader: str = RESULTS_READER) -> dict:
    """``results`` without the id, name and score run of a study that lent it utility which
    ``user`` may not view (``lenders_withheld``), in every key that names one
    (``LENDER_PROVENANCE``, ``LENDER_BREAKDOWN``) and in the warnings that quote its name; the
    utility values and the figures built on them stay. ``results`` itself when nothing is withheld."""
    if not isinstance(results, dict):
        return results
    blocks = {block: results.get(block) for block, _ in (*LENDER_PROVENANCE, LENDER_BREAKDOWN)}
    blocks = {block: value for block, value in blocks.items() if isinstance(value, dict)}
    provenances = [blocks[block].get(key) for block, key in LENDER_PROVENANCE if block in blocks]
    block, key = LENDER_BREAKDOWN
    breakdown = (blocks.get(block) or {}).get(key)
    withheld = lenders_withheld([*provenances, breakdown if isinstance(breakdown, list) else []], user=user)
    if not withheld:
        return results
    marker = lender_withheld(reader)
    shown = {name: dict(value) for name, value in blocks.items()}
    for block, key in LENDER_PROVENANCE:
        if block in shown and key in shown[block]:
            shown[block][key] = provenance_for_reader(shown[block][key], withheld, reader=reader)
    block, key = LENDER_BREAKDOWN
    if isinstance(breakdown, list):
        shown[block][key] = [_lender_shown(e, withheld, marker) for e in breakdown]
    warnings = results.get("warnings")
    if isinstance(warnings, list):
        shown["warnings"] = [_text_for_reader(w, withheld, marker) for w in warnings]
    return {**results, **shown}


def _could_count() -> Q:
    """A claim whose answers count or could have counted: completed, and of a task submitted or
    approved whose slot is still held (``claim_counts`` but for the hold: held work counts once
    cleared), or of a task rejected (its claims are released by the rejection, which took them out
    of what counts). Active, returned and expired work never counted: sync holding or lifting it
    (a ``NOT_SUBMITTED_HERE`` flag on a returned task) changes nothing that counts."""
    return Q(completed_at__isnull=False) & (
        Q(released=False, assignment__status__in=COUNTING_ASSIGNMENT_STATUSES)
        | Q(assignment__status=Assignment.Status.REJECTED))


def _counting_changed() -> dict:
    """The aggregates of the changes to the answers that count, over the claims aggregated, of those
    that count or could have counted (``_could_count``: held ones and rejected ones too): a task
    submitted (counting work) or rejected unless still on hold (``on_hold``: held work never counted
    and a rejection keeps it out, so rejecting it changes nothing that counts; one held after the run
    read it is dated by its hold, ``flagged_at``), a hold set (``PlatformSubmission.flagged_at`` of a holding
    flag), a hold lifted by sync (``flagged_at`` of a flag changed back to none) and a hold cleared
    by a researcher (``cleared_at``). Active, returned and expired work never counted and changes
    nothing, whatever sync writes of it. The one owner of those conditions, for a unit
    (``unit_counting_changes``) and a whole study (``study_counting_changed_at``)."""
    counting, could_count = claim_counts(), _could_count()
    hold = "assignment__platform_submissions__"
    flag_changed = (Q(**{f"{hold}flag__in": HOLDING_FLAGS})
                    | Q(**{f"{hold}flag": PlatformSubmission.Flag.OK, f"{hold}flagged_at__isnull": False}))
    return {"submitted": Max("assignment__submitted_at", filter=counting),
            "rejected": Max("assignment__reviewed_at",
                            filter=could_count & Q(assignment__status=Assignment.Status.REJECTED)
                            & ~on_hold("assignment_id")),
            "flagged": Max(f"{hold}flagged_at", filter=could_count & flag_changed),
            "cleared": Max(f"{hold}cleared_at", filter=could_count & Q(**{f"{hold}flag__in": HOLDING_FLAGS}))}


def _latest(times) -> datetime | None:
    return max((t for t in times if t is not None), default=None)


def unit_counting_changes(*, study: Study) -> dict[tuple[int, int], tuple[int, datetime | None]]:
    """(item, source) -> (how many answers count now for the study's utility unit, the latest time
    its counting answers changed), in one grouped query (its size is the study's units). Together
    they tell whether a unit's scores are stale (``selectors.unit_score_stale``): a run aggregated
    ``n_annotators`` counting answers and finished at ``finished_at``; a different count now (work
    rejected, withdrawn, put on hold or cleared) or a change after it (``_counting_changed``) means
    the answers that count are not the ones it scored. So a hold set on one task and cleared on
    another after the run is stale though the count is the same."""
    changed = _counting_changed()
    rows = (Claim.objects.filter(study_id=study.pk, unit__isnull=False, unit__generalization_question__isnull=True)
            .values("unit__item_id", "unit__source_id")
            # distinct: the join repeats a claim per platform row
            .annotate(n=Count("id", filter=claim_counts(), distinct=True), **changed)
            .order_by()
            .values_list("unit__item_id", "unit__source_id", "n", *changed))
    return {(item, source): (n, _latest(times)) for item, source, n, *times in rows}


def score_run_read_at(run: ScoreRun) -> datetime | None:
    """When ``run`` began reading the answers it scored (its results.json ``run.read_at``, taken
    before ``score._compute`` reads them): a change of the answers after it may be missing from the
    run though dated before it finished. Its ``finished_at`` for a run from before that was recorded
    (or a time without a zone): ``score_run_read_at_recorded`` tells which."""
    read_at = score_run_read_at_recorded(run)
    return read_at if read_at is not None else run.finished_at


def score_run_read_at_recorded(run: ScoreRun) -> datetime | None:
    """``run``'s results.json ``run.read_at`` as recorded, None for a run from before that was
    recorded (or a time without a zone), so a message can say which time ``score_run_read_at`` is."""
    header = run.results.get("run") if isinstance(run.results, dict) else None
    recorded = header.get("read_at") if isinstance(header, dict) else None
    try:
        read_at = datetime.fromisoformat(recorded) if isinstance(recorded, str) else None
    except ValueError:
        read_at = None
    return read_at if read_at is not None and read_at.tzinfo is not None else None


def study_counting_changed_at(*, study: Study) -> datetime | None:
    """The latest time the answers that count in ``study`` changed, over all its units' claims, in one
    query (``_counting_changed``, the changes ``unit_counting_changes`` reads for a utility unit).
    For a generalization study also the latest change of a question its units ask (``updated_at``: a
    validation status set, ``studies.services.questions``): Figure 4 counts a question by it. The
    staleness of a run of a study kind that writes no unit scores
    (``scoring.services.bundle.export.scores_staleness``); None when nothing changed."""
    times = list(Claim.objects.filter(study_id=study.pk, unit__isnull=False)
                 .aggregate(**_counting_changed()).values())
    if study.kind == Study.Kind.GENERALIZATION:
        times.append(GeneralizationQuestion.objects.filter(unit__study_id=study.pk)
                     .aggregate(changed=Max("updated_at"))["changed"])
    return _latest(times)


@dataclass(frozen=True)
class BundleScores:
    """Where the unit scores of a copy imported from a study bundle came from, as the import
    recorded them (``bundle.importing``: its ``ImportRecord``'s ``summary["scores"]``): the bundle's
    file and when it was imported, the study and the score run that computed them on the
    installation that made the bundle (``score_run``, ``finished_at``: None where the bundle did not
    say), and whether that bundle's settings.json ``scores_stale`` called them stale (``stale``: None
    when it did not say, a bundle without a run or made before bundles said; true with no unit named
    for a study kind without unit scores: stale at study level) with the copy's (item, source) of
    each unit it named (``stale_units``), and how many workers who withdrew from
    the original study here the copy left out (``n_left_out``: the record's
    ``workers_withdrawn_from_original``; their answers are not the copy's, but the imported scores
    still count them). A row the copy's own run wrote is not one of these (``UnitScore.score_run``)."""

    filename: str
    imported_at: datetime
    original_study: int | None
    original_name: str
    score_run: int | None
    finished_at: datetime | None
    stale: bool | None
    stale_units: frozenset[tuple[int, int]]
    n_stale: int | None
    n_scored: int | None
    n_left_out: int = 0
    # What that run recorded it scored them with, as the exports' scored-with columns give it
    # (``export_units.scored_with_results``: similarity model, Gen-U method, majority rule, counted
    # answers, ...); empty for a copy imported before the import kept it.
    scored_with: dict = field(default_factory=dict)

    def origin(self) -> str:
        """One sentence: where the scores came from, whether the bundle called them stale, and the
        workers who withdrew from the original that the copy left out (whose answers they count)."""
        return self._origin() + self._left_out()

    def _left_out(self) -> str:
        if not self.n_left_out:
            return ""
        who = "1 worker who withdrew from the original study was" if self.n_left_out == 1 else \
            f"{self.n_left_out:,} workers who withdrew from the original study were"
        return (f"; {who} left out of this copy: its imported scores still count their answers, so score the "
                "study again")

    def _origin(self) -> str:
        run = f"run {self.score_run}" if self.score_run is not None else "a run it does not name"
        when = f", finished {self.finished_at:%Y-%m-%d %H:%M %Z}" if self.finished_at is not None else ""
        text = (f"imported from the study bundle {self.filename} on {self.imported_at:%Y-%m-%d %H:%M %Z}, not scored "
                f"here: {run} of study {self.original_study} ({self.original_name!r}){when}, on the installation "
                "that made the bundle")
        if self.stale and not self.n_stale:
            return (f"{text}; the bundle called its scores stale at study level (its settings.json scores_stale, "
                    "naming no unit: the answers that count, or a generalization study's questions, changed after "
                    "that run read its answers, e.g. a participant withdrew or a task was rejected), so scoring this "
                    "study again gives other numbers")
        if self.stale:
            return (f"{text}; the bundle said {self.n_stale} of its {self.n_scored} units' scores were stale (its "
                    "settings.json scores_stale: the answers that count changed after that run, e.g. a participant "
                    "withdrew), so scoring this study again gives other numbers")
        if self.stale is None:
            return f"{text}; the bundle did not say whether they still match its answers"
        return f"{text}; the bundle said they match its answers"

    def stale_reason(self) -> str:
        """Why the bundle's scores of a unit it named stale are: the bundle said so, by the rule of
        the installation that made it (a change after its run began reading the answers,
        ``score_run_read_at``: the bundle does not give that time, so both readings are named)."""
        return (f"the study bundle {self.filename} said so (settings.json scores_stale: the answers that count "
                f"changed after run {self.score_run} of study {self.original_study} began reading them, or after "
                "it finished for a run from before that was recorded)")


BUNDLE_SCORES_KEY = "scores"  # the bundle import record's summary key ``bundle_scores`` reads


def bundle_import_record(*, study: Study | int) -> ImportRecord | None:
    """The import record of ``study``, a copy imported from a study bundle (its latest, with its
    ``summary`` of what the bundle carried); None for a study not copied from a bundle."""
    study_id = study.pk if isinstance(study, Study) else study
    return (ImportRecord.objects.filter(kind="bundle", summary__study=study_id)
            .order_by("-imported_at", "-pk").only("filename", "imported_at", "summary").first())


def unit_score_stale(*, n_annotators: int | None, imported: bool, read_at, change,
                     bundle: BundleScores | None = None, unit: tuple[int, int] | None = None) -> str:
    """Why a scored row's scores are stale ('' when they are not; the `stale` column is its truth):
    ``change`` is its unit's (counting answers now, last change of them) from
    ``unit_counting_changes``; ``read_at`` when its run began reading the answers
    (``score_run_read_at``: a change while the run computed is dated before it
    finished, yet missing from it, even when the count came out the same). Imported outcomes: never
    (a re-import clears what it changes). ``bundle``: the row was imported with a copy of a study
    bundle and not scored here (``bundle_scores``): stale when the bundle said so of
    ``unit`` (its settings.json ``scores_stale``), and otherwise by the same rule against the run
    that scored it where the bundle was made (``read_at`` is then ``bundle.finished_at``, all the
    bundle gives of that run; a time the bundle did not give is compared with nothing: the count
    alone decides)."""
    if imported:
        return ""
    if bundle is not None and unit in bundle.stale_units:
        return bundle.stale_reason()
    n_now, changed_at = change if change is not None else (0, None)
    if n_now != (n_annotators or 0):
        return f"{n_now} answers count for this unit now; the run aggregated {n_annotators or 0}"
    if changed_at is None or (bundle is not None and read_at is None):
        return ""
    if read_at is not None and changed_at <= read_at:
        return ""
    return ("the answers that count changed after the run finished" if bundle is not None or read_at is None
            else "the answers that count changed after the run began reading them")


def bundle_scores(*, study: Study | int) -> BundleScores | None:
    """Where the unit scores that ``study``, a copy imported from a study bundle, imported came from
    (``BundleScores``); None for a study not copied from a bundle, or copied before the import
    recorded it (``summary["scores"]``)."""
    record = bundle_import_record(study=study)
    if record is None or not isinstance(record.summary.get(BUNDLE_SCORES_KEY), dict):
        return None
    summary, scores = record.summary, record.summary[BUNDLE_SCORES_KEY]
    finished = scores.get("finished_at")
    try:
        finished_at = datetime.fromisoformat(finished) if isinstance(finished, str) else None
    except ValueError:
        finished_at = None
    if finished_at is not None and finished_at.tzinfo is None:
        finished_at = None  # a time without a zone is compared with nothing
    return BundleScores(
        filename=record.filename, imported_at=record.imported_at,
        original_study=summary.get("original_study"), original_name=str(summary.get("original_name") or ""),
        score_run=scores.get("score_run"), finished_at=finished_at, stale=scores.get("stale"),
        stale_units=frozenset((int(item), int(source)) for item, source in scores.get("stale_units") or []),
        n_stale=scores.get("n_stale"), n_scored=scores.get("n_scored"),
        n_left_out=left_out if isinstance(left_out := summary.get("workers_withdrawn_from_original"), int) else 0,
        scored_with=scored_with if isinstance(scored_with := scores.get("scored_with"), dict) else {})


def imported_outcomes_count(*, study: Study) -> int:
    """How many (item, source) outcomes of a study run elsewhere ``study`` holds."""
    return UnitScore.objects.filter(study=study, imported=True).count()


def outcome_import_changes(record: ImportRecord) -> dict[str, int]:
    """How many of the study's imported outcomes the outcomes import ``record`` created, updated and
    removed (``scoring.services.outcomes``: a re-import of the same file changes none; a record from
    before it counted removals, none), with their sum under ``changed``."""
    summary = record.summary if isinstance(record.summary, dict) else {}
    removed = summary.get("removed")
    counts = {"created": record.created, "updated": record.updated,
              "removed": removed if isinstance(removed, int) else 0}
    return {**counts, "changed": sum(counts.values())}


def outcomes_changed_since(*, study: Study, since: datetime | None) -> ImportRecord | None:
    """The latest outcomes import into ``study`` (``study_outcome_imports``) recorded after ``since``
    that changed any of its outcomes (``outcome_import_changes``: rows created, updated or removed),
    or None. A run that began reading the outcomes at ``since`` (``score_run_read_at``) no longer
    matches them then: the re-import cleared the scores of the rows it changed and removed those no
    longer in the file, while the run's results.json still counts what it read. ``since`` None: any
    such import counts (a run with no time to compare with)."""
    records = study_outcome_imports(study=study)
    if since is not None:
        records = records.filter(imported_at__gt=since)
    return next((r for r in records.only("filename", "imported_at", "created", "updated", "summary")
                 if outcome_import_changes(r)["changed"] > 0), None)


# --- the study planner's prior -----------------------------------------------------------------

RELEASED_PRIOR = "released"
RELEASED_PRIOR_LABEL = ("the released StrategyQA study (Joshi et al. 2023: 458 questions x 3 models, "
                        "5 workers per unit, yes/no)")


@dataclass(frozen=True)
class PlanPrior:
    """Where the planner's expected shares come from: ``key`` (``"released"`` or ``"pilot:<id>"``),
    a label that says so, per-source priors and the pooled one (the paired test's baseline), and
    ``workers``: how many workers the prior's units actually had, when that is not one count for
    every unit (a pilot short of workers), said apart from the design's planned workers."""

    key: str
    label: str
    sources: dict
    pooled: planning.SourcePrior
    workers: str = ""


def plan_prior_choices(*, user) -> list[tuple[str, str]]:
    """The priors ``user`` may pick: the released study's shares, or a scored pilot they may view,
    named by its latest run (``score_run_latest``'s order: by creation), whose shares ``plan_prior`` reads."""
    choices = [(RELEASED_PRIOR, f"Released study: {RELEASED_PRIOR_LABEL}")]
    runs = ScoreRun.objects.filter(study__in=studies_for_user(user=user), status=ScoreRun.Status.DONE,
                                   results__has_key="utility_shares").select_related("study").order_by("-created_at", "-pk")
    seen = set()
    for run in runs:
        if run.study_id not in seen:
            seen.add(run.study_id)
            choices.append((f"pilot:{run.study_id}", f"Pilot: {run.study.name} (scored run {run.pk})"))
    return choices


def plan_prior(*, user, key: str = RELEASED_PRIOR) -> PlanPrior:
    """The prior ``key`` names, if ``user`` may read it (``ValueError`` with the reason otherwise).

    A pilot's prior is its latest finished run's useful / unsure / not useful shares per source and
    over all sources (read under scoring's default majority rule, the plurality: ``utility_shares``),
    fitted to the workers its scored units actually had (``pilot_worker_counts``: a unit short of
    workers was scored on the answers it had, so its share is fitted with that many), and its answer
    choices."""
    if key == RELEASED_PRIOR:
        priors = planning.released_priors()
        pooled = priors.pop(pipeline.ALL)
        return PlanPrior(key, RELEASED_PRIOR_LABEL, priors, pooled)
    if key not in dict(plan_prior_choices(user=user)):
        raise ValueError(f"Unknown prior {key[:40]!r}: pick the released study or a scored pilot you may view.")
    study = Study.objects.select_related("dataset").get(pk=int(key.split(":", 1)[1]))
    run = score_run_latest(study=study)
    shares = (run.results or {}).get("utility_shares") or {} if run else {}
    planned, assumed = pilot_raters(study=study, run=run)
    counts = pilot_worker_counts(study=study, planned=max(planned, 1))
    choices = study_answer_choices(study=study)
    priors = {}
    for name, row in shares.items():
        try:
            useful, unsure = float(row["useful"]), float(row["unsure"])
        except (KeyError, TypeError, ValueError):
            continue
        workers = counts.get(name) or counts.get(pipeline.ALL) or min(max(planned, 1), planning.MAX_RATERS)
        priors[name] = planning.SourcePrior.from_shares(name, useful, unsure, raters=workers, choices=choices)
    if pipeline.ALL not in priors:
        raise ValueError(f"The pilot {study.name!r} has no utility shares in its latest scored run.")
    pooled = priors.pop(pipeline.ALL)
    seen = counts.get(pipeline.ALL)
    workers_text = ""
    if seen and (len(seen) > 1 or seen[0][0] < planned):
        workers = pilot_workers_summary(seen, planned=planned)
        workers_text = pilot_workers_text(seen, planned=planned)
    else:
        one = seen[0][0] if seen else min(max(planned, 1), planning.MAX_RATERS)
        workers = (f"{one} workers per unit assumed: its outcomes file does not say how many answered"
                   if assumed and not seen else f"{one} workers per unit")
    label = f"the pilot {study.name} (latest scored run {run.pk}, {workers})"
    return PlanPrior(key, label, priors, pooled, workers_text)


def pilot_worker_counts(*, study: Study, planned: int) -> dict[str, tuple[tuple[int, int], ...]]:
    """The workers a pilot's scored units actually had (``UnitScore.n_annotators``: the answers the
    unit was scored on), per source name and over all (``pipeline.ALL``): ((workers, units), ...)
    ascending, each count at most ``planning.MAX_RATERS``; no entry where no unit's count is known
    (imported outcomes whose file gave none). A unit the pilot stopped once its result was decided
    (``Unit.decided_at``: ``Study.stop_when_decided``) counts as ``planned`` workers, the pilot's
    workers per unit: no remaining answer could change its outcome, so its outcome is the full
    count's, and it stopped early because its answers agreed (fitted at the answers it had, it would
    overstate the per-worker rates)."""
    decided = Unit.objects.filter(study_id=OuterRef("study_id"), item_id=OuterRef("item_id"),
                                  source_id=OuterRef("source_id"), generalization_question__isnull=True,
                                  decided_at__isnull=False)
    rows = (UnitScore.objects.filter(study=study, utility__isnull=False, n_annotators__gt=0)
            .annotate(decided=Exists(decided))
            .values_list("source__name", "n_annotators", "decided").annotate(n=Count("id")))
    by_source: dict[str, dict[int, int]] = {}
    for name, workers, was_decided, n in rows:
        workers = min(max(int(workers), planned) if was_decided else int(workers), planning.MAX_RATERS)
        for key in (str(name), pipeline.ALL):
            bucket = by_source.setdefault(key, {})
            bucket[workers] = bucket.get(workers, 0) + int(n)
    return {key: tuple(sorted(bucket.items())) for key, bucket in by_source.items()}


def pilot_workers_summary(counts: tuple[tuple[int, int], ...], *, planned: int) -> str:
    """``counts`` (``pilot_worker_counts``) in a few words: the average and the units short."""
    n_units = sum(n for _, n in counts)
    mean = sum(w * n for w, n in counts) / n_units
    short = sum(n for w, n in counts if w < planned)
    return f"its units had {mean:.1f} workers on average, {short} of {n_units} short of the {planned} it asked for"


def pilot_workers_text(counts: tuple[tuple[int, int], ...], *, planned: int) -> str:
    """What the page says of a pilot's units' real worker counts, apart from the design's."""
    spread = ", ".join(f"{n} with {w}" for w, n in counts)
    return (f"Workers the pilot's units actually had: {spread} ({pilot_workers_summary(counts, planned=planned)}). "
            "Each source's per-worker rates are fitted to the workers its units actually had (a short unit was "
            "scored on the answers it had; a unit stopped early once its result was decided counts as the "
            f"{planned} it asked for, its outcome being theirs); this design is then simulated with its own "
            "workers per unit.")


def pilot_raters(*, study: Study, run: ScoreRun | None) -> tuple[int, bool]:
    """The workers per unit a pilot's shares were observed with, and whether that is assumed. A
    study run here: its design's (as its run recorded it). Imported outcomes: the most common
    ``n_annotators`` its file gave; when the file gave none (the released file), the study's
    design value, assumed."""
    recorded = ((run.results or {}).get("study") or {}).get("annotators_per_unit") if run is not None else None
    if not study.is_imported_outcome:
        return int(recorded or study.annotators_per_unit), False
    known = (UnitScore.objects.filter(study=study, n_annotators__isnull=False).values("n_annotators")
             .annotate(n=Count("id")).order_by("-n", "-n_annotators").values_list("n_annotators", flat=True)
             .first())
    if known is not None:
        return int(known), False
    return int(study.annotators_per_unit or recorded or 1), True


def study_answer_choices(*, study: Study) -> int:
    """How many labels a worker picks from in ``study`` (2 for yes/no): every one of them, simulated
    as it is (``study_precision`` simulates at most ``planning.MAX_CHOICES``, and says so past it)."""
    dataset = study.dataset
    n = 2 if dataset is None or dataset.is_yes_no else len(dataset.choice_labels or [])
    return max(n, 2)


# The planner's figures are kept in Django's cache, keyed by everything they depend on (the design,
# the prior's rates, the difference asked, the simulation's version), so a page viewed again does not
# simulate again: a week, then simulated afresh (the same figures: the simulation is seeded).
PLAN_CACHE_SECONDS = 7 * 24 * 3600


def plan_cache_key(priors: tuple, baseline: planning.SourcePrior, **design) -> str:
    """The Django cache key of one design's figures (``study_precision``)."""
    text = repr((planning.VERSION, priors, baseline, sorted(design.items())))
    return "planner:" + hashlib.sha256(text.encode()).hexdigest()


def study_precision(*, study: Study, prior: PlanPrior, n_items: int,
                    difference: float | None = None) -> tuple[planning.Precision, list[str]]:
    """The planner's figures for ``study``'s saved design (``n_items`` items: the design summary's),
    and notes on how each of its sources was matched to the prior. Cached (``plan_cache_key``)."""
    notes = []
    matched = []
    for source in study.sources.order_by("name"):
        found = prior.sources.get(source.name)
        if found is None:
            notes.append(f"{source.name}: no shares in {prior.label}; the pooled shares over its sources are used.")
            found = prior.pooled
        matched.append(planning.SourcePrior(source.name, found.q_before, found.q_after))
    raters = min(max(study.annotators_per_unit, 1), planning.MAX_RATERS)
    if raters != study.annotators_per_unit:
        notes.append(f"The planner simulates at most {planning.MAX_RATERS} workers per unit.")
    choices = study_answer_choices(study=study)
    if choices > planning.MAX_CHOICES:
        notes.append(f"The dataset has {choices} answer choices; the planner simulates at most "
                     f"{planning.MAX_CHOICES}, so these figures are for {planning.MAX_CHOICES}.")
        choices = planning.MAX_CHOICES
    design = {"n_items": n_items, "raters": raters, "choices": choices, "difference": difference}
    key = plan_cache_key(tuple(matched), prior.pooled, **design)
    result = cache.get(key)
    if not isinstance(result, planning.Precision):
        result = planning.precision(tuple(matched), prior.pooled, **design)
        cache.set(key, result, PLAN_CACHE_SECONDS)
    return result, notes
