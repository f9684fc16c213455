"""Importing a study bundle (``bundle.export``) as a new, closed study whose re-scoring gives the
original ``results.json`` numbers.

All or nothing, in three passes over the zip:

1. every file's SHA-256 against ``SHA256SUMS`` (and ``datapackage.json``'s hashes): a changed,
   missing or unlisted file is refused by name;
2. each table's schema in ``datapackage.json`` and its CSV header against the fields this
   installation reads: a missing field or another type is refused naming the file and the field;
3. the rows, read one at a time and written in batches inside one transaction: a bad row is
   reported with its file, row (CSV line), field and reason (the importers' ``ImportValidationError``)
   and nothing is kept.

Content is shared, never overwritten: a dataset, item, source, rationale, generalization question
or Gen-U prediction that exists already (same name or key) is used when it holds the same values
and refused by row otherwise, so an import never changes another study. Nor does it add to what
another researcher's study shows: a new item, rationale or generalization question that a study
the importing owner may not change would show (``studies.services.content``) is refused by row, as
the dataset importers refuse it (the operator, with no owner, may add it). The dataset and the
sources (the study's and Gen-U's answerers') are found by name only among those the importing owner
may use in a study (``datasets_for_design``, ``sources_for_design``: what ``study_insert`` lets a study use); a
name another researcher's row holds gets the answer a missing name gets, a new row made from the
bundle, under ``NAME (STUDY)`` since names are unique here (``outcomes.usable_by_name``; the import
record's ``renamed`` lists them), and nothing of the hidden row is compared or told. Workers become
participants keyed by their pseudonym on their platform, within the new study: the pseudonym is all
the bundle has, so nobody here can map them back to a platform id, and none is invented. A worker
cell is exactly what ``lab.pseudonyms.worker_pseudonym`` writes (``w_`` + 16 lowercase hex digits)
and is refused by row otherwise, so a platform id typed into a bundle names nobody. Each import makes
its own participants (``imported_worker_id``: the study's id and the pseudonym, a shape no platform
id takes) and never uses an existing one: not a worker the questionnaire made, and not the same
pseudonym of another import, whose blocks (``Participant.blocked``) and work another researcher's
workers page would otherwise show. A worker the bundle names as blocked in the original when it was
made (data/worker_blocks.csv) is blocked in the copy alone, so the copy's scoring counts their work
as the original's did (``_Import.worker_block_rows``).

Memory: answers, claims, units and tasks are streamed in batches of ``BATCH`` rows; ids are mapped
through :class:`IdMap`, which keeps runs of consecutive ids (a study's units, claims and tasks are
made in blocks), and claims are found again per batch in the database, so memory does not grow with
the number of answers."""
from __future__ import annotations

import csv
import hashlib
import io
import math
import os
import re
import struct
import zipfile
import zlib
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import DataError, IntegrityError, transaction
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models import Count, Q

from annotations.choices import answer_is_correct
from annotations.models import (
    WITHDRAWAL_LOCK,
    Annotation,
    Assignment,
    AttentionCheck,
    Claim,
    FlagReview,
    Participant,
    QualificationGrant,
    QualificationQuestion,
    QualificationTest,
    Unit,
    WorkerBlock,
)
from annotations.selectors import study_withdrawal_digests
from annotations.services.answers import claim_labels
from annotations.services.errors import InvalidAnswer
from annotations.services.participants import imported_worker_id
from annotations.services.release import unit_counts, units_recount
from annotations.services.steps import clean_answer, steps_for
from annotations.services.stopping import unit_votes_decide, units_after_release
from lab.dblocks import transaction_lock
from lab.ids import parse_id
from lab.jsontext import JsonTooDeep, UnstorableText, load_json, storable_text, text_problem
from lab.pseudonyms import withdrawal_digest
from scoring.api.export_units import SCORED_WITH_RUN_KEYS, scored_with_results
from scoring.metrics import pipeline
from scoring.metrics.labels import utility_category
from scoring.models import BundledUtility, UnitScore
from scoring.selectors import BUNDLE_SCORES_KEY
from scoring.services.outcomes import usable_by_name
from scoring.services.score import (
    WORKER_BLOCKS_KEY,
    WORKER_BLOCKS_UNKNOWN_KEY,
    _annotation_frame,
    _units_frame,
)
from studies.choices import LABELS_AS_RECORDED, as_label, own_choices, predicted_answer_problem
from studies.models import (
    Dataset,
    GeneralizationQuestion,
    GenUPrediction,
    Item,
    Platform,
    Rationale,
    RationaleSource,
    Study,
)
from studies.selectors import VIEW, datasets_for_design, sources_for_design, studies_for_user
from studies.services.content import content_added_refusals, gen_u_added_refusals, source_prompt_problems
from studies.services.grading import prediction_correct
from studies.services.importers import ImportValidationError
from studies.services.importers.errors import MAX_LISTED_ERRORS, ErrorCollector, RowError
from studies.services.importers.reading import ImportFile
from studies.services.importers.upsert import UpsertResult, import_record_create
from studies.services.model_paths import model_path_stored, source_model_path_problem
from studies.services.questions import validation_ever_invalid
from studies.services.studies import StudyError, study_add_check
from studies.textrules import identifier_problem, sentinel_problem

from .export import SOURCE_FIELDS, genu_inputs_cell
from .tables import (
    CHECKSUMS_FILE,
    DATAPACKAGE_FILE,
    FORMAT_VERSION,
    GENU_FINGERPRINT_DIGITS,
    GENU_INPUT_KEYS,
    GRANT_VOID_KEYS,
    RESULTS_FILE,
    SETTINGS_FILE,
    STUDY_FILE,
    TABLES,
    Table,
)

BATCH = 5_000
HASH_CHUNK = 1 << 20
# What the archive may hold, checked against its directory (each member's declared size) before
# any member is read; zipfile never reads a member past its declared size, so a member cannot
# unpack to more than these say. The caps follow RL_MAX_IMPORT_BYTES (100 MiB by default), read at
# each import:
# - a member read whole into memory (SHA256SUMS and the .json files): RL_MAX_IMPORT_BYTES //
#   WHOLE_READ_SHARE, 10 MiB (a bundle's are tens of KB: study.json, settings.json, results.json and
#   datapackage.json hold the design and the aggregate results, never a row per answer);
# - any other member (a table, read row by row): RL_MAX_IMPORT_BYTES * MEMBER_FACTOR, 1,000 MiB
#   (the 1,000,000-answer benchmark's annotations.csv is 183 MiB, benchmarks/bundle/README.md);
# - all members together: RL_MAX_IMPORT_BYTES * TOTAL_FACTOR, 2,000 MiB (that benchmark's bundle
#   unzips to 224 MiB);
# - a member over RATIO_FROM_BYTES (1 MiB) that unpacks to more than MAX_RATIO times its packed
#   size (deflate reaches about 1,000 on repeated bytes; the benchmark's synthetic tables, which
#   repeat, compress about 15 to 1).
WHOLE_READ_SHARE = 10
MEMBER_FACTOR = 10
TOTAL_FACTOR = 20
MAX_RATIO = 100
RATIO_FROM_BYTES = 1 << 20
# Before the archive's directory is read (``_open``): the upload itself at most RL_MAX_IMPORT_BYTES
# (what every import upload is held to, and what deploy/nginx.conf lets through: the 1,000,000-answer
# benchmark's bundle is 16.5 MiB, and its annotations.csv alone would pass the table cap above at
# about 5,000,000 answers), and its end-of-central-directory record (zip64's too) listing at most
# MAX_MEMBERS members in a directory of at most MAX_DIRECTORY_BYTES. A bundle has about 15 members
# (study.json, settings.json, results.json, datapackage.json, README.md, SHA256SUMS and a dozen
# tables); a zip of a million empty members would otherwise be read whole into memory (zipfile
# builds an object per member) before any cap above is checked. zipfile reads the directory by its
# size, not its count, so both are checked, and the members it found are counted again.
MAX_MEMBERS = 1_000
MAX_DIRECTORY_BYTES = MAX_MEMBERS * 1024  # a member's directory entry: 46 bytes, its name and extras
EOCD = struct.Struct("<4s4H2LH")  # the end-of-central-directory record (22 bytes and a comment)
EOCD64_LOCATOR = struct.Struct("<4sLQL")  # just before it in a zip64 archive: where the zip64 record is
EOCD64 = struct.Struct("<4sQ2H2L4Q")  # the zip64 end-of-central-directory record
# The cells a row cannot do without (an empty one is a row error naming the field).
REQUIRED = {
    "items": ("id", "external_id", "split", "question", "gold_answer"),
    "rationales": ("item_id", "source", "text"),
    "generalization_questions": ("id", "item_id", "type", "text", "answer", "validation_status"),
    "genu_predictions": ("generalization_question_id", "source", "answerer", "correct"),
    "units": ("id", "item_id", "rationale", "question_key", "quota", "n_claimed", "n_completed"),
    "tasks": ("id", "worker", "platform", "status", "on_hold", "expires_at"),
    "claims": ("id", "task_id", "worker", "position", "question_key", "released"),
    "annotations": ("assignment_id", "position", "step", "answered_at"),
    "flag_reviews": ("task_id", "position", "step", "decision"),
    "qualification_grants": ("worker", "platform", "passed", "score"),
    # n_annotators may be empty: imported outcomes whose file did not say how many workers answered
    "unit_scores": ("item_id", "source", "before_tie", "after_tie", "imported"),
    "borrowed_utility": ("item_id", "source", "utility", "study_id"),
    "worker_blocks": ("worker", "platform"),
}
# A copy whose bundle has no borrowed utility table (made before bundles carried one): why its
# scoring cannot give Figure 4 by the original rationale's utility (the migration that marks the
# studies imported before keeps a copy of these words).
NO_BORROWED_TABLE = (
    "the study bundle it was imported from has no borrowed utility table (data/borrowed_utility.csv: bundles made "
    "before they carried one), so the utility of its original rationales, which came from another study where the "
    "bundle was made, is not known here")
# A copy whose bundle has no worker blocks table (made before bundles carried one, or from a copy of
# such a bundle): why its scoring cannot say which counted tasks are of blocked workers
# (``score.worker_blocks_unknown`` reads it from the import record).
NO_WORKER_BLOCKS_TABLE = (
    "the study bundle it was imported from has no worker blocks table (data/worker_blocks.csv: bundles made before "
    "they carried one, or from a copy of such a bundle), so which of its workers were blocked where the bundle was "
    "made is not known here")
# The reason of the block the import makes on the copy for each worker its bundle names as blocked.
BLOCKED_AT_ORIGIN = ("blocked in the study this one was imported from (its import record names it) when its study "
                     "bundle was made (data/worker_blocks.csv): this block is the copy's record of that, so that "
                     "re-scoring counts this worker's work as the original's results did")
# The longest task duration a bundle may carry (a week, in minutes): more is not a study's deadline.
MAX_TASK_MINUTES = 7 * 24 * 60
# The steps whose answer ``clean_answer`` reads from the payload (a validation's marks and its
# corrected answer, a rationale's property marks): a refusal of theirs names the payload field.
PAYLOAD_STEPS = frozenset({Annotation.Step.VALIDATION, Annotation.Step.PROPERTIES})
# A bundle's worker cell: the shape ``lab.pseudonyms.worker_pseudonym`` gives, and nothing else.
WORKER_PSEUDONYM = re.compile(r"w_[0-9a-f]{16}")
# A fingerprint of a Gen-U prediction's ``inputs`` cell (``lab.jsontext.json_fingerprint``).
_FINGERPRINT = re.compile(f"[0-9a-f]{{{GENU_FINGERPRINT_DIGITS}}}")
NOT_A_PSEUDONYM = ("not a worker pseudonym: a bundle names a worker only as the export writes it, w_ followed "
                   "by 16 lowercase hex digits (never a platform id)")
# study.json: what the import reads, by section.
DESIGN_KEYS = {
    "study": ("id", "name", "kind", "split", "annotators_per_unit", "units_per_task", "reward", "hourly_pay_floor",
              "estimated_minutes_per_task", "platform"),
    "dataset": ("name", "task_format"),
}


class BundleError(ImportValidationError):
    """The bundle cannot be imported; nothing was written. Each error's ``record`` names the file."""


# --- ids -----------------------------------------------------------------------------------------


class IdMap:
    """Bundle id -> new id, added in increasing bundle id order, kept as runs of consecutive ids on
    both sides: a block of a thousand units made together costs three integers."""

    def __init__(self) -> None:
        self._old = array("q")
        self._new = array("q")
        self._len = array("q")

    def add(self, old: int, new: int) -> None:
        if self._old:
            end = self._old[-1] + self._len[-1]
            if old == end and new == self._new[-1] + self._len[-1]:
                self._len[-1] += 1
                return
            if old < end:
                raise ValueError("ids must be added in increasing order")
        self._old.append(old)
        self._new.append(new)
        self._len.append(1)

    def get(self, old: int | None) -> int | None:
        if old is None:
            return None
        i = bisect_right(self._old, old) - 1
        if i < 0 or old >= self._old[i] + self._len[i]:
            return None
        return self._new[i] + old - self._old[i]

    @property
    def runs(self) -> int:
        return len(self._old)


# --- cells ---------------------------------------------------------------------------------------


class BadCell(ValueError):
    pass


def _bool(text: str) -> bool:
    if text in ("true", "True", "1"):
        return True
    if text in ("false", "False", "0"):
        return False
    raise BadCell(f"{text[:40]!r} is not true or false")


INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # a database's bigint (and IdMap's array("q"))


def _int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BadCell(f"{text[:40]!r} is not an integer") from None
    if not INT_MIN <= value <= INT_MAX:
        raise BadCell(f"{text[:40]!r} is out of range (a 64-bit integer)")
    return value


# The range of each integer column type as PostgreSQL holds it (Django's own table; SQLite's
# ``integer_field_range`` widens every type to 64 bits). A cell or study.json value stored in a model
# field is held to its field's range on every database, so a bundle that imports on one database
# imports on the other: PostgreSQL refused a quota of 2**40 with a DataError (a 500) that SQLite kept.
COLUMN_RANGES = BaseDatabaseOperations.integer_field_ranges


@dataclass(frozen=True)
class IntField:
    """The model field an integer of the bundle is stored in, and the range its column holds."""
    model: type
    name: str

    @property
    def bounds(self) -> tuple[int, int]:
        return COLUMN_RANGES[self.model._meta.get_field(self.name).get_internal_type()]

    def problem(self, value: int, shown: str) -> str | None:
        """Why ``value`` is past what the field's column holds (``shown``: how the bundle wrote it);
        None when it is not. A negative value of a positive field is left to its row's own rule (a
        reason that names the rule; the column's CHECK, an IntegrityError, behind it)."""
        low, high = self.bounds
        where = f"{self.model.__name__}.{self.name}"
        if value > high:
            return f"{shown[:40]!r} is out of range ({where} holds at most {high})"
        if value < (low if low else -high - 1):  # a positive field's column is the signed type's
            return f"{shown[:40]!r} is out of range ({where} holds at least {low})"
        return None


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadCell(f"{text[:40]!r} is not a number") from None
    if not math.isfinite(value):  # the bundle writes no NaN or infinity (an unknown number is empty)
        raise BadCell(f"{text[:40]!r} is not a finite number")
    return value


# The times a bundle may give, in UTC: what a study's times (made, consented, answered, due) can be.
# A time zone moves a time past what Python and the databases hold: 0001-01-01T00:00:00+14:00 is
# before year 1 in UTC (SQLite's write raised OverflowError, a 500; PostgreSQL kept it and every
# later read of the row failed, the study's own bundle download too).
EARLIEST, LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)


