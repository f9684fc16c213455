"""Imports in the background: a file over ``RL_IMPORT_BACKGROUND_BYTES`` is stored and imported by
a Celery worker (``studies.tasks.run_import_job``) instead of inside the web request, with its
progress (records read so far, then the writing stage) on its :class:`ImportJob`.

The import itself is the same call as an inline one (:func:`import_run`): all or nothing, every
bad row with its line, field and reason, the row cap ``RL_IMPORT_MAX_ROWS``."""
from __future__ import annotations

import inspect
import logging
from contextlib import ExitStack
from dataclasses import asdict, is_dataclass
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.utils import timezone

from lab.jsontext import text_problem
from studies.models import ImportJob
from studies.services.content import job_acts_for

from . import IMPORT_KINDS, ItemColumns, RationaleColumns, import_permission_check, import_run
from .errors import ImportValidationError
from .generalization import generalization_target_check
from .generic import items_table_target_check
from .openbookqa import openbookqa_target_check
from .rationales import rationales_target_check
from .reading import read_import_file, reporting_progress
from .strategyqa import strategyqa_target_check

logger = logging.getLogger(__name__)

# The importers' options a job stores (as JSON; a column mapping as its dict).
JOB_OPTIONS = {"dataset_name", "split", "source_name", "file_format", "task_format", "validation_status",
               "choice_labels", "columns"}
COLUMNS = {"items": ItemColumns, "rationales": RationaleColumns}
# What each kind's importer checks of its target before reading the file (its dataset, its source name,
# its split, its status): asked again before a job's upload is stored, so that a large file is refused
# as the same file small is (the same 400, field and reason), not queued to fail later.
TARGET_CHECKS = {
    "strategyqa": strategyqa_target_check,
    "openbookqa": openbookqa_target_check,
    "items": items_table_target_check,
    "rationales": rationales_target_check,
    "generalization": generalization_target_check,
}
# The task that runs a stored job (``studies.tasks.run_import_job`` is registered under this name),
# sent by name: the task calls this module, so this module does not import the tasks.
IMPORT_TASK = "studies.tasks.run_import_job"
# A failed job keeps at most this many row errors (and says how many there were).
MAX_STORED_ERRORS = 1000
# What a job whose task could not be queued says, and what the caller is told.
QUEUE_DOWN = "the task queue could not be reached; nothing was imported, upload the file again"


class ImportQueueUnavailable(ImportValidationError):
    """The task queue (broker) could not be reached when a background import was queued: its job
    was marked failed and its upload deleted. An ``ImportValidationError`` (nothing imported, one
    problem to show), so every upload form shows it as it shows a refused file; the API answers
    503."""

    def summary(self) -> str:
        name = f"{self.filename}: " if self.filename else ""
        return f"{name}{self.errors[0].reason}"


def import_in_background(*, file: Any) -> bool:
    """Whether an upload of this size is imported by a background job."""
    size = getattr(file, "size", None)
    return isinstance(size, int) and size > settings.RL_IMPORT_BACKGROUND_BYTES


def import_job_create(*, kind: str, file: Any, user, options: dict[str, Any] | None = None) -> ImportJob:
    """Store the upload and queue its import (after the job's row is committed). Needs
    ``studies.add_importrecord``; unknown kinds and options are refused before anything is stored, and
    so is a target the importer refuses before reading a file (``TARGET_CHECKS``: a dataset or a source
    name the user may not write to, an unknown split), with the error the same file imported inline
    gets.
    Raises ``ImportQueueUnavailable`` when the task queue cannot be reached (``_send``): the job is
    then failed and its upload deleted, never left queued."""
    import_permission_check(user)
    if kind not in IMPORT_KINDS:
        raise ImportValidationError(f"unknown import kind {kind!r}: use one of {', '.join(IMPORT_KINDS)}")
    options = {k: asdict(v) if is_dataclass(v) else v for k, v in (options or {}).items()
               if v not in (None, "") and k != "filename"}
    unknown = sorted(set(options) - JOB_OPTIONS)
    if unknown:
        raise ImportValidationError(f"a background import takes no option {', '.join(unknown)}")
    name = (getattr(file, "name", "") or "upload").rsplit("/", 1)[-1]
    reason = text_problem(name)
    if reason:
        raise ImportValidationError(f"the file name {reason}; rename the file", filename=name.replace("\x00", ""))
    size = int(getattr(file, "size", 0) or 0)
    if size > settings.RL_MAX_IMPORT_BYTES:
        read_import_file(file, filename=name)  # refuses it by its size before reading, as inline
    _target_check(kind=kind, options=options, filename=name, user=user)
    with transaction.atomic():
        job = ImportJob(kind=kind, options=options, filename=name[:500], size=size,
                        created_by=user if getattr(user, "pk", None) else None)
        job.file.save(name[-100:], file, save=False)
        job.full_clean()
        job.save()
        transaction.on_commit(lambda: _send(job))
    return job


def _target_check(*, kind: str, options: dict[str, Any], filename: str, user) -> None:
    """Ask ``kind``'s importer's own target check (``TARGET_CHECKS``) with the options it takes, for
    ``user``, as the import will; raises its ``ImportValidationError``. Writes nothing."""
    check = TARGET_CHECKS[kind]
    takes = inspect.signature(check).parameters
    check(filename=filename, user=user, **{k: v for k, v in options.items() if k in takes})


