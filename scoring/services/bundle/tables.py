"""The tables of a study bundle: each one's file, fields and Frictionless types, declared once for
the writer (``bundle.export``), the ``datapackage.json`` and the reader (``bundle.importing``).

Ids in the tables are the exporting installation's ids: they tie the tables together inside the
bundle and mean nothing elsewhere (the import makes its own). Workers appear only as their
pseudonym (``lab.pseudonyms``); raw platform ids are never written.

Cells: CSV, UTF-8, one header row, rows ending CRLF, every cell exact (not neutralised for
spreadsheets: ``lab.spreadsheet.exact_csv_writer``); an empty cell is null; booleans ``true`` / ``false``;
datetimes ISO 8601 in UTC; ``object`` and ``array`` cells are JSON; numbers are written with
Python's shortest exact repr, so a float reads back to the same bits."""
from __future__ import annotations

from dataclasses import dataclass

from lab.api.streaming import Column
from scoring.api.export_annotations import annotation_columns
from studies.services.generation.genu import INPUT_QUESTION, INPUT_RATIONALE

FORMAT_VERSION = 1
# lab.api.streaming's column kinds as Frictionless table-schema types.
FRICTIONLESS_TYPES = {"int": "integer", "str": "string", "bool": "boolean", "float": "number", "datetime": "datetime"}


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # integer, string, boolean, number, datetime, object, array
    description: str = ""
    # Added to its table after bundles of this format were made: a bundle without the column (in its
    # CSV header and datapackage.json alike) still imports, each row reading it as empty.
    optional: bool = False

    def as_json(self) -> dict:
        out = {"name": self.name, "type": self.type}
        if self.description:
            out["description"] = self.description
        return out


@dataclass(frozen=True)
class Table:
    name: str
    fields: tuple[Field, ...]
    description: str
    primary_key: tuple[str, ...] = ()
    # The fields the import reads; None: all of them, in this order (the bundle's own tables). The
    # annotations table is the API's annotation export, whose columns are only ever appended: a
    # bundle with more columns than these still imports.
    reads: tuple[str, ...] | None = None
    # Written only for some studies (and absent from bundles made before it existed): the import
    # reads it when the bundle has it, and says what is missing without it.
    optional: bool = False

    @property
    def path(self) -> str:
        return f"data/{self.name}.csv"

    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]


def _f(spec: str, description: str = "", *, optional: bool = False) -> Field:
    name, _, kind = spec.partition(":")
    return Field(name, kind or "string", description, optional)


# The keys of each attempt set aside in a qualification grant's ``voids`` cell, as
# ``QualificationGrant.voids`` holds them (``annotations.services.impostor.grant_retake_start``),
# read in this shape by the import: ``task`` and ``retake_task`` are ids of data/tasks.csv.
GRANT_VOID_KEYS = ("task", "score", "answers", "taken_at", "voided_at", "retake_task")

# The keys of a Gen-U prediction's ``inputs`` cell (data/genu_predictions.csv): of what the Gen-U job
# recorded (``GenUPrediction.inputs``, ``studies.services.generation.genu.genu_inputs``) only the
# fingerprints scoring compares in a copy, of the question asked and (F^IR) of the rationale shown.
# Its checkpoint and training record are not carried: they are keyed by this installation's source
# ids and hold the answerer's training settings, which a bundle gives only to a reader of the source
# (``export.answerer_sources_json``), and a copy's predictions record no answerer source to compare
# them with. ``GENU_FINGERPRINT_DIGITS``: a fingerprint's length (``lab.jsontext.json_fingerprint``).
GENU_INPUT_KEYS = (INPUT_QUESTION, INPUT_RATIONALE)
GENU_FINGERPRINT_DIGITS = 12


def _annotation_table() -> Table:
    columns: list[Column] = annotation_columns(raw_worker_ids=False)
    return Table(
        "annotations",
        tuple(Field(c.name, FRICTIONLESS_TYPES[c.kind], c.description) for c in columns),
        "Every recorded answer, as GET /api/v1/studies/<id>/export/annotations/ gives it (worker pseudonyms).",
        primary_key=("annotation_id",),
        reads=("assignment_id", "position", "step", "answer", "payload", "shown_at", "answered_at", "duration_ms"),
    )