def _datetime(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise BadCell(f"{text[:40]!r} is not an ISO 8601 date and time") from None
    if value.tzinfo is None:
        raise BadCell(f"{text[:40]!r} has no time zone (expected UTC, +00:00)")
    if not EARLIEST <= value < LATEST:  # compared by their UTC times, with no conversion to overflow
        raise BadCell(f"{text[:40]!r} is not a time a study can have (from 1970 to 2099, in UTC)")
    return value


def _text(text: str) -> str:
    """A text cell, refused when no database can store it (``lab.jsontext.text_problem``: a NUL, a
    lone surrogate), as the dataset importers refuse it: PostgreSQL refused a NUL with a 500."""
    reason = text_problem(text)
    if reason:
        raise BadCell(f"the text {reason}")
    return text


def _json_cell(text: str) -> Any:
    """A JSON cell parsed by ``lab.jsontext.load_json``: nesting deeper than ``MAX_DEPTH`` or text
    no database can store is a ``BadCell`` that says so, as any other bad JSON (never a
    RecursionError)."""
    try:
        return load_json(text)
    except (JsonTooDeep, UnstorableText) as exc:
        raise BadCell(str(exc)) from None
    except ValueError as exc:
        raise BadCell(f"not JSON ({exc})") from None


def _json(kind: type):
    def parse(text: str):
        value = _json_cell(text)
        if not isinstance(value, kind):
            raise BadCell(f"expected a JSON {'object' if kind is dict else 'array'}")
        return value
    return parse


# The tables' integer cells stored in a model field, or compared with one (a claim's position), each
# held to its column's range (``IntField``) where it is read (``Bundle._values``); the others are ids
# of the bundle (mapped to this installation's, ``IdMap``) or checked by their rows' own rules.
CELL_FIELDS = {
    ("units", "quota"): IntField(Unit, "quota"),
    ("units", "n_claimed"): IntField(Unit, "n_claimed"),
    ("units", "n_completed"): IntField(Unit, "n_completed"),
    ("claims", "position"): IntField(Claim, "position"),
    ("annotations", "position"): IntField(Claim, "position"),
    ("annotations", "duration_ms"): IntField(Annotation, "duration_ms"),
    ("flag_reviews", "position"): IntField(Claim, "position"),
    ("qualification_grants", "score"): IntField(QualificationGrant, "score"),
    ("unit_scores", "n_annotators"): IntField(UnitScore, "n_annotators"),
    ("unit_scores", "utility"): IntField(UnitScore, "utility"),
    ("unit_scores", "gen_u"): IntField(UnitScore, "gen_u"),
    ("unit_scores", "reported_utility"): IntField(UnitScore, "reported_utility"),
}

PARSERS = {"integer": _int, "number": _number, "boolean": _bool, "datetime": _datetime,
           "object": _json(dict), "array": _json(list), "string": _text}


@dataclass
class Row:
    path: str
    line: int
    values: dict[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]


class _KeysSeen:
    """The primary keys of a table's rows read so far (``Bundle.rows``). A single integer key (an
    id) above every id before it (a bundle writes its tables in id order) extends or follows the
    last run of consecutive ids, as ``IdMap`` keeps them (a table of a million answers in id order
    costs a few integers, not a set of a million); an id below the last one is looked up in the
    runs (by bisection) and kept in a set, so a table in any order is checked in O(n log n), never
    by inserts into the runs (quadratic), with memory only for the ids out of order. An earlier row
    is then named by none; other keys (an (item, source) pair, a worker on a platform: tables of a
    study's units or workers) are kept with the line that gave them."""

    def __init__(self) -> None:
        self._start = array("q")
        self._end = array("q")  # exclusive
        self._out_of_order: set[int] = set()  # every one below the last run's end (which only grows)
        self._lines: dict[tuple, int] = {}

    def add(self, key: tuple, line: int) -> int | None:
        """None when ``key`` is new (and it is kept); else the line of the row that gave it, 0 when
        not kept. A key with an empty part is not a key (the row's own checks refuse it)."""
        if any(part is None for part in key):
            return None
        if len(key) == 1 and isinstance(key[0], int) and key[0] < INT_MAX:  # a run's end is one past its last id
            return self._add_id(key[0])
        if key in self._lines:
            return self._lines[key]
        self._lines[key] = line
        return None

    def _add_id(self, value: int) -> int | None:
        starts, ends = self._start, self._end
        if not ends or value > ends[-1]:  # above every id so far: a new last run
            starts.append(value)
            ends.append(value + 1)
            return None
        if value == ends[-1]:  # the next id of the last run
            ends[-1] = value + 1
            return None
        i = bisect_right(starts, value) - 1  # the run starting at or below value
        if (i >= 0 and value < ends[i]) or value in self._out_of_order:
            return 0
        self._out_of_order.add(value)
        return None


# --- the archive ---------------------------------------------------------------------------------


@dataclass
class Bundle:
    archive: zipfile.ZipFile
    name: str
    sha256: str
    size: int
    errors: ErrorCollector = field(default_factory=ErrorCollector)

    def error(self, path: str, line: int | None, field_name: str, reason: str) -> None:
        self.errors.add(line, field_name, reason, record=path)

    def raise_if_any(self) -> None:
        if self.errors:
            raise BundleError(self.errors.errors, filename=self.name, unlisted=self.errors.unlisted)

    def read_whole(self, path: str) -> bytes:
        """A member read whole into memory: at most the cap on such members (``_open`` refused a
        larger declared size; a byte more is never read)."""
        cap = _whole_read_cap()
        try:
            with self.archive.open(path) as member:
                data = member.read(cap + 1)
        except KeyError:
            raise BundleError(RowError(None, "", "missing from the bundle", record=path), filename=self.name) from None
        except UNREADABLE as exc:
            raise BundleError(RowError(None, "", f"unreadable: {exc}", record=path), filename=self.name) from None
        if len(data) > cap:
            raise BundleError(RowError(None, "", f"over {cap:,} bytes", record=path), filename=self.name)
        return data

    def json(self, path: str) -> Any:
        data = self.read_whole(path)
        try:
            return load_json(data.decode("utf-8"))  # depth-limited: deep nesting is a ValueError, not a 500
        except ValueError as exc:
            raise BundleError(RowError(None, "", f"not JSON: {exc}", record=path), filename=self.name) from None

    def rows(self, table: Table) -> Iterator[Row]:
        """The table's rows, each cell parsed by its type; a bad cell is reported and its row skipped.
        A row repeating the table's primary key (``Table.primary_key``) of an earlier row is
        reported naming the key's fields and skipped: a keyed table lists each key once, so a
        row cannot be counted twice (a repeated (item, source) of the borrowed utility would weigh
        twice in Figure 4). The key's fields are read even where the import reads no other use of
        them (the annotations' ``annotation_id``); a table whose header lacks one is not checked."""
        types = {f.name: f.type for f in table.fields}
        wanted = table.reads or tuple(types)
        required = REQUIRED.get(table.name, ())
        with self.archive.open(table.path) as raw:
            reader = csv.reader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))
            header = next(reader, [])
            # a field added after the bundle was made (``Field.optional``): every row reads it as empty
            absent = tuple(f.name for f in table.fields if f.optional and f.name not in header)
            key = table.primary_key if all(name in header for name in table.primary_key) else ()
            wanted = (*(name for name in wanted if name not in absent), *(name for name in key if name not in wanted))
            index = {name: header.index(name) for name in wanted}
            seen = _KeysSeen()
            for line, cells in self._records(table, reader):
                if len(cells) != len(header):
                    self.error(table.path, line, "", f"{len(cells)} cells where the header has {len(header)}")
                    continue
                values = self._values(table, line, cells, index, wanted, types, required)
                if values is None:
                    continue
                values.update(dict.fromkeys(absent))
                if key and (earlier := seen.add(tuple(values[name] for name in key), line)) is not None:
                    where = f"row {earlier}" if earlier else "an earlier row"
                    shown = ", ".join(f"{name} {str(values[name])[:40]!r}" for name in key)
                    self.error(table.path, line, ", ".join(key),
                               f"{shown} is given again ({where} of {table.path} has it): the table's "
                               "primary key names each row once")
                    continue
                yield Row(table.path, line, values)

    def _records(self, table: Table, reader) -> Iterator[tuple[int, list[str]]]:
        """``(line, cells)`` for each record after the header, ``line`` the CSV line it starts on
        (``reader.line_num``, as the dataset importers' ``_csv_records`` count): a cell holding a
        line break spans lines, so counting records would name the wrong line after it. Unlike
        theirs, a blank line is a record here (a bundle writes none: its row is refused by its
        cells). A record that cannot be read is reported by its line and ends the file."""
        while True:
            line = reader.line_num + 1
            try:
                cells = next(reader)
            except StopIteration:
                return
            except (csv.Error, UnicodeDecodeError) as exc:  # the rest of the file cannot be read
                self.error(table.path, line, "", f"unreadable CSV: {exc}")
                return
            yield line, cells

    def _values(self, table: Table, line: int, cells: list[str], index: dict[str, int], wanted, types,
                required) -> dict[str, Any] | None:
        values, ok = {}, True
        for name in wanted:
            text = cells[index[name]]
            if text == "":
                values[name] = None
                if name in required:
                    self.error(table.path, line, name, "empty")
                    ok = False
                continue
            try:
                values[name] = PARSERS[types[name]](text)
            except BadCell as exc:
                self.error(table.path, line, name, str(exc))
                ok = False
                continue
            stored = CELL_FIELDS.get((table.name, name))
            if stored is not None and (problem := stored.problem(values[name], text)):
                self.error(table.path, line, name, problem)
                ok = False
        return values if ok else None


def _is_path(file: Any) -> bool:
    return isinstance(file, (str, bytes)) or hasattr(file, "__fspath__")


@contextmanager
def _opened(file: Any, filename: str | None) -> Iterator[tuple[Any, str | None]]:
    """``(file object, name)`` for the bundle ``file``: a path is opened here and closed when the
    import ends (zipfile never closes a file object it was given), and one that cannot be read is
    refused as the importers' shared reader refuses it (``importers.reading.read_import_file``:
    ``NAME: nothing imported: file: file not found: PATH``), its name checked the same way; a file
    object is used as it is."""
    if not _is_path(file):
        yield file, filename
        return
    path = os.fsdecode(file)
    name = filename or os.path.basename(path) or path
    if reason := text_problem(name):
        raise BundleError(f"the file name {reason}; rename the file", filename=storable_text(name))
    shown = storable_text(path)  # the folders above it may be named in any bytes
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below, when the import is done
    except FileNotFoundError:
        raise BundleError(f"file not found: {shown}", filename=name) from None
    except IsADirectoryError:
        raise BundleError(f"a folder, not a file: {shown}", filename=name) from None
    except OSError as exc:
        raise BundleError(f"cannot be read ({exc.strerror or exc}): {shown}", filename=name) from None
    with fh:
        yield fh, name


def _open(file: IO, filename: str | None) -> Bundle:
    name = str(filename or getattr(file, "name", None) or "bundle.zip")
    limit = int(settings.RL_MAX_IMPORT_BYTES)
    digest, size = hashlib.sha256(), 0
    file.seek(0)
    while chunk := file.read(HASH_CHUNK):
        digest.update(chunk)
        size += len(chunk)
        if size > limit:  # nothing more is read
            raise BundleError(f"the file is over the import limit of {limit:,} bytes (RL_MAX_IMPORT_BYTES)",
                              filename=name)
    _check_directory(file, name)
    file.seek(0)
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise BundleError(f"not a zip archive ({exc})", filename=str(name)) from None
    bundle = Bundle(archive, name.rsplit("/", 1)[-1], digest.hexdigest(), size)
    try:
        _check_members(bundle)
    except BundleError:
        archive.close()
        raise
    return bundle


def _check_directory(file: IO, name: str) -> None:
    """Before zipfile reads the archive's directory: its end-of-central-directory record (and the
    zip64 one it points at) lists at most ``MAX_MEMBERS`` members in a directory of at most
    ``MAX_DIRECTORY_BYTES`` (the larger of the two records' numbers where both are there).
    ``BundleError`` naming the count (or size) and the maximum otherwise. The records are the ones
    zipfile reads (``_end_record``); an archive without a record is left to zipfile, which refuses it."""
    file.seek(0, io.SEEK_END)
    end = file.tell()
    found = _end_record(file, end, name)
    if found is None:
        return
    at, record = found
    *_, entries, total, directory, _offset, _comment = EOCD.unpack(record)
    entries = max(entries, total)
    # zipfile reads the zip64 locator just before the record, and the zip64 record just before the
    # locator (a file object that cannot seek before its start clamps to 0: read there too)
    file.seek(max(0, at - EOCD64_LOCATOR.size))
    locator = file.read(EOCD64_LOCATOR.size)
    if len(locator) == EOCD64_LOCATOR.size and locator[:4] == b"PK\x06\x07":
        _sig, _disk, record_at, _disks = EOCD64_LOCATOR.unpack(locator)
        # just before the locator (where zipfile reads it), and where the locator says
        for place in {max(0, at - EOCD64_LOCATOR.size - EOCD64.size), record_at}:
            if 0 <= place <= end - EOCD64.size:
                file.seek(place)
                record64 = file.read(EOCD64.size)
                if record64[:4] == b"PK\x06\x06":
                    *_, entries64, total64, directory64, _offset64 = EOCD64.unpack(record64)
                    entries, directory = max(entries, entries64, total64), max(directory, directory64)
    if entries > MAX_MEMBERS:
        raise BundleError(f"the archive lists {entries:,} members, over the maximum of {MAX_MEMBERS:,} (a study "
                          "bundle has about 15)", filename=name)
    if directory > MAX_DIRECTORY_BYTES:
        raise BundleError(f"the archive's directory is {directory:,} bytes, over the maximum of "
                          f"{MAX_DIRECTORY_BYTES:,} ({MAX_MEMBERS:,} members)", filename=name)


def _end_record(file: IO, end: int, name: str) -> tuple[int, bytes] | None:
    """The end-of-central-directory record zipfile reads (Python 3.11's ``_EndRecData``), and where
    it is: the file's last 22 bytes when they start with the signature and give no comment, else
    the last signature in its last 64 KiB and 22 bytes. None where there is none (zipfile refuses
    the file); ``BundleError`` where that signature has too few bytes after it to be a record."""
    if end < EOCD.size:
        return None
    file.seek(end - EOCD.size)
    last = file.read(EOCD.size)
    if last[:4] == b"PK\x05\x06" and last[-2:] == b"\x00\x00":
        return end - EOCD.size, last
    start = max(0, end - (1 << 16) - EOCD.size)
    file.seek(start)
    tail = file.read(end - start)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0:
        return None
    if len(tail) - at < EOCD.size:
        raise BundleError(f"not a zip archive (its last end-of-central-directory signature, {len(tail) - at} "
                          f"bytes from its end, is too close to it to begin a {EOCD.size}-byte record)",
                          filename=name)
    return start + at, tail[at:at + EOCD.size]


# What reading a member may raise on an archive whose data does not match its directory (a bad
# CRC, a truncated or corrupt stream, an encrypted member, a compression zipfile cannot read).
UNREADABLE = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, OSError)


def _whole_read_cap() -> int:
    return int(settings.RL_MAX_IMPORT_BYTES) // WHOLE_READ_SHARE


def _whole_read(path: str) -> bool:
    return path == CHECKSUMS_FILE or path.endswith(".json")


