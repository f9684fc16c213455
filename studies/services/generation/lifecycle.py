"""What every LM job kind does the same way once it runs, in one place:

- **progress and cancel**: :class:`StepProgress` reports the steps of a training kind (done, rate,
  ETA) and says whether the job was asked to stop; item kinds smooth their rate per batch with
  :func:`smoothed_rate` and read their ETA from :func:`eta_seconds`; :func:`job_refusal` says
  whether a job's researcher may still have it run (and read its inputs), and :func:`job_cancel`
  stops it;
- **fail and finish**: :func:`generation_job_fail` records why a job stopped;
  :func:`generation_job_finish` (or :func:`mark_done` on a job the caller holds locked) moves a
  running job to DONE with its final counts and params. A job cancelled meanwhile stays cancelled:
  what it stored stands;
- **model folders**: :func:`model_folder_publish` writes a folder beside its place and swaps it in
  so that a crash leaves the old folder or the new one, never half of either;
- **sources**: :func:`output_name_check` refuses an output name a non-LM source holds, or an LM
  source the job's user may not change (:mod:`studies.services.content`), and
  :func:`model_source_register` registers (or updates) the LM rationale source of a checkpoint.

Status changes go through ``GenerationJob.STATUS`` (:mod:`lab.transitions`)."""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lab.jsontext import storable_text
from studies.models import GenerationJob, RationaleSource
from studies.selectors import JOB_START_PERMISSION
from studies.services.content import ContentChangeRefused, content_change_check
from studies.services.model_paths import (
    QUARK_RUNS,
    SCRATCH_SUFFIXES,
    TRAINING_FILE,
    local_model_path,
    model_path_stored,
    operator_model_paths,
    path_within,
    resolved_path,
)

from .errors import GenerationError
from .inputs import generation_job_inputs_refusal

Status = GenerationJob.Status


# --- progress and cancel ------------------------------------------------------------------------
def eta_seconds(remaining: float, rate: float | None) -> float | None:
    """Seconds left at ``rate`` units a second (None while the rate is unknown or zero)."""
    return remaining / rate if rate else None


def smoothed_rate(previous: float | None, latest: float) -> float:
    """The job's rate after a batch that ran at ``latest``: the mean of it and the rate before."""
    return latest if previous is None else 0.5 * previous + 0.5 * latest


def job_touch(job_id: int) -> None:
    """Mark the job as moving (beat queues again only the jobs that stopped moving)."""
    GenerationJob.objects.filter(pk=job_id).update(updated_at=timezone.now())


def cancel_requested(job_id: int) -> bool:
    """Whether someone asked the job to stop (``generation_job_cancel``) since it started."""
    return GenerationJob.objects.filter(pk=job_id, cancel_requested=True).exists()


def creator_refusal(job: GenerationJob) -> str:
    """Why ``job`` may not go on: the researcher who started it may no longer start jobs (the
    permission was removed or the account deactivated), so the job stops spending compute and
    budget for them; empty when it may go on. A job a command started (the operator's) always
    may, and so may one whose researcher's account was deleted: it acts for nobody
    (``common.job_actor``), storing only what no study shows. Django caches permissions on a user
    instance: pass a job read afresh (with its ``created_by``) to see a right removed since."""
    creator = job.created_by
    if creator is None or creator.has_perm(JOB_START_PERMISSION):
        return ""
    why = "their account was deactivated" if not creator.is_active else f"they no longer hold {JOB_START_PERMISSION}"
    return f"Cancelled: {creator} who started this job may no longer start LM jobs ({why})."


def job_refusal(job: GenerationJob) -> str:
    """Why ``job`` may not go on: :func:`creator_refusal`, or its researcher may no longer read what
    it reads (its source, question generator, dataset, items, the sources and model paths its
    params name: ``inputs.generation_job_inputs_refusal``, the check its creation made, made again
    as a share may have been revoked since); empty when it may. Pass a job read afresh."""
    return creator_refusal(job) or generation_job_inputs_refusal(job)


def job_cancel(locked: GenerationJob, *, error: str = "") -> None:
    """Move ``locked`` (held with ``select_for_update``) to cancelled, with ``error`` saying why
    when the job did not ask for it."""
    fields = {"error": error[:5000]} if error else {}
    GenerationJob.STATUS.move(locked, Status.CANCELLED, cancel_requested=True, eta_seconds=None,
                              finished_at=timezone.now(), **fields)


def job_goes_on(job_id: int) -> bool:
    """Whether a job that is running in one long stretch (fine-tuning) may go on: not when a
    cancel was requested, nor when its researcher may no longer start jobs or read its inputs
    (:func:`job_refusal`, the rule each batch's start applies), in which case the job is cancelled
    here with that reason. One read of the job with its researcher, the permission lookup and the
    few indexed reads of the inputs check for a researcher's job; the lock is taken only to cancel."""
    job = GenerationJob.objects.select_related("created_by").filter(pk=job_id).first()
    if job is None or job.cancel_requested:
        return False
    refusal = job_refusal(job)
    if not refusal:
        return True
    with transaction.atomic():
        locked = GenerationJob.objects.select_for_update().defer("item_ids").filter(pk=job_id).first()
        if locked is not None and locked.is_active:
            job_cancel(locked, error=refusal)
    return False


