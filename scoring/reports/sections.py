"""The report of one score run, section by section, in our order (utility, what predicts it, Gen-U and
generalization, agreement, then the rest; SPEC prescribes no order).

Every section is built from the run's ``results.json`` (``ScoreRun.results``); the association
measures also get their n and a bootstrap interval from the study's unit scores when those are the
run's own (the latest finished run of the study). A section the study's data does not support is
kept with ``absent`` saying why, so the reader knows it was not forgotten."""
from __future__ import annotations

import hashlib
import json

import pandas as pd
from django.core.cache import cache
from django.db.models import OuterRef, Subquery

from annotations.models import Unit
from scoring import plots
from scoring.metrics import theils_u
from scoring.metrics.labels import PLURALITY, STRICT_MAJORITY
from scoring.metrics.pipeline import RC_ONE_INSTANCE
from scoring.models import ScoreRun, UnitScore
from scoring.reports.intervals import correlation_ratio_draws, percentile_ci, run_bootstrap, theils_u_draws
from scoring.reports.tables import Column, Section, Table
from scoring.selectors import score_run_latest
from scoring.services.genu import (
    AS_ANSWERED,
    CONFLICTING_FIRST_KEPT,
    CONFLICTING_LEFT_OUT,
    EVERY_SOURCE_ANSWERED,
    QUESTIONS_NOT_INVALID,
    QUESTIONS_VALIDATED_ONLY,
    UNPARSED_COUNTED_WRONG,
    UNPARSED_LEFT_OUT,
    answerer_text,
)
from scoring.services.results_folder import (
    all_sources_text,
    bootstrap_note,
    degenerate_text,
    pools_lm_sources_only,
    share_rows,
    similarity_binning_note,
)
from scoring.services.score import (
    BUNDLE_INCOMPLETE_NOT_CONSISTENT,
    TASK_ACCURACY_COUNTED_WRONG,
    TASK_ACCURACY_LEFT_OUT,
)
from scoring.similarity import (
    FIGURES_STATED_IN,
    MODEL_STATED_IN,
    figure_stated_in,
    fingerprint_notes,
    recorded_model_label,
)
from studies.models import RationaleSource, Study

ALL = "all"
SHARE_COLUMNS = [
    Column("source", "Source"), Column("n", "n", "int"),
    Column("useful", "Useful", "float"), Column("useful_ci", "95% CI", "ci"),
    Column("unsure", "Unsure", "float"), Column("unsure_ci", "95% CI", "ci"),
    Column("not_useful", "Not useful", "float"), Column("not_useful_ci", "95% CI", "ci"),
]
# The utility table's per-source ties (``pipeline.tie_counts``: units without a majority, counted wrong),
# beside the shares they weigh on; a run from before they were recorded has neither column.
TIE_COLUMNS = [Column("no_majority_before", "No majority before", "int"),
               Column("no_majority_after", "No majority after", "int")]
# results key -> (label, (x column, y column) in the unit scores: U(x | y))
THEILS_U = {
    "theils_u_utility_given_task_accuracy": ("U(utility | task accuracy)", ("utility", "task_correct")),
    "theils_u_task_accuracy_given_utility": ("U(task accuracy | utility)", ("task_correct", "utility")),
    "theils_u_utility_given_gen_u": ("U(utility | Gen-U)", ("utility", "gen_u")),
    "theils_u_gen_u_given_utility": ("U(Gen-U | utility)", ("gen_u", "utility")),
}
REVERSE = {"theils_u_utility_given_task_accuracy": "theils_u_task_accuracy_given_utility",
           "theils_u_utility_given_gen_u": "theils_u_gen_u_given_utility"}
def ci_note(results: dict) -> str:
    """How the intervals were drawn, as the run recorded it (``results["bootstrap"]``; a run from
    before it was recorded says so, with what runs drew with then: ``intervals.run_bootstrap``)."""
    return bootstrap_note(results)


def drawn_ci_notes(results: dict) -> list[str]:
    """For the intervals the report draws itself (Theil's U, eta): how they were drawn, with the
    run's recorded settings (``intervals.run_bootstrap``); a run that did not record them is told
    that they were drawn as runs from before the record drew theirs (``run_bootstrap``'s fallback)."""
    boot, recorded = run_bootstrap(results)
    if recorded:
        return [ci_note(results)]
    return [f"This run did not record its bootstrap settings: the intervals this report draws (Theil's U, η) use "
            f"what runs drew with before they were recorded, {boot['confidence']:.0%} percentile bootstrap over "
            f"units, {boot['n_resamples']:,} resamples (seed {boot['seed']})."]


def _ci_label(results: dict) -> str:
    return f"{run_bootstrap(results)[0]['confidence']:.0%} CI"


UTILITY_ORDER = ["useful", "unsure", "not_useful", "unknown"]


def _ordered(rows: list[dict], key: str, order: list[str] | None = None) -> list[dict]:
    """Rows in a stable order whatever order the stored JSON kept (PostgreSQL's jsonb sorts keys
    by length): ``order`` first when given, then by name, with "all" last."""
    def rank(row):
        name = str(row[key])
        return (name == ALL, order.index(name) if order and name in order else len(order or []), name)

    return sorted(rows, key=rank)


def _share_ci_rows(results: dict, key: str) -> list[dict]:
    rows = []
    for row in _ordered(share_rows(results, key), "source"):
        for cat in ("useful", "unsure", "not_useful"):
            row[f"{cat}_ci_low"], row[f"{cat}_ci_high"] = row.pop(f"{cat}_ci_low"), row.pop(f"{cat}_ci_high")
        rows.append(row)
    return rows


def _warning(results: dict, *needles: str) -> str:
    """The first of the run's warnings that mentions every needle (the reason a part is missing)."""
    for text in results.get("warnings") or []:
        if all(n.lower() in text.lower() for n in needles):
            return text
    return ""


def unit_frame(run: ScoreRun, latest: ScoreRun | None) -> pd.DataFrame | None:
    """The study's unit scores, when they are this run's (``latest``, the study's latest finished
    run, is ``run``); else None."""
    if latest is None or latest.pk != run.pk:
        return None
    # In the study's unit order, as scoring reads its units (``score._units_frame``): the bootstrap
    # resamples rows by position, so the order in which the rows were written (a run mid-collection
    # writes some first) or the database's choice would change the intervals under the same seed.
    unit_order = Subquery(Unit.objects.filter(
        study_id=OuterRef("study_id"), item_id=OuterRef("item_id"), source_id=OuterRef("source_id"),
        generalization_question__isnull=True).order_by("id").values("id")[:1])
    rows = UnitScore.objects.filter(study_id=run.study_id, utility__isnull=False).annotate(
        unit_order=unit_order).order_by("unit_order", "item_id", "source_id").values_list(
        "source__name", "utility", "task_correct", "gen_u", "similarity")
    frame = pd.DataFrame.from_records(list(rows), columns=["source", "utility", "task_correct", "gen_u", "similarity"])
    if len(frame) != (run.results or {}).get("n_units_scored"):
        return None
    return frame


def _groups(frame: pd.DataFrame, columns: list[str]):
    sub = frame.dropna(subset=columns)
    for name, g in sub.groupby("source", sort=True):
        yield str(name), g
    yield ALL, sub


def utility_section(results: dict) -> Section:
    section = Section("utility", "Utility per source (SPEC section 2)")
    if not results.get("utility_shares"):
        section.absent = ("No utility outcomes: utility needs each unit's majority answers before and after the "
                          f"rationale (a utility study, or imported outcomes); this is a {_kind(results)} study.")
        return section
    ties = (results.get("ties") or {}).get("units_with_tie", 0)
    shares = results["utility_shares"]
    rows = _share_ci_rows(results, "utility_shares")
    tie_keys = [c.key for c in TIE_COLUMNS]
    with_ties = any(isinstance(row, dict) and set(tie_keys) <= set(row) for row in shares.values())
    for row in rows:
        row.update({key: (shares.get(row["source"]) or {}).get(key) for key in tie_keys} if with_ties else {})
    section.tables.append(Table("utility_shares", "Share of rationales per utility category",
                                SHARE_COLUMNS + TIE_COLUMNS if with_ties else SHARE_COLUMNS, rows))
    majority = results.get("majority_readings") or {}
    section.notes.append(f"{_majority_rule_text(majority)} per unit; a majority tie counts as wrong ({ties} units had a "
                         "tie" + ("; per source: No majority before / after, the units without a majority answer at that "
                                  "step, counted wrong there" if with_ties else "")
                         + f"). {ci_note(results)}")
    if majority.get("by_source"):
        section.tables.append(majority_readings_table(majority, UTILITY_MAJORITY_COLUMNS))
    if majority:
        section.notes.append(majority_readings_note(majority, "The utility shares and Theil's U"))
    if results.get("study", {}).get("split"):
        section.notes.append(items_note(results["study"]))
    if results.get("counted_answers"):
        section.notes.append(counted_note(results["counted_answers"]))
    if results.get("short_units"):
        section.notes.append(short_units_note(results["short_units"]))
    if pooled := all_sources_text(results, "utility_shares"):
        section.notes.append(f"Utility shares: {pooled}.")
    section.notes += sources_notes(results)
    section.figures.append("utility_shares")
    return section


def _majority_rule_text(majority: dict) -> str:
    """How a unit's majority is taken, as the run named it (a run from before it was named: plurality)."""
    rule = (majority.get("rules") or {}).get(majority.get("default"))
    return f"Majority of the annotators ({rule})" if rule else "Majority of the annotators (plurality)"


UTILITY_MAJORITY_COLUMNS = [
    Column("source", "Source"), Column("reading", "Majority rule"), Column("n", "n", "int"),
    Column("no_majority_before", "No majority before", "int"), Column("no_majority_after", "No majority after", "int"),
    Column("useful", "Useful", "float"), Column("unsure", "Unsure", "float"), Column("not_useful", "Not useful", "float"),
    Column("theils_u_utility_given_task_accuracy", "U(utility | task accuracy)", "float", 4),
    Column("theils_u_utility_given_gen_u", "U(utility | Gen-U)", "float", 4),
]
ACCURACY_MAJORITY_COLUMNS = [
    Column("source", "Source"), Column("reading", "Majority rule"), Column("n", "n", "int"),
    Column("no_majority_before", "No majority before", "int"), Column("no_majority_after", "No majority after", "int"),
    Column("accuracy_before", "Before", "float"), Column("accuracy_after", "After", "float"),
    Column("accuracy_delta", "After − before", "float"),
]