def _send(job: ImportJob) -> None:
    """Queue ``job``'s import. A broker that cannot be reached fails the job at once and deletes its
    upload (``_finish``), then raises ``ImportQueueUnavailable``: no job is left queued with nothing
    to run it and its file kept, as ``scoring.services.runs`` does for a score run."""
    try:
        current_app.signature(IMPORT_TASK, args=(job.pk,)).apply_async()
    except Exception as exc:  # kombu's OperationalError, a refused socket, DNS: nothing was queued
        logger.warning("import job %s not queued: %s: %s", job.pk, exc.__class__.__name__, exc)
        _finish(job, status=ImportJob.Status.FAILED, error=QUEUE_DOWN)
        raise ImportQueueUnavailable(QUEUE_DOWN, filename=job.filename) from exc


# Starts of one import job: a file that kills its worker each time (out of memory) is redelivered
# at once (``reject_on_worker_lost``) and would be started for ever, as score runs would
# (``scoring.services.runs.MAX_ATTEMPTS``).
MAX_ATTEMPTS = 3


def import_job_run(*, job_id: int) -> ImportJob:
    """Run a queued (or interrupted) job's import; a finished job is left as it is, so a
    redelivered message changes nothing. A job started ``MAX_ATTEMPTS`` times already (each start
    killed its worker) is failed instead, its upload deleted. Returns the job as it ended."""
    with transaction.atomic():
        job = ImportJob.objects.select_for_update().get(pk=job_id)
        if job.status in (ImportJob.Status.DONE, ImportJob.Status.FAILED):
            return job
        if job.attempts >= MAX_ATTEMPTS:  # each start so far killed its worker: not once more
            _finish(job, status=ImportJob.Status.FAILED, error=(
                f"nothing imported: the import worker stopped {job.attempts} times on this file (killed: out of "
                "memory, or restarted?); not tried again. Split the file, or import it once the cause is fixed."))
            return job
        started = {"stage": ImportJob.Stage.READING, "started_at": timezone.now(), "attempts": job.attempts + 1}
        if not ImportJob.STATUS.move(job, ImportJob.Status.RUNNING, **started):  # interrupted: run again
            ImportJob.objects.filter(pk=job.pk).update(**started)

    # The writing stage runs in one transaction, opened once every record is read (so the reading
    # progress is seen while it runs): the rows, their ImportRecord and the job's "done" with its
    # record commit together. A worker killed before that commit leaves nothing imported and the job
    # "running" (a redelivery imports it); one killed after leaves the job done (a redelivery does
    # nothing; it waits on the job's row lock while the first run writes).
    depth = len(connection.atomic_blocks)
    writing = ExitStack()

    def progress(rows: int, finished: bool) -> None:
        stage = ImportJob.Stage.WRITING if finished else ImportJob.Stage.READING
        ImportJob.objects.filter(pk=job_id).update(rows_read=rows, stage=stage)
        if finished and len(connection.atomic_blocks) == depth:  # once, and not inside an importer's own
            writing.enter_context(transaction.atomic())
            ImportJob.objects.select_for_update().filter(pk=job_id).exists()

    options = dict(job.options)
    if "columns" in options:
        options["columns"] = COLUMNS[job.kind](**options["columns"])
    try:
        with writing, reporting_progress(progress), job.file.open("rb") as fh:
            record = import_run(kind=job.kind, file=fh, filename=job.filename, user=_job_actor(job), **options)
            _finish(job, status=ImportJob.Status.DONE, record=record, keep_file=True)
    except PermissionDenied as exc:  # its researcher lost the right to import since queueing it
        _finish(job, status=ImportJob.Status.FAILED, error=f"nothing imported: {exc}")
    except ImportValidationError as exc:
        errors = [e.as_dict() for e in exc.errors[:MAX_STORED_ERRORS]]
        more = len(exc.errors) - len(errors)
        _finish(job, status=ImportJob.Status.FAILED, error=str(exc) + (f" ({more} more not stored)" if more else ""),
                errors=errors)
    except Exception as exc:  # the job must not stay "running": say what failed, and let Celery log it
        logger.exception("import job %s failed", job_id)
        _finish(job, status=ImportJob.Status.FAILED, error=f"the import failed: {type(exc).__name__}: {exc}")
        raise
    else:
        _drop_upload(job)  # once the import and the job's "done" are committed
    return job


def _job_actor(job: ImportJob):
    """Who a job imports for (``content.job_acts_for``): every job is queued by a user
    (``import_job_create`` needs the import permission), so one without a user lost its researcher
    and acts for nobody."""
    return job_acts_for(created_by=job.created_by)


def _finish(job: ImportJob, *, status: str, error: str = "", errors: list | None = None, record=None,
            keep_file: bool = False) -> None:
    job.refresh_from_db(fields=["rows_read", "status"])  # as stored: a rolled-back "done" is not kept
    ImportJob.STATUS.move(job, status, stage=ImportJob.Stage.FINISHED, finished_at=timezone.now(), error=error,
                          errors=errors or [], record=record)
    if not keep_file:
        _drop_upload(job)


def _drop_upload(job: ImportJob) -> None:
    if job.file:
        job.file.delete(save=False)  # the upload is not kept once imported (or refused)
        ImportJob.objects.filter(pk=job.pk).update(file="")