TABLES: dict[str, Table] = {t.name: t for t in [
    Table("items", (
        _f("id:integer"), _f("external_id", "The item's id in its dataset."), _f("split"), _f("question"),
        _f("choices:array", "The labelled options, [{label, text}]."), _f("gold_answer", "Choice label."),
        _f("gold_rationale"), _f("metadata:object"),
    ), "The study's items.", primary_key=("id",)),
    Table("rationales", (
        _f("item_id:integer"), _f("source", "Rationale source name (study.json sources)."), _f("text"),
        _f("predicted_answer"), _f("prediction_correct:boolean"), _f("highlights:array"),
        _f("faithfulness:object"), _f("raw_output"), _f("generation_info:object"),
    ), "The rationale of each study source for each item.", primary_key=("item_id", "source")),
    Table("generalization_questions", (
        _f("id:integer"), _f("item_id:integer"), _f("type", "rephrase, counterfactual or similar."), _f("text"),
        _f("answer"), _f("origin"), _f("validation_status"), _f("metadata:object"),
    ), "Generalization questions of the study's items.", primary_key=("id",)),
    Table("genu_predictions", (
        _f("generalization_question_id:integer"), _f("source"), _f("answerer", "I (F^I) or IR (F^IR)."),
        _f("answerer_model"), _f("predicted_answer", "Empty: the output did not parse."), _f("correct:boolean"),
        _f("raw_output"),
        _f("inputs:object", "What the answerer was given, as the Gen-U job recorded it: {question, rationale}, the "
                            "fingerprints (12 hex digits) of the question asked (its text and choices) and, for F^IR, "
                            "of the rationale shown; scoring leaves out a prediction whose question or rationale "
                            "differs now. {} when the prediction records none (kept, counted as inputs not "
                            "recorded); absent from bundles made before they carried it.", optional=True),
    ), "The Gen-U answerers' answers.", primary_key=("generalization_question_id", "source", "answerer")),
    Table("units", (
        _f("id:integer"), _f("item_id:integer"), _f("source"), _f("generalization_question_id:integer"),
        _f("rationale:boolean", "The unit shows the (item, source) rationale itself (properties studies)."),
        _f("question_key"), _f("quota:integer"), _f("n_claimed:integer"), _f("n_completed:integer"),
        _f("decided_at:datetime", "When early stopping decided the unit (its quota then fell to its claims)."),
    ), "Units of work: each needs `quota` distinct workers.", primary_key=("id",)),
    Table("tasks", (
        _f("id:integer"), _f("worker", "Pseudonym (w_ + 16 hex digits)."), _f("platform"),
        _f("status", "active, submitted, expired, approved, rejected or returned: the review decision."),
        _f("on_hold:boolean", "The platform reported another worker; not cleared (its answers do not count)."),
        _f("created_at:datetime"), _f("consented_at:datetime"), _f("expires_at:datetime"),
        _f("submitted_at:datetime"), _f("reviewed_at:datetime"),
    ), "One worker's task (assignment).", primary_key=("id",)),
    Table("claims", (
        _f("id:integer"), _f("task_id:integer"), _f("worker"), _f("position:integer"), _f("unit_id:integer"),
        _f("attention_check_id:integer", "study.json attention_checks id; empty for a unit."),
        _f("question_key"), _f("completed_at:datetime"),
        _f("released:boolean", "Given back (expired, returned or rejected task)."),
    ), "A unit or attention check placed in a task at a position.", primary_key=("id",)),
    _annotation_table(),
    Table("flag_reviews", (
        _f("annotation_id:integer"), _f("task_id:integer"), _f("position:integer"), _f("step"),
        _f("decision", "accepted or dismissed."), _f("decided_at:datetime"),
    ), "The researcher's decision on each flagged answer.", primary_key=("annotation_id",)),
    Table("qualification_grants", (
        _f("worker"), _f("platform"), _f("passed:boolean"), _f("score:integer"),
        _f("answers:object", "Question position (study.json qualification_test) -> answer."),
        _f("voids:array", "The failed attempts set aside before the one this row gives, oldest first (the test was "
                          "taken again from a browser whose study cookie did not name the task it was failed in, "
                          "under the same typed identifier or MTurk worker id), each {task, score, answers, "
                          "taken_at, voided_at, retake_task}: the data/tasks.csv id of the task it was taken in "
                          "(null: not in the bundle), its score, its answers as this row's answers, when it was "
                          "taken and set aside, and the task given to take the test again. [] when none; absent "
                          "from bundles made before they carried it.", optional=True),
    ), "Qualification test attempts: each worker's latest attempt graded (passed, score, answers), and the failed "
       "attempts set aside before it (voids).", primary_key=("worker", "platform")),
    Table("unit_scores", (
        _f("item_id:integer"), _f("source"), _f("n_annotators:integer"), _f("before_majority"),
        _f("after_majority"), _f("before_tie:boolean"), _f("after_tie:boolean"), _f("before_correct:boolean"),
        _f("after_correct:boolean"), _f("utility:integer"), _f("task_correct:boolean"), _f("gen_u:integer"),
        _f("similarity:number"), _f("imported:boolean"), _f("reported_utility:integer"),
    ), "The unit scores of the latest score run.", primary_key=("item_id", "source")),
    Table("borrowed_utility", (
        _f("item_id:integer"), _f("source"), _f("utility:integer", "1 useful, 0 unsure, -1 not useful."),
        _f("orig_after_correct:boolean", "The lending study's majority after the rationale was right."),
        _f("orig_before_correct:boolean", "The lending study's majority before the rationale was right."),
        _f("study_id:integer", "The lending study (settings.json borrowed_utility names it, with its score run)."),
    ), "The utility of each (item, source) of the study's sources taken from another study (studies other than "
       "utility studies: Figure 4 by the original rationale's utility, and the properties model of a study without "
       "utility of its own); re-scoring the imported study uses it.", primary_key=("item_id", "source"),
       optional=True),
    Table("worker_blocks", (
        _f("worker", "Pseudonym (w_ + 16 hex digits) of a worker of data/tasks.csv."), _f("platform"),
    ), "The workers of the study's tasks who were blocked in it when the bundle was made (a block made on it, by its "
       "owner, or everywhere: annotations.selectors.blocks_covering), which its scoring's counted_answers and "
       "other_readings.without_blocked_workers read; re-scoring the imported study reads them. Always written (empty "
       "when no worker was blocked): a bundle without it was made before bundles carried blocks, or from a copy of "
       "such a bundle.", primary_key=("worker", "platform"), optional=True),
]}

# JSON files of the bundle besides the tables.
STUDY_FILE = "study.json"
SETTINGS_FILE = "settings.json"
RESULTS_FILE = "results.json"
DATAPACKAGE_FILE = "datapackage.json"
CHECKSUMS_FILE = "SHA256SUMS"
JSON_FILES = {
    STUDY_FILE: "The design: kind, dataset, sources, quota, units per task, pay, consent, instructions, attention "
                "checks, the qualification test.",
    SETTINGS_FILE: "The app's version and every setting that affects a score, and where the borrowed utility "
                   "(data/borrowed_utility.csv) came from.",
    RESULTS_FILE: "results.json of the study's latest finished score run (absent when never scored).",
}