def majority_readings_table(majority: dict, columns: list[Column], name: str = "majority_readings") -> Table:
    """The figures under each reading of the majority rule, the default (plurality) first
    (``majority_readings``: utility shares, or Figure 4's accuracy for a generalization study)."""
    rows = [{"source": source, "reading": label, **(entry.get(rule) or {})}
            for source, rule, label, entry in _readings_by_source(majority)]
    return Table(name, "By the majority rule: plurality (the default) or a strict majority "
                 "(SPEC section 2 leaves it open)", columns, rows)


def majority_readings_note(majority: dict, what: str) -> str:
    """Which majority rule ``what`` use, what SPEC says, and how many units the other reading changes."""
    differs = majority.get("n_units_majority_differs") or {}
    note = (f"{majority.get('spec')}. {what} use the default reading, "
            f"{READING_LABELS.get(majority.get('default'), majority.get('default'))!r} ({_readings_listed(majority)}).")
    if majority.get("by_source"):
        note += (f" {differs.get('units', 0)} of {majority.get('n_units')} units have a plurality that is no strict "
                 f"majority ({differs.get('before', 0)} before, {differs.get('after', 0)} after)")
        if "n_units_utility_differs" in majority:
            note += f", changing the utility of {majority['n_units_utility_differs']}"
        note += "; the table gives both readings."
    elif majority.get("note"):
        note += f" Here {majority['note']}."
    if majority.get("early_stopping"):
        note += f" Early stopping: {majority['early_stopping']}."
    return note


def gen_u_readings_columns(reading: str) -> list[Column]:
    """The columns of a table giving Gen-U's figures per source under each reading of ``reading``
    (what the readings differ on: answers that did not parse, questions with conflicting answers)."""
    return [
        Column("source", "Source"), Column("reading", reading), Column("n", "n", "int"),
        Column("n_questions", "Questions", "int"), Column("mean", "Mean Gen-U", "float"),
        Column("useful", "Useful", "float"), Column("unsure", "Unsure", "float"),
        Column("not_useful", "Not useful", "float"), Column("theils_u", "U(utility | Gen-U)", "float"),
    ]


CONFLICTING_GEN_U_COLUMNS = gen_u_readings_columns("Questions with conflicting answers")
CONFLICTING_FIGURE_4_COLUMNS = [
    Column("source", "Source"), Column("reading", "Questions with conflicting answers"), Column("n", "n", "int"),
    Column("n_questions", "Questions", "int"), Column("accuracy_before", "Before", "float"),
    Column("accuracy_after", "After", "float"), Column("accuracy_delta", "After − before", "float"),
]


def _conflicting_answers_add(section, conflicting: dict, columns: list[Column], key: str, what: str) -> None:
    """The table of both readings (when they differ) and the note naming the rule, for ``what``."""
    if conflicting.get("by_source"):
        section.tables.append(conflicting_answers_table(conflicting, columns, key))
    if conflicting:
        section.notes.append(conflicting_answers_note(conflicting, what))


def conflicting_answers_table(block: dict, columns: list[Column], key: str) -> Table:
    """The figures with a question its file gave twice with different answers kept with its first
    answer (the default) and left out (``gen_u["conflicting_answers"]`` or
    ``generalization["conflicting_answers"]``)."""
    return readings_by_source_table(block, columns, key, "With the questions their file gave twice with different "
                                    "answers kept (first answer) or left out (SPEC is silent)")


def readings_by_source_table(block: dict, columns: list[Column], key: str, title: str) -> Table:
    """A readings block's figures per source under each reading, the default first (``by_source``:
    {source: {reading: figures}}, with U(utility | Gen-U) per reading where the block has it)."""
    rows = []
    for source, rule, label, entry in _readings_by_source(block):
        u = (block.get("theils_u_utility_given_gen_u") or {}).get(rule) or {}
        rows.append({"source": source, "reading": label, **(entry.get(rule) or {}), "theils_u": u.get(source)})
    return Table(key, title, columns, rows)


UNVALIDATED_GEN_U_COLUMNS = gen_u_readings_columns("Questions counted")
UNVALIDATED_TITLE = "With the questions nobody validated counted (published) or left out (SPEC section 4 does not say)"


def unvalidated_questions_note(block: dict, what: str) -> str:
    """Which questions ``what`` count (``gen_u["unvalidated_questions"]`` or
    ``generalization["unvalidated_questions"]``), what SPEC says and where the other reading is."""
    n = block.get("n_questions_unvalidated", 0)
    note = (f"{block.get('spec')}: {what} use the default, {_readings_listed(block)}. {n} counted question(s) "
            "nobody validated")
    return note + ("; the table gives both readings." if n else ", so the readings coincide.")


def gen_u_unvalidated_add(section, block: dict) -> None:
    """Gen-U on validated questions only beside the published figures, when they differ."""
    if block.get("by_source"):
        section.tables.append(readings_by_source_table(block, UNVALIDATED_GEN_U_COLUMNS, "gen_u_unvalidated_questions",
                                                       UNVALIDATED_TITLE))
    if block:
        section.notes.append(unvalidated_questions_note(block, "the Gen-U shares and Theil's U(utility | Gen-U)"))


def conflicting_answers_note(block: dict, what: str) -> str:
    """The rule for a question given twice with different answers, its count and the other reading."""
    n = block.get("n_questions_conflicting_answers", 0)
    note = (f"{block.get('spec')}: {what} use the default, {_readings_listed(block)}. "
            f"{n} counted question(s) had conflicting answers in their file")
    consistency = block.get("consistency") or {}
    if consistency:
        def step(rule: str, name: str):
            return ((consistency.get(rule) or {}).get(name) or {}).get("consistency")

        parts = [f"{_reading_label(rule, block.get('default'))} {_fmt(step(rule, 'before'))} before, "
                 f"{_fmt(step(rule, 'after'))} after" for rule in _readings_in_order(block)]
        note += f"; consistency over an item's questions: {'; '.join(parts)}"
    return note + ("; the table gives both readings." if block.get("by_source") else ".")


def short_units_note(short: dict) -> str:
    """Units scored short of annotators (``results["short_units"]``) and the shares over full units."""
    counts = short.get("n_short_by_source") or {}
    if not counts.get(ALL):
        return "Every scored unit has all the answers it needs."
    per = ", ".join(f"{s} {n}" for s, n in counts.items() if s != ALL)
    full = (short.get("utility_shares_full_units_only") or {}).get(ALL) or {}
    return (f"{counts[ALL]} units are short of annotators ({per}) and are scored on the answers they have. Other "
            f"reading, {short.get('full_units_rule')}: {full.get('n', 0)} units, useful {_fmt(full.get('useful'))}, "
            f"unsure {_fmt(full.get('unsure'))}, not useful {_fmt(full.get('not_useful'))}.")


def sources_notes(results: dict) -> list[str]:
    """One line per rationale source (``results["sources"]``; a run from before it was recorded
    has none): what it is, how it was trained, and what its rationales of the study's items were
    made with, with how many each."""
    notes = []
    for name, source in sorted((results.get("sources") or {}).items()):
        what = [source.get("kind") or "?"]
        if source.get("backend"):
            what.append(f"{source['backend']} backend")
        if source.get("model_name_or_path"):
            what.append(f"model {source['model_name_or_path']}")
        trained = [f"fine-tuning preset {source['training_preset']}" if source.get("training_preset") else "",
                   f"mode {source['training_mode']}" if source.get("training_mode") else "",
                   f"method {source['training_method']}" if source.get("training_method") else ""]
        if any(trained):
            what.append("trained with " + ", ".join(t for t in trained if t))
        loads = f"; it loads checkpoint {source['checkpoint_hash']} now" if source.get("checkpoint_hash") else ""
        made = "; ".join(_generation_text(g, trained=any(trained))
                         for g in source.get("generation") or []) or "none of the study's items"
        notes.append(f"Source {name}: {', '.join(what)}{loads}. Rationales: {made}.")
    return notes


def _generation_text(combo: dict, *, trained: bool = False) -> str:
    """What one ``generation`` row of a source says, and that its weights were since replaced where
    the results know it (``checkpoint_replaced``); ``trained``: the source's line names its training,
    which is then that of other weights."""
    recorded = [f"{key} {json.dumps(combo[key], sort_keys=True) if isinstance(combo[key], dict) else combo[key]}"
                for key in ("backend", "model", "template", "decoding") if combo.get(key) is not None]
    # The seed that sampled is the decoding's; ``seed`` is the source's, which only draws the
    # demonstrations of a source without its own (a record without a decoding seed keeps "seed").
    sampling = combo["decoding"].get("seed") if isinstance(combo.get("decoding"), dict) else None
    if sampling is not None:
        recorded.append(f"sampling seed {sampling}")
    if combo.get("seed") is not None:
        recorded.append(f"source seed {combo['seed']} (it draws only demonstrations)" if sampling is not None
                        else f"seed {combo['seed']}")
    # What tells rows of one source apart beyond those: the demonstrations' content, the checkpoint,
    # and where and how it ran (the endpoint and its api; the device, dtype and library versions).
    recorded += [f"{label} {combo[key]}" for key, label in (("demonstrations_fingerprint", "demonstrations"),
                                                            ("checkpoint_hash", "checkpoint"),
                                                            ("endpoint_url", "endpoint"), ("api", "api"),
                                                            ("device", "device"), ("dtype", "dtype"),
                                                            ("torch", "torch"), ("transformers", "transformers"))
                 if combo.get(key)]
    if combo.get("checkpoint_replaced") is True:
        recorded.append("weights the source no longer loads" + (" (its training above is that of the weights it "
                                                                "loads now)" if trained else ""))
    return f"{combo.get('n_rationales')} " + (f"made with {', '.join(recorded)}" if recorded
                                              else "with no generation record (imported or gold)")


def items_note(study: dict) -> str:
    """Which of the dataset's items the study drew (``results["study"]``)."""
    size = study.get("item_sample_size")
    drawn = (f"a sample of {size} drawn with seed {study.get('sample_seed')}" if size is not None
             else "all of them")
    return f"Items: the {study.get('dataset')} {study.get('split')} split, {drawn}."


