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
from scoring.metrics.pipeline import ALL
from scoring.models import ScoreRun, UnitScore
from scoring.reports.intervals import run_bootstrap
from scoring.similarity import MODEL_STATED_IN, figure_stated_in, recorded_model_label

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
    counted = results.get("counted_answers") or {}
    if counted.get("rule"):
        parts.append(f"counted: {counted['rule']}; {counted.get('tasks_failing_an_attention_check', 0)} counted tasks "
                     f"failed an attention check ({counted.get('attention_check_rule', 'any wrong check')}); other "
                     "readings in results.json counted_answers.other_readings")
    short = results.get("short_units") or {}
    if short:
        n_short = (short.get("n_short_by_source") or {}).get("all", 0)
        parts.append(f"{n_short} units short of annotators scored on the answers they have"
                     + ("; shares over full units only in results.json short_units" if n_short else ""))
    return "; ".join(parts) + ". " + bootstrap_note(results)


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
    """``utility_shares.csv``: the utility shares with the ``note`` of what they rest on."""
    note = utility_note(results)
    return [{**row, "note": note} for row in share_rows(results)]


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


def association_rows(results: dict) -> list[dict]:
    """One row per (measure, source); ``note`` says what a figure depends on (the similarity
    model and layer, the Gen-U question filter), so it is never read without it."""
    similarity = results.get("similarity") or {}
    notes = {
        "similarity": (f"BERTScore with {recorded_model_label(similarity)} (the published "
                       f"figures' model: {similarity['paper_used']})") if similarity else "",
        "gen_u": gen_u_note(results),
        "task_accuracy": task_accuracy_note(results),
    }
    rows = []
    for name, per_source in results.items():
        if not (name.startswith("theils_u_") or name.startswith("correlation_ratio_")):
            continue
        note = next((text for key, text in notes.items() if key in name), "")
        if "task_accuracy" in name:
            note += "; utility: " + utility_note(results)
        if name == "theils_u_utility_given_similarity_quintile":
            note = "; ".join(part for part in (note, binned_similarity_note(results)) if part)
        paper = similarity.get("paper") if name.startswith("correlation_ratio_") else None
        for source, value in per_source.items():
            theirs = (paper or {}).get("correlation_ratio", {}).get(source)
            extra = (f"; the published figure ({figure_stated_in(source)}), with {paper['model']} "
                     f"({paper.get('model_stated_in') or MODEL_STATED_IN}): {theirs}"
                     if theirs is not None and not paper.get("same_model") else "")
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
                     "filled_units_annotations", "filled_units_alpha", "filled_units_kappa"]


def agreement_rows(results: dict) -> list[dict]:
    """``agreement.csv``: the published agreement per step (its unit named), then the by-item
    reading of the before answers; the full-units-only kappa flattened into its columns and
    ``fleiss_kappa_note`` kept; where the study stopped units early, the bias note and the filled
    units' reading (``filled_units``) flattened into theirs."""
    rows = []
    for reading, key in (("published", "agreement"), ("by item", "agreement_by_item")):
        for step, row in (results.get(key) or {}).items():
            full = row.get("fleiss_kappa_full_units") or {}
            filled = row.get("filled_units") or {}
            rows.append({"reading": reading, "step": step,
                         **{k: v for k, v in row.items() if k not in ("fleiss_kappa_full_units", "filled_units")},
                         "fleiss_kappa_full_units": full.get("fleiss_kappa"), "full_units_raters": full.get("raters"),
                         "full_units_n": full.get("n_units"), "filled_units_n": filled.get("n_units"),
                         "filled_units_annotations": filled.get("n_annotations"),
                         "filled_units_alpha": filled.get("krippendorff_alpha"),
                         "filled_units_kappa": filled.get("fleiss_kappa")})
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