def _check_members(bundle: Bundle) -> None:
    """Before any member is read: every member's declared size (and the total) is under its cap,
    none unpacks to more than MAX_RATIO times its packed size, and no name is there twice."""
    limit = int(settings.RL_MAX_IMPORT_BYTES)
    member_cap, total_cap, whole_cap = limit * MEMBER_FACTOR, limit * TOTAL_FACTOR, _whole_read_cap()
    seen: set[str] = set()
    total = 0
    members = bundle.archive.infolist()
    if len(members) > MAX_MEMBERS:  # a directory whose record said fewer (zipfile reads it by its size)
        raise BundleError(f"the archive holds {len(members):,} members, over the maximum of {MAX_MEMBERS:,} "
                          "(a study bundle has about 15)", filename=bundle.name)
    for info in members:
        path, size = info.filename, info.file_size
        if path in seen:
            bundle.error(path, None, "", "in the archive twice")
        seen.add(path)
        total += size
        cap = whole_cap if _whole_read(path) else member_cap
        if size > cap:
            bundle.error(path, None, "", f"unpacks to {size:,} bytes, over the limit of {cap:,} for this file")
        elif size > RATIO_FROM_BYTES and size > MAX_RATIO * max(info.compress_size, 1):
            bundle.error(path, None, "", f"unpacks to {size:,} bytes from {info.compress_size:,}: more than "
                                         f"{MAX_RATIO} times its packed size (a zip bomb?)")
    if total > total_cap:
        bundle.error("", None, "", f"the archive unpacks to {total:,} bytes, over the limit of {total_cap:,}")
    bundle.raise_if_any()


def _check_sums(bundle: Bundle) -> None:
    """Pass 1: every file's SHA-256 is the one SHA256SUMS lists (and datapackage.json states)."""
    names = {i.filename for i in bundle.archive.infolist() if not i.is_dir()}
    if CHECKSUMS_FILE not in names:
        raise BundleError(RowError(None, "", "missing: the bundle cannot be checked", record=CHECKSUMS_FILE),
                          filename=bundle.name)
    listed: dict[str, str] = {}
    for n, line in enumerate(bundle.read_whole(CHECKSUMS_FILE).decode("utf-8", "replace").splitlines(), 1):
        digest, _, path = line.partition("  ")
        if len(digest) != 64 or not path:
            bundle.error(CHECKSUMS_FILE, n, "", "expected '<sha256>  <path>'")
            continue
        listed[path] = digest.lower()
    for path in sorted(names - {CHECKSUMS_FILE} - set(listed)):
        bundle.error(path, None, "sha256", f"not listed in {CHECKSUMS_FILE}")
    for path, expected in sorted(listed.items()):
        if path not in names:
            bundle.error(path, None, "sha256", f"listed in {CHECKSUMS_FILE} but missing from the bundle")
            continue
        digest = hashlib.sha256()
        try:
            with bundle.archive.open(path) as member:
                while chunk := member.read(HASH_CHUNK):
                    digest.update(chunk)
        except UNREADABLE as exc:
            bundle.error(path, None, "", f"unreadable: {exc}")
            continue
        if digest.hexdigest() != expected:
            bundle.error(path, None, "sha256",
                         f"checksum mismatch: the file's SHA-256 is {digest.hexdigest()}, {CHECKSUMS_FILE} says "
                         f"{expected} (the file changed after the bundle was made)")
    bundle.raise_if_any()
    for resource in _package(bundle)["resources"]:
        path, stated = resource.get("path"), str(resource.get("hash") or "").removeprefix("sha256:")
        if path in listed and stated and stated != listed[path]:
            bundle.error(DATAPACKAGE_FILE, None, "hash", f"{path}: {stated} differs from {CHECKSUMS_FILE}'s")
    bundle.raise_if_any()


def _package(bundle: Bundle) -> dict:
    """datapackage.json, refused naming the place where its shape is not a data package's: an
    object whose ``resources`` (absent: none) is a list of objects, each with a string ``path``, a
    ``schema`` object (absent: none) whose ``fields`` is a list of objects with string names and
    types. What the passes read of it is then there to read; ``resources`` is always a list."""
    package = bundle.json(DATAPACKAGE_FILE)

    def bad(where: str, reason: str) -> None:
        bundle.error(DATAPACKAGE_FILE, None, where, reason)

    if not isinstance(package, dict):
        bad("", "expected a JSON object")
        bundle.raise_if_any()
    resources = package.get("resources")
    if resources is None:
        resources = package["resources"] = []
    if not isinstance(resources, list):
        bad("resources", "expected a list of objects")
        bundle.raise_if_any()
    for i, resource in enumerate(resources):
        where = f"resources[{i}]"
        if not isinstance(resource, dict):
            bad(where, "expected an object")
            continue
        for key in ("path", "hash"):
            if not isinstance(resource.get(key), (str, type(None))):
                bad(f"{where}.{key}", "expected a string")
        schema = resource.get("schema")
        if schema is None:
            continue
        if not isinstance(schema, dict):
            bad(f"{where}.schema", "expected an object")
            continue
        fields = schema.get("fields")
        if fields is None:
            continue
        if not isinstance(fields, list):
            bad(f"{where}.schema.fields", "expected a list of objects")
            continue
        for j, spec in enumerate(fields):
            if not isinstance(spec, dict):
                bad(f"{where}.schema.fields[{j}]", "expected an object")
                continue
            for key in ("name", "type"):
                if not isinstance(spec.get(key), (str, type(None))):
                    bad(f"{where}.schema.fields[{j}].{key}", "expected a string")
    bundle.raise_if_any()
    return package


def _check_schemas(bundle: Bundle) -> None:
    """Pass 2: each table's fields (datapackage.json and the CSV header) are the ones read here."""
    resources = {r.get("path"): r for r in _package(bundle)["resources"]}
    for table in TABLES.values():
        resource = resources.get(table.path)
        if resource is None and table.optional and table.path not in bundle.archive.namelist():
            continue  # not written for this study, or a bundle made before the table existed
        if resource is None:
            bundle.error(table.path, None, "", f"no resource in {DATAPACKAGE_FILE}")
            continue
        given = {f.get("name"): f.get("type") for f in (resource.get("schema") or {}).get("fields") or []}
        _check_schema_fields(bundle, table, given)
        if table.path not in bundle.archive.namelist():
            bundle.error(table.path, None, "", "missing from the bundle")
            continue
        _check_csv_header(bundle, table, given)
    bundle.raise_if_any()


def _check_schema_fields(bundle: Bundle, table: Table, given: dict) -> None:
    """The fields ``datapackage.json`` gives a table (name -> type) are the ones read here, with
    the types read here; a table read whole may have no field this installation does not know."""
    expected = {f.name: f.type for f in table.fields}
    optional = {f.name for f in table.fields if f.optional}
    for name in table.reads or expected:
        if name not in given and name in optional:
            continue  # a bundle made before the field was added (its CSV header has none either)
        if name not in given:
            bundle.error(table.path, None, name, f"schema mismatch: the field is missing from {DATAPACKAGE_FILE}")
        elif given[name] != expected[name]:
            bundle.error(table.path, None, name,
                         f"schema mismatch: type {given[name]!r} in {DATAPACKAGE_FILE}, expected {expected[name]!r}")
    if table.reads is None:
        for name in given.keys() - expected.keys():
            bundle.error(table.path, None, name, "schema mismatch: a field this installation does not know")


def _check_csv_header(bundle: Bundle, table: Table, given: dict) -> None:
    """The table's CSV header is the fields ``datapackage.json`` gives it, in that order."""
    with bundle.archive.open(table.path) as raw:
        header = next(csv.reader(io.TextIOWrapper(raw, encoding="utf-8", newline="")), [])
    if header != list(given):
        missing = [n for n in given if n not in header] or [n for n in header if n not in given]
        bundle.error(table.path, 1, missing[0] if missing else "",
                     f"schema mismatch: the CSV header ({', '.join(header)}) is not the fields of "
                     f"{DATAPACKAGE_FILE}")


# --- writing -------------------------------------------------------------------------------------


def _is_pseudonym(cell: Any) -> bool:
    """Whether a bundle's worker cell is a pseudonym (``WORKER_PSEUDONYM``)."""
    return isinstance(cell, str) and WORKER_PSEUDONYM.fullmatch(cell) is not None


def _batches(rows: Iterator[Row]) -> Iterator[list[Row]]:
    batch: list[Row] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _right_answer(value):
    """A right answer of the bundle (a generalization question's, an attention check's, a
    qualification question's) read as the label it names (``studies.choices.as_label``), as the
    data migrations wrote the stored ones (``annotations 0032``, ``studies 0024``): a bundle made
    before white space around a right answer was refused still imports, and matches its questions
    here. A value that is no text, or white space only, is left for the checks to name."""
    return as_label(value) if isinstance(value, str) and value.strip() else value


def _differs(obj, row: Row, fields: dict[str, str]) -> str:
    """The first field (bundle name) whose value differs from the existing row's, or ''."""
    for name, attr in fields.items():
        mine = getattr(obj, attr)
        if mine != row[name] and not (row[name] is None and mine in ("", {}, [])):
            return name
    return ""