def counted_note(counted: dict) -> str:
    """Whose answers the figures count (``results["counted_answers"]``): approved tasks and those
    not yet reviewed, which count until rejected, among them the tasks of workers blocked in the
    study (a block ends only their tasks in progress)."""
    note = (f"Counted: {counted.get('tasks_approved', 0)} approved tasks and {counted.get('tasks_not_reviewed', 0)} "
            f"submitted but not yet reviewed ({counted.get('rule')})")
    if counted.get("tasks_failing_an_attention_check"):
        note += f"; {counted['tasks_failing_an_attention_check']} of them failed an attention check"
    if counted.get("attention_check_rule"):
        note += f" ({counted['attention_check_rule']})"
    if "tasks_on_hold" in counted:  # runs from before it was recorded say nothing of the work left out
        # what puts work on hold, named where any was (results.json counted_answers.hold_rule)
        held_by = f"; on hold is {counted['hold_rule']}" if counted["tasks_on_hold"] and counted.get("hold_rule") else ""
        note += (f". Left out: {counted['tasks_on_hold']} tasks on hold ({counted.get('answers_on_hold', 0)} answers; "
                 f"they count once a researcher clears them{held_by}) and {counted.get('tasks_rejected', 0)} rejected "
                 f"({counted.get('answers_rejected', 0)} answers)")
    if "tasks_returned_with_completed_answers" in counted:
        expired = counted.get("tasks_expired_with_completed_answers", 0)
        # what expires a task, named where any did (results.json counted_answers.expiry_rule)
        expired_by = f"; {counted['expiry_rule']}" if expired and counted.get("expiry_rule") else ""
        note += (f"; {counted['tasks_returned_with_completed_answers']} returned tasks "
                 f"({counted.get('answers_returned', 0)} answers to completed questions) and "
                 f"{expired} expired tasks "
                 f"({counted.get('answers_expired', 0)} answers{expired_by}) are left out as well")
    also = []
    if counted.get("tasks_of_blocked_workers"):
        also.append(f"{counted['tasks_of_blocked_workers']} tasks of workers blocked in this study "
                    f"({counted.get('answers_of_blocked_workers', 0)} answers; {counted.get('blocked_worker_rule')})")
    if counted.get("tasks_speeding"):
        also.append(f"{counted['tasks_speeding']} speeding tasks ({counted.get('answers_speeding', 0)} answers)")
    if counted.get("answers_in_units_with_accepted_flags"):
        also.append(f"{counted['answers_in_units_with_accepted_flags']} answers in "
                    f"{counted.get('units_with_accepted_flags', 0)} units a researcher accepted a flag on")
    if also:
        note += ". Counted as well: " + "; ".join(also)
    return note + "." + "".join(f" {text}" for text in other_readings_notes(counted))


READING_NAMES = {"without_tasks_failing_any_check": "without the tasks that failed any attention check",
                 "without_tasks_failing_every_check": "without the tasks that failed every attention check",
                 "approved_tasks_only": "approved tasks only",
                 "without_units_with_accepted_flags": "without the units a researcher accepted a flag on",
                 "without_speeding_tasks": "without the speeding tasks",
                 "without_blocked_workers": "without the tasks of blocked workers"}


def _fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def other_readings_notes(counted: dict) -> list[str]:
    """What the other readings of which answers count give (``counted["other_readings"]``; a run
    from before they were recorded has none): utility shares over all sources and Theil's
    U(utility | task accuracy), or in a generalization study Figure 4's accuracy before, after and
    its change over all units and per source and the consistency of the answers
    (``_generalization_reading_text``), then Krippendorff's alpha before and after, each with its rule."""
    notes = []
    for name, row in (counted.get("other_readings") or {}).items():
        label = READING_NAMES.get(name, name)
        if row.get("identical_to") == "published":
            notes.append(f"Other reading, {label}: the same answers as published ({row.get('rule')}).")
            continue
        if row.get("note"):
            notes.append(f"Other reading, {label}: {row['note']} ({row.get('rule')}).")
            continue
        agreement = row.get("agreement") or {}
        alpha = ", ".join(f"{step} {_fmt((agreement.get(step) or {}).get('krippendorff_alpha'))}"
                          for step in ("before", "after") if step in agreement)
        same = f" (the same answers as {READING_NAMES.get(row['identical_to'], row['identical_to'])})" \
            if row.get("identical_to") else ""
        if "generalization" in row:
            figures = _generalization_reading_text(row["generalization"] or {})
        else:
            shares = (row.get("utility_shares") or {}).get(ALL) or {}
            u = (row.get("theils_u_utility_given_task_accuracy") or {}).get(ALL)
            figures = (f"useful {_fmt(shares.get('useful'))}, unsure {_fmt(shares.get('unsure'))}, not useful "
                       f"{_fmt(shares.get('not_useful'))}; U(utility | task accuracy) {_fmt(u, 4)}")
        notes.append(f"Other reading, {label}{same}: {row.get('answers_left_out', 0)} answers left out, "
                     f"{row.get('n_units_scored')} units scored; {figures}; Krippendorff's α {alpha or 'n/a'} "
                     f"({row.get('rule')}).")
    return notes


def _generalization_reading_text(gen: dict) -> str:
    """A generalization study's other reading of the counted answers in words: Figure 4's accuracy
    before and after and its change over all units and per source (``_delta_summary``'s figures),
    and the consistency and relative consistency of the answers over an item's questions
    (``score.BUNDLE_QUESTIONS``) before and after."""
    def accuracy(figures: dict) -> str:
        return (f"before {_fmt(figures.get('accuracy_before'))}, after {_fmt(figures.get('accuracy_after'))}, "
                f"after − before {_fmt(figures.get('accuracy_delta'))}")

    text = f"Figure 4 accuracy over all units {accuracy(gen.get('all') or {})}"
    per_source = [f"{source} {_fmt(figures.get('accuracy_delta'))}"
                  for source, figures in (gen.get("by_source") or {}).items()]
    if per_source:
        text += f" (after − before by source: {', '.join(per_source)})"
    consistency = (gen.get("consistency") or {}).get("all_generalization_questions") or {}
    if consistency:
        before, after = consistency.get("before") or {}, consistency.get("after") or {}
        text += (f"; consistency over an item's questions before {_fmt(before.get('consistency'))}, after "
                 f"{_fmt(after.get('consistency'))} (relative consistency before {_rc_fmt(before)}, after "
                 f"{_rc_fmt(after)})")
    return text


def _rc_fmt(figures: dict) -> str:
    """A relative consistency in words: the figure, or n/a with why when it is not given
    (``rc_degenerate``, ``RC_DEGENERATE_TEXT``)."""
    if figures.get("rc_degenerate"):
        return f"n/a, {rc_degenerate_text(figures)}"
    return _fmt(figures.get("relative_consistency"))


def _kind(results: dict) -> str:
    return (results.get("study") or {}).get("kind") or "this"


def theils_u_section(results: dict, frame: pd.DataFrame | None, *, both_directions: bool) -> Section:
    section = Section("theils_u", "Theil's U: what predicts utility (SPEC section 3)")
    keys = [k for k in ("theils_u_utility_given_task_accuracy", "theils_u_utility_given_gen_u") if results.get(k)]
    if not keys:
        section.absent = (_warning(results, "theil") or "Theil's U needs utility outcomes with the source's "
                          "predicted answers (task accuracy) or Gen-U; this run has neither.")
        return section
    if both_directions:
        keys = [k for key in keys for k in (key, REVERSE[key])]
    rows = []
    for key in keys:
        label, (x, y) = THEILS_U[key]
        stored = results.get(key) or {}
        if frame is not None:
            rows += _theils_u_unit_rows(label, x, y, stored, frame, run_bootstrap(results)[0])
        else:
            rows += _ordered([{"measure": label, "source": s, "n": None, "value": v, "ci_low": None, "ci_high": None}
                              for s, v in stored.items()], "source")
    columns = [Column("measure", "Measure"), Column("source", "Source"), Column("n", "n", "int"),
               Column("value", "Theil's U", "float", 4), Column("ci", _ci_label(results), "ci", 4)]
    section.tables.append(Table("theils_u", "Uncertainty coefficient, per source and over all sources", columns, rows))
    if (results.get("task_accuracy_readings") or {}).get("by_source"):
        section.tables.append(task_accuracy_readings_table(results["task_accuracy_readings"]))
    section.notes += theils_u_degenerate_notes(results)
    section.notes += [f"{THEILS_U[key][0]}: {pooled}." for key in keys if key in THEILS_U
                      and (pooled := all_sources_text(results, key))]
    section.notes += _theils_u_notes(results, frame, both_directions=both_directions)
    if "gen_u_vs_utility" in plots.available(results):
        section.figures.append("gen_u_vs_utility")
    return section


def _theils_u_unit_rows(label: str, x: str, y: str, stored: dict, frame: pd.DataFrame, boot: dict) -> list[dict]:
    """U(x | y) per source and over all, with n and a bootstrap interval from the unit scores (drawn
    with ``boot``, the run's recorded settings); a direction that was not stored is computed here
    from the same units."""
    rows = []
    for source, g in _groups(frame, [x, y]):
        xs, ys = g[x].astype(int).to_numpy(), g[y].astype(int).to_numpy()
        value = stored.get(source)
        if value is None:
            value = theils_u(xs, ys) if len(g) else None
        low, high = percentile_ci(theils_u_draws(xs, ys, n_resamples=boot["n_resamples"], seed=boot["seed"]),
                                  boot["confidence"])
        rows.append({"measure": label, "source": source, "n": len(g), "value": value,
                     "ci_low": low, "ci_high": high})
    return rows


def theils_u_degenerate_notes(results: dict) -> list[str]:
    """A note per measure naming its cells whose U is 1 only because utility does not vary there
    (``pipeline.theils_u_degenerate``, as the run recorded them; SPEC's U is 1 when H(utility) = 0)."""
    notes = []
    for key, cells in (results.get("theils_u_degenerate") or {}).items():
        if key not in THEILS_U or not cells:
            continue
        said = "; ".join(degenerate_text(why, source) for source, why in cells.items())
        notes.append(f"{THEILS_U[key][0]}: {said}.")
    return notes


def _theils_u_notes(results: dict, frame: pd.DataFrame | None, *, both_directions: bool) -> list[str]:
    notes = []
    gen_u = results.get("gen_u") or {}
    if gen_u.get("method"):
        notes.append(f"{gen_u['method']}.")
    elif gen_u.get("question_filter"):
        notes.append(f"Gen-U on {gen_u['question_filter']}.")
    notes += task_accuracy_notes(results)
    notes += gen_u_unparsed_u_notes(gen_u)
    notes += (drawn_ci_notes(results) if frame is not None else
              ["n and intervals come from the study's unit scores, which a later run replaced."])
    if not both_directions:
        notes.append("Both directions: add ?both=1 to this page's address.")
    return notes


def task_accuracy_notes(results: dict) -> list[str]:
    """Which items task accuracy leaves out (``results["n_items_without_rationale"]``): a source's
    items with no rationale (its output did not parse) have no unit, so they are not counted."""
    missing = results.get("n_items_without_rationale")
    if missing is None or "theils_u_utility_given_task_accuracy" not in results:
        return []
    left_out = {source: n for source, n in missing.items() if n}
    n = results.get("task_accuracy_n") or {}
    over = (" Task accuracy is over the scored units only (units nobody has answered yet are left out): n = "
            + ", ".join(f"{source} {k}" for source, k in n.items()) + ".") if n else ""
    if not left_out:
        return ["Task accuracy: every source has a rationale (a unit) for each of the study's items." + over]
    named = ", ".join(f"{source} {n}" for source, n in left_out.items())
    notes = [f"Task accuracy and U(utility | task accuracy) count only the items a source has a rationale for; "
             f"items without one (its output did not parse, or none was made) have no unit and are left out, "
             f"not counted wrong, which can raise its task accuracy. Items left out: {named}." + over]
    if (results.get("task_accuracy_readings") or {}).get("by_source"):
        notes.append(task_accuracy_readings_note(results["task_accuracy_readings"]))
    return notes


