"""Write a finished score run to a folder: ``results.json`` and CSV tables (cells a spreadsheet would
run as a formula are neutralised: ``lab.spreadsheet``; ``results.json`` is exact)."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lab.folders import output_folder_prepare
from lab.spreadsheet import csv_writer
from scoring.api.export_units import SCORED_WITH_COLUMNS, SCORED_WITH_READS, ScoredWith
from scoring.errors import ScoringError
from scoring.metrics.pipeline import (
    ALL,
    THEILS_U_FEWER_THAN_2,
    THEILS_U_UTILITY_CONSTANT,
    WITHOUT_GOLD_SOURCES,
)
from scoring.models import ScoreRun, UnitScore
from scoring.reports.intervals import run_bootstrap
from scoring.similarity import MODEL_STATED_IN, figure_stated_in, recorded_model_label
from studies.models import RationaleSource

GOLD_KIND = RationaleSource.Kind.GOLD.value

# Each row ends with what its scores were computed with (``export_units.SCORED_WITH_COLUMNS``, the
# unit-score export's columns: the row's own run, its similarity model, layer and method, its Gen-U
# method, whether the answers changed since, its majority rule and which answers it counted).
UNIT_COLUMNS = [
    "item_id", "external_id", "source", "n_annotators", "before_majority", "after_majority", "before_tie",
    "after_tie", "before_correct", "after_correct", "utility", "task_correct", "gen_u", "similarity", "imported",
    "reported_utility", "gen_u_note", *SCORED_WITH_COLUMNS,
]


def bootstrap_note(results: dict) -> str:
    """How the intervals were drawn, as the run recorded it (``results["bootstrap"]``); a run from
    before it was recorded says so, with what runs drew with then (``intervals.run_bootstrap``, the
    one owner of that fallback)."""
    boot, recorded = run_bootstrap(results)
    text = (f"{boot['confidence']:.0%} intervals: percentile bootstrap over units, {boot['n_resamples']:,} resamples "
            f"(seed {boot['seed']}).")
    if recorded:
        return text
    return f"This run did not record its bootstrap settings; runs from before they were recorded drew {text}"


def utility_note(results: dict) -> str:
    """What every utility figure rests on: the tie rule, which answers counted (and the other
    readings' place), units short of annotators, and the bootstrap."""
    ties = (results.get("ties") or {}).get("units_with_tie", 0)
    parts = [f"{majority_text(results.get('majority_readings') or {})} per unit, a majority tie counted wrong "
             f"({ties} units had a tie)"]
    if counted := counted_text(results):
        parts.append(counted)
    short = results.get("short_units") or {}
    if short:
        n_short = (short.get("n_short_by_source") or {}).get("all", 0)
        parts.append(f"{n_short} units short of annotators scored on the answers they have"
                     + ("; shares over full units only in results.json short_units" if n_short else ""))
    return "; ".join(parts) + ". " + bootstrap_note(results)


# The other reading of the counted answers every note points to first: the tasks that failed an
# attention check, which the published figures count, left out.
WITHOUT_FAILING = "without_tasks_failing_any_check"


def counted_text(results: dict, figure: str = "") -> str:
    """Which answers a figure counts (``results["counted_answers"]``): the rule, how many counted
    tasks failed an attention check, and where the other readings are; with ``figure`` (a key each
    reading repeats, e.g. ``agreement``), the path of that figure without the failing tasks. Empty
    for a run that counted no collected answers (imported outcomes)."""
    counted = results.get("counted_answers") or {}
    if not counted.get("rule"):
        return ""
    text = (f"counted: {counted['rule']}; {counted.get('tasks_failing_an_attention_check', 0)} counted tasks "
            f"failed an attention check ({counted.get('attention_check_rule', 'any wrong check')}) and count")
    reading = (counted.get("other_readings") or {}).get(WITHOUT_FAILING) or {}
    if figure and figure in reading:
        return (f"{text}; without them: results.json counted_answers.other_readings.{WITHOUT_FAILING}.{figure} "
                "(other readings beside it)")
    return f"{text}; other readings in results.json counted_answers.other_readings" if "other_readings" in counted \
        else text


def agreement_note(results: dict, key: str = "agreement") -> str:
    """``agreement.csv``'s ``note`` of the rows of reading ``key`` (``agreement``, or
    ``agreement_by_item``): the answers agreement is computed on (``counted_text``) and, without the
    tasks that failed an attention check, what Krippendorff's alpha of that reading gives, or that
    results.json has no such reading of it."""
    text = counted_text(results, key)
    reading = ((results.get("counted_answers") or {}).get("other_readings") or {}).get(WITHOUT_FAILING) or {}
    if text and reading.get("identical_to") == "published":
        text += " (the same answers as published)"
    elif text and key in reading:
        alpha = ", ".join(f"{step} {_number((row or {}).get('krippendorff_alpha'))}"
                          for step, row in reading[key].items())
        text += f": Krippendorff's alpha {alpha or 'not computed'}"
    elif text and reading:
        text += f"; results.json has no {key} reading without them"
    return text


def _number(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def all_sources_text(results: dict, key: str) -> str:
    """What the ``all`` row of ``key`` pools (``results["all_sources"]``; a run from before it was
    recorded: the sources with a figure of ``key``), the gold-kind sources among them named and,
    where one is, the all figure without them (``all_sources.other_readings``)."""
    pooled, gold = all_pooled(results, key)
    if not pooled:
        return ""
    text = f"the all row pools {', '.join(pooled)}"
    if not gold:
        return text + " (no gold-kind source)" if results.get("all_sources") else text
    text += f", the gold-kind source(s) {', '.join(gold)} included"
    reading = ((results.get("all_sources") or {}).get("other_readings") or {}).get(WITHOUT_GOLD_SOURCES) or {}
    value = reading.get(key)
    if isinstance(value, dict) and isinstance(value.get(ALL), dict):  # utility shares: the three shares
        shares = value[ALL]
        value = ", ".join(f"{cat} {_number(shares.get(cat))}" for cat in ("useful", "unsure", "not_useful"))
    elif isinstance(value, dict):
        value = _number(value.get(ALL), 4)
    if value is not None:
        text += (f"; without them ({', '.join(reading.get('sources') or [])}): {value} (results.json "
                 f"all_sources.other_readings.{WITHOUT_GOLD_SOURCES})")
    return text


def all_pooled(results: dict, key: str) -> tuple[list[str], list[str]]:
    """(the sources the ``all`` figure of ``key`` pools, the gold-kind ones among them): the one
    reading of ``all_sources`` the exports and the report share. A run from before it was recorded:
    the sources with a figure of ``key``, their kinds from ``results["sources"]``."""
    record = results.get("all_sources") or {}
    if key in (record.get("by_measure") or {}):
        pooled = list(record["by_measure"][key])
        gold = [s for s in pooled if s in set(record.get("gold_sources") or [])]
        return pooled, gold
    pooled = sorted(s for s in (results.get(key) or {}) if s != ALL)
    kinds = results.get("sources") or {}
    return pooled, [s for s in pooled if (kinds.get(s) or {}).get("kind") == GOLD_KIND]


def pools_lm_sources_only(results: dict, key: str) -> bool:
    """Whether the ``all`` figure of ``key`` pools what SPEC section 3's over-all figures pool, the
    model sources only: no source it pools is known to be gold-kind (a run that recorded neither
    ``all_sources`` nor ``sources`` does not say a source's kind, and is read as it always was)."""
    return not all_pooled(results, key)[1]


def majority_text(majority: dict) -> str:
    """The majority rule a run used and where its other reading is (``majority_readings``; a run
    from before it was named: plurality, unnamed)."""
    rules = majority.get("rules") or {}
    default = majority.get("default")
    if default not in rules:
        return "majority (plurality) of the annotators"
    text = f"majority of the annotators, {rules[default]}"
    others = [rule for rule in rules if rule != default]
    if majority.get("by_source"):
        text += (f" ({(majority.get('n_units_majority_differs') or {}).get('units', 0)} units differ under "
                 f"{', '.join(others)}: results.json majority_readings)")
    elif majority.get("note"):
        text += f" ({', '.join(others)} gives the same: {majority['note']})"
    return text


def conflicting_text(block: dict) -> str:
    """A question given twice with different answers: the rule, how many, where the other reading is
    (nothing when no counted question had conflicting answers: results.json still names the rule)."""
    if not block.get("n_questions_conflicting_answers"):
        return ""
    text = (f"{block.get('n_questions_conflicting_answers', 0)} question(s) given twice with different answers in "
            f"their file: {(block.get('rules') or {}).get(block.get('default'))}")
    return text + ("; with them left out: conflicting_answers in results.json" if block.get("by_source") else "")


def _by_source(values: dict) -> list[tuple]:
    """``values``' items in one order whatever the dict's (results.json read back from PostgreSQL's
    jsonb comes in another order than the run wrote it): sources by name, ``all`` last."""
    return sorted(values.items(), key=lambda item: (item[0] == ALL, str(item[0])))


def task_accuracy_note(results: dict) -> str:
    """What task accuracy (and Theil's U given it) is over: the scored units with the source's
    predicted answer, per source, and the items left out because they have no rationale."""
    n = results.get("task_accuracy_n") or {}
    missing = {s: k for s, k in (results.get("n_items_without_rationale") or {}).items() if k}
    text = "task accuracy over the scored units only (units nobody answered yet are left out)"
    if n:
        text += " (n: " + ", ".join(f"{s} {k}" for s, k in _by_source(n)) + ")"
    if missing:
        text += "; items without a rationale of the source left out: " + ", ".join(
            f"{s} {k}" for s, k in _by_source(missing))
        wrong = {s: r.get("items_counted_wrong") for s, r in
                 _by_source((results.get("task_accuracy_readings") or {}).get("by_source") or {}) if s in missing}
        if wrong:
            text += " (counted as wrong instead: " + ", ".join(
                f"{s} {v:.3f}" for s, v in wrong.items() if v is not None) + "; task_accuracy_readings)"
    return text


def share_rows(results: dict, key: str = "utility_shares") -> list[dict]:
    rows = []
    for source, row in (results.get(key) or {}).items():
        out = {"source": source, "n": row["n"]}
        for cat in ("useful", "unsure", "not_useful"):
            out[cat] = row[cat]
            out[f"{cat}_ci_low"], out[f"{cat}_ci_high"] = row[f"{cat}_ci"]
        # the source's ties (``pipeline.tie_counts``), where its run recorded them
        out.update({key: row[key] for key in ("no_majority_before", "no_majority_after") if key in row})
        rows.append(out)
    return rows


def gen_u_note(results: dict) -> str:
    """What a Gen-U figure rests on (``results["gen_u"]["method"]``; a run from before it was
    recorded: its question filter), for every table that prints one."""
    gen_u = results.get("gen_u") or {}
    note = gen_u.get("method") or (f"Gen-U on {gen_u['question_filter']}" if gen_u.get("question_filter") else "")
    conflicting = conflicting_text(gen_u.get("conflicting_answers") or {})
    return f"{note}; {conflicting}" if note and conflicting else note or conflicting


def with_bootstrap_note(note: str, results: dict) -> str:
    """``note`` followed by how the intervals beside it were drawn (``bootstrap_note``)."""
    return f"{note.rstrip('.')}. {bootstrap_note(results)}" if note else bootstrap_note(results)


def utility_share_rows(results: dict) -> list[dict]:
    """``utility_shares.csv``: the utility shares with the ``note`` of what they rest on, the ``all``
    row's naming what it pools (``all_sources_text``)."""
    note = utility_note(results)
    pooled = all_sources_text(results, "utility_shares")
    return [{**row, "note": f"{note} {pooled}." if pooled and row["source"] == ALL else note}
            for row in share_rows(results)]


def gen_u_share_rows(results: dict) -> list[dict]:
    """``gen_u_shares.csv``: the Gen-U shares with the ``note`` of what they rest on, their
    intervals' bootstrap included."""
    note = with_bootstrap_note(gen_u_note(results), results)
    return [{**row, "note": note} for row in share_rows(results, "gen_u_shares")]


def generalization_note(gen: dict) -> str:
    """What every Figure 4 figure rests on (``results["generalization"]``): the questions it counts
    and how accuracy is aggregated, with the other reading (a run from before they were recorded
    names what it has)."""
    parts = []
    if gen.get("question_filter"):
        parts.append(f"questions: {gen['question_filter']}")
    aggregation = gen.get("aggregation") or {}
    if aggregation:
        parts.append(f"accuracy {aggregation['rule']}; the other reading, accuracy {aggregation['other_reading']}")
    if (gen.get("majority_readings") or {}).get("by_source"):  # where the majority rule's readings differ
        parts.append(majority_text(gen["majority_readings"]))
    if conflicting := conflicting_text(gen.get("conflicting_answers") or {}):
        parts.append(conflicting)
    return "; ".join(parts)


def _bins_text(row: dict) -> str:
    edges = ", ".join(f"{e:.4f}" for e in row.get("edges") or [])
    return f"{row.get('bins_used')} of {row.get('bins_asked')} bins used (edges {edges})"


def similarity_binning_note(binning: dict) -> str:
    """How the similarity quintiles were binned and U under the other bin counts
    (``results["similarity_binning"]``; empty for a run from before it was recorded), for the
    report and ``associations.csv``."""
    if not binning:
        return ""
    others = []
    for row in (binning.get("other_readings") or {}).values():
        value = (row.get("theils_u") or {}).get("all")
        shown = f"{value:.4f}" if value is not None else "not computed"
        others.append(f"{shown} with {row.get('bins_asked')} bins ({_bins_text(row)})")
    text = f" Bins: {binning.get('rule')}; {_bins_text(binning)}."
    if others:
        text += (" SPEC says only \"binned similarity\"; the other readings, U(utility | similarity bin): "
                 + "; ".join(others) + ".")
    return text


# Why a cell of U(utility | X) says nothing (``pipeline.theils_u_degenerate``), as associations.csv's
# note of that row says it (the report's ``sections.theils_u_degenerate_notes`` reads these too).
THEILS_U_DEGENERATE_TEXT = {
    THEILS_U_UTILITY_CONSTANT: "utility does not vary for {source}: U is 1 by definition and says nothing",
    THEILS_U_FEWER_THAN_2: "utility does not vary for {source} (fewer than 2 units): U is 1 by definition and says "
                           "nothing",
}
# results.json keys named like a measure that are not one (``association_rows`` skips them).
NOT_MEASURES = ("theils_u_degenerate",)


def degenerate_text(why: str, source: str) -> str:
    return THEILS_U_DEGENERATE_TEXT.get(why, "{source}: " + str(why)).format(source=source)


def association_rows(results: dict) -> list[dict]:
    """One row per (measure, source); ``note`` says what a figure depends on (the similarity
    model and layer, the Gen-U question filter, and, every measure being of utility, the utility
    note: the majority and tie rule and the answers counted), so it is never read without it; an
    ``all`` row names the sources it pools (``all_sources_text``), a cell whose U is 1 by definition
    says so (``theils_u_degenerate``, not a measure: never a row of its own)."""
    similarity = results.get("similarity") or {}
    notes = {
        "similarity": (f"BERTScore with {recorded_model_label(similarity)} (the published "
                       f"figures' model: {similarity['paper_used']})") if similarity else "",
        "gen_u": gen_u_note(results),
        "task_accuracy": task_accuracy_note(results),
    }
    degenerate = results.get("theils_u_degenerate") or {}
    rows = []
    for name, per_source in results.items():
        if not (name.startswith("theils_u_") or name.startswith("correlation_ratio_")) or name in NOT_MEASURES \
                or not isinstance(per_source, dict):
            continue
        note = next((text for key, text in notes.items() if key in name), "")
        if name == "theils_u_utility_given_similarity_quintile":
            note = "; ".join(part for part in (note, binned_similarity_note(results)) if part)
        if "utility" in name:
            note = "; ".join(part for part in (note, "utility: " + utility_note(results)) if part)
        paper = similarity.get("paper") if name.startswith("correlation_ratio_") else None
        # the quoted over-all figure pools the LMs: beside an all row only where it pools as much
        spec_pool = pools_lm_sources_only(results, name)
        for source, value in per_source.items():
            theirs = (paper or {}).get("correlation_ratio", {}).get(source)
            if source == ALL and not spec_pool:
                theirs = None
            extra = (f"; the published figure ({figure_stated_in(source)}), with {paper['model']} "
                     f"({paper.get('model_stated_in') or MODEL_STATED_IN}): {theirs}"
                     if theirs is not None and not paper.get("same_model") else "")
            if source == ALL and (pooled := all_sources_text(results, name)):
                extra += f"; {pooled}"
            if why := (degenerate.get(name) or {}).get(source):
                extra += f"; {degenerate_text(why, source)}"
            rows.append({"measure": name, "source": source, "value": value, "note": note + extra})
    return rows


def binned_similarity_note(results: dict) -> str:
    """What U(utility | similarity quintile) rests on besides the model: the binning rule, the bins
    used of those asked (tied similarities can merge them, so the name's "quintile" may be fewer
    bins) and U under the other bin counts (``similarity_binning``; empty for an older run)."""
    binning = results.get("similarity_binning") or {}
    if not binning:
        return ""
    text = similarity_binning_note(binning).strip()
    if binning.get("bins_used") != binning.get("bins_asked"):
        text += (f" The measure is named for the {binning.get('bins_asked')} bins asked (quintiles); "
                 f"{binning.get('bins_used')} were used.")
    return text


# generalization.csv's columns after the majority figures: the ties they count wrong and the other
# reading, per answer (``score.FIGURE_4_AGGREGATION``); empty for a run from before they were recorded.
PER_ANSWER_COLUMNS = ["ties_before", "ties_after", "n_answers_before", "n_answers_after",
                      "accuracy_before_per_answer", "accuracy_after_per_answer", "delta_per_answer"]


def generalization_rows(results: dict) -> list[dict]:
    """``generalization.csv``: Figure 4 per group, majority per unit (a tie wrong) with its interval,
    then its ties and the per-answer reading, and the ``note`` of what it rests on (the interval's
    bootstrap included)."""
    gen = results.get("generalization") or {}
    note = with_bootstrap_note(generalization_note(gen), results)
    rows = []
    for group in ("by_type", "by_utility", "by_source", "by_source_and_type"):
        for key, row in (gen.get(group) or {}).items():
            rows.append({"group": group, "key": key, "n": row["n"], "accuracy_before": row["accuracy_before"],
                         "accuracy_after": row["accuracy_after"], "accuracy_delta": row["accuracy_delta"],
                         "ci_low": row["accuracy_delta_ci"][0], "ci_high": row["accuracy_delta_ci"][1],
                         **{c: row.get(c) for c in PER_ANSWER_COLUMNS}, "note": note})
    return rows


AGREEMENT_COLUMNS = ["reading", "step", "unit", "n_units", "n_annotations", "n_units_alpha", "n_units_single_answer",
                     "krippendorff_alpha", "fleiss_kappa", "fleiss_kappa_full_units", "full_units_raters",
                     "full_units_n", "fleiss_kappa_note", "early_stopping_bias", "filled_units_n",
                     "filled_units_annotations", "filled_units_alpha", "filled_units_kappa", "note"]


def agreement_rows(results: dict) -> list[dict]:
    """``agreement.csv``: the published agreement per step (its unit named), then the by-item
    reading of the before answers; the full-units-only kappa flattened into its columns and
    ``fleiss_kappa_note`` kept; where the study stopped units early, the bias note and the filled
    units' reading (``filled_units``) flattened into theirs; ``note``: the answers counted, those of
    tasks that failed an attention check among them, and alpha without them (``agreement_note``)."""
    rows = []
    for reading, key in (("published", "agreement"), ("by item", "agreement_by_item")):
        note = agreement_note(results, key)
        for step, row in (results.get(key) or {}).items():
            full = row.get("fleiss_kappa_full_units") or {}
            filled = row.get("filled_units") or {}
            rows.append({"reading": reading, "step": step,
                         **{k: v for k, v in row.items() if k not in ("fleiss_kappa_full_units", "filled_units")},
                         "fleiss_kappa_full_units": full.get("fleiss_kappa"), "full_units_raters": full.get("raters"),
                         "full_units_n": full.get("n_units"), "filled_units_n": filled.get("n_units"),
                         "filled_units_annotations": filled.get("n_annotations"),
                         "filled_units_alpha": filled.get("krippendorff_alpha"),
                         "filled_units_kappa": filled.get("fleiss_kappa"), "note": note})
    return rows


def _write_csv(path: Path, rows: list[dict], columns: list[str] | None = None) -> None:
    columns = columns or (list(rows[0]) if rows else [])
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv_writer(fh)
        writer.writerow(columns)
        writer.writerows([row.get(column) for column in columns] for row in rows)


# Every file ``score_run_export`` writes: a folder is reused run after run (README: ``score_study 3
# --out results/``), so a file of these names the new run does not produce is the older run's and is
# removed; files of other names are the user's and are left alone. ``results.json`` is the set's
# marker: removed first and put back last, so a folder with one holds exactly that run's tables.
RESULTS_FILE = "results.json"
TABLE_FILES = ("units.csv", "utility_shares.csv", "associations.csv", "agreement.csv", "gen_u_shares.csv",
               "generalization.csv")
# The column of every summary table naming the run it comes from (``units.csv`` names each row's own
# run in its ``score_run`` column, ``SCORED_WITH_COLUMNS``).
RUN_COLUMN = "score_run"


def _with_run(rows: list[dict], columns: list[str] | None, run: ScoreRun) -> tuple[list[dict], list[str]]:
    columns = [*(columns or (list(rows[0]) if rows else [])), RUN_COLUMN]
    return [{**row, RUN_COLUMN: run.pk} for row in rows], columns


# The folder's lock (``_folder_lock``) and the prefix of the folders each set is written into.
LOCK_FILE = ".score_run_export.lock"
STAGING_PREFIX = ".score_run_export-"


def results_folder_prepare(out_dir: str | Path) -> Path:
    """``out_dir`` created if missing (with its parents) and checked to take ``score_run_export``'s
    files, by making and removing a folder in it as the export's first write does: an OSError naming
    the path when it is not a folder or cannot be created or written to. ``score_study`` calls it
    before scoring, so an ``--out`` that cannot take the files is refused before a run is stored
    (``lab.folders.output_folder_prepare``, the one check)."""
    return output_folder_prepare(out_dir, probe_prefix=STAGING_PREFIX)


@contextmanager
def _folder_lock(out: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``out``'s ``LOCK_FILE`` while the block runs: two exports into one
    folder at once swap their sets in one after the other, never interleaved. The file is left in
    the folder (removing it would let a waiting export lock a file the next one no longer sees)."""
    with (out / LOCK_FILE).open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # released when the file is closed
        yield


def _swap_in(staging: Path, out: Path, names: list[str]) -> list[Path]:
    """Move the set written into ``staging`` into ``out``, holding the folder's lock
    (``_folder_lock``) throughout: the old ``results.json`` goes first, then each table, then any
    table of ``TABLE_FILES`` this run did not write, and the new ``results.json`` last. A stop
    part-way leaves a folder without ``results.json`` (and every table names its run), never a
    ``results.json`` beside another run's tables; another export into the folder waits its turn."""
    with _folder_lock(out):
        (out / RESULTS_FILE).unlink(missing_ok=True)
        for name in names:
            if name != RESULTS_FILE:
                os.replace(staging / name, out / name)
        for name in TABLE_FILES:
            if name not in names:
                (out / name).unlink(missing_ok=True)
        os.replace(staging / RESULTS_FILE, out / RESULTS_FILE)
    return [out / name for name in names]


def score_run_export(*, run: ScoreRun, out_dir: str | Path) -> list[Path]:
    """Write ``results.json``, ``units.csv`` (one row per UnitScore; ``gen_u_note`` says what its gen_u
    rests on, the tie rule included, and the ``SCORED_WITH_COLUMNS`` what its own run computed it
    with: ``similarity_model`` beside ``similarity``), ``utility_shares.csv``,
    ``associations.csv``, ``agreement.csv`` and, when present, ``gen_u_shares.csv`` and
    ``generalization.csv`` into ``out_dir`` (created if missing), each summary table ending with
    the run's id (``score_run``). The set is written into a folder inside ``out_dir`` and moved in
    once whole (``_swap_in``, under the folder's lock ``LOCK_FILE``): an older run's files of these
    names are replaced or removed, other files are left alone. Returns the paths written; an OSError
    (a path that is not a folder, a folder that cannot be written to) propagates."""
    if run.status != ScoreRun.Status.DONE:
        raise ScoringError(f"Score run {run.pk} is {run.status}, not done: {run.error or 'score the study first'}.")
    out = results_folder_prepare(out_dir)
    results = run.results
    units = UnitScore.objects.filter(study_id=run.study_id).select_related("item", "source").order_by("source__name", "item_id")
    # gen_u's tie rule and questions (``gen_u_note``), on every row as the other tables' ``note``
    note = gen_u_note(results)
    # and what each row's own run computed it with, as the unit-score export says (the operator's reading)
    scored_with = ScoredWith(run.study_id, user=None)
    own = ("item_id", "external_id", "source", "gen_u_note", *SCORED_WITH_COLUMNS)
    unit_rows = [{
        "item_id": u.item_id, "external_id": u.item.external_id, "source": u.source.name,
        **{c: getattr(u, c) for c in UNIT_COLUMNS if c not in own},
        "gen_u_note": note,
        **dict(zip(SCORED_WITH_COLUMNS, scored_with.values(*(getattr(u, name) for name in SCORED_WITH_READS)),
                   strict=True)),
    } for u in units]
    tables = {
        "units.csv": (unit_rows, UNIT_COLUMNS),
        "utility_shares.csv": _with_run(utility_share_rows(results), None, run),
        "associations.csv": _with_run(association_rows(results), ["measure", "source", "value", "note"], run),
        "agreement.csv": _with_run(agreement_rows(results), AGREEMENT_COLUMNS, run),
    }
    if results.get("gen_u_shares"):
        tables["gen_u_shares.csv"] = _with_run(gen_u_share_rows(results), None, run)
    if results.get("generalization"):
        tables["generalization.csv"] = _with_run(generalization_rows(results), None, run)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
    try:
        (staging / RESULTS_FILE).write_text(json.dumps(results, indent=2, sort_keys=False), encoding="utf-8")
        for name, (rows, columns) in tables.items():
            _write_csv(staging / name, rows, columns)
        return _swap_in(staging, out, [RESULTS_FILE, *tables])
    finally:
        shutil.rmtree(staging, ignore_errors=True)