class StepProgress:
    """Progress of a job that runs ``total`` steps in one process (fine-tuning, Quark): each
    :meth:`report` stores the steps done, the rate since this process started (from step
    ``started_from``) and the ETA, touches the job (so beat sees it move), and says whether to go
    on (False once a cancel was requested). ``every``: report one step in that many (and the last).
    ``creator_checked``: a report also stops (and cancels) the job when its researcher may no
    longer start jobs (:func:`job_goes_on`), for a kind whose whole run is one batch."""

    def __init__(self, job_id: int, *, total: int, started_from: int = 0, every: int = 1,
                 creator_checked: bool = False):
        self.job_id, self.total, self.started_from, self.every = job_id, total, started_from, max(1, every)
        self.creator_checked = creator_checked
        self.began = time.monotonic()

    def report(self, step: int) -> bool:
        if step % self.every and step != self.total:
            return True
        rate = (step - self.started_from) / max(time.monotonic() - self.began, 1e-6)
        GenerationJob.objects.filter(pk=self.job_id).update(
            done=step, rate=rate, eta_seconds=eta_seconds(self.total - step, rate), updated_at=timezone.now())
        if self.creator_checked:
            return job_goes_on(self.job_id)
        return not cancel_requested(self.job_id)


# --- fail and finish ----------------------------------------------------------------------------
def generation_job_fail(*, job_id: int, error: str) -> None:
    """Record why a job stopped (shown in the admin); it can be resumed. ``error`` may quote what
    an endpoint sent: it is stored as :func:`lab.jsontext.storable_text`."""
    error = storable_text(error)
    with transaction.atomic():
        job = GenerationJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status in (Status.DONE, Status.CANCELLED):
            return
        GenerationJob.STATUS.move(job, Status.FAILED, error=error[:5000], eta_seconds=None,
                                  finished_at=timezone.now())


def mark_done(locked: GenerationJob, **changes) -> None:
    """Move ``locked`` (held with ``select_for_update`` by the caller) to DONE with ``changes``
    when it is running; a job cancelled or failed meanwhile keeps its status."""
    if locked.status == Status.RUNNING:
        GenerationJob.STATUS.move(locked, Status.DONE, finished_at=timezone.now(), eta_seconds=0.0, **changes)


def generation_job_finish(*, job_id: int, params: dict | None = None) -> GenerationJob:
    """A job that did all its work: ``params`` merged into its own and ``done`` set to ``total``
    (stored whatever its status: what it produced stands), then DONE if it is running."""
    with transaction.atomic():
        locked = GenerationJob.objects.select_for_update().defer("item_ids").get(pk=job_id)
        locked.params = {**locked.params, **(params or {})}
        locked.done = locked.total
        locked.save(update_fields=["params", "done", "updated_at"])
        mark_done(locked)
        return locked