# How the report names each reading of an output that did not parse (``task_accuracy_readings``,
# ``gen_u["unparsed_rules"]``).
READING_LABELS = {TASK_ACCURACY_LEFT_OUT: "left out", TASK_ACCURACY_COUNTED_WRONG: "counted as wrong",
                  UNPARSED_LEFT_OUT: "left out", UNPARSED_COUNTED_WRONG: "counted as wrong",
                  # the majority rule's readings (``majority_readings``) and a question's conflicting answers
                  PLURALITY: "plurality", STRICT_MAJORITY: "strict majority",
                  CONFLICTING_FIRST_KEPT: "first answer kept", CONFLICTING_LEFT_OUT: "left out",
                  # which questions count (``genu.QUESTION_READINGS``)
                  QUESTIONS_NOT_INVALID: "validated and unvalidated", QUESTIONS_VALIDATED_ONLY: "validated only",
                  # which questions a source's Gen-U rests on (``genu.QUESTIONS_ANSWERED_RULES``)
                  AS_ANSWERED: "as each job answered", EVERY_SOURCE_ANSWERED: "answered by every source"}


def _reading_label(rule: str, default: str | None) -> str:
    return READING_LABELS.get(rule, rule) + (" (default)" if rule == default else "")


def _readings_in_order(block: dict) -> list[str]:
    """A readings block's rules, the default first."""
    rules = list(block.get("rules") or {})
    return sorted(rules, key=lambda rule: rule != block.get("default"))


def _readings_by_source(block: dict):
    """(source, rule, its label, the source's entry) for each source of a readings block
    (``by_source``) in the report's source order, and each reading, the default first: the rows of
    the readings tables."""
    for source in _ordered([{"source": s} for s in block["by_source"]], "source"):
        entry = block["by_source"][source["source"]]
        for rule in _readings_in_order(block):
            yield source["source"], rule, _reading_label(rule, block.get("default")), entry


def _readings_listed(block: dict) -> str:
    """Each reading of a readings block with what it is, the default first, for its note."""
    rules = block.get("rules") or {}
    return "; ".join(f"{_reading_label(rule, block.get('default'))}: {rules[rule]}"
                     for rule in _readings_in_order(block))


TASK_ACCURACY_READING_COLUMNS = [
    Column("source", "Source"), Column("reading", "Items without a rationale"), Column("n_correct", "Right", "int"),
    Column("n", "n", "int"), Column("accuracy", "Task accuracy", "float"),
]


def task_accuracy_readings_table(readings: dict) -> Table:
    """Task accuracy with a source's items without a rationale left out (the default, the published
    figure) and counted as wrong (``results["task_accuracy_readings"]``)."""
    rows = []
    for source, rule, label, entry in _readings_by_source(readings):
        n = entry["n_units"] + (entry["n_items_without_rationale"] if rule == TASK_ACCURACY_COUNTED_WRONG else 0)
        rows.append({"source": source, "reading": label, "n_correct": entry["n_correct"], "n": n,
                     "accuracy": entry.get(rule)})
    return Table("task_accuracy_readings", "Task accuracy with the items a source has no rationale for left out or "
                 "counted as wrong (SPEC states no rule)", TASK_ACCURACY_READING_COLUMNS, rows)


def task_accuracy_readings_note(readings: dict) -> str:
    """Which reading the published task accuracy is, and what SPEC says (nothing)."""
    default = readings.get("default")
    return (f"{readings.get('spec')}. Task accuracy and U(utility | task accuracy) use the default reading, "
            f"{READING_LABELS.get(default, default)!r}; the table gives both ({_readings_listed(readings)}). U(utility | task accuracy) "
            "has no counted-as-wrong reading: an item without a rationale has no unit, so no utility.")


def similarity_section(results: dict, frame: pd.DataFrame | None) -> Section:
    section = Section("similarity", "Utility and similarity to the gold rationale (correlation ratio)")
    similarity = results.get("similarity") or {}
    stored = results.get("correlation_ratio_utility_similarity") or {}
    if not stored or not similarity:
        section.absent = (_warning(results, "similarity") or "Similarity to the gold rationale was not computed "
                          "for this run (no gold rationales, or scoring without similarity).")
        return section
    model = f"BERTScore F1 with {recorded_model_label(similarity)}"
    rows = []
    if frame is not None:
        boot, _ = run_bootstrap(results)
        for source, g in _groups(frame, ["similarity"]):
            draws = correlation_ratio_draws(g["utility"].to_numpy(), g["similarity"].to_numpy(float),
                                            n_resamples=boot["n_resamples"], seed=boot["seed"])
            low, high = percentile_ci(draws, boot["confidence"])
            rows.append({"source": source, "n": len(g), "eta": stored.get(source), "ci_low": low, "ci_high": high,
                         "similarity_model": model})
    else:
        rows = _ordered([{"source": s, "n": None, "eta": v, "ci_low": None, "ci_high": None,
                          "similarity_model": model} for s, v in stored.items()], "source")
    columns = [Column("source", "Source"), Column("n", "n", "int"), Column("eta", "Correlation ratio η", "float", 4),
               Column("ci", _ci_label(results), "ci", 4), Column("similarity_model", "Similarity model")]
    paper = similarity.get("paper")
    # the quoted over-all figure pools the LMs (SPEC section 3): beside our all row only where it pools as much
    spec_pool = pools_lm_sources_only(results, "correlation_ratio_utility_similarity")
    if paper and not paper.get("same_model"):  # another model: the published figure and its model beside ours
        for row in rows:
            row["paper_eta"] = (paper["correlation_ratio"].get(row["source"])
                                if row["source"] != ALL or spec_pool else None)
            row["paper_model"] = paper["model"] if row["paper_eta"] is not None else ""
            row["paper_eta_from"] = figure_stated_in(row["source"]) if row["paper_eta"] is not None else ""
        columns += [Column("paper_eta", "Quoted η (overall: SPEC section 3; per source: issue 21)", "float", 3),
                    Column("paper_eta_from", "Stated in"), Column("paper_model", "Its model (as quoted in issue 21)")]
        section.notes.append(f"Our similarity model ({recorded_model_label(similarity)}) "
                             f"is not the one the published figures are quoted with ({paper['model']}, "
                             f"{paper.get('model_stated_in') or MODEL_STATED_IN}): they are shown beside ours, not "
                             f"comparable with them. Published figures: {FIGURES_STATED_IN}. A quoted figure is "
                             "attached by name alone: the per-source ones to a source named exactly gpt3, t53b or "
                             "t5large in a dataset named StrategyQA (any case), whatever its split or its rationales; "
                             "the overall one to the all row of a dataset named StrategyQA or OpenBookQA where that "
                             "row pools no gold-kind source (SPEC's pools the LMs). Point "
                             "RL_SIMILARITY_MODEL at a local roberta-large folder to compare.")
    section.tables.append(Table("correlation_ratio", "Utility vs similarity", columns, rows))
    if pooled := all_sources_text(results, "correlation_ratio_utility_similarity"):
        section.notes.append(f"Correlation ratio η: {pooled} (a gold-kind source's rationale is the gold one: it "
                             "has no similarity).")
    quintile = (results.get("theils_u_utility_given_similarity_quintile") or {}).get(ALL)
    if quintile is not None:
        section.notes.append(f"Theil's U(utility | similarity quintile) over all sources: {quintile:.4f}."
                             + similarity_binning_note(results.get("similarity_binning") or {}))
    section.notes.append(f"Similarity: {similarity.get('method', 'BERTScore')} with {recorded_model_label(similarity)}. "
                         f"The published figures' model: {similarity.get('paper_used')}; the number "
                         "is comparable only with the same model (RL_SIMILARITY_MODEL).")
    section.notes += fingerprint_notes(similarity)
    section.notes += (drawn_ci_notes(results) if frame is not None else
                      ["n and intervals come from the study's unit scores, which a later run replaced."])
    return section


def gen_u_section(results: dict) -> Section:
    section = Section("gen_u", "Gen-U per source")
    if not results.get("gen_u_shares"):
        section.absent = (_warning(results, "gen-u", "any unit") or _warning(results, "gen-u") or "No Gen-U: it needs answered generalization questions "
                          "(Compute Gen-U answers) for the study's items and sources.")
        return section
    section.tables.append(Table("gen_u_shares", "Share of rationales per Gen-U score", SHARE_COLUMNS,
                                _share_ci_rows(results, "gen_u_shares")))
    gen_u = results.get("gen_u") or {}
    if gen_u:
        section.notes += gen_u_method_notes(gen_u)
    if gen_u.get("consistency_bundle"):
        section.notes.append(f"The answerers' consistency (results.json, gen_u.consistency) is over bundles of "
                             f"{gen_u['consistency_bundle']}.")
    ties = gen_u.get("tie_rules") or {}
    if ties.get("by_source"):
        section.tables.append(gen_u_tie_rule_table(ties))
        rules = "; ".join(f"{name}: {text}" for name, text in (ties.get("rules") or {}).items())
        section.notes.append(f"SPEC section 4 breaks ties toward the lowest score, as the conservative reading. Under each rule a tie in an item's mode goes to {rules}; "
                             f"the shares above and Theil's U(utility | Gen-U) in the Theil's U section use {ties.get('default')!r}"
                             " (the table's last column gives U under each rule).")
    unparsed = gen_u.get("unparsed_rules") or {}
    if unparsed.get("by_source"):
        section.tables.append(gen_u_unparsed_table(unparsed))
        section.notes.append(gen_u_unparsed_note(unparsed))
    _conflicting_answers_add(section, gen_u.get("conflicting_answers") or {}, CONFLICTING_GEN_U_COLUMNS,
                             "gen_u_conflicting_answers", "the Gen-U shares and Theil's U(utility | Gen-U)")
    gen_u_unvalidated_add(section, gen_u.get("unvalidated_questions") or {})
    gen_u_questions_answered_add(section, gen_u.get("questions_answered") or {})
    section.notes.append(ci_note(results))
    return section


ANSWERED_GEN_U_COLUMNS = gen_u_readings_columns("Questions each source rests on")