class _Import:
    def __init__(self, bundle: Bundle, *, name: str, owner) -> None:
        self.b, self.name, self.owner = bundle, name, owner
        self.items, self.units, self.tasks, self.genqs = IdMap(), IdMap(), IdMap(), IdMap()
        self.sources: dict[str, RationaleSource] = {}  # the study's, by the bundle's names
        self.found: dict[str, RationaleSource] = {}  # every source this import uses, by the bundle's names
        self.taken: dict[type, set[str]] = {Dataset: set(), RationaleSource: set()}
        self.renamed: dict[str, dict[str, str]] = {}  # "dataset" / "sources" -> {bundle's name: name here}
        self.checks: dict[int, int] = {}
        self.workers: dict[tuple[str, str], int] = {}
        self.pseudonyms: dict[int, str] = {}  # the other way: participant id -> the bundle's pseudonym
        self.held_tasks: set[int] = set()
        # each unit's units.csv line, quota and decided_at, checked against its claims (``unit_counters``)
        self.unit_lines: dict[int, tuple[int, int, datetime | None]] = {}
        self.counts: dict[str, int] = {}
        self.score_lines: dict[tuple[int, int], int] = {}  # (item, source) -> its data/unit_scores.csv line
        # the original study here and the digests of its withdrawals (``original_withdrawals``); the
        # workers who withdrew from it, their tasks (bundle id -> on hold) and, by unit, their claims
        # that are not released, left out of the copy
        self.original: int | None = None
        self.withdrawn_digests: set[str] = set()
        self.withdrew_: dict[str, bool] = {}
        self.left_out_tasks: dict[int, bool] = {}
        self.left_out_claims: dict[int, int] = {}
        # why the copy does not know which workers were blocked ('' when its bundle said: ``worker_block_rows``)
        self.blocks_unknown = ""

    def err(self, row: Row, field_name: str, reason: str) -> None:
        self.b.error(row.path, row.line, field_name, reason)

    def map_id(self, ids: IdMap, row: Row, new: int) -> None:
        """``ids.add`` of the row's id, or the row's error when its id is not above the one before."""
        try:
            ids.add(row["id"], new)
        except ValueError:
            self.err(row, "id", f"{row['id']} is not above the id of the row before: a bundle lists each "
                                "table's ids once, in increasing order")

    def refuse_added(self, model, pairs: list[tuple[Row, Any]]) -> None:
        """Of the content rows just written (each with its bundle row), those a study the owner may
        not change would show (``studies.services.content``: a rationale of a source another
        researcher's study lists for an item it drew, a generalization question of an item their
        generalization study drew) are reported by row; the import then keeps nothing. The
        operator (no owner) may add them."""
        if self.owner is None or not pairs:
            return
        refused = content_added_refusals(user=self.owner, model=model, pks=[obj.pk for _, obj in pairs])
        for row, obj in pairs:
            if obj.pk in refused:
                self.err(row, "", refused[obj.pk])

    def refuse_gen_u(self, pairs: list[tuple[Row, GenUPrediction]]) -> None:
        """Gen-U predictions a study the owner may not change would score (its source's rationale of
        the question's item: ``content.gen_u_added_refusals``) are reported by row, as
        ``refuse_added`` reports content; the operator (no owner) may add them."""
        if self.owner is None or not pairs:
            return
        item_of = dict(GeneralizationQuestion.objects.filter(
            pk__in={p.generalization_question_id for _, p in pairs}).values_list("pk", "item_id"))
        refused = gen_u_added_refusals(user=self.owner, pairs={
            (item_of[p.generalization_question_id], p.rationale_source_id) for _, p in pairs})
        for row, p in pairs:
            reason = refused.get((item_of[p.generalization_question_id], p.rationale_source_id))
            if reason:
                self.err(row, "", reason)

    def _minutes(self, spec: dict, name: str) -> float | None:
        """A task duration the study fixed when it opened (``study.name``: minutes, a number above 0
        and at most a week, or empty for a study that never opened or a bundle made before they were
        recorded); anything else is the row's error and is read as empty."""
        value = spec.get(name)
        if value is None:
            return None
        if (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and 0 < value <= MAX_TASK_MINUTES):
            return float(value)
        self.b.error(STUDY_FILE, None, f"study.{name}",
                     f"{str(value)[:40]!r} is not a number of minutes above 0 and at most {MAX_TASK_MINUTES}")
        return None

    def _clean(self, obj, section: str) -> bool:
        """``obj.full_clean()``; its problems reported against study.json's ``section``."""
        try:
            obj.full_clean()
        except ValidationError as exc:
            for name, problems in exc.message_dict.items():
                self.b.error(STUDY_FILE, None, f"{section}.{name}", "; ".join(problems))
            return False
        return True

    # design and content

    def usable(self, model, name: str):
        """The row named ``name`` the owner may see, or None and the name a new one takes
        (``usable_by_name``: a name held by a row the owner may not see is answered as a missing one)."""
        if self.owner is None:
            visible = model.objects.all()
        else:
            visible = (datasets_for_design if model is Dataset else sources_for_design)(user=self.owner)
        found, usable = usable_by_name(model=model, visible=visible, name=name, tag=self.name, taken=self.taken[model])
        if found is None and usable != name:
            self.renamed.setdefault("dataset" if model is Dataset else "sources", {})[name] = usable
        return found, usable

    def dataset(self, design: dict) -> Dataset:
        spec = design["dataset"]
        if problem := identifier_problem(spec["name"], what="the dataset name"):  # the dataset importers' rule
            self.b.error(STUDY_FILE, None, "dataset.name", problem)
        dataset, usable = self.usable(Dataset, spec["name"])
        if dataset is None:
            dataset = Dataset(name=usable, task_format=spec["task_format"],
                              choice_labels=spec.get("choice_labels") or [], description=spec.get("description", ""))
            if self._clean(dataset, "dataset"):
                dataset.save()
        elif (dataset.task_format, list(dataset.choice_labels)) != (spec["task_format"], spec.get("choice_labels") or []):
            self.b.error(STUDY_FILE, None, "dataset",
                         f"dataset {dataset.name!r} exists here with another task format or choices")
        return dataset

    def source(self, spec: dict, section: str = "sources") -> RationaleSource:
        """The source the bundle's ``spec`` (of study.json's ``section``) names: the one of that name
        the owner may see, used when it holds the same settings and refused otherwise; else a new
        one (``usable``). A name holding a bidirectional control is refused, as the rationale
        importers refuse it (``textrules.identifier_problem``)."""
        if spec["name"] in self.found:
            return self.found[spec["name"]]
        if problem := identifier_problem(spec["name"], what="the source name"):
            self.b.error(STUDY_FILE, None, f"{section}.name", problem)
        if "model_name_or_path" in spec:  # a folder under this lab's RL_MODEL_DIR, in its stored form
            spec = {**spec, "model_name_or_path": model_path_stored(spec["model_name_or_path"] or "")}
        source, usable = self.usable(RationaleSource, spec["name"])
        if source is None:
            source = RationaleSource(**{f: spec[f] for f in SOURCE_FIELDS if f in spec and f != "name"}, name=usable)
            problem = source_model_path_problem(user=self.owner, path=source.model_name_or_path)
            if problem:  # a bundle may not point a source at another researcher's checkpoint
                self.b.error(STUDY_FILE, None, "sources.model_name_or_path",
                             f"source {spec['name']!r}: {problem.removeprefix('model_name_or_path: ')}")
            prompt = self.source_prompt_problems(source, spec["name"])
            if not problem and not prompt and self._clean(source, "sources"):
                source.save()
        else:
            for f in ("kind", "backend", "model_name_or_path", "template", "decoding", "seed", "has_highlights"):
                if f in spec and getattr(source, f) != spec[f]:
                    self.b.error(STUDY_FILE, None, f"sources.{f}",
                                 f"source {source.name!r} exists here with another {f}; rename it to import")
                    break
        self.found[spec["name"]] = source
        return source

    def source_prompt_problems(self, source: RationaleSource, name: str) -> bool:
        """A new language model source of the bundle held to the rule ``content.content_row_save``
        holds a new one to (``content.source_prompt_problems``: its template and decoding), each problem study.json's
        ``sources.template`` / ``sources.decoding`` error naming the source (``name``: the bundle's).
        True when there was one."""
        problems = source_prompt_problems(source)
        for setting, problem in problems.items():
            self.b.error(STUDY_FILE, None, f"sources.{setting}",
                         f"source {name!r}: {problem.removeprefix('template: ')}")
        return bool(problems)

    def item_rows(self, dataset: Dataset, study_items: list[int]) -> None:
        table = TABLES["items"]
        compare = {"question": "question", "choices": "choices", "gold_answer": "gold_answer",
                   "gold_rationale": "gold_rationale", "split": "split"}
        for batch in _batches(self.b.rows(table)):
            existing = {i.external_id: i for i in Item.objects.filter(
                dataset=dataset, external_id__in=[r["external_id"] for r in batch])}
            new = []
            for row in batch:
                if not row["external_id"] or not row["question"] or not row["gold_answer"]:
                    self.err(row, "external_id" if not row["external_id"] else
                             "question" if not row["question"] else "gold_answer", "empty")
                    continue
                if self.item_text_problems(row):
                    continue
                item = existing.get(row["external_id"])
                if item is not None:
                    bad = _differs(item, row, compare)
                    if bad:
                        self.err(row, bad, f"differs from item {item.external_id!r} of dataset {dataset.name!r} "
                                           "here; an import never changes another study's items")
                    new.append((row, item))
                    continue
                obj = Item(dataset=dataset, external_id=row["external_id"], question=row["question"],
                           choices=row["choices"] or [], gold_answer=row["gold_answer"],
                           gold_rationale=row["gold_rationale"] or "", split=row["split"] or "other",
                           metadata=row["metadata"] or {})
                new.append((row, obj))
            created = [(row, o) for row, o in new if o.pk is None]
            Item.objects.bulk_create([o for _, o in created])
            self.refuse_added(Item, created)
            for row, obj in new:
                self.map_id(self.items, row, obj.pk)
                study_items.append(obj.pk)

    def item_text_problems(self, row: Row) -> bool:
        """An item row held to the dataset importers' rules (``importers.items``): its external id
        holds no bidirectional control (``textrules.identifier_problem``), and its question, options
        and gold rationale no T5 sentinel token (``textrules.sentinel_problem``); each problem is the
        row's error. True when there was one."""
        found = False
        if problem := identifier_problem(row["external_id"]):
            self.err(row, "external_id", problem)
            found = True
        options = [c.get("text") if isinstance(c, dict) else c for c in row["choices"] or []]
        for name, what, text in [("question", "the question", row["question"]),
                                 ("gold_rationale", "the rationale", row["gold_rationale"]),
                                 *(("choices", "the option", t) for t in options)]:
            problem = sentinel_problem(text, what=what) if isinstance(text, str) else None
            if problem:
                self.err(row, name, problem)
                found = True
        return found

    def rationale_rows(self) -> None:
        # prediction_correct is not compared: it follows from the predicted answer and the item's
        # gold answer (both compared), and a new rationale takes the grading rule's value, not the bundle's
        compare = {"text": "text", "predicted_answer": "predicted_answer", "highlights": "highlights",
                   "faithfulness": "faithfulness"}
        for batch in _batches(self.b.rows(TABLES["rationales"])):
            keyed = []
            for row in batch:
                item, source = self.items.get(row["item_id"]), self.sources.get(row["source"])
                if item is None or source is None:
                    self.err(row, "item_id" if item is None else "source", "not in the bundle's items / sources")
                    continue
                if row["text"] and (problem := sentinel_problem(row["text"], what="the rationale")):
                    self.err(row, "text", problem)  # the rationale importers' rule
                    continue
                # faithfulness is kept as exported, even a value breaking the rule of the writes
                # (``studies.faithfulness_rules``: one stored before it): the original's scoring left
                # it out as invalid and the copy's does the same, so the copy scores as the original
                keyed.append(((item, source.pk), row))
            existing = {(r.item_id, r.source_id): r for r in Rationale.objects.filter(
                item_id__in={k[0] for k, _ in keyed}, source_id__in={k[1] for k, _ in keyed})}
            # each item's gold answer as imported (an existing item's is the bundle's: ``item_rows``)
            loaded = Item.objects.select_related("dataset").in_bulk({k[0] for k, _ in keyed})
            new = []
            for key, row in keyed:
                if key in existing:
                    bad = _differs(existing[key], row, compare)
                    if bad:
                        self.err(row, bad, "differs from this item's rationale of this source here")
                    continue
                if not row["text"]:
                    self.err(row, "text", "empty")
                    continue
                predicted = row["predicted_answer"] or ""
                problem = predicted_answer_problem(loaded[key[0]].dataset, predicted)  # the admin's rule
                if problem:
                    self.err(row, "predicted_answer", problem)
                    continue
                new.append((row, Rationale(
                    item_id=key[0], source_id=key[1], text=row["text"], predicted_answer=predicted,
                    # graded here by the one rule (``grading``), whatever flag the bundle wrote
                    prediction_correct=prediction_correct(predicted, loaded[key[0]].gold_answer),
                    highlights=row["highlights"] or [],
                    faithfulness=row["faithfulness"] or {}, raw_output=row["raw_output"] or "",
                    generation_info=row["generation_info"] or {})))
            Rationale.objects.bulk_create([r for _, r in new])
            self.refuse_added(Rationale, new)

    def genq_rows(self) -> None:
        given: set[tuple] = set()  # every question of the bundle so far, across batches
        for batch in _batches(self.b.rows(TABLES["generalization_questions"])):
            items = {self.items.get(r["item_id"]) for r in batch}
            existing = {(q.item_id, q.qtype, q.text): q for q in GeneralizationQuestion.objects.filter(item_id__in=items)}
            # each new question's item, for its answer check (``GeneralizationQuestion.clean``): one query a batch
            loaded = Item.objects.only("pk", "choices").in_bulk(items - {None})
            pairs = []
            for row in batch:
                item = self.items.get(row["item_id"])
                if item is None:
                    self.err(row, "item_id", "not in the bundle's items")
                    continue
                if problem := sentinel_problem(row["text"], what="the question"):
                    self.err(row, "text", problem)
                    continue
                key = (item, row["type"], row["text"])
                if key in given:
                    self.err(row, "text", "given twice for this item and type")
                    continue
                given.add(key)
                row.values["answer"] = _right_answer(row["answer"])
                q = existing.get(key)
                if q is not None:
                    bad = _differs(q, row, {"answer": "answer", "validation_status": "validation_status"}) or (
                        "metadata" if own_choices(q.metadata) != own_choices(row["metadata"]) else "")
                    if bad:
                        self.err(row, bad, "differs from this generalization question here")
                else:
                    q = GeneralizationQuestion(item=loaded[item], qtype=row["type"], text=row["text"],
                                               answer=row["answer"], origin=row["origin"] or "",
                                               metadata=row["metadata"] or {}, validation_status=row["validation_status"])
                    setattr(q, LABELS_AS_RECORDED, True)  # as the original recorded them
                    if not self.genq_clean(row, q):
                        continue
                pairs.append((row, q))
            created = [(row, q) for row, q in pairs if q.pk is None]
            GeneralizationQuestion.objects.bulk_create([q for _, q in created])
            self.refuse_added(GeneralizationQuestion, created)
            for row, q in pairs:
                self.map_id(self.genqs, row, q.pk)

    def genq_clean(self, row: Row, question: GeneralizationQuestion) -> bool:
        """A new question of the bundle checked by the model's own rule (``full_clean``: its type and
        validation status known, its metadata's choices a list of choices, its answer one of the choices
        it offers, its origin fits), each problem the row's error by the bundle's field name. Its item is
        the bundle's (mapped above), and whether the question is new was settled by its key: neither is
        asked of the database again, one query a row."""
        try:
            question.full_clean(exclude=["item"], validate_unique=False, validate_constraints=False)
        except ValidationError as exc:
            for name, problems in exc.message_dict.items():
                field_name = {"qtype": "type", "__all__": ""}.get(name, name)
                self.err(row, field_name, "; ".join(dict.fromkeys(p.rstrip(".") for p in problems)))
            return False
        return True

    def genu_rows(self, answerer_sources: dict[str, RationaleSource]) -> None:
        for batch in _batches(self.b.rows(TABLES["genu_predictions"])):
            keyed = []
            for row in batch:
                q, source = self.genqs.get(row["generalization_question_id"]), self.sources.get(row["source"])
                if q is None or source is None:
                    self.err(row, "generalization_question_id" if q is None else "source", "not in the bundle")
                    continue
                inputs = self.genu_inputs(row)
                if inputs is None:
                    continue
                keyed.append(((q, source.pk, row["answerer"]), row, inputs))
            existing = {(p.generalization_question_id, p.rationale_source_id, p.answerer): p
                        for p in GenUPrediction.objects.filter(generalization_question_id__in={k[0] for k, *_ in keyed})}
            answers = dict(GeneralizationQuestion.objects.filter(pk__in={k[0] for k, *_ in keyed})
                           .values_list("pk", "answer"))
            new = []
            for key, row, inputs in keyed:
                if key in existing:
                    # Its grade is not compared: it follows from the prediction and the question's
                    # answer (compared with the question), by the one rule (``grading``), as a new row's
                    # is graded here; a bundle made before spaced right answers were written as their
                    # labels graded against "yes " (``_right_answer``).
                    bad = _differs(existing[key], row, {"predicted_answer": "predicted_answer"})
                    # what it was answered on, where the bundle says (a bundle made before the column
                    # does not): the copy's scoring leaves out what the original's did
                    if not bad and row["inputs"] is not None and genu_inputs_cell(existing[key].inputs) != inputs:
                        bad = "inputs"
                    if bad:
                        self.err(row, bad, "differs from this Gen-U prediction here")
                    continue
                new.append((row, GenUPrediction(
                    generalization_question_id=key[0], rationale_source_id=key[1], answerer=key[2],
                    # in the form the answerer source keeps it (``source``), by which readers match them
                    answerer_model=model_path_stored(row["answerer_model"] or ""), predicted_answer=row["predicted_answer"] or "",
                    # graded by the one rule (``grading``) against the question's answer, as the Gen-U job does
                    correct=bool(prediction_correct(row["predicted_answer"] or "", answers[key[0]])),
                    raw_output=row["raw_output"] or "", inputs=inputs)))
            self.refuse_gen_u(new)
            GenUPrediction.objects.bulk_create([p for _, p in new])

    def genu_inputs(self, row: Row) -> dict | None:
        """A Gen-U prediction's ``inputs`` cell (``export.genu_inputs_cell``) as the copy's
        ``GenUPrediction.inputs``: {} where it records none, or the bundle was made before the column
        (the prediction is kept, counted as inputs not recorded); else an object of the keys
        ``GENU_INPUT_KEYS``, ``question`` always and ``rationale`` where F^IR was shown one (the Gen-U
        job records it for answerer IR only; restored as given, so the copy reads it as the original), each a
        fingerprint (``GENU_FINGERPRINT_DIGITS`` lowercase hex digits). None, the problem reported
        naming ``inputs`` or ``inputs.<key>``, where it is not so."""
        given = row["inputs"]
        if given is None or given == {}:
            return {}
        keys = set(given)
        if GENU_INPUT_KEYS[0] not in keys or not keys <= set(GENU_INPUT_KEYS):
            unknown = sorted(keys - set(GENU_INPUT_KEYS))
            self.err(row, "inputs", f"expected {{}} or an object of the keys {', '.join(GENU_INPUT_KEYS)} (the first "
                                    "always)" + (f"; missing {GENU_INPUT_KEYS[0]}" if GENU_INPUT_KEYS[0] not in keys else "")
                                    + (f"; unknown {', '.join(repr(k[:40]) for k in unknown)}" if unknown else ""))
            return None
        ok = True
        for key in GENU_INPUT_KEYS:
            value = given.get(key)
            if key in given and not (isinstance(value, str) and _FINGERPRINT.fullmatch(value)):
                self.err(row, f"inputs.{key}", f"{str(value)[:40]!r} is not a fingerprint "
                                               f"({GENU_FINGERPRINT_DIGITS} lowercase hex digits)")
                ok = False
        return {key: given[key] for key in GENU_INPUT_KEYS if key in given} if ok else None

    def study(self, design: dict, dataset: Dataset) -> Study:
        spec = design["study"]
        study = Study(
            name=self.name, kind=spec["kind"], status=Study.Status.CLOSED, dataset=dataset, split=spec["split"],
            item_sample_size=spec.get("item_sample_size"), sample_seed=spec.get("sample_seed", 0),
            annotators_per_unit=spec["annotators_per_unit"], units_per_task=spec["units_per_task"],
            reward=Decimal(spec["reward"]), hourly_pay_floor=Decimal(spec["hourly_pay_floor"]),
            estimated_minutes_per_task=Decimal(spec["estimated_minutes_per_task"]), platform=spec["platform"],
            consent_text=spec.get("consent_text", ""), instructions=spec.get("instructions", ""),
            example=spec.get("example", ""), faithfulness_enabled=spec.get("faithfulness_enabled", False),
            is_imported_outcome=spec.get("is_imported_outcome", False),
            stop_when_decided=spec.get("stop_when_decided", False),
            assignment_minutes=self._minutes(spec, "assignment_minutes"),
            first_answer_minutes=self._minutes(spec, "first_answer_minutes"),
            owner=self.owner if getattr(self.owner, "is_authenticated", False) else None,
        )
        self._clean(study, "study")
        self.b.raise_if_any()  # its fields' problems (``_clean``, ``_minutes``) refuse the bundle here
        study.save()
        for i, check in enumerate(design.get("attention_checks") or []):
            obj = AttentionCheck(study=study, question=check.get("question", ""), choices=check.get("choices", []),
                                 correct_answer=_right_answer(check.get("correct_answer", "")))
            setattr(obj, LABELS_AS_RECORDED, True)
            if self.sentinels(f"attention_checks[{i}]", obj.question, obj.choices):
                continue
            if self._clean(obj, "attention_checks") and isinstance(check.get("id"), int):
                obj.save()
                self.checks[check["id"]] = obj.pk
        test = design.get("qualification_test")
        if test:  # an object (``_check_design``), its questions' values typed there
            qt = QualificationTest(study=study, pass_mark=test.get("pass_mark"),
                                   instructions=test.get("instructions") or "")
            if self._clean(qt, "qualification_test"):
                qt.save()
                self.qualification = []
                for i, q in enumerate(test.get("questions") or []):
                    question = QualificationQuestion(test=qt, position=q.get("position"), question=q.get("question", ""),
                                                     choices=q.get("choices", []),
                                                     correct_answer=_right_answer(q.get("correct_answer", "")))
                    setattr(question, LABELS_AS_RECORDED, True)
                    if not self.sentinels(f"qualification_test.questions[{i}]", question.question, question.choices) \
                            and self._clean(question, f"qualification_test.questions[{i}]"):
                        question.save()
                        self.qualification.append(question)
        self.b.raise_if_any()  # the attention checks' and the qualification test's problems refuse it here
        return study

    def sentinels(self, where: str, question: str, choices: Any) -> bool:
        """A question of study.json (an attention check's, a qualification question's) and its
        options held to the dataset importers' rule (``textrules.sentinel_problem``): each problem is
        study.json's error at ``where``. True when there was one."""
        texts = [("question", "the question", question)] + [
            ("choices", "the option", c.get("text") if isinstance(c, dict) else c)
            for c in (choices if isinstance(choices, list) else [])]
        found = False
        for name, what, text in texts:
            problem = sentinel_problem(text, what=what) if isinstance(text, str) else None
            if problem:
                self.b.error(STUDY_FILE, None, f"{where}.{name}", problem)
                found = True
        return found

    # the work

    def original_withdrawals(self, design: dict) -> None:
        """When the study the bundle was made from (study.json's ``study.id``, what the import record
        keeps as ``original_study``) is a study of this installation, the digests of its
        withdrawals (``Withdrawal`` rows, ``annotations.selectors.study_withdrawal_digests``): a
        bundle made before a worker withdrew from it still holds their work, which the copy leaves
        out (``withdrew``). Only a study the importer may view is read: another researcher's study
        is not theirs to ask about (a made-up bundle naming it and a pseudonym they know would learn
        from the count whether that worker withdrew from it), and its copies the withdrawal reaches
        are those its researchers may change (``withdrawal.participant_withdraw``)."""
        original = design["study"]["id"]
        if isinstance(original, int) and not isinstance(original, bool) and INT_MIN <= original <= INT_MAX:
            readable = Study.objects.all() if self.owner is None else studies_for_user(user=self.owner, access=VIEW)
            study = readable.filter(pk=original).first()
            if study is not None:
                # Held until the import commits: a withdrawal from the original made meanwhile waits for
                # it, then finds this copy among the original's (``withdrawal.participant_withdraw``);
                # read before, it found none, and the copy kept the worker's answers.
                transaction_lock(WITHDRAWAL_LOCK, study.pk, shared=True)
                self.original, self.withdrawn_digests = study.pk, study_withdrawal_digests(study=study)

    def withdrew(self, worker: Any) -> bool:
        """Whether the bundle's ``worker`` (a pseudonym) withdrew from the original study here: their
        withdrawal is recorded under ``lab.pseudonyms.withdrawal_digest`` of the original and the
        pseudonym its exports (and so this bundle) show. Such a worker's tasks, claims, answers,
        flag reviews and qualification answers are not imported, and the import record counts them
        (``workers_withdrawn_from_original``)."""
        if not self.withdrawn_digests or not _is_pseudonym(worker):
            return False
        if worker not in self.withdrew_:
            self.withdrew_[worker] = withdrawal_digest(self.original, worker) in self.withdrawn_digests
        return self.withdrew_[worker]

    @property
    def n_withdrawn(self) -> int:
        return sum(self.withdrew_.values())

    def unit_rows(self, study: Study) -> None:
        for batch in _batches(self.b.rows(TABLES["units"])):
            pairs = []
            for row in batch:
                item = self.items.get(row["item_id"])
                source = self.sources.get(row["source"]) if row["source"] else None
                genq = self.genqs.get(row["generalization_question_id"])
                if item is None or (row["source"] and source is None) or (
                        row["generalization_question_id"] is not None and genq is None):
                    self.err(row, "item_id" if item is None else "source" if genq is not None or
                             row["generalization_question_id"] is None else "generalization_question_id",
                             "not in the bundle")
                    continue
                rationale = None
                if row["rationale"]:
                    rationale = Rationale.objects.filter(item_id=item, source=source).values_list("pk", flat=True).first()
                # the counters start empty: ``unit_counters`` sets them from the claims, never from the file
                pairs.append((row, Unit(study=study, item_id=item, source=source, generalization_question_id=genq,
                                        rationale_id=rationale, question_key=row["question_key"], quota=row["quota"],
                                        n_claimed=0, n_completed=0, decided_at=row["decided_at"])))
            Unit.objects.bulk_create([u for _, u in pairs])
            for row, unit in pairs:
                self.map_id(self.units, row, unit.pk)
                self.unit_lines[unit.pk] = (row.line, row["quota"], row["decided_at"])
            self.counts["units"] = self.counts.get("units", 0) + len(pairs)

    def participants(self, study: Study, rows: list[Row]) -> None:
        """The participants of ``rows``' workers (``self.workers``: (platform, pseudonym) -> id),
        made on first sight, this import's own (``imported_worker_id``): a bundle worker never
        resolves to a participant the questionnaire made (a platform id) nor to another import's.
        A worker cell that is not a pseudonym (``WORKER_PSEUDONYM``) or a platform that is not one
        is the row's error (the cell is not repeated: it may be a platform id), and the row's
        worker stays unknown."""
        keys = set()
        for row in rows:
            if row["platform"] not in Platform.values:
                self.err(row, "platform", f"{str(row['platform'])[:40]!r} is not a platform "
                                          f"({', '.join(Platform.values)})")
            elif not _is_pseudonym(row["worker"]):
                self.err(row, "worker", NOT_A_PSEUDONYM)
            else:
                keys.add((row["platform"], row["worker"]))
        keys -= self.workers.keys()
        for platform in {p for p, _ in keys}:
            wanted = {imported_worker_id(study.pk, w): w for p, w in keys if p == platform}
            Participant.objects.bulk_create([Participant(platform=platform, external_id=e) for e in wanted],
                                            ignore_conflicts=True)
            found = Participant.objects.filter(platform=platform, external_id__in=wanted).values_list("external_id", "pk")
            for e, pk in found:
                self.workers[(platform, wanted[e])] = pk
                self.pseudonyms[pk] = wanted[e]

    def task_rows(self, study: Study) -> None:
        for batch in _batches(self.b.rows(TABLES["tasks"])):
            for row in batch:
                if self.withdrew(row["worker"]):
                    self.left_out_tasks[row["id"]] = bool(row["on_hold"])
            batch = [row for row in batch if row["id"] not in self.left_out_tasks]
            self.participants(study, batch)
            pairs = []
            for row in batch:
                if (row["platform"], row["worker"]) not in self.workers:
                    continue  # the worker cell's error is reported (``participants``)
                if row["status"] not in Assignment.Status.values:
                    self.err(row, "status", f"{row['status']!r} is not a task status")
                    continue
                if not row["expires_at"]:
                    self.err(row, "expires_at", "empty")
                    continue
                pairs.append((row, Assignment(
                    study=study, participant_id=self.workers[(row["platform"], row["worker"])], status=row["status"],
                    consented_at=row["consented_at"], expires_at=row["expires_at"],
                    submitted_at=row["submitted_at"], reviewed_at=row["reviewed_at"])))
            Assignment.objects.bulk_create([a for _, a in pairs])
            for row, task in pairs:
                task.created_at = row["created_at"] or task.created_at
                self.map_id(self.tasks, row, task.pk)
                if row["on_hold"]:
                    self.held_tasks.add(task.pk)
            # created_at is auto_now_add: the original time goes back in a second write (one per task)
            Assignment.objects.bulk_update([a for _, a in pairs], ["created_at"], batch_size=500)
            self.counts["tasks"] = self.counts.get("tasks", 0) + len(pairs)

    def claim_rows(self, study: Study) -> None:
        """The claims, each checked against what the live app writes (``annotations.services.assignment``):
        its worker is its task's worker, its ``question_key`` is its unit's own key, or for an attention
        check ``attn:<check>`` or, for a check given again, ``attn:<check>:<task>`` (the bundle's ids,
        written here with the ids they became), and a worker holds a question at most once in the study
        (``claim_worker_sees_question_once``). Anything else is the row's error: a rewritten bundle
        cannot give one worker two counted claims of one unit."""
        for batch in _batches(self.b.rows(TABLES["claims"])):
            tasks = {self.tasks.get(row["task_id"]) for row in batch} - {None}
            task_worker = dict(Assignment.objects.filter(pk__in=tasks).values_list("pk", "participant_id"))
            units = {self.units.get(row["unit_id"]) for row in batch} - {None}
            unit_key = dict(Unit.objects.filter(pk__in=units).values_list("pk", "question_key"))
            checked = []
            for row in batch:
                if row["task_id"] in self.left_out_tasks:  # a worker who withdrew from the original
                    self.leave_out_claim(row)
                    continue
                task = self.tasks.get(row["task_id"])
                unit = self.units.get(row["unit_id"])
                check = self.checks.get(row["attention_check_id"]) if row["attention_check_id"] is not None else None
                if not _is_pseudonym(row["worker"]):
                    self.err(row, "worker", NOT_A_PSEUDONYM)
                    continue
                if task is None:
                    self.err(row, "task_id", "not in the bundle's tasks")
                    continue
                if (unit is None) == (check is None):
                    self.err(row, "unit_id", "a claim holds one unit or one attention check of the bundle")
                    continue
                worker = task_worker.get(task)
                if worker is None or self.pseudonyms.get(worker) != row["worker"]:
                    self.err(row, "worker", f"not the worker of task {row['task_id']} (data/tasks.csv)")
                    continue
                given = row["question_key"] or ""
                if unit is not None:
                    key = unit_key[unit]
                    if given != key:
                        self.err(row, "question_key", f"{given[:100]!r} is not the key of unit {row['unit_id']} "
                                                      f"({key[:100]!r}): a claim's key is its unit's")
                        continue
                else:
                    bundle_check, bundle_task = row["attention_check_id"], row["task_id"]
                    plain, again = Claim.attention_key(bundle_check), Claim.attention_key(bundle_check, bundle_task)
                    if given == plain:
                        key = Claim.attention_key(check)
                    elif given == again:
                        key = Claim.attention_key(check, task)
                    else:
                        self.err(row, "question_key", f"{given[:100]!r} is not a key of attention check "
                                                      f"{bundle_check} in task {bundle_task} ({plain} or {again})")
                        continue
                checked.append((row, task, unit, check, worker, key))
            # a worker holds a question at most once: within the batch, and against the batches before
            held = set(Claim.objects.filter(study=study, participant_id__in={c[4] for c in checked},
                                            question_key__in={c[5] for c in checked})
                       .values_list("participant_id", "question_key"))
            first: dict[tuple[int, str], int] = {}
            claims = []
            for row, task, unit, check, worker, key in checked:
                if (worker, key) in held or (worker, key) in first:
                    where = f"row {first[(worker, key)]}" if (worker, key) in first else "an earlier row"
                    self.err(row, "question_key", f"worker {row['worker']} already holds question "
                                                  f"{row['question_key'][:100]!r} ({where} of claims.csv): a worker "
                                                  "sees a question, and so a unit, once in a study")
                    continue
                first[(worker, key)] = row.line
                claims.append(Claim(assignment_id=task, unit_id=unit, attention_check_id=check, study=study,
                                    participant_id=worker, question_key=key,
                                    position=row["position"], completed_at=row["completed_at"],
                                    # work on hold at the origin does not count there, nor here (the
                                    # platform's report that put it on hold cannot travel)
                                    released=bool(row["released"]) or task in self.held_tasks))
            Claim.objects.bulk_create(claims)
            self.counts["claims"] = self.counts.get("claims", 0) + len(claims)

    def leave_out_claim(self, row: Row) -> None:
        """A claim of a worker who withdrew from the original (``withdrew``), not imported: if it
        held its unit (not released, its task not on hold), its unit's ``quota`` and ``decided_at``
        are still checked as the bundle's claims give them (``unit_counters``)."""
        unit = self.units.get(row["unit_id"])
        if unit is not None and not row["released"] and not self.left_out_tasks.get(row["task_id"], False):
            self.left_out_claims[unit] = self.left_out_claims.get(unit, 0) + 1

    def unit_counters(self, study: Study) -> None:
        """Each unit's ``n_claimed`` and ``n_completed`` from the claims just imported, by the rules
        the live app keeps them by (``release.unit_counts`` / ``release.units_recount``), never from
        data/units.csv's cells: a hand-edited bundle, or one from an older installation, cannot make
        the copy's complete units (the API's ``n_units_complete``, the unit admin's "Filled") differ
        from its progress page and results. The file's ``quota`` and ``decided_at`` are kept where
        the copy's design allows them (``_unit_design_problem``) and are the row's error otherwise."""
        path = TABLES["units"].path
        ids = list(self.unit_lines)
        for start in range(0, len(ids), BATCH):
            counts = unit_counts(unit_ids=ids[start:start + BATCH])
            # a generalization study's unit was closed while its question was marked invalid, and stays so
            # if the question was marked valid after the study closed: its validation record says so
            closed = {pk for pk, status, metadata in Unit.objects.filter(
                pk__in=ids[start:start + BATCH], study__kind=Study.Kind.GENERALIZATION,
                generalization_question__isnull=False).values_list(
                    "pk", "generalization_question__validation_status", "generalization_question__metadata")
                if validation_ever_invalid(status=status, metadata=metadata)}
            for unit_id, (claimed, _completed) in counts.items():
                line, quota, decided_at = self.unit_lines[unit_id]
                # the bundle's claims: those of workers left out (``withdrew``) held the unit there
                claimed += self.left_out_claims.get(unit_id, 0)
                problem = _unit_design_problem(study, quota=quota, decided_at=decided_at, claimed=claimed,
                                               question_invalid=unit_id in closed)
                if problem:
                    self.b.error(path, line, *problem)
        if self.b.errors:
            return  # refused anyway; a count past a quota would only break a rule of the database
        for start in range(0, len(ids), BATCH):
            units_recount(unit_ids=ids[start:start + BATCH])

    def decided_units_check(self, study: Study) -> None:
        """Each unit data/units.csv calls decided (``decided_at`` set) is one its imported answers
        decide, by early stopping's own rule (``stopping.unit_votes_decide`` on the answers that count:
        work on hold at the origin counts in neither), and the row's error otherwise: a hand-edited
        bundle cannot turn a unit its answers leave open into a decided one, which the copy's results
        would count as decided and whose missing answers as saved. Run once the claims and answers
        are imported (``claim_rows``, ``annotation_rows``), and only while the import has no error
        (on rows refused, the answers are not all there). A unit holding claims of a worker who withdrew
        from the original (``leave_out_claim``) is not checked: it was decided on answers this copy
        leaves out. Those units are checked again as the original checked them when the withdrawal
        released those claims (``stopping.units_after_release``): still decided on the answers left,
        ``quota = n_claimed``; no longer decided, reopened (the study's workers per unit, ``decided_at``
        cleared), so a bundle made before the withdrawal does not keep a unit decided that the
        original reopened (its results would score it complete on fewer answers)."""
        if self.b.errors:
            return
        # rows made in this uncommitted transaction: no other one sees them, so none needs locking
        units_after_release(unit_ids=sorted(self.left_out_claims))
        path = TABLES["units"].path
        ids = [pk for pk, (_line, _quota, decided_at) in self.unit_lines.items()
               if decided_at is not None and pk not in self.left_out_claims]
        for start in range(0, len(ids), BATCH):
            for unit_id, decided in unit_votes_decide(study=study, unit_ids=ids[start:start + BATCH]).items():
                if not decided:
                    line, _quota, decided_at = self.unit_lines[unit_id]
                    self.b.error(path, line, "decided_at", (
                        f"{decided_at.isoformat()}, where the unit's answers that count (data/claims.csv, "
                        "data/annotations.csv) do not decide it: the answers still to come, up to the study's "
                        f"workers per unit ({study.annotators_per_unit}), could change its score; a unit is "
                        "decided only when none could"))

    def _tasks_of(self, batch: list[Row]) -> set[int]:
        return {self.tasks.get(r["assignment_id" if "assignment_id" in r.values else "task_id"]) for r in batch} - {None}

    def _claims_of(self, batch: list[Row]) -> dict[tuple[int, int], int]:
        return {(a, p): pk for a, p, pk in Claim.objects.filter(assignment_id__in=self._tasks_of(batch))
                .values_list("assignment_id", "position", "id")}

    def _claims_asked(self, batch: list[Row]) -> dict[tuple[int, int], Claim]:
        """The batch's claims by (task, position), each with what ``claim_labels`` reads of the
        question it asks (its attention check, or its unit's item and generalization question)."""
        claims = (Claim.objects.filter(assignment_id__in=self._tasks_of(batch))
                  .select_related("attention_check", "unit__item", "unit__generalization_question")
                  .only("id", "assignment_id", "position", "unit_id", "attention_check_id", "completed_at",
                        "attention_check__choices", "attention_check__correct_answer",
                        "unit__item_id", "unit__generalization_question_id", "unit__item__choices",
                        "unit__generalization_question__metadata", "unit__generalization_question__item_id"))
        return {(c.assignment_id, c.position): c for c in claims}

    def clean_row_answer(self, row: Row, claim: Claim, payload: dict, *, kind: str,
                         labels_of: dict[tuple, list[str] | ValueError]) -> tuple[str, dict] | None:
        """The (answer, payload) to store for one row of data/annotations.csv, by the worker path's
        own rule (``annotations.services.answers.annotation_submit_with_task``): the step is one of
        its claim's (``steps_for``), and ``clean_answer`` with the labels of the question the claim
        asks (``claim_labels``) accepts the answer and payload and gives what is stored (an
        attention check's payload is whether it was right, ``answer_is_correct``, as there). An
        answer ``clean_answer`` derives from the payload (a validation's verdict, a properties
        answer's empty one) must be the row's. None, with the row's error (field answer or payload,
        ``clean_answer``'s reason), when the worker path would refuse it. ``labels_of``: the
        batch's labels by question, read once each."""
        step = row["step"]
        allowed = steps_for(kind=kind, is_attention_check=bool(claim.attention_check_id))
        if step not in allowed:
            self.err(row, "step", f"{step!r} is not a step of this claim's question (its steps: {', '.join(allowed)})")
            return None
        question = (claim.unit_id, claim.attention_check_id)
        if question not in labels_of:
            try:
                labels_of[question] = claim_labels(claim, kind=kind)
            except ValueError as exc:  # choices that are no list of choices (``normalise_choices``)
                labels_of[question] = exc
        labels = labels_of[question]
        if isinstance(labels, ValueError):
            self.err(row, "answer", f"the choices of its question are not usable: {labels}")
            return None
        given = row["answer"] or ""
        try:
            answer, clean = clean_answer(step=step, answer=given, payload=payload, labels=labels)
        except InvalidAnswer as exc:
            self.err(row, "payload" if step in PAYLOAD_STEPS else "answer", str(exc))
            return None
        if answer != given.strip():
            self.err(row, "answer", f"{given[:50]!r} is not the answer its payload gives ({answer!r})")
            return None
        if step == Annotation.Step.ATTENTION:
            clean = {"correct": answer_is_correct(answer, claim.attention_check.correct_answer)}
        return answer, clean

    def annotation_rows(self, study: Study) -> None:
        """The answers, each one the worker path would store (``clean_row_answer``), where the worker
        path would leave it (``answer_place_problem``: one answer per step of a claim, the last step's
        only on a claim completed): a row it would refuse is the row's error, and the import keeps
        nothing. A completed claim's missing answers are found once every row is read
        (``completed_claims_check``)."""
        steps = set(Annotation.Step.values)
        for batch in _batches(self.b.rows(TABLES["annotations"])):
            claims = self._claims_asked(batch)
            labels_of: dict[tuple, list[str] | ValueError] = {}
            # the steps answered of the batch's claims: by the batches before (written), and by this
            # one (with the line that gave each), so a step is answered once
            written = set(Annotation.objects.filter(claim_id__in=[c.pk for c in claims.values()])
                          .values_list("claim_id", "step"))
            given: dict[tuple[int, str], int] = {}
            new = []
            for row in batch:
                if row["assignment_id"] in self.left_out_tasks:
                    continue  # a worker who withdrew from the original (``withdrew``)
                claim = claims.get((self.tasks.get(row["assignment_id"]), row["position"]))
                if claim is None:
                    self.err(row, "assignment_id", "no claim of the bundle at this task and position")
                    continue
                if row["step"] not in steps:
                    self.err(row, "step", f"{row['step']!r} is not a step")
                    continue
                if row["answered_at"] is None:
                    self.err(row, "answered_at", "empty")
                    continue
                try:
                    payload = _json_cell(row["payload"]) if row["payload"] else {}
                except BadCell as exc:
                    self.err(row, "payload", str(exc))
                    continue
                if not isinstance(payload, dict):
                    self.err(row, "payload", "expected a JSON object")
                    continue
                cleaned = self.clean_row_answer(row, claim, payload, kind=study.kind, labels_of=labels_of)
                if cleaned is None:
                    continue
                if problem := self.answer_place_problem(row, claim, kind=study.kind, written=written, given=given):
                    self.err(row, "step", problem)
                    continue
                given[(claim.pk, row["step"])] = row.line
                answer, payload = cleaned
                new.append(Annotation(claim_id=claim.pk, step=row["step"], answer=answer, payload=payload,
                                      shown_at=row["shown_at"], answered_at=row["answered_at"],
                                      duration_ms=row["duration_ms"]))
            Annotation.objects.bulk_create(new)
            self.counts["annotations"] = self.counts.get("annotations", 0) + len(new)

    def answer_place_problem(self, row: Row, claim: Claim, *, kind: str, written: set[tuple[int, str]],
                             given: dict[tuple[int, str], int]) -> str:
        """Why the worker path would never leave the answer of ``row`` (a step of its claim's
        question: ``clean_row_answer``) on its claim, or ''. A claim has one answer per step (the
        database's ``annotation_once_per_step``; ``written``: the (claim, step) pairs earlier batches
        wrote, ``given``: this batch's so far, with their line); and the answer to the last step of
        its question (``steps_for``) is what completes a claim (``annotation_submit_with_task`` sets
        ``completed_at`` with it), so a claim data/claims.csv gives as not completed has none: a
        counted claim is a complete one (scoring reads it so: ``score._annotation_frame``)."""
        step, where = row["step"], f"task {row['assignment_id']}, position {row['position']}"
        key = (claim.pk, step)
        if key in written or key in given:
            earlier = f"row {given[key]}" if key in given else "an earlier row"
            return (f"{step!r} is answered again for the claim at {where} ({earlier} of {row.path} answers it): "
                    "a claim has one answer for each step of its question")
        steps = steps_for(kind=kind, is_attention_check=bool(claim.attention_check_id))
        if step == steps[-1] and claim.completed_at is None:
            return (f"{step!r} answers the last step of its question ({', '.join(steps)}), but its claim at {where} "
                    f"(data/claims.csv) has no completed_at: the answer to the last step completes a claim, so a "
                    "claim not completed has none")
        return ""

    def completed_claims_check(self, study: Study) -> None:
        """Each claim data/claims.csv gives as completed (``completed_at``) has an answer in
        data/annotations.csv for every step of its question (``steps_for``), as the worker path
        leaves it: a claim is completed by the answer to its last step, given after the ones before
        (``annotation_submit_with_task``). Scoring reads a counted claim as complete
        (``score._annotation_frame``): one missing its after answer would be scored on the answers
        left, a before majority over more workers than the after one. Each such claim's row of
        data/claims.csv is the error (field ``completed_at``), naming the steps it has no answer for.
        Run once every answer is written (``annotation_rows``, which refuses a step answered twice),
        and only while the import has no error (on rows refused, the answers are not all there). The
        claims short of answers are found in the database; data/claims.csv is read again for their
        lines only when there are some (the first ``MAX_LISTED_ERRORS``; the rest are counted)."""
        if self.b.errors:
            return
        n_steps = {check: len(steps_for(kind=study.kind, is_attention_check=check)) for check in (False, True)}
        short = (Claim.objects.filter(study=study, completed_at__isnull=False).order_by()
                 .annotate(n_answers=Count("annotations"))
                 .filter(Q(attention_check__isnull=True, n_answers__lt=n_steps[False])
                         | Q(attention_check__isnull=False, n_answers__lt=n_steps[True])))
        named = {(task, position): pk for pk, task, position in
                 short.order_by("pk").values_list("pk", "assignment_id", "position")[:MAX_LISTED_ERRORS]}
        if not named:
            return
        self.b.errors.unlisted += short.count() - len(named)
        answered: dict[int, set[str]] = {}
        for claim_id, step in Annotation.objects.filter(claim_id__in=named.values()).values_list("claim_id", "step"):
            answered.setdefault(claim_id, set()).add(step)
        for row in self.b.rows(TABLES["claims"]):
            if row["task_id"] in self.left_out_tasks:
                continue  # not imported (``leave_out_claim``)
            claim_id = named.get((self.tasks.get(row["task_id"]), row["position"]))
            if claim_id is None:
                continue
            steps = steps_for(kind=study.kind, is_attention_check=row["attention_check_id"] is not None)
            missing = [s for s in steps if s not in answered.get(claim_id, set())]
            self.err(row, "completed_at", (
                f"{row['completed_at'].isoformat()}: the claim is completed, but data/annotations.csv has no "
                f"{' or '.join(repr(str(s)) for s in missing)} answer for it (task {row['task_id']}, position "
                f"{row['position']}): a completed claim has an answer for each step of its question "
                f"({', '.join(steps)})"))

    def flag_rows(self, user) -> None:
        for batch in _batches(self.b.rows(TABLES["flag_reviews"])):
            claims = self._claims_of(batch)
            answers = {(a.claim_id, a.step): a.pk for a in Annotation.objects.filter(claim_id__in=claims.values())}
            reviews = []
            for row in batch:
                if row["task_id"] in self.left_out_tasks:
                    continue  # a worker who withdrew from the original (``withdrew``)
                answer = answers.get((claims.get((self.tasks.get(row["task_id"]), row["position"])), row["step"]))
                if answer is None or row["decision"] not in FlagReview.Decision.values:
                    self.err(row, "decision" if answer else "annotation_id",
                             "not a decision" if answer else "no answer of the bundle at this task, position and step")
                    continue
                reviews.append((row, FlagReview(annotation_id=answer, decision=row["decision"])))
            FlagReview.objects.bulk_create([r for _, r in reviews])
            for row, review in reviews:
                review.decided_at = row["decided_at"] or review.decided_at
            FlagReview.objects.bulk_update([r for _, r in reviews], ["decided_at"], batch_size=500)

    def grant_rows(self, study: Study) -> None:
        """Each worker's qualification grant (data/qualification_grants.csv): the latest attempt
        graded, and the failed attempts set aside before it (``voids``, ``grant_voids``); the grant
        records no task of its own (``QualificationGrant.assignment``: null for an imported one)."""
        questions = getattr(self, "qualification", [])
        grants, void_tasks = [], []
        for row in self.b.rows(TABLES["qualification_grants"]):
            if self.withdrew(row["worker"]):
                continue
            self.participants(study, [row])
            if (row["platform"], row["worker"]) not in self.workers:
                continue  # the worker cell's error is reported (``participants``)
            participant = self.workers[(row["platform"], row["worker"])]
            answers = self.grant_answers(row, "answers", row["answers"], questions)
            voids = self.grant_voids(row, questions, participant, void_tasks)
            if answers is None or voids is None:
                continue
            grants.append(QualificationGrant(study=study, participant_id=participant, passed=row["passed"],
                                             score=row["score"], answers=answers, voids=voids))
        named = sorted({task for *_, task, _ in void_tasks})
        held: dict[int, int] = {}
        for start in range(0, len(named), 500):  # a hostile bundle may name many: batches of SQLite's variables
            held.update(Assignment.objects.filter(pk__in=named[start:start + 500]).values_list("pk", "participant_id"))
        for row, where, task, participant in void_tasks:
            if held.get(task) != participant:
                self.err(row, where, "a task of another worker (data/tasks.csv): an attempt set aside, and the task "
                                     "given to take the test again, are the row's worker's tasks")
        QualificationGrant.objects.bulk_create(grants)

    def grant_answers(self, row: Row, where: str, given: dict | None, questions: list) -> dict | None:
        """A qualification attempt's answers (question position -> answer) keyed by the copy's
        question ids; None, the row's error reported, where a key is no question position."""
        answers = {}
        for k, v in (given or {}).items():
            position = parse_id(k)
            if position is None or position >= len(questions):
                self.err(row, where, f"{k[:40]!r} is not a question position of the qualification test")
                return None
            answers[str(questions[position].pk)] = v
        return answers

    def grant_voids(self, row: Row, questions: list, participant: int, void_tasks: list) -> list[dict] | None:
        """A grant's ``voids`` cell (``export.grant_voids_cell``) as the copy's ``QualificationGrant.voids``:
        each attempt an object of the keys ``GRANT_VOID_KEYS``, its score a whole number from 0, its
        answers keyed by question position (``grant_answers``), ``taken_at`` and ``voided_at`` times
        with a time zone, ``task`` and ``retake_task`` ids of data/tasks.csv (or null) mapped to the
        copy's tasks, each appended to ``void_tasks`` (row, field, copy's task, participant) for the
        check that it is the row's worker's. Empty (a bundle made before the column, or a grant
        with none): []. None, each problem reported naming ``voids[i].key``, where it is not so."""
        given = row["voids"]
        if given is None:
            return []
        voids, ok = [], True
        for i, void in enumerate(given):
            where = f"voids[{i}]"
            if not isinstance(void, dict):
                self.err(row, where, "expected a JSON object (an attempt set aside)")
                ok = False
                continue
            keys = set(void)
            if keys != set(GRANT_VOID_KEYS):
                missing = [k for k in GRANT_VOID_KEYS if k not in keys]
                unknown = sorted(keys - set(GRANT_VOID_KEYS))
                self.err(row, where, f"expected the keys {', '.join(GRANT_VOID_KEYS)}"
                                     + (f"; missing {', '.join(missing)}" if missing else "")
                                     + (f"; unknown {', '.join(repr(k[:40]) for k in unknown)}" if unknown else ""))
                ok = False
                continue
            score = void["score"]
            if not isinstance(score, int) or isinstance(score, bool) or not 0 <= score <= len(questions):
                self.err(row, f"{where}.score", f"{str(score)[:40]!r} is not a score of the qualification test "
                                                f"(a whole number from 0 to {len(questions)})")
                ok = False
            answers = void["answers"]
            if not isinstance(answers, dict):
                self.err(row, f"{where}.answers", "expected a JSON object (question position -> answer)")
                answers, ok = None, False
            else:
                answers = self.grant_answers(row, f"{where}.answers", answers, questions)
                ok = ok and answers is not None
            cell = {"score": score, "answers": answers}
            for key in ("taken_at", "voided_at"):
                try:
                    if not isinstance(void[key], str):
                        raise BadCell("expected an ISO 8601 date and time (text)")
                    cell[key] = _datetime(void[key]).astimezone(UTC).isoformat()
                except BadCell as exc:
                    self.err(row, f"{where}.{key}", str(exc))
                    ok = False
            for key in ("task", "retake_task"):
                old = void[key]
                new = self.tasks.get(old) if isinstance(old, int) and not isinstance(old, bool) else None
                if old is not None and new is None:
                    self.err(row, f"{where}.{key}", f"{str(old)[:40]!r} is not the id of a task of data/tasks.csv")
                    ok = False
                elif new is not None:
                    void_tasks.append((row, f"{where}.{key}", new, participant))
                cell[key] = new
            voids.append({key: cell.get(key) for key in GRANT_VOID_KEYS})
        return voids if ok else None

    def worker_block_rows(self, study: Study) -> None:
        """The workers the bundle names as blocked in the original when it was made
        (``data/worker_blocks.csv``, ``export.worker_block_rows``), each blocked here in the copy
        alone: a ``WorkerBlock`` on the copy (its study; no researcher, so it covers that study only:
        ``annotations.selectors.blocks_covering``), which the copy's scoring reads by the rule the
        original's did (``annotations.selectors.worker_blocked_in``), so its counted_answers and
        ``without_blocked_workers`` reading give the original's. Nothing else a block does is done:
        the copy is closed and takes no work, and its participants are its own
        (``imported_worker_id``). A worker who withdrew from the original (``withdrew``) is left
        out with their tasks; a row naming no worker of the bundle's tasks is the row's error.
        Without the table the copy's import record says why the blocks are not known
        (``NO_WORKER_BLOCKS_TABLE``), and so do its results (``score.worker_blocks_unknown``)."""
        table = TABLES["worker_blocks"]
        if table.path not in self.b.archive.namelist():
            self.blocks_unknown = NO_WORKER_BLOCKS_TABLE
            return
        n = 0
        for batch in _batches(self.b.rows(table)):
            batch = [row for row in batch if not self.withdrew(row["worker"])]
            named = {row.line: self.workers.get((row["platform"], row["worker"])) for row in batch}
            working = set(Assignment.objects.filter(study=study, participant_id__in=set(named.values()) - {None})
                          .values_list("participant_id", flat=True).distinct())
            blocks = []
            for row in batch:
                if not _is_pseudonym(row["worker"]):
                    self.err(row, "worker", NOT_A_PSEUDONYM)
                elif named[row.line] not in working:
                    self.err(row, "worker", "not a worker of the bundle's tasks (data/tasks.csv)")
                else:
                    blocks.append(WorkerBlock(participant_id=named[row.line], study=study, researcher=None,
                                              everywhere=False, reason=BLOCKED_AT_ORIGIN))
            WorkerBlock.objects.bulk_create(blocks)
            n += len(blocks)
        self.counts["worker_blocks"] = n

    def unit_score_rows(self, study: Study) -> None:
        """The unit scores as the bundle states them, each row's values in the ranges a run writes
        (``unit_score_problem``); whether they are the scores of the answers just imported is
        checked once every row is written (``unit_scores_match_answers``)."""
        fields = [f.name for f in TABLES["unit_scores"].fields if f.name not in ("item_id", "source")]
        for batch in _batches(self.b.rows(TABLES["unit_scores"])):
            scores = []
            for row in batch:
                item, source = self.items.get(row["item_id"]), self.sources.get(row["source"])
                if item is None or source is None:
                    self.err(row, "item_id" if item is None else "source", "not in the bundle")
                    continue
                if problem := unit_score_problem(row.values):
                    self.err(row, *problem)
                    continue
                self.score_lines[(item, source.pk)] = row.line
                values = {f: row[f] for f in fields}
                values["before_majority"] = values["before_majority"] or ""
                values["after_majority"] = values["after_majority"] or ""
                scores.append(UnitScore(study=study, item_id=item, source=source, **values))
            UnitScore.objects.bulk_create(scores)

    def unit_scores_match_answers(self, study: Study, origin: dict) -> None:
        """The unit scores just written (data/unit_scores.csv) against the answers just imported,
        scored by the code the copy's re-score runs (``score._units_frame``, ``_annotation_frame``
        and ``pipeline.unit_outcomes``: the answers that count, majorities, ties, right or wrong,
        utility): a row that differs is the row's error naming the first field that differs, so a
        bundle cannot show other figures than its answers give as the study's, marked not stale. A
        collected utility study only (imported outcomes hold no answers), and not the units the
        bundle called stale (settings.json ``scores_stale``: every unit, where it named none, or where
        it did not say, as bundles made before it could: ``bundle_scores`` says it did not say) nor
        any unit where the copy left out workers who withdrew from the original (their answers are
        not here, and ``bundle_scores`` says so)."""
        if study.kind != Study.Kind.UTILITY or study.is_imported_outcome or not self.score_lines:
            return
        if self.b.errors or self.n_withdrawn or origin.get("stale") is None or (
                origin.get("stale") and not origin.get("stale_units")):
            return  # a bundle that did not say (made before bundles said) is shown as not saying
        stale = {tuple(unit) for unit in origin.get("stale_units") or []}
        answers = _annotation_frame(study, generalization=False)
        expected: dict[tuple[int, int], dict] = {}
        if not answers.empty:
            frame, _warnings, _ties = pipeline.unit_outcomes(
                _units_frame(study, generalization=False), pipeline.as_categories(answers),
                expected_raters=study.annotators_per_unit)
            for rec in frame.to_dict("records"):
                expected[(int(rec["item_id"]), int(rec["source_id"]))] = {
                    "n_annotators": int(rec["n_annotators"]),
                    "before_majority": rec["before_majority"] or "", "after_majority": rec["after_majority"] or "",
                    "before_tie": bool(rec["before_tie"]), "after_tie": bool(rec["after_tie"]),
                    "before_correct": bool(rec["before_correct"]), "after_correct": bool(rec["after_correct"]),
                    "utility": int(rec["utility"])}
        path = TABLES["unit_scores"].path
        stated = UnitScore.objects.filter(study=study, imported=False).values_list(
            "item_id", "source_id", *UNIT_SCORE_CHECKED)
        for item, source, *values in stated.iterator():
            if (item, source) in stale:
                continue
            line = self.score_lines.get((item, source))
            want = expected.get((item, source))
            if want is None:
                self.b.error(path, line, "n_annotators", "no answer of the bundle that counts is of this unit "
                             "(data/annotations.csv), so it has no score; settings.json scores_stale does not "
                             "name it stale")
                continue
            for name, value in zip(UNIT_SCORE_CHECKED, values, strict=True):
                if value != want[name]:
                    self.b.error(path, line, name, f"{value!r}, where the bundle's answers give {want[name]!r} "
                                 "(scored as the copy's re-score scores them); settings.json scores_stale does "
                                 "not name the unit stale, so its scores must be those of the answers")
                    break

    def scores_origin(self, results: Any) -> dict:
        """The import record's ``scores`` (``scoring.selectors.bundle_scores`` reads it): where the
        unit scores of data/unit_scores.csv came from, the run settings.json's ``latest_run`` names
        and when it finished (results.json ``run.finished_at``), and whether settings.json
        ``scores_stale`` called them stale, with each unit it named as the copy's (item, source)
        ids. ``stale`` None: the bundle did not say (no run, or made before bundles said). A named
        unit that is not the bundle's is a row error of settings.json (nothing is kept)."""
        written = _settings(self.b)
        latest = written.get("latest_run") if isinstance(written.get("latest_run"), dict) else {}
        run = results.get("run") if isinstance(results, dict) and isinstance(results.get("run"), dict) else {}
        said = written.get("scores_stale")
        origin = {"score_run": latest.get("score_run", run.get("id")), "finished_at": run.get("finished_at"),
                  "stale": None, "stale_units": [], "n_stale": None, "n_scored": None,
                  "scored_with": self.scored_with(results, said)}
        if said is None:
            return origin
        if not isinstance(said, dict) or not isinstance(said.get("stale"), bool) \
                or not isinstance(said.get("units") or [], list):
            self.b.error(SETTINGS_FILE, None, "scores_stale", "expected an object with stale (true or false) and "
                         "units (a list)")
            return origin
        units = []
        for unit in said.get("units") or []:
            item = self.items.get(unit.get("item_id")) if isinstance(unit, dict) and isinstance(
                unit.get("item_id"), int) else None
            source = self.sources.get(unit.get("source")) if isinstance(unit, dict) and isinstance(
                unit.get("source"), str) else None
            if item is None or source is None:
                self.b.error(SETTINGS_FILE, None, "scores_stale.units",
                             f"{str(unit)[:80]} is not an item_id and source of the bundle")
                continue
            units.append([item, source.pk])
        # a copy's bundle has no results.json: its settings.json carries the original run's finish
        origin.update(finished_at=origin["finished_at"] or said.get("finished_at"))
        origin.update(score_run=said.get("score_run", origin["score_run"]), stale=said["stale"],
                      stale_units=sorted(units), n_stale=len(units),
                      n_scored=said.get("scored_units") if isinstance(said.get("scored_units"), int) else None)
        return origin

    def scored_with(self, results: Any, said: Any) -> dict:
        """What the run that scored data/unit_scores.csv recorded it scored them with, as the
        exports' scored-with columns give it (``export_units.scored_with_results``): read from the
        bundle's results.json, or, in the bundle of a copy (no results.json), from settings.json
        ``scores_stale.scored_with``, which carries the copy's own. Not what a run writes: a row error
        of the file naming why (nothing is kept). {} when neither says."""
        if isinstance(results, dict) and results:
            path, field_name = RESULTS_FILE, ""
            try:
                carried = scored_with_results(results)
            except (ArithmeticError, AttributeError, TypeError, ValueError, KeyError):
                carried = None  # no run writes what these texts cannot be made of
        else:
            path, field_name = SETTINGS_FILE, "scores_stale.scored_with"
            carried = said.get("scored_with", {}) if isinstance(said, dict) else {}
        # one check of both: what the copy keeps, and its own bundle carries on, is what the exports print
        if not isinstance(carried, dict) or any(
                key not in SCORED_WITH_KEPT
                or not (value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(
                    value, bool))) for key, value in carried.items()):
            self.b.error(path, None, field_name, f"not what a score run records: expected {', '.join(SCORED_WITH_KEPT)} "
                         "(each a text, a whole number or null)")
            return {}
        return {key: storable_text(value) if isinstance(value, str) else value for key, value in carried.items()}

    def borrowed_utility_rows(self, study: Study) -> None:
        """The borrowed utility the bundle carried (``data/borrowed_utility.csv``, and where it came
        from in ``settings.json``), kept for the copy's scoring (``BundledUtility``) in place of this
        installation's studies. A study that is not a utility study and whose bundle has no table
        gets a ``BundledUtility`` without rows: its scoring then says what it cannot reproduce."""
        if study.kind == Study.Kind.UTILITY:
            return  # a utility study's scoring never borrows
        names = set(self.b.archive.namelist())
        section = _settings(self.b).get("borrowed_utility")
        section = section if isinstance(section, dict) else {}
        table = TABLES["borrowed_utility"]
        if table.path not in names:
            BundledUtility.objects.create(study=study, rows=None,
                                          reason=str(section.get("unavailable") or NO_BORROWED_TABLE))
            return
        rows = []
        for row in self.b.rows(table):
            item, source = self.items.get(row["item_id"]), self.sources.get(row["source"])
            if item is None or source is None:
                self.err(row, "item_id" if item is None else "source", "not in the bundle's items / sources")
                continue
            if row["utility"] not in (-1, 0, 1):
                self.err(row, "utility", f"{row['utility']} is not -1, 0 or 1")
                continue
            rows.append([item, source.pk, row["utility"], row["orig_after_correct"], row["orig_before_correct"],
                         row["study_id"]])
        provenance = self.borrowed_from(section)
        caveat = str(section.get("note") or "") if section.get("same_as_latest_run") is False else ""
        BundledUtility.objects.create(study=study, rows=rows, provenance=provenance, reason=caveat)
        self.counts["borrowed_utility"] = len(rows)


    def borrowed_from(self, section: dict) -> dict:
        """settings.json ``borrowed_utility.from`` (where the borrowed utility came from), kept with
        the copy's table for its scoring and results (``score.borrowed_utility``), with the stale
        unit scores each lending study names (``studies[].stale_pairs``: [item_id, source_id] of the
        bundle's installation) mapped onto the copy's items and sources as the table's rows are: the
        item by the bundle's item id, the source by its name in ``stale_pair_sources`` (a source
        that is not the study's, which no unit of the copy has, is left out). What no export writes
        is a row error of settings.json naming the key (nothing is kept): ``from`` or a lending
        study not an object, ``studies`` not a list, a stale pair that is not two whole numbers or
        not an item and source of the bundle, a count of stale pairs that is not a whole number."""
        written = section.get("from")
        if written is None:
            return {}
        key = "borrowed_utility.from"
        if not isinstance(written, dict):
            self.b.error(SETTINGS_FILE, None, key, "expected an object (where the borrowed utility came from)")
            return {}
        for name in ("pairs_stale", "pairs_stale_left_out"):
            if not _count(written.get(name, 0)):
                self.b.error(SETTINGS_FILE, None, f"{key}.{name}", f"{str(written[name])[:80]} is not a whole number")
        if "studies" not in written:
            return written
        studies = written["studies"]
        if not isinstance(studies, list):
            self.b.error(SETTINGS_FILE, None, f"{key}.studies", "expected a list of the lending studies")
            return {}
        named = section.get("stale_pair_sources", {})
        if not isinstance(named, dict) or not all(isinstance(v, str) for v in named.values()):
            self.b.error(SETTINGS_FILE, None, "borrowed_utility.stale_pair_sources",
                         "expected an object of source ids and the names of the bundle's sources")
            named = {}
        mapped = []
        for entry in studies:
            if not isinstance(entry, dict):
                self.b.error(SETTINGS_FILE, None, f"{key}.studies", f"{str(entry)[:80]} is not a lending study (an "
                             "object)")
                continue
            if not _count(entry.get("pairs_stale", 0)):
                self.b.error(SETTINGS_FILE, None, f"{key}.studies.pairs_stale",
                             f"{str(entry['pairs_stale'])[:80]} is not a whole number")
            if "stale_pairs" not in entry:
                mapped.append(entry)
                continue
            pairs = entry["stale_pairs"]
            if not isinstance(pairs, list):
                self.b.error(SETTINGS_FILE, None, f"{key}.studies.stale_pairs",
                             f"{str(pairs)[:80]} is not a list of [item_id, source_id] pairs")
                continue
            here = []
            for pair in pairs:
                if not (isinstance(pair, list) and len(pair) == 2 and all(_count(v) for v in pair)):
                    self.b.error(SETTINGS_FILE, None, f"{key}.studies.stale_pairs",
                                 f"{str(pair)[:80]} is not an [item_id, source_id] pair of whole numbers")
                    continue
                item, name = self.items.get(pair[0]), named.get(str(pair[1]))
                source = self.sources.get(name) if name is not None else None
                if item is None or (name is not None and source is None):
                    self.b.error(SETTINGS_FILE, None, f"{key}.studies.stale_pairs",
                                 f"{pair} is not an item_id of the bundle" if item is None else
                                 f"{pair}: stale_pair_sources names source {name!r}, which is not the bundle's")
                    continue
                if source is not None:
                    here.append([item, source.pk])
            mapped.append({**entry, "stale_pairs": sorted(here)})
        return {**written, "studies": mapped}