# --- model folders ------------------------------------------------------------------------------
def slug(text: str) -> str:
    """``text`` as a folder name: runs of other characters than letters, digits, ``_.-`` become
    one ``-``; at most 100 characters; ``model`` when nothing is left."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:100] or "model"


def model_folder(output_name: str) -> Path:
    """Where a job's checkpoint named ``output_name`` is published: under ``RL_MODEL_DIR``.
    :func:`output_name_check` says whether a job may publish there."""
    return Path(settings.RL_MODEL_DIR) / slug(output_name)


# model_paths.TRAINING_FILE, what a training job writes into the checkpoint it publishes, also tells
# a job resumed after a crash between publishing and registering that the folder is its own
# (:func:`published_by`).


def published_by(folder: Path) -> int | None:
    """The id of the job that published ``folder`` (its :data:`TRAINING_FILE`'s ``job_id``), None
    when it has no readable record. Only jobs write into ``RL_MODEL_DIR``, so a record naming a
    job was written by that job."""
    try:
        job_id = json.loads((folder / TRAINING_FILE).read_text()).get("job_id")
    except (OSError, ValueError, AttributeError):
        return None
    return job_id if isinstance(job_id, int) else None


def _model_folder_refusal(name: str, folder: Path, *, replacing: RationaleSource | None, published: bool,
                          job_id: int | None = None) -> str:
    """Why a job may not publish its checkpoint named ``name`` to ``folder`` (``model_folder(name)``);
    empty when it may. See :func:`output_name_check`."""
    root, leaf = resolved_path(settings.RL_MODEL_DIR), slug(name)  # folder's name (a Path drops a "." leaf)
    where = f"output_name {name!r}: its model folder {leaf!r}"
    if (leaf.startswith(".") or leaf == QUARK_RUNS or leaf.endswith(SCRATCH_SUFFIXES)
            or any(path_within(p, root / leaf) for p in operator_model_paths())):
        return f"{where} is one the lab keeps for itself (hidden, Quark's runs, a scratch folder or an operator's model)"
    target = resolved_path(folder)
    if target.parent != root:
        return f"{where} does not sit directly in the model directory"
    claimed = RationaleSource.objects.exclude(model_name_or_path="")
    if replacing is not None:
        claimed = claimed.exclude(pk=replacing.pk)
    theirs = (local_model_path(p) for p in claimed.values_list("model_name_or_path", flat=True))
    taken = any(path is not None and path_within(path, target) for path in theirs)
    if not taken and not published and os.path.lexists(folder):
        # Only the folder of the very source being replaced may be replaced (the content rule said it may be),
        # or one this job published itself before a crash kept it from registering it.
        taken = ((replacing is None or local_model_path(replacing.model_name_or_path) != target)
                 and (job_id is None or published_by(folder) != job_id))
    if taken:
        return f"{where} is already taken by another model"
    return ""


def model_folder_publish(folder: Path, write: Callable[[Path], None], *, partial_name: str = "") -> Path:
    """Publish ``folder`` crash-safely: ``write`` makes and fills a fresh folder beside it
    (``partial_name``, by default ``<name>.partial``; one left by a crashed write is deleted
    first), as ``save_pretrained`` or ``shutil.copytree`` do, then the old folder
    is moved aside to ``<name>.old``, the new one renamed into place and the old one deleted.
    Each step is a rename, so a crash leaves the old or the new folder (under its name or
    ``.old``), never a half-written one under ``folder``'s name. Returns ``folder``."""
    partial = folder.with_name(partial_name or folder.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.parent.mkdir(parents=True, exist_ok=True)
    write(partial)
    old = folder.with_name(folder.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if folder.exists():
        folder.rename(old)
    partial.rename(folder)
    if old.exists():
        shutil.rmtree(old)
    return folder


# --- sources ------------------------------------------------------------------------------------
# What registering a checkpoint under an LM source's name changes of that source (its name and kind stay).
REGISTERED_FIELDS = frozenset({"backend", "model_name_or_path", "template", "demonstrations", "decoding", "seed",
                               "training", "description"})


def output_name_check(name: str, *, user, lock: bool = False, published: bool = False,
                      job_id: int | None = None) -> None:
    """A job acting for ``user`` (None: the operator; ``common.job_actor``) may register its
    checkpoint as ``name``: a new name, or an LM source that ``user`` may change under the shared
    content rule (:mod:`studies.services.content`). Registering replaces that source's model, and so
    what the studies listing it get from it next: a source that a study ``user`` may not change
    lists is not theirs to replace, nor is a source that is not an LM. Checked when the job is
    created and again before it publishes its checkpoint (the source may have been listed by
    another researcher's study meanwhile). ``lock``: as for ``content_change_check``.

    The checkpoint goes to the folder :func:`model_folder` names, whatever source it registers
    under, and publishing it deletes what was there: so the folder too must be the job's to write.
    It must sit directly in ``RL_MODEL_DIR`` (resolved); it may not be hidden (``.``, ``..``),
    Quark's runs, a publish's scratch folder (``*.partial``, ``*.old``) or hold an operator's model
    (:func:`operator_model_paths`); no other source's model may lie in it; and a folder that
    exists may only be the model folder of the very source being replaced. A folder held by a
    source ``user`` may not see gets the same answer as any taken folder. ``published``: the job
    has just written the folder itself (``model_source_register``), so its existence is no refusal;
    ``job_id``: the job about to publish, whose own folder (:func:`published_by`: a crash came
    between its publishing and registering, and it runs again) is no refusal either."""
    if not isinstance(name, str) or not name.strip():
        raise GenerationError("output_name: give the name to register the checkpoint under")
    existing = RationaleSource.objects.filter(name=name).first()
    if existing is not None and existing.kind != RationaleSource.Kind.LM:
        raise GenerationError(f"a non-LM rationale source is already named {name!r}: pick another output_name")
    refusal = _model_folder_refusal(name, model_folder(name), replacing=existing, published=published,
                                    job_id=job_id)
    if refusal:
        raise GenerationError(f"{refusal}: pick another output_name")
    if existing is None:
        return
    try:
        content_change_check(user=user, model=RationaleSource, changes={existing.pk: REGISTERED_FIELDS}, lock=lock)
    except ContentChangeRefused as exc:
        raise GenerationError(f"output_name {name!r} is an existing source this job may not replace: {exc}. "
                              "Pick another output_name") from exc


def model_source_register(*, name: str, backend: str, folder: Path, user, **fields) -> RationaleSource:
    """The LM rationale source ``name`` reading the checkpoint in ``folder`` with ``backend``,
    created or updated with ``fields`` (description, training record, decoding, template...) for
    ``user`` (:func:`output_name_check`, under a lock on the studies using it). The folder is kept
    relative to ``RL_MODEL_DIR`` (:func:`~studies.services.model_paths.model_path_stored`), so the
    source still names it once the database is restored beside a moved model directory."""
    with transaction.atomic():
        output_name_check(name, user=user, lock=True, published=True)
        source, _ = RationaleSource.objects.update_or_create(
            name=name, defaults={"kind": RationaleSource.Kind.LM, "backend": backend,
                                 "model_name_or_path": model_path_stored(folder), **fields})
    return source