def gen_u_questions_answered_add(section, block: dict) -> None:
    """Which questions each source's Gen-U rests on (``gen_u["questions_answered"]``): a note naming
    the default, and where a source lacks predictions of questions that count now, the figures under
    both readings (the run computed them only then: otherwise they coincide)."""
    by_source = block.get("by_source") or {}
    if not by_source:
        return
    if any(rule in entry for entry in by_source.values() for rule in block.get("rules") or {}):
        section.tables.append(readings_by_source_table(
            block, ANSWERED_GEN_U_COLUMNS, "gen_u_questions_answered",
            "Gen-U on the questions each source's job answered (published) or on those every source answered "
            "(SPEC section 4 does not say)"))
    missing = sum(entry.get("n_questions_without_predictions") or 0 for source, entry in by_source.items()
                  if source != ALL)
    note = (f"Which questions a source's Gen-U rests on: the Gen-U shares and Theil's U(utility | Gen-U) use the "
            f"default, {_readings_listed(block)}. ")
    section.notes.append(note + (f"{missing} time(s) a question that counts now has no prediction of a source "
                                 "scored on its item (its Gen-U job ran before the question was validated or added); "
                                 "the table gives both readings."
                                 if missing else "Every source answered every question that counts, so the readings "
                                 "coincide."))


UNPARSED_COLUMNS = gen_u_readings_columns("Answers that did not parse")


def gen_u_unparsed_table(unparsed: dict) -> Table:
    """The Gen-U figures with an answer that did not parse left out (the default, the published
    figures) and counted as wrong, under the default tie rule (``results["gen_u"]["unparsed_rules"]``)."""
    rows = []
    for source, rule, label, entry in _readings_by_source(unparsed):
        figures = entry.get(rule)
        if not figures:
            continue
        u = (unparsed.get("theils_u_utility_given_gen_u") or {}).get(rule) or {}
        rows.append({"source": source, "reading": label,
                     **{k: figures.get(k) for k in ("n", "n_questions", "mean", "useful", "unsure", "not_useful")},
                     "theils_u": u.get(source)})
    return Table("gen_u_unparsed_rules", "Gen-U with the answers that did not parse left out or counted as wrong "
                 "(SPEC states no rule)", UNPARSED_COLUMNS, rows)


def gen_u_unparsed_note(unparsed: dict) -> str:
    """Which reading the published Gen-U figures are, and what SPEC says (nothing)."""
    default = unparsed.get("default")
    return (f"{unparsed.get('spec')}. The Gen-U shares above and Theil's U(utility | Gen-U) in the Theil's U section use the "
            f"default reading, {READING_LABELS.get(default, default)!r}; the table gives both, under the "
            f"{unparsed.get('tie_rule')!r} tie rule ({_readings_listed(unparsed)}).")


def gen_u_unparsed_u_notes(gen_u: dict) -> list[str]:
    """U(utility | Gen-U) with the answers that did not parse counted as wrong, beside the default
    figure in the Theil's U table (``gen_u["unparsed_rules"]``); nothing when no run recorded it."""
    unparsed = gen_u.get("unparsed_rules") or {}
    by_reading = unparsed.get("theils_u_utility_given_gen_u") or {}
    other = by_reading.get(UNPARSED_COUNTED_WRONG)
    if not other:
        return []
    values = ", ".join(f"{row['source']} {_fmt(other[row['source']], 4)}"
                       for row in _ordered([{"source": s} for s in other], "source"))
    return [f"U(utility | Gen-U) leaves out a question whose F^I or F^IR answer did not parse (the default; "
            f"{unparsed.get('spec')}); with those answers counted as wrong it is {values} (the Gen-U section's "
            "table gives both readings)."]


TIE_RULE_COLUMNS = [
    Column("source", "Source"), Column("rule", "Tie rule"), Column("n", "n", "int"), Column("n_tied", "Tied items", "int"),
    Column("mean", "Mean Gen-U", "float"), Column("useful", "Useful", "float"), Column("unsure", "Unsure", "float"),
    Column("not_useful", "Not useful", "float"), Column("theils_u", "U(utility | Gen-U)", "float"),
]


def gen_u_tie_rule_table(ties: dict) -> Table:
    """The Gen-U figures under each tie rule and with tied items left out (``results["gen_u"]["tie_rules"]``)."""
    default = ties.get("default")
    rows = []
    for source, entry in ties["by_source"].items():
        for rule in [*ties.get("rules", {}), "ties_left_out"]:
            figures = entry.get(rule)
            if not figures:
                continue
            label = "tied items left out" if rule == "ties_left_out" else rule + (" (default)" if rule == default else "")
            u = (ties.get("theils_u_utility_given_gen_u") or {}).get(rule) or {}
            rows.append({"source": source, "rule": label, "n": figures["n"], "n_tied": entry["n_tied"],
                         **{k: figures[k] for k in ("mean", "useful", "unsure", "not_useful")},
                         "theils_u": u.get(source)})
    return Table("gen_u_tie_rules", "Gen-U under each tie rule (SPEC section 4: the lowest, as the conservative reading)", TIE_RULE_COLUMNS, rows)


def gen_u_method_notes(gen_u: dict) -> list[str]:
    """What the Gen-U figures were computed on, from ``results["gen_u"]``: the question filter,
    the tie rule, the answers left out because they did not parse, and the answerers with their
    fine-tuning preset (SPEC section 4; runs stored before a key existed skip its line)."""
    notes = [f"Questions: {gen_u.get('question_filter')} ({gen_u.get('n_questions_validated')} validated, "
             f"{gen_u.get('n_questions_unvalidated')} unvalidated; {gen_u.get('n_questions')} counted). "
             f"Tie rule: {gen_u.get('tie_rule')}"]
    unparseable = gen_u.get("unparseable") or {}
    if unparseable:
        counts = "; ".join(
            f"{source} {c.get('questions_left_out_unparseable', 0)} questions ({c.get('unparseable_i_answers', 0)} "
            f"F^I, {c.get('unparseable_ir_answers', 0)} F^IR answers)" for source, c in sorted(unparseable.items()))
        notes.append(f"Answers that did not parse are left out of the mode, not counted as wrong: {counts}.")
    answerers = gen_u.get("answerers") or {}
    if answerers:
        # Each answerer as results.json's method names it: base model, what of its preset the paper
        # states, and the backend, prompt template and decoding its job recorded.
        roles = "; ".join(answerer_text(role, e) for role, entries in sorted(answerers.items()) for e in entries)
        notes.append(f"Answerers: {roles}.")
        by_path = [f"{role} {e.get('model')}" for role, entries in sorted(answerers.items()) for e in entries
                   if e.get("matched_by") == "model path"]
        if by_path:
            notes.append(
                f"The Gen-U predictions of {', '.join(by_path)} do not record which source answered them (made before "
                "that was recorded, imported from a bundle, or their source deleted): their settings were read by "
                "model path, from the newest fine-tuned source with that path the study's owner may read, which "
                "another source sharing the path would change.")
        trained = [f"{role} {e.get('model')}: {(e.get('trained_on') or {}).get('rationales') or 'no rationales'} "
                   f"({(e.get('trained_on') or {}).get('generalization_questions', 0)} generalization questions)"
                   for role, entries in sorted(answerers.items()) if role == "F^IR" for e in entries
                   if e.get("trained_on")]
        if trained:
            notes.append(f"F^IR was trained on: {'; '.join(trained)}.")
    return notes


def _gold_names(names) -> set[str]:
    return set(RationaleSource.objects.filter(name__in=list(names), kind=RationaleSource.Kind.GOLD)
               .values_list("name", flat=True))


GENERALIZATION = Study.Kind.GENERALIZATION.value
# A generalization study's run without Figure 4: one from before such a run failed (``score.NothingScored``).
NO_GENERALIZATION_ANSWERS = ("No generalization answers: no unit of this generalization study had a completed answer "
                             "when this run scored it (a run now fails so: score the study again once answers count).")


def generalization_section(results: dict) -> Section:
    section = Section("generalization", "Generalization: accuracy after minus before (Figure 4)")
    gen = results.get("generalization") or {}
    if not gen:
        section.absent = (NO_GENERALIZATION_ANSWERS if _kind(results) == GENERALIZATION else
                          "No generalization answers: Figure 4 needs a generalization study (workers answer "
                          f"generalization questions before and after the original rationale); this is a "
                          f"{_kind(results)} study.")
        return section
    columns = [Column("key", "Group"), Column("n", "n", "int"), Column("accuracy_before", "Before", "float"),
               Column("accuracy_after", "After", "float"), Column("accuracy_delta", "After − before", "float"),
               Column("ci", "95% CI", "ci")]
    if gen.get("aggregation"):  # a run from before the other reading was recorded has neither column
        columns += [Column("ties", "Ties (before, after)"),
                    Column("delta_per_answer", "After − before, per answer", "float")]

    def rows(group: str) -> list[dict]:
        out = [{"key": k, "n": r["n"], "accuracy_before": r["accuracy_before"], "accuracy_after": r["accuracy_after"],
                "accuracy_delta": r["accuracy_delta"], "ci_low": r["accuracy_delta_ci"][0],
                "ci_high": r["accuracy_delta_ci"][1], "delta_per_answer": r.get("delta_per_answer"),
                "ties": f"{r.get('ties_before')}, {r.get('ties_after')}"} for k, r in (gen.get(group) or {}).items()]
        return _ordered(out, "key", UTILITY_ORDER if group == "by_utility" else None)

    section.tables.append(Table("generalization_by_type", "By generalization type", columns, rows("by_type")))
    section.tables.append(Table("generalization_by_utility", "By utility category of the original rationale",
                                columns, rows("by_utility")))
    by_source = rows("by_source")
    gold = _gold_names(r["key"] for r in by_source)
    reference = next((r["accuracy_delta"] for r in by_source if r["key"] in gold), None)
    for r in by_source:
        r["reference"] = "gold (for comparison)" if r["key"] in gold else ""
        r["minus_gold"] = None if reference is None or r["key"] in gold else r["accuracy_delta"] - reference
    section.tables.append(Table(
        "generalization_by_source", "By source, gold shown for comparison (our addition: SPEC section 4 lists gold "
        "as one of the sources)",
        [*columns, Column("reference", "Gold (for comparison)"), Column("minus_gold", "Minus gold's change", "float")],
        by_source))
    pairs = rows("by_source_and_type")
    if pairs:
        section.tables.append(Table("generalization_by_source_and_type", "By source and type", columns, pairs))
    if not gold:
        section.notes.append("No gold source in this study, so there is no gold row to compare with (our addition: "
                             "SPEC section 4 lists gold as one of the sources); add the dataset's gold rationales "
                             "as a source to get it.")
    if gen.get("aggregation"):
        section.notes.append(figure_4_aggregation_note(gen))
    if gen.get("question_filter"):
        section.notes.append(generalization_questions_note(gen))
    _conflicting_answers_add(section, gen.get("conflicting_answers") or {}, CONFLICTING_FIGURE_4_COLUMNS,
                             "generalization_conflicting_answers", "Figure 4 and the consistency of the answers")
    _generalization_unvalidated_add(section, gen)
    majority = gen.get("majority_readings") or {}
    if majority.get("by_source"):
        section.tables.append(majority_readings_table(majority, ACCURACY_MAJORITY_COLUMNS,
                                                      "generalization_majority_readings"))
    if majority:
        section.notes.append(majority_readings_note(majority, "Figure 4's accuracy by majority"))
    if results.get("counted_answers"):
        section.notes.append(counted_note(results["counted_answers"]))
    section.notes += sources_notes(results)
    if gen.get("original_utility_from"):
        section.notes.append(_utility_from_note(gen["original_utility_from"], "The original rationales' utility"))
    section.notes.append(ci_note(results))
    if "generalization" in plots.available(results):
        section.figures.append("generalization")
    return section