def _count(value) -> bool:
    """Whether ``value`` is a whole number of at least 0 (a JSON number, never true or false)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# The fields of a unit score the answers give, checked against them (``unit_scores_match_answers``).
UNIT_SCORE_CHECKED = ("n_annotators", "before_majority", "after_majority", "before_tie", "after_tie",
                      "before_correct", "after_correct", "utility")
UTILITY_VALUES = (-1, 0, 1)


def unit_score_problem(values: dict) -> tuple[str, str] | None:
    """(field, reason) when a row of data/unit_scores.csv holds a value no score run writes; None
    when it does not: a utility, stated utility or Gen-U category is -1, 0 or 1, a number of
    annotators is not negative, and a utility is the category of the row's own right-or-wrong
    before and after (``metrics.labels.utility_category``; a tie counts as wrong)."""
    for name in ("utility", "reported_utility", "gen_u"):
        if values.get(name) is not None and values[name] not in UTILITY_VALUES:
            return name, f"{values[name]} is not -1, 0 or 1"
    if values.get("n_annotators") is not None and values["n_annotators"] < 0:
        return "n_annotators", f"{values['n_annotators']} is below 0"
    for step in ("before", "after"):
        if values.get(f"{step}_tie") and values.get(f"{step}_correct"):
            return f"{step}_correct", f"true on a {step} tie, which counts as a wrong answer"
    if values.get("utility") is not None:
        before, after = values.get("before_correct"), values.get("after_correct")
        if before is None or after is None:
            return ("before_correct" if before is None else "after_correct",
                    "empty, where the row states a utility (the category of the answers before and after)")
        if values["utility"] != utility_category(before, after):
            return "utility", (f"{values['utility']}, where before_correct {str(before).lower()} and after_correct "
                               f"{str(after).lower()} give {utility_category(before, after)}")
    return None


# What a copy keeps of the run that scored its imported unit scores (``BundleScores.scored_with``).
SCORED_WITH_KEPT = tuple(key for key in SCORED_WITH_RUN_KEYS if key != "score_run")


def _settings(bundle: Bundle) -> dict:
    """The bundle's settings.json ({} when it has none, or it is not an object): what its scores
    and its borrowed utility rest on (``export.score_settings``)."""
    written = bundle.json(SETTINGS_FILE) if SETTINGS_FILE in bundle.archive.namelist() else {}
    return written if isinstance(written, dict) else {}


def _unit_design_problem(study: Study, *, quota: int, decided_at: datetime | None,
                         claimed: int, question_invalid: bool = False) -> tuple[str, str] | None:
    """(field, reason) when a unit's ``quota`` or ``decided_at`` in data/units.csv is not one the
    copy's design gives a unit holding ``claimed`` claims that are not released (data/claims.csv);
    None when it is. As the live app sets them (``units.study_units_build``, ``stopping``): an
    undecided unit's quota is the study's workers per unit (or more, kept for a unit that held more
    claims when the study lowered it); only a study that stops when decided has decided units, and
    a decided unit's quota is at most the workers per unit and never below its claims (it was
    lowered to them, held work included). A unit whose generalization question was marked invalid
    while the study was open (``question_invalid``) had its quota lowered to its claims then
    (``stopping.units_follow_question_validation``): anywhere from its claims to the workers per unit."""
    per_unit = study.annotators_per_unit
    if decided_at is not None and not study.stop_when_decided:
        return ("decided_at", f"{decided_at.isoformat()}: a unit is decided only in a study that stops when "
                              "decided, and study.json's study.stop_when_decided is not true")
    if claimed > quota:
        return ("quota", f"{quota}, below the unit's {claimed} claims that are not released (data/claims.csv): "
                         "a unit never holds more workers than its quota")
    if question_invalid and quota <= max(per_unit, claimed):
        return None
    if decided_at is None and quota != per_unit and not per_unit < claimed:
        return ("quota", f"{quota} is not the study's workers per unit ({per_unit}, study.json's "
                         "study.annotators_per_unit): an undecided unit's quota is that")
    if decided_at is not None and quota > max(per_unit, claimed):
        return ("quota", f"{quota}, above the study's workers per unit ({per_unit}, study.json's "
                         "study.annotators_per_unit): a decided unit's quota was lowered to its claims")
    return None


def bundled_utility_missing(study: Study) -> str:
    """Why ``study``, imported from a bundle, cannot reproduce the figures that need borrowed
    utility ('' when it can, or borrows none): what the import command and its callers say."""
    return BundledUtility.objects.filter(study=study, rows__isnull=True).values_list("reason", flat=True).first() or ""


def bundle_import(*, file: str | IO | Any, name: str, owner, filename: str | None = None) -> Study:
    """Import the bundle ``file`` (a path or a binary file object) as a new closed study named
    ``name`` owned by ``owner``, the user who imports it (None: the operator, e.g. a management
    command), whose right to create a study (``studies.add_study``) and to add shared content is
    checked here. All or nothing: a changed file, a
    schema that is not this installation's, any bad row, or content the owner may not add raises
    ``BundleError`` (an ``ImportValidationError``) listing every problem with its file, row, field
    and reason, and nothing is written. Returns the study; score it to re-compute
    ``results.json``."""
    with _opened(file, filename) as (fh, shown):
        return _import(_open(fh, shown), name=name, owner=owner)


def _import(bundle: Bundle, *, name: str, owner) -> Study:
    with bundle.archive:
        try:
            study_add_check(user=owner)  # creating a study, whoever calls (the admin and the API check it too)
        except StudyError as exc:
            raise BundleError(RowError(None, "owner", str(exc)), filename=bundle.name) from None
        _check_sums(bundle)
        _check_schemas(bundle)
        design = bundle.json(STUDY_FILE)
        _check_design(bundle, design)
        if design.get("bundle_format") != FORMAT_VERSION:
            raise BundleError(RowError(None, "bundle_format", f"format {design.get('bundle_format')!r}; this "
                                       f"installation reads format {FORMAT_VERSION}", record=STUDY_FILE),
                              filename=bundle.name)
        name = (name or "").strip()
        if not name:
            raise BundleError(RowError(None, "name", "give the new study a name"), filename=bundle.name)
        if problem := identifier_problem(name, what="the study name"):
            raise BundleError(RowError(None, "name", problem), filename=bundle.name)
        if Study.objects.filter(name=name).exists():
            raise BundleError(RowError(None, "name", f"a study named {name!r} exists already"), filename=bundle.name)
        try:
            study = _write(bundle, design, name=name, owner=owner)
        except (IntegrityError, DataError) as exc:  # a rule (or a column's range) the checks above do not know of
            raise BundleError(RowError(None, "", f"the bundle's rows break a rule of the database: {exc}"),
                              filename=bundle.name) from None
    return study


def _check_design(bundle: Bundle, design: Any) -> None:
    if not isinstance(design, dict):
        raise BundleError(RowError(None, "", "expected a JSON object", record=STUDY_FILE), filename=bundle.name)
    for section, keys in DESIGN_KEYS.items():
        part = design.get(section)
        if not isinstance(part, dict):
            bundle.error(STUDY_FILE, None, section, "missing")
            continue
        for key in keys:
            if key not in part:
                bundle.error(STUDY_FILE, None, f"{section}.{key}", "missing")
    for section in ("sources", "answerer_sources", "attention_checks"):
        value = design.get(section) or []
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            bundle.error(STUDY_FILE, None, section, "expected a list of objects")
    if any(not s.get("name") for s in design.get("sources") or [] if isinstance(s, dict)):
        bundle.error(STUDY_FILE, None, "sources.name", "a source without a name")
    for where, value, kind, stored in _design_values(design):
        problem = _design_type_problem(value, kind)
        if problem:
            bundle.error(STUDY_FILE, None, where, f"{str(value)[:40]!r} is not {problem}")
        elif stored is not None and (problem := stored.problem(value, str(value))):
            bundle.error(STUDY_FILE, None, where, problem)
    bundle.raise_if_any()


# study.json's values by the type the import reads them as (``_design_values``): an optional value
# may be absent or null; ``decimal``: a number or the text of one (the export writes "0.50").
DESIGN_TYPES = {
    "study": {"name": "text", "kind": "text", "split": "text", "platform": "text",
              "annotators_per_unit": "integer", "units_per_task": "integer", "item_sample_size": "integer?",
              "sample_seed": "integer?", "reward": "decimal", "hourly_pay_floor": "decimal",
              "estimated_minutes_per_task": "decimal", "consent_text": "text?", "instructions": "text?",
              "example": "text?", "faithfulness_enabled": "boolean?", "is_imported_outcome": "boolean?",
              "stop_when_decided": "boolean?"},
    "dataset": {"name": "text", "task_format": "text", "choice_labels": "labels?", "description": "text?"},
    "sources[]": {"name": "text", "seed": "integer?"},
    "answerer_sources[]": {"name": "text?", "seed": "integer?"},
    "attention_checks[]": {"id": "integer", "question": "text", "choices": "list", "correct_answer": "text"},
    "qualification_test": {"pass_mark": "integer", "instructions": "text?", "questions": "list"},
    "qualification_test.questions[]": {"position": "integer", "question": "text", "choices": "list",
                                       "correct_answer": "text"},
}
# study.json's integers stored in a model field (``IntField``): each is held to its column's range.
DESIGN_FIELDS = {
    ("study", "annotators_per_unit"): IntField(Study, "annotators_per_unit"),
    ("study", "units_per_task"): IntField(Study, "units_per_task"),
    ("study", "item_sample_size"): IntField(Study, "item_sample_size"),
    ("study", "sample_seed"): IntField(Study, "sample_seed"),
    ("sources[]", "seed"): IntField(RationaleSource, "seed"),
    ("answerer_sources[]", "seed"): IntField(RationaleSource, "seed"),
    ("qualification_test", "pass_mark"): IntField(QualificationTest, "pass_mark"),
    ("qualification_test.questions[]", "position"): IntField(QualificationQuestion, "position"),
}
DESIGN_TYPE_NAMES = {"text": "a text", "integer": "an integer (a 64-bit one)", "boolean": "true or false",
                     "decimal": "a finite number (or its text)", "list": "a list", "labels": "a list of texts"}


def _design_values(design: dict) -> Iterator[tuple[str, Any, str, IntField | None]]:
    """(where, value, kind, the model field it is stored in: ``DESIGN_FIELDS``) of each value of
    study.json that ``DESIGN_TYPES`` names, a list's entries each (``sources[1].name``); a section or
    entry that is no object is skipped (the checks above name it), but a qualification test that is
    not an object is named here."""
    test = design.get("qualification_test")
    if test is not None and not isinstance(test, dict):
        yield "qualification_test", test, "object", None
    for section, kinds in DESIGN_TYPES.items():
        path = section.removesuffix("[]").split(".")
        parts = [design]
        for step in path:
            parts = [p.get(step) for p in parts if isinstance(p, dict)]
        if section.endswith("[]"):
            entries = [(f"{section.removesuffix('[]')}[{i}]", e) for p in parts if isinstance(p, list)
                       for i, e in enumerate(p)]
        else:
            entries = [(section, p) for p in parts]
        for where, entry in entries:
            if not isinstance(entry, dict):
                continue
            for key, kind in kinds.items():
                optional = kind.endswith("?")
                if key not in entry or (optional and entry[key] is None):
                    continue  # a missing value the import reads is named by the checks above, or by the model
                yield f"{where}.{key}", entry[key], kind.removesuffix("?"), DESIGN_FIELDS.get((section, key))


def _design_type_problem(value: Any, kind: str) -> str | None:
    """What ``value`` should be (``DESIGN_TYPE_NAMES``) when it is not of ``kind``; None when it is."""
    if kind == "object":
        return "an object"
    if kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool) and INT_MIN <= value <= INT_MAX
    elif kind == "text":
        ok = isinstance(value, str)
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind == "list":
        ok = isinstance(value, list)
    elif kind == "labels":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:  # decimal
        ok = False
        if isinstance(value, (int, float, str)) and not isinstance(value, bool) and len(str(value)) <= 40:
            try:
                ok = Decimal(str(value)).is_finite()
            except ArithmeticError:  # decimal.InvalidOperation
                ok = False
    return None if ok else DESIGN_TYPE_NAMES[kind]


def _write(bundle: Bundle, design: dict, *, name: str, owner) -> Study:
    with transaction.atomic():
        job = _Import(bundle, name=name, owner=owner)
        job.original_withdrawals(design)
        dataset = job.dataset(design)
        bundle.raise_if_any()
        study_sources = [job.source(s) for s in design.get("sources") or []]
        job.sources = {s["name"]: job.found[s["name"]] for s in design.get("sources") or []}
        # Gen-U's fine-tuned answerers (results.json reads their training); one whose settings the
        # bundle withholds (``export.answerer_sources_json``) is not made here
        answerers = {s["name"]: job.source(s, "answerer_sources") for s in design.get("answerer_sources") or []
                     if s.get("name") and "withheld" not in s}
        bundle.raise_if_any()
        study_items: list[int] = []
        job.item_rows(dataset, study_items)
        job.rationale_rows()
        job.genq_rows()
        job.genu_rows(answerers)
        bundle.raise_if_any()  # content first: the rest refers to it
        study = job.study(design, dataset)
        study.sources.set(study_sources)
        study.items.add(*study_items)
        job.unit_rows(study)
        job.task_rows(study)
        job.claim_rows(study)
        job.unit_counters(study)
        job.annotation_rows(study)
        job.completed_claims_check(study)
        job.decided_units_check(study)
        job.flag_rows(owner)
        job.grant_rows(study)
        job.worker_block_rows(study)
        job.unit_score_rows(study)
        job.borrowed_utility_rows(study)
        original = bundle.json(RESULTS_FILE) if RESULTS_FILE in bundle.archive.namelist() else None
        scores = job.scores_origin(original)
        job.unit_scores_match_answers(study, scores)
        bundle.raise_if_any()
        import_record_create(
            kind="bundle", f=ImportFile(name=bundle.name, text="", sha256=bundle.sha256, size=bundle.size),
            dataset=dataset, result=UpsertResult(created=sum(job.counts.values())), user=owner,
            summary={"study": study.pk, "original_study": design["study"]["id"],
                     "original_name": design["study"]["name"], **job.counts,
                     "original_results": bool(original), "renamed": job.renamed,
                     # workers left out because they withdrew from the original here (a count, no names)
                     "workers_withdrawn_from_original": job.n_withdrawn,
                     # the workers blocked in the original (``worker_block_rows``: also in job.counts),
                     # or why they are not known (``score.worker_blocks_unknown`` reads both)
                     **({WORKER_BLOCKS_KEY: None, WORKER_BLOCKS_UNKNOWN_KEY: job.blocks_unknown}
                        if job.blocks_unknown else {}),
                     # where the unit scores came from and whether the bundle called them stale
                     # (``scoring.selectors.bundle_scores``, read by the rule of the `stale` column)
                     BUNDLE_SCORES_KEY: scores,
                     # the renamed sources' ids: who reads the record reads them (``import_records_for_user``)
                     "source_ids": sorted(job.found[name].pk for name in job.renamed.get("sources", {})),
                     "id_runs": {"items": job.items.runs, "units": job.units.runs, "tasks": job.tasks.runs}},
        )
    return study