def _generalization_unvalidated_add(section, gen: dict) -> None:
    """Figure 4 (over all, by type, by utility) and its consistency on validated questions only
    beside the published figures, when they differ (``generalization["unvalidated_questions"]``)."""
    block = gen.get("unvalidated_questions") or {}
    if not block:
        return
    other = block.get(QUESTIONS_VALIDATED_ONLY)
    if other:
        columns = [Column("reading", "Questions counted"), Column("key", "Group"), Column("n", "n", "int"),
                   Column("accuracy_before", "Before", "float"), Column("accuracy_after", "After", "float"),
                   Column("accuracy_delta", "After − before", "float"), Column("ci", "95% CI", "ci")]
        rows = []
        for rule, figures in ((block.get("default"), gen), (QUESTIONS_VALIDATED_ONLY, other)):
            label = _reading_label(rule, block.get("default"))
            groups = [("all", figures.get("all"))]
            for group, prefix in (("by_type", "type"), ("by_utility", "utility")):
                groups += [(f"{prefix} {k}", v) for k, v in sorted((figures.get(group) or {}).items())]
            rows += [{"reading": label, "key": key, **{k: r.get(k) for k in (
                "n", "accuracy_before", "accuracy_after", "accuracy_delta")},
                "ci_low": (r.get("accuracy_delta_ci") or [None, None])[0],
                "ci_high": (r.get("accuracy_delta_ci") or [None, None])[1]} for key, r in groups if r]
        section.tables.append(Table("generalization_unvalidated_questions", UNVALIDATED_TITLE, columns, rows))
    note = unvalidated_questions_note(block, "Figure 4 and its consistency")
    if other and other.get("note"):
        note += f" Validated only: {other['note']}"
    elif other:
        def step(figures: dict, name: str):
            entry = (figures.get("consistency") or {}).get("all_generalization_questions") or {}
            return (entry.get(name) or {}).get("consistency")

        note += (" Consistency over an item's questions: " + "; ".join(
            f"{_reading_label(rule, block.get('default'))} {_fmt(step(figures, 'before'))} before, "
            f"{_fmt(step(figures, 'after'))} after"
            for rule, figures in ((block.get("default"), gen), (QUESTIONS_VALIDATED_ONLY, other))) + ".")
    section.notes.append(note)


def figure_4_aggregation_note(gen: dict) -> str:
    """How Figure 4's accuracy is aggregated and what the other reading gives over all units
    (``results["generalization"]["aggregation"]``; SPEC section 4 says only accuracy(after) -
    accuracy(before))."""
    aggregation, everything = gen["aggregation"], gen.get("all") or {}
    note = (f"Accuracy {aggregation['rule']} (SPEC section 4 leaves it open). The other reading, accuracy "
            f"{aggregation['other_reading']}, is the last column")

    def num(key):
        value = everything.get(key)
        return "n/a" if value is None else f"{value:.3f}"

    if everything.get("accuracy_before_per_answer") is not None:
        note += (f"; over all units per answer: before {num('accuracy_before_per_answer')}, after "
                 f"{num('accuracy_after_per_answer')}, after − before {num('delta_per_answer')} "
                 f"({everything.get('n_answers_before')} answers), against {num('accuracy_delta')} by majority with "
                 f"{everything.get('ties_before')} ties before and {everything.get('ties_after')} after counted wrong")
    return note + "."


def generalization_questions_note(gen: dict) -> str:
    """Which generalization questions Figure 4 counts (``results["generalization"]``; a run from
    before they were recorded has no note): the filter, its counts and the questions marked invalid
    that were left out, with their answers."""
    note = (f"Questions: {gen.get('question_filter')} ({gen.get('n_questions_validated')} validated, "
            f"{gen.get('n_questions_unvalidated')} unvalidated; {gen.get('n_questions')} counted); "
            f"{gen.get('n_questions_invalid_left_out', 0)} marked invalid left out")
    if gen.get("n_questions_invalid_left_out"):
        note += (f" with their {gen.get('n_units_invalid_left_out', 0)} units and "
                 f"{gen.get('answers_invalid_left_out', 0)} counted answers")
    return note + f". Rule, as for Gen-U: {gen.get('question_rule')}."


def agreement_section(results: dict) -> Section:
    section = Section("agreement", "Annotator agreement before and after the rationale (SPEC section 2)")
    agreement = results.get("agreement") or {}
    if not agreement:
        section.absent = _warning(results, "agreement") or "No raw answers to measure agreement on."
        return section
    def table_rows(block: dict, label: str = "") -> list[dict]:
        rows = []
        for step, row in block.items():
            rows.append({"step": f"{step}{label}", **row,
                         "fleiss_kappa_full": (row.get("fleiss_kappa_full_units") or {}).get("fleiss_kappa")})
            if row.get("filled_units"):  # a study that stopped units early: the filled units' reading beside it
                filled = row["filled_units"]
                rows.append({"step": f"{step}{label}, filled units only ({filled.get('raters')} answers)",
                             **{k: v for k, v in filled.items() if k != "fleiss_kappa_full_units"},
                             "fleiss_kappa_full": (filled.get("fleiss_kappa_full_units") or {}).get("fleiss_kappa")})
        return rows

    rows = table_rows(agreement) + table_rows(results.get("agreement_by_item") or {}, " (by item)")
    columns = [Column("step", "Answer"), Column("n_units", "Units", "int"),
               Column("n_units_alpha", "Units α uses (2+ answers)", "int"),
               Column("n_annotations", "Answers", "int"),
               Column("krippendorff_alpha", "Krippendorff's α (nominal)", "float"),
               Column("fleiss_kappa", "Fleiss' κ", "float"),
               Column("fleiss_kappa_full", "Fleiss' κ, full units only", "float")]
    section.tables.append(Table("agreement", "Agreement over the raw answers", columns, rows))
    units = [f"{row['step']}: {row['unit']}" for row in rows if row.get("unit")]
    if units:
        section.notes.append("Unit of agreement (SPEC leaves it open): " + "; ".join(units) + ".")
    single = [f"{row['step']} {row['n_units_single_answer']}" for row in rows if row.get("n_units_single_answer")]
    if single:
        section.notes.append("Units with a single answer add nothing to α and are left out of it: " + ", ".join(single)
                             + ".")
    for row in rows:
        if row.get("fleiss_kappa_note"):
            section.notes.append(f"{row['step']}: {row['fleiss_kappa_note']}")
    if (results.get("early_stopping") or {}).get("used"):
        section.notes.append("Computed on the answers collected: this study stopped each unit once its result was "
                             "decided, so units have different numbers of answers (see Early stopping).")
    bias = next((row["early_stopping_bias"] for row in rows if row.get("early_stopping_bias")), None)
    if bias:
        section.notes.append(bias + " The rows \"filled units only\" are that reading.")
    if results.get("counted_answers"):  # the answers agreement is over, and alpha without the failing tasks
        section.notes.append(counted_note(results["counted_answers"]))
    return section


def early_stopping_section(results: dict) -> Section:
    """Whether the study stopped units early, and the answers each unit got then."""
    section = Section("early_stopping", "Early stopping: answers per unit")
    early = results.get("early_stopping") or {}
    if not early.get("used"):
        section.absent = "This study collected every unit's full number of answers (it did not stop units early)."
        return section
    rows = [{"answers": int(n), "units": k} for n, k in sorted((early.get("answers_per_unit") or {}).items(),
                                                               key=lambda kv: int(kv[0]))]
    columns = [Column("answers", "Answers that count", "int"), Column("units", "Units", "int")]
    section.tables.append(Table("early_stopping_answers_per_unit", "Units by number of answers", columns, rows))
    section.notes.append(early.get("note", ""))
    invalid = early.get("answers_not_asked_invalid_questions") or 0
    section.notes.append(f"{early.get('answers_collected', 0):,} answers collected of {early.get('answers_designed', 0):,} "
                         f"designed; {early.get('answers_saved', 0):,} saved by stopping early "
                         f"({early.get('units_decided', 0):,} units decided early)"
                         + (f"; {invalid:,} not asked because their generalization question was marked invalid"
                            if invalid else "") + ".")
    return section


def properties_section(results: dict) -> Section:
    section = Section("properties", "Rationale properties: what predicts utility (binomial mixed model)")
    model = results.get("properties_model") or {}
    if not model:
        section.absent = (_warning(results, "properties model") or "No property annotations: the model needs "
                          "annotators to mark the properties of rationales (a rationale-properties study).")
        return section
    columns = [Column("term", "Term"), Column("log_odds", "Log-odds", "float"), Column("ci", "95% interval", "ci")]
    section.tables.append(Table("properties_model", f"n = {model.get('n_rationales')} rationales", columns,
                                _term_rows(model)))
    section.notes.append(f"{model.get('formula')}: {model.get('method')}.")
    section.notes += _properties_reading_notes(model)
    other = model.get("unsure_dropped") or {}
    if other.get("fitted"):
        section.tables.append(Table(
            "properties_model_unsure_dropped",
            f"Other reading of useful vs not: {other.get('outcome')} (n = {other.get('n_rationales')} rationales)",
            columns, _term_rows(other)))
    if model.get("mark_rule"):
        section.notes.append(f"Properties: {model['mark_rule']} ({model.get('even_splits', 0)} even splits).")
    if model.get("answers_read"):
        section.notes.append(f"Answers read: {model['answers_read']}.")
    if model.get("constant_properties_dropped"):
        section.notes.append("Left out (no rationale differed): " + ", ".join(model["constant_properties_dropped"]))
    if model.get("utility_from"):
        section.notes.append(_utility_from_note(model["utility_from"], "Utility (this study has none of its own)"))
    if results.get("counted_answers") and _kind(results) == Study.Kind.RATIONALE_PROPERTIES:
        # the study's own section: whose property marks count (another kind's section says it of its answers)
        section.notes.append(counted_note(results["counted_answers"]))
    return section


QUESTION_VALIDATION_READINGS = {"majority_of_verdicts": "majority of worker verdicts",
                                "answer_corrected": "answer corrected",
                                "majority_per_field": "majority per field"}


def question_validation_section(results: dict) -> Section:
    """A question-validation study's verdicts on its generalization questions
    (``results["question_validation"]``): the totals under each reading, then one row per question
    with its votes, its verdict by each reading and the corrected answer the workers suggested."""
    section = Section("question_validation", "Question validation: the crowd's verdicts")
    block = results.get("question_validation") or {}
    default = block.get("default", "majority_of_verdicts")
    columns = [Column("reading", "Reading"), Column("n_valid", "Valid", "int"), Column("n_invalid", "Invalid", "int"),
               Column("n_undecided", "Undecided", "int")]
    totals = [{"reading": QUESTION_VALIDATION_READINGS.get(name, name) + (" (default)" if name == default else ""),
               **counts}
              for name, counts in (block.get("readings") or {}).items()]
    section.tables.append(Table("question_validation_readings", f"{block.get('n_questions', 0)} questions, "
                                f"{block.get('n_answers', 0)} counted verdicts", columns, totals))
    fields = [Column(f"{name}_yes", f"{name} yes", "int") for name in ("well_formed", "type_correct", "answer_correct")]
    rows = [{"question": q.get("text"), "n_verdicts": q.get("n_verdicts"),
             **{f"{name}_yes": (q.get("votes") or {}).get(name, {}).get("yes") for name in
                ("well_formed", "type_correct", "answer_correct")},
             "verdict": q.get("majority_of_verdicts"), "answer_corrected": q.get("answer_corrected"),
             "majority_per_field": q.get("majority_per_field"), "n_verdicts_asked": q.get("n_verdicts_asked"),
             "suggested": q.get("suggested_corrected_answer"), "status": q.get("status_when_scored")}
            for q in block.get("questions") or []]
    section.tables.append(Table("question_validation_questions", "Verdict per question", [
        Column("question", "Question"), Column("n_verdicts", "Verdicts", "int"),
        Column("n_verdicts_asked", "Verdicts asked", "int"), *fields,
        Column("verdict", "Verdict (majority)"), Column("answer_corrected", "Answer corrected"),
        Column("majority_per_field", "Majority per field"),
        Column("suggested", "Suggested corrected answer"), Column("status", "Status when scored")], rows))
    rules = block.get("rules") or {}
    differ = block.get("n_questions_differ_by_reading") or {}
    per_field = (f" Other reading, {rules['majority_per_field']}: {differ.get('majority_per_field', 0)} questions "
                 "differ." if "majority_per_field" in rules else "")
    section.notes.append(
        f"Verdict: {rules.get(default, default)} (our reading; {block.get('spec', '')}). Other reading, "
        f"{rules.get('answer_corrected', 'answer corrected')}: {block.get('n_questions_readings_differ', 0)} "
        f"questions differ.{per_field} Ties: {block.get('n_ties', 0)}; questions without a counted verdict: "
        f"{block.get('n_questions_without_verdicts', 0)}. The verdicts change no question until a researcher "
        "applies them (the score runs' action); answers are never changed by it.")
    short = block.get("short_questions")
    if isinstance(short, dict):
        ids = short.get("question_ids") or []
        section.notes.append(
            f"Questions judged by fewer workers than asked ({block.get('annotators_per_unit')} per question): "
            f"{short.get('n_short', 0)}, {short.get('n_short_with_verdict', 0)} of them with a verdict"
            + (f" (questions {', '.join(map(str, ids))})" if ids else "") + f". Rule: {short.get('rule')}.")
    for name, row in (block.get("other_readings") or {}).items():
        section.notes.append(f"Other reading, {READING_NAMES.get(name, name)}: {row.get('answers_left_out', 0)} "
                             f"answers left out; {row.get('n_valid', 0)} valid, {row.get('n_invalid', 0)} invalid, "
                             f"{row.get('n_undecided', 0)} undecided ({row.get('n_questions_verdict_differs', 0)} "
                             f"verdicts differ) ({row.get('rule')}).")
    if results.get("counted_answers"):
        section.notes.append(counted_note(results["counted_answers"]))
    return section


def _term_rows(model: dict) -> list[dict]:
    return [{"term": name, "log_odds": t["log_odds"], "ci_low": t["ci"][0], "ci_high": t["ci"][1]}
            for name, t in (model.get("terms") or {}).items()]


def _properties_reading_notes(model: dict) -> list[str]:
    """The outcome coding and priors the model was fitted with, and the other reading of "useful vs
    not" (``results["properties_model"]``; a run from before they were recorded has no such notes)."""
    notes = []
    if model.get("outcome"):
        notes.append(f"Outcome: {model['outcome']}. SPEC section 7 says \"useful vs not\" and leaves unsure open; "
                     "the other reading, unsure left out, is given as well.")
    priors = model.get("priors") or {}
    if priors:
        notes.append(f"Priors: each fixed effect (log-odds) normal with sd {priors.get('fe_p')}; the log of each "
                     f"random intercept's sd normal with sd {priors.get('vcp_p')} (statsmodels' defaults, stated; "
                     "SPEC names none).")
    other = model.get("unsure_dropped") or {}
    if other.get("fitted"):
        notes.append(f"Other reading ({other.get('outcome')}): {other.get('formula')}, "
                     f"n = {other.get('n_rationales')} rationales (table above).")
    elif other:
        notes.append(f"Other reading ({other.get('outcome')}): not fitted: {other.get('not_fitted')}.")
    return notes


def _utility_from_note(provenance: dict, what: str) -> str:
    """Which studies a borrowed utility came from, by the rule the results name (a run from before
    the rule was recorded has none: the note says nothing then). A study imported from a bundle
    says it read the bundle's table, or why the bundle could not give it."""
    if provenance.get("unavailable"):
        return f"{what}: not known here: {provenance['unavailable']}."
    studies = provenance.get("studies") or []
    named = "; ".join(f"{s['name']!r} ({s['pairs']} pairs" + (f", {s['pairs_stale']} stale and not lent"
                                                               if s.get("pairs_stale") else "") + ")"
                      for s in studies) or "no study"
    note = f"{what}: from {named}; {provenance.get('rule', '')}."
    if provenance.get("pairs_stale"):
        note += (f" {provenance['pairs_stale']} pairs were not lent because their lender's unit scores are stale, "
                 f"{provenance.get('pairs_stale_left_out', 0)} of them with no utility here ('unknown'): "
                 f"{provenance.get('stale_rule', '')}; score the lending study again, then this one.")
    if provenance.get("read_from"):
        note += f" Read from {provenance['read_from']}."
    if provenance.get("caveat"):
        note += f" {provenance['caveat']}"
    if provenance.get("pairs_in_several_studies"):
        note += (f" {provenance['pairs_in_several_studies']} pairs were scored in more than one study, "
                 f"{provenance.get('pairs_the_studies_disagree_on', 0)} of them differently.")
    return note


STEPS = ("before", "after")


def consistency_section(results: dict) -> Section:
    section = Section("consistency", "Consistency and relative consistency")
    consistency = (results.get("generalization") or {}).get("consistency") or {}
    if not consistency:
        section.absent = (NO_GENERALIZATION_ANSWERS if _kind(results) == GENERALIZATION else
                          "No bundles: consistency needs a generalization study (an item's generalization "
                          "questions, or the item with its counterfactuals, answered by the same study).")
        return section
    rows, by_size = [], []
    for bundle, entry in consistency.items():
        other = (entry.get("incomplete_bundles") or {}).get(BUNDLE_INCOMPLETE_NOT_CONSISTENT) or {}
        figures = [(bundle.replace("_", " "), step, entry[step]) for step in STEPS if step in entry]
        figures += [(f"{bundle.replace('_', ' ')} (incomplete bundles not consistent)", step, other[step])
                    for step in STEPS if step in other]
        for name, step, r in figures:
            rows.append({"bundles": name, "step": step, "n": r.get("n_bundles"),
                         "accuracy": r.get("accuracy"), "consistency": r.get("consistency"),
                         "relative_consistency": r.get("relative_consistency"), "rc_bundle_size": r.get("rc_bundle_size"),
                         "rc_n": r.get("rc_n_bundles"), "rc_accuracy": r.get("rc_accuracy"),
                         "rc_consistency": r.get("rc_consistency"),
                         "note": rc_degenerate_text(r) or r.get("rc_note", "")})
            sizes = r.get("rc_by_bundle_size") or {}
            if len(sizes) > 1:
                by_size += [{"bundles": name, "step": step, "size": int(size), **figures,
                             "note": rc_degenerate_text(figures, per_size=True)}
                            for size, figures in sorted(sizes.items(), key=lambda kv: int(kv[0]))]
    columns = [Column("bundles", "Bundles"), Column("step", "Answer"), Column("n", "Bundles (n)", "int"),
               Column("accuracy", "Accuracy", "float"), Column("consistency", "Consistency", "float"),
               Column("relative_consistency", "Relative consistency", "float"),
               Column("rc_bundle_size", "RC on bundles of size", "int"), Column("rc_n", "RC bundles (n)", "int"),
               Column("rc_accuracy", "RC's accuracy", "float"), Column("rc_consistency", "RC's consistency", "float"),
               Column("note", "Note")]
    section.tables.append(Table("consistency", "Human answers over bundles", columns, rows))
    if by_size:
        section.tables.append(Table(
            "consistency_by_bundle_size", "Relative consistency per bundle size (bundles of different sizes)",
            [Column("bundles", "Bundles"), Column("step", "Answer"), Column("size", "Bundle size", "int"),
             Column("n_bundles", "Bundles (n)", "int"), Column("accuracy", "Accuracy", "float"),
             Column("consistency", "Consistency", "float"), Column("relative_consistency", "Relative consistency",
                                                                  "float"), Column("note", "Note")], by_size))
    section.notes.append("Relative consistency: the probability that a model of the same accuracy is at most this "
                         "consistent (1 is the most consistency that accuracy allows).")
    section.notes += consistency_notes(consistency)
    section.notes += rc_degenerate_notes(consistency)
    return section


# Why a relative consistency is not given (results.json ``rc_degenerate``, ``pipeline.bundle_consistency``):
# the whole figure (every bundle has one instance) and a row of the per-size table (bundles of size 1).
RC_DEGENERATE_TEXT = {
    RC_ONE_INSTANCE: "every bundle has one instance: consistency is accuracy there and relative consistency would be "
                     "1 by definition, so it is not given",
}
RC_DEGENERATE_SIZE_TEXT = {
    RC_ONE_INSTANCE: "bundles of one instance: relative consistency would be 1 by definition, so it is not given "
                     "and not considered",
}


def rc_degenerate_text(figures: dict, *, per_size: bool = False) -> str:
    """Why ``figures``' relative consistency (one step's, or one bundle size's with ``per_size``) is
    not given, in words; "" when it is (or when the run is from before the reason was recorded)."""
    why = figures.get("rc_degenerate")
    if not why:
        return ""
    return (RC_DEGENERATE_SIZE_TEXT if per_size else RC_DEGENERATE_TEXT).get(why, str(why))


def rc_degenerate_notes(consistency: dict) -> list[str]:
    """A note per kind of bundle whose relative consistency is not given before or after
    (``rc_degenerate``), naming the steps and why."""
    notes = []
    for bundle, entry in consistency.items():
        readings = [(bundle.replace("_", " "), entry)]
        other = (entry.get("incomplete_bundles") or {}).get(BUNDLE_INCOMPLETE_NOT_CONSISTENT) or {}
        if other:
            readings.append((f"{bundle.replace('_', ' ')} (incomplete bundles not consistent)", other))
        for name, figures in readings:
            steps = [step for step in STEPS if (figures.get(step) or {}).get("rc_degenerate")]
            if steps:
                notes.append(f"Relative consistency of \"{name}\" ({', '.join(steps)}): "
                             f"{rc_degenerate_text(figures[steps[0]])}.")
    return notes


def consistency_notes(consistency: dict) -> list[str]:
    """What each kind of bundle is (with its incomplete bundles, left out: ``score.BUNDLE_INCOMPLETE_RULES``),
    which bundles relative consistency is computed on, and, when SPEC's bundle (the item with all
    its generalization questions) could not be formed, why (``results["generalization"]["consistency"]``;
    a run from before the bundles were named has none of these lines)."""
    notes = []
    for bundle, entry in consistency.items():
        if entry.get("bundle"):
            note = f"Bundles \"{bundle.replace('_', ' ')}\": {entry['bundle']}"
            if "n_bundles_with_item" in entry:
                note += (f" ({entry['n_bundles_with_item']} bundles with the item's outcome, "
                         f"{entry.get('n_bundles_without_item', 0)} without)")
            if entry.get("n_bundles_incomplete"):
                note += (f"; {entry['n_bundles_incomplete']} bundles are incomplete ({entry['n_questions_unanswered']} "
                         "questions with no completed answers yet) and left out: the rows \"(incomplete bundles not "
                         "consistent)\" count each as not consistent, its unanswered questions wrong")
            notes.append(note + ".")
    named = [entry for entry in consistency.values() if entry.get("bundle")]
    if named and "item_with_generalization_questions" not in consistency:
        notes.append("SPEC section 5's bundle, the item with all its generalization questions, is not given: the "
                     "original items' outcomes are not known here (no utility study this study's owner owns "
                     "scored them, or the bundle it was imported from had no table).")
    incomplete = next((entry["incomplete_rule"] for entry in named if entry.get("incomplete_rule")), None)
    if incomplete:
        notes.append(f"A bundle is every generalization question of it that counts, answered or not: {incomplete}.")
    rule = next((entry[step].get("rc_size_rule") for entry in named for step in STEPS
                 if (entry.get(step) or {}).get("rc_size_rule")), None)
    if rule:
        notes.append(f"Relative consistency is defined for bundles of one size: it is computed on {rule}; "
                     "accuracy and consistency cover every bundle, RC's accuracy and consistency the bundles it is "
                     "computed on.")
    return notes


def faithfulness_section(results: dict) -> Section:
    section = Section("faithfulness", "Faithfulness of highlights")
    faith = results.get("faithfulness")
    if not faith:
        section.absent = "Faithfulness is off for this study (an opt-in on the study page, for sources with highlights)."
        return section
    split = faith.get("split") or "test"  # results from before the split was recorded were test-split studies
    rules_named = {"highlight": "highlight pass (select-then-predict)", "full": "full input (ERASER)"}
    per_source = faith.get("per_source") or {}
    # What the figures left out (``left_out``) and kept without knowing their highlight
    # (``spans_not_recorded``): blank in results from before they were counted. A source all of whose
    # probabilities were left out has a row of its own, with no figures.
    counted = "left_out" in faith
    left_out = faith.get("left_out") or {}

    def y_hat_text(rules, assumed: int, n: int) -> str:
        text = ", ".join(rules_named.get(r, r) for r in rules)
        if assumed:  # the importer's rule, not given in the file (``y_hat_from_assumed``)
            text += " (assumed)" if assumed >= n else f" (assumed for {assumed} of {n})"
        return text

    def row_of(name: str, f: dict | None) -> dict:
        f = f or {}
        out = left_out.get(name) or {}
        return {"source": name, "n": f.get("n", 0), "sufficiency": f.get("sufficiency"),
                "comprehensiveness": f.get("comprehensiveness"),
                "y_hat_from": y_hat_text(f.get("y_hat_from") or (["highlight"] if f else []),
                                         f.get("y_hat_from_assumed") or 0, f.get("n", 0)),
                "computed_by": probabilities_from(f) if f else "",
                "left_out_invalid": out.get("invalid", 0) if counted else None,
                "left_out_highlights_changed": out.get("highlights_changed", 0) if counted else None,
                "spans_not_recorded": f.get("spans_not_recorded", 0 if f else None) if counted else None}

    rows = [row_of(name, f) for name, f in per_source.items()]
    rows += [row_of(name, None) for name in left_out if name not in per_source]
    assumed_sources = (faith.get("y_hat_from_assumed") or {}).get("sources") or []
    pooled_rule = ", ".join(rules_named.get(r, r) for r in faith.get("y_hat_from") or [])
    if assumed_sources:
        pooled_rule += f" (assumed for {', '.join(assumed_sources)})"

    def total(key):
        return sum(r[key] for r in rows) if counted and all(r[key] is not None for r in rows) else None

    rows.append({"source": f"{split} (all sources)", "n": sum(r["n"] for r in rows),
                 "sufficiency": results.get(f"{split}_sufficiency"),
                 "comprehensiveness": results.get(f"{split}_comprehensiveness"),
                 "y_hat_from": pooled_rule, "computed_by": "",
                 **{key: total(key) for key in ("left_out_invalid", "left_out_highlights_changed",
                                                "spans_not_recorded")}})
    columns = [Column("source", "Source"), Column("n", "n", "int"),
               Column("sufficiency", "Sufficiency (lower is better)", "float"),
               Column("comprehensiveness", "Comprehensiveness (higher is better)", "float"),
               Column("y_hat_from", "y_hat from"), Column("computed_by", "Probabilities from"),
               Column("left_out_invalid", "Left out: invalid", "int"),
               Column("left_out_highlights_changed", "Left out: highlights changed", "int"),
               Column("spans_not_recorded", "Kept, spans not recorded", "int")]
    section.tables.append(Table("faithfulness", "Sufficiency and comprehensiveness", columns, rows))
    if faith.get("left_out_rule"):
        section.notes.append(f"Left out and kept: {faith['left_out_rule']}.")
    if assumed_sources and (assumption := (faith.get("y_hat_from_assumed") or {}).get("assumption")):
        section.notes.append(f"y_hat from (assumed): {assumption}.")
    section.notes += [f"{key}: {text}" for key, text in (faith.get("caveats") or {}).items()]
    unstated = sorted({row["task_model"] for f in (faith.get("per_source") or {}).values()
                       for row in f.get("computed_with") or [] if row.get("task_model") and not row.get("method")})
    if unstated:
        section.notes.append(f"Probabilities from: the task model and its backend; the stored probabilities do not "
                             f"record how {', '.join(unstated)} scored the labels (method) or the prompt it read.")
    return section


def probabilities_from(source: dict) -> str:
    """What computed a source's faithfulness probabilities (``computed_with``: the task model with
    its backend, and the scoring method, prompt and checkpoint where the job stored them; a run from
    before it was recorded: ``computed_by``, the models alone)."""
    if "computed_with" not in source:
        return ", ".join(source.get("computed_by") or [])
    texts = []
    for row in source["computed_with"]:
        if not row.get("task_model"):
            texts.append(f"imported from {row.get('imported_from') or '?'} ({row.get('n_rationales')} rationales)")
            continue
        how = [f"backend {row.get('task_backend') or 'not recorded'}"]
        how += [f"{key} {row[key]}" for key in ("method", "prompt", "checkpoint") if row.get(key)]
        texts.append(f"{row['task_model']} ({'; '.join(how)}; {row.get('n_rationales')} rationales)")
    return ", ".join(texts)


def figure_options(results: dict) -> dict[str, dict]:
    """What each figure needs besides ``results`` (Figure 4: the names of the gold sources)."""
    by_source = (results.get("generalization") or {}).get("by_source") or {}
    return {"generalization": {"gold": tuple(sorted(_gold_names(by_source)))} if by_source else {}}


def render_figure(name: str, results: dict, fmt: str) -> bytes | None:
    return plots.PLOTS[name](results, fmt, **figure_options(results).get(name, {}))


CACHE_SECONDS = 3600


def report_sections(run: ScoreRun, *, both_directions: bool = False) -> list[Section]:
    """The report's sections for a finished run (an empty list for one that is not done).

    The intervals resample every unit (seconds for a study of a hundred thousand units), so the
    sections are cached for an hour, keyed by the run, its results and the study's latest run (a
    newer run changes the key)."""
    if run.status != ScoreRun.Status.DONE:
        return []
    results = run.results or {}
    both = both_directions or any(results.get(k) for k in REVERSE.values())
    latest = score_run_latest(study=run.study)
    digest = hashlib.sha256(json.dumps([run.pk, str(run.finished_at), latest.pk if latest else 0, both, results],
                                       sort_keys=True, default=str).encode()).hexdigest()
    key = f"rl-report-sections:v2:{digest}"
    sections = cache.get(key)
    if sections is None:
        sections = _sections(results, unit_frame(run, latest), both)
        cache.set(key, sections, CACHE_SECONDS)
    return sections


def _sections(results: dict, frame: pd.DataFrame | None, both: bool) -> list[Section]:
    return [
        utility_section(results),
        theils_u_section(results, frame, both_directions=both),
        similarity_section(results, frame),
        gen_u_section(results),
        generalization_section(results),
        agreement_section(results),
        early_stopping_section(results),
        properties_section(results),
        consistency_section(results),
        faithfulness_section(results),
    ] + ([question_validation_section(results)] if results.get("question_validation") else [])
