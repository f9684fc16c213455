"""LM jobs from the outside: create (each kind's handler checks its inputs), queue, run batch by
batch, cancel, resume, resume the stalled ones (how a running job reports, finishes and fails is
:mod:`.lifecycle`'s). One handler per job kind:

- ``rationales``: :class:`~.rationales.RationaleHandler`
- ``generalization_questions``: :class:`~.questions.QuestionHandler`
- ``genu_answers``: :class:`~.genu.GenUHandler`
- ``faithfulness``: :class:`~.faithfulness.FaithfulnessHandler`
- ``finetune``: :class:`~.finetune.FinetuneHandler`
- ``quark``: :class:`~.quark.QuarkHandler` (a batch is ``checkpoint_every`` training steps)

A job freezes its item ids at creation. The worker calls :func:`generation_job_run_batch` until it
returns False (see :class:`~.common.ItemHandler` for what one batch does).

A job has one live chain of messages: each message that queues it (:func:`generation_job_create`,
:func:`generation_job_resume`, :func:`generation_jobs_resume_stalled`) draws the job's chain token
(``GenerationJob.chain``) anew and carries it, a batch that hands on to the next advances the token
and the next message carries the new one (:func:`_hand_on`), and a message whose token is no longer
the job's does nothing (:func:`generation_job_run_message`). So a message sent again for a job whose
first one only waits in line (the ``lm`` worker busy or down) leaves one chain, not two running side
by side, and so does a message delivered again after its batch queued the next (tasks are
``acks_late``: a worker that dies between queueing the next message and acking its own has it
redelivered); one delivered again because its worker died mid-batch still carries the job's token
and runs the batch again (items stored are skipped).

Jobs are queued by the task's name (:data:`RUN_TASK`), not by importing ``studies.tasks``: the
tasks call these services, so importing them back would make an import cycle. ``studies.apps``
imports the tasks when Django starts, so the name resolves to the task in every process (and runs
it inline where ``CELERY_TASK_ALWAYS_EAGER`` is set).
"""
from __future__ import annotations

import json
import traceback
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from lab.dblocks import transaction_lock
from studies.lm.backends import TransientBackendError
from studies.models import Dataset, GenerationJob, Item, QuestionGenerator, RationaleSource
from studies.selectors import (
    CHANGE,
    JOB_START_PERMISSION,
    generation_jobs_for_user,
)

from .common import (
    DEFAULT_BATCH_SIZE,
    MAX_BATCH_SIZE,
    Handler,
    budget_caps_check,
    budget_rows,
    operator_key_budget,
    template_check,
)
from .errors import GenerationError
from .faithfulness import FaithfulnessHandler
from .finetune import FinetuneHandler
from .genu import GenUHandler
from .inputs import (
    SETTINGS_SNAPSHOT,
    generation_job_inputs_check,
    generation_job_inputs_refusal,
    job_settings_snapshot,
    preparing_done,
)
from .lifecycle import (
    Status,
    creator_refusal,
    generation_job_fail,
    job_cancel,
    job_refusal,
    output_name_check,
)
from .quark import QuarkHandler
from .questions import QuestionHandler
from .rationales import RationaleHandler

HANDLERS: dict[str, Handler] = {
    handler.kind: handler
    for handler in (RationaleHandler(), QuestionHandler(), GenUHandler(), FaithfulnessHandler(), FinetuneHandler(),
                    QuarkHandler())
}
# The kinds that prompt their source with its own template (a rationale job's source, a Quark job's
# policy): a template that cannot be used is refused as the job is created (:func:`.common.template_check`).
TEMPLATE_KINDS = (GenerationJob.Kind.RATIONALES, GenerationJob.Kind.QUARK)
# The name of the lock that serialises the operator's job requests (``_active_twin``,
# ``lab.dblocks.transaction_lock``), which nothing else in the app takes.
OPERATOR_JOB_CREATE_LOCK = "studies.operator-job-create"


# Starts of one batch: a batch that kills its worker each time (out of memory) is redelivered at
# once (``reject_on_worker_lost``) and queued again by beat, and would be started for ever.
MAX_BATCH_STARTS = 3

RUN_TASK = "studies.tasks.run_generation_job"  # its default name, which CELERY_TASK_ROUTES names too


def generation_job_start_check(*, user) -> None:
    """Refuse ``user`` (None: the operator, never refused) unless they may start LM jobs
    (``studies.add_generationjob``; an inactive account holds no permission), with
    ``GenerationError``. :func:`generation_job_create` calls it, so the admin's actions, the API
    and any other caller get one answer; a job whose researcher lost the right stops when it next
    runs (:func:`.lifecycle.creator_refusal`), a fine-tuning job (one long batch) while it trains
    and again before it writes its checkpoint (:func:`.lifecycle.job_goes_on`)."""
    if user is not None and not user.has_perm(JOB_START_PERMISSION):
        raise GenerationError(f"you may not start LM jobs (it needs the permission {JOB_START_PERMISSION}).")




def _enqueue(job_id: int, chain: int) -> None:
    result = current_app.signature(RUN_TASK, args=[job_id, chain], queue="lm").apply_async()
    GenerationJob.objects.filter(pk=job_id).update(celery_task_id=result.id or "")


def _queue(job_id: int, *, enqueue: bool) -> int:
    """Make a new chain the job's one live chain: draw its token (``GenerationJob.chain``) anew and
    touch the job, then (after commit, where ``enqueue``) send the message that carries it. Any
    message sent before, still waiting or redelivered, now does nothing when it arrives
    (:func:`generation_job_run_message`). Call inside a transaction; returns the token (a caller
    that runs the job itself, ``enqueue=False``, may pass it on)."""
    GenerationJob.objects.filter(pk=job_id).update(chain=F("chain") + 1, updated_at=timezone.now())
    chain = GenerationJob.objects.filter(pk=job_id).values_list("chain", flat=True).get()
    if enqueue:
        transaction.on_commit(lambda: _enqueue(job_id, chain))
    return chain


@transaction.atomic
def generation_job_create(
    *,
    kind: str,
    source: RationaleSource | None = None,
    generator: QuestionGenerator | None = None,
    dataset: Dataset | None = None,
    split: str = "",
    item_ids: list[int] | None = None,
    limit: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    params: dict | None = None,
    user=None,
    enqueue: bool = True,
) -> GenerationJob:
    """Create a job and (after commit) queue it on the ``lm`` queue.

    ``batch_size``: the items each batch takes, 1 to :data:`.common.MAX_BATCH_SIZE` (the bound the API
    and the admin's forms offer too); any other is refused.

    ``params`` per kind: rationales, questions and Gen-U answers take ``max_requests`` /
    ``max_tokens`` (budget cap for the openai backend; where its requests carry the operator's key,
    at most the operator's ``RL_OPENAI_KEY_MAX_*_PER_JOB``, which a job setting none gets:
    :func:`.common.operator_key_budget`); Gen-U answers take ``answerer_i`` and ``answerer_ir`` (ids of LM
    sources of any backend) and ``only_valid`` (default True: ``genu.VALIDATED_ONLY_READING``,
    validated questions only, our reading of SPEC section 4; False is an explicit choice to include
    unvalidated ones); faithfulness takes
    ``task_model`` and ``task_backend`` (see :mod:`.faithfulness`); fine-tuning takes what
    :func:`.finetune.finetune_params` accepts; Quark training takes what
    :func:`.quark.quark_params` accepts (``source`` is the policy, or
    ``params["policy_path"]`` a checkpoint folder). Any other key is refused (each handler's
    ``params_accepted``): the keys a job writes as it runs (cursor, usage, history, report, best,
    checkpoint_step, ...) never come from the caller. The job records the settings of the source,
    generator or answerers its kind prompts as it runs (``params["settings_snapshot"]``:
    :func:`.inputs.job_settings_snapshot`) and is cancelled if they are changed before it ends.

    ``user``: who starts the job, refused unless they may start jobs
    (:func:`generation_job_start_check`) and read its source or question generator, dataset, items
    and the sources its params name (:func:`generation_job_inputs_check`); None: the operator (a
    management command).

    Asked again while the same principal's job with the same inputs is queued or running (a
    retried request, a double click), it returns that job with ``already_queued`` True (False on a
    job made here) and starts nothing (:func:`_active_twin`); a job run in this process
    (``enqueue=False``) is always made."""
    generation_job_start_check(user=user)
    handler = HANDLERS.get(kind)
    if handler is None:
        raise GenerationError(f"unknown job kind {kind!r}")
    if batch_size < 1:
        raise GenerationError("batch size must be at least 1")
    if batch_size > MAX_BATCH_SIZE:
        raise GenerationError(f"batch size must be at most {MAX_BATCH_SIZE}")
    if params is not None and not isinstance(params, dict):
        raise GenerationError("params must be an object of parameters")
    unknown = sorted(set(params or {}) - handler.params_accepted)
    if unknown:
        raise GenerationError(
            f"{', '.join(f'params.{key}' for key in unknown)}: not a parameter of {kind} jobs (they take "
            f"{', '.join(sorted(handler.params_accepted)) or 'none'})")
    budget_caps_check(params)
    generation_job_inputs_check(user=user, source=source, dataset=dataset, item_ids=item_ids, params=params,
                                generator=generator)
    if kind in TEMPLATE_KINDS and source is not None:  # once the source is known to be the user's to read
        try:
            template_check(source, "policy" if kind == GenerationJob.Kind.QUARK else "rationale source")
        except GenerationError:
            preparing_done()  # refused: no prepare follows (generation_job_inputs_check set it for one)
            raise
    if dataset is None and item_ids:
        first = Item.objects.filter(pk=item_ids[0]).select_related("dataset").first()
        dataset = first.dataset if first else None
    prepared = handler.prepare(source=source, generator=generator, dataset=dataset, split=split, item_ids=item_ids,
                               limit=limit, params=dict(params or {}))
    # A job whose requests carry the operator's OpenAI key is bounded by the operator's caps per job
    # (RL_OPENAI_KEY_MAX_*_PER_JOB): recorded in its params when it sets none, refused when it asks for more.
    operator_key_budget(prepared.params, budget_rows(handler, source=source, generator=generator,
                                                     params=prepared.params))
    researcher = user if getattr(user, "is_authenticated", False) else None  # none: the operator
    if "output_name" in prepared.params:  # fine-tuning and Quark register their checkpoint under it
        output_name_check(prepared.params["output_name"], user=researcher)
    # The settings of the rows the kind prompts as it runs, as they are now: the job stops if
    # anyone changes them while it waits or runs (generation_job_inputs_refusal).
    prepared.params[SETTINGS_SNAPSHOT] = job_settings_snapshot(
        roles=handler.settings_read_live, source=source, generator=generator, params=prepared.params)
    job = GenerationJob(
        kind=kind, source=source, generator=generator, dataset=dataset, split=prepared.split,
        item_ids=prepared.item_ids, batch_size=batch_size, params=prepared.params, total=prepared.total,
        created_by=researcher, by_operator=researcher is None,
    )
    handler.before_save(job)
    job.full_clean()
    if enqueue:
        twin = _active_twin(job, handler)
        if twin is not None:
            twin.already_queued = True
            return twin
    job.save()
    job.chain = _queue(job.pk, enqueue=enqueue)
    job.already_queued = False
    return job


def already_queued_message(job: GenerationJob) -> str:
    """What a request that got an active twin back (``job.already_queued``) is told."""
    return (f"Job {job.pk} with the same inputs is already {job.get_status_display().lower()}; no second job "
            "was started. Cancel it first to start it again.")


def _json_value(value):
    """``value`` as a JSONField gives it back (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def _active_twin(job: GenerationJob, handler: Handler) -> GenerationJob | None:
    """A job asked for again is not started twice: the newest job of ``job``'s principal (its
    researcher; the operator's for an operator's job) that is still queued or running, not being
    cancelled, has moved within ``RL_LM_STALL_SECONDS`` (a fine-tuning job whose message was lost
    runs again only when someone resumes it: it does not keep the same request from starting a new
    one), and has the same kind, source, generator, dataset, split, items, batch size and params
    (those the caller gave and those creating the job derived, as the kind tells requests apart:
    ``Handler.request_params``, which leaves out a question job's drawn demonstrations, as long as
    they could still be drawn: ``Handler.twin_prompts_allowed``; not what a running job writes as it
    goes, its cursor or usage), or None. A retried request (a lost 202, a double
    click) would otherwise generate, spend an OpenAI budget or train a checkpoint twice. The
    requesting user's row is locked first, so two such requests at once make one job; an
    operator's job (a management command) has no user row, so the operator's requests take a
    transaction-scoped advisory lock of their own instead (PostgreSQL; SQLite serialises the writes).
    Call inside the creating transaction, with ``job`` not yet saved."""
    if job.created_by_id is not None:  # no_key: rows that point at the user (tokens, imports) are not held up
        get_user_model().objects.select_for_update(no_key=True).filter(pk=job.created_by_id).exists()
    else:  # released with the creating transaction
        transaction_lock(OPERATOR_JOB_CREATE_LOCK)
    params = _json_value(job.params)
    wanted = handler.request_params(params)
    item_ids = _json_value(job.item_ids)
    moved_since = timezone.now() - timedelta(seconds=settings.RL_LM_STALL_SECONDS)
    for other in (GenerationJob.objects
                  .filter(kind=job.kind, source_id=job.source_id, generator_id=job.generator_id,
                          dataset_id=job.dataset_id, split=job.split, batch_size=job.batch_size,
                          created_by_id=job.created_by_id, by_operator=job.by_operator,
                          status__in=[Status.QUEUED, Status.RUNNING], cancel_requested=False,
                          updated_at__gte=moved_since)
                  .order_by("-created_at", "-pk")):
        given = {k: v for k, v in other.params.items() if k in params or k in handler.params_accepted}
        if (other.item_ids == item_ids and handler.request_params(given) == wanted
                and handler.twin_prompts_allowed(job, other)):
            return other
    return None


def _job_to_change(*, user, job: GenerationJob, verb: str) -> GenerationJob:
    """The job, locked, if ``user`` may cancel or resume it (``generation_jobs_for_user``, access
    CHANGE); a GenerationError otherwise, the same for a job that does not exist. Call inside a
    transaction."""
    locked = (generation_jobs_for_user(user=user, access=CHANGE).select_for_update()
              .filter(pk=job.pk).first())
    if locked is None:
        raise GenerationError(f"job {job.pk}: not found or not yours to {verb}")
    return locked


@transaction.atomic
def generation_job_cancel(*, job: GenerationJob, user) -> GenerationJob:
    """Ask a job to stop, for ``user`` (who must be allowed to: their own job while they may start
    jobs, any job with ``studies.change_generationjob``). It stops at the end of its current
    batch; a queued job never starts."""
    job = _job_to_change(user=user, job=job, verb="cancel")
    if not job.is_active:
        raise GenerationError(f"job {job.pk} is {job.get_status_display().lower()}: only queued or running jobs can be cancelled")
    job_cancel(job)
    return job


@transaction.atomic
def generation_job_resume(*, job: GenerationJob, user, enqueue: bool = True) -> GenerationJob:
    """Queue a failed, cancelled or stalled job again, for ``user`` (allowed as for
    :func:`generation_job_cancel`); it continues where it stopped. A job whose researcher may no
    longer start jobs, or no longer read what it reads (:func:`generation_job_inputs_refusal`), is
    not resumed (it would stop again when it runs): start a new one."""
    job = _job_to_change(user=user, job=job, verb="resume")
    if job.status == Status.DONE:
        raise GenerationError(f"job {job.pk} is done: nothing to resume")
    if creator_refusal(job):
        raise GenerationError(f"job {job.pk} cannot be resumed: {job.created_by} who started it may no longer "
                              "start LM jobs; start a new job instead")
    refusal = generation_job_inputs_refusal(job) or HANDLERS[job.kind].resume_refusal(job, user=user)
    if refusal:
        raise GenerationError(f"job {job.pk} cannot be resumed: {refusal.removeprefix('Cancelled: ')}")
    # The cursor (items before it are done) is forgotten: a resumed job looks at every item once more.
    job.params = {k: v for k, v in job.params.items() if k != "cursor"}
    GenerationJob.STATUS.move(job, Status.QUEUED, cancel_requested=False, error="", finished_at=None, params=job.params,
                              batch_starts=0)
    # A new chain: a message of the old one (a frozen worker's next batch) does nothing when it arrives.
    job.chain = _queue(job.pk, enqueue=enqueue)
    return job


@transaction.atomic
def generation_jobs_resume_stalled(*, stalled_after: timedelta, enqueue: bool = True) -> list[int]:
    """Queue again the batched jobs that say they are queued or running but have not moved for
    ``stalled_after``: their message may have been lost with a killed worker (the filesystem broker
    has no redelivery; Redis redelivers only after its visibility timeout). Beat runs this every
    minute, so a job continues soon after a worker comes back. A batch that is merely slow is not
    taken for a stalled one: item kinds touch their job while a batch generates (the heartbeat of
    :class:`~.common.ItemHandler`).

    A queued job may only be waiting in line (the ``lm`` worker busy with a long job, or down), its
    message not lost: the new message starts a new chain (:func:`_queue`), so when the old message
    arrives it does nothing, and the job runs as one chain however often it was sent again. If a
    worker froze past ``stalled_after`` in a batch and wakes while the new chain runs, both may send
    the same items' requests once (that one batch at most: the woken batch finds its token gone and
    queues no next message, :func:`_hand_on`), but batches skip stored items and write under the job's row lock, and each adds what
    it spent to the job's usage, which every copy's budget cap reads (:class:`~.common.BatchUsage`).
    Fine-tuning is one long batch and is left to the admin's "Resume job". A Quark batch
    (``checkpoint_every`` steps) touches its job every step, and a woken copy of one is harmless:
    the batch that finds the checkpoint moved on discards its work and ends its chain.

    A stalled job whose researcher may no longer start jobs or read its inputs is cancelled with
    that reason instead (:func:`.lifecycle.job_refusal`). Returns the ids of the jobs queued again."""
    cutoff = timezone.now() - stalled_after
    stalled = (GenerationJob.objects.filter(status__in=[Status.QUEUED, Status.RUNNING], updated_at__lt=cutoff)
               .exclude(kind=GenerationJob.Kind.FINETUNE).select_related("created_by").defer("item_ids"))
    ids = []
    for job in stalled:
        refusal = job_refusal(job)
        if not refusal:
            ids.append(job.pk)
            continue
        locked = GenerationJob.objects.select_for_update().defer("item_ids").filter(pk=job.pk).first()
        if locked is not None and locked.is_active:
            job_cancel(locked, error=refusal)
    for job_id in ids:
        # A new chain, and a touch so the next beat tick does not queue the job again while this message waits.
        _queue(job_id, enqueue=enqueue)
    return ids


def _start(job_id: int, chain: int | None = None) -> GenerationJob | None:
    """The job, locked while its batch starts, or None when the batch is not to run: the message's
    ``chain`` is no longer the job's (nothing is done), or the job ended, was asked to stop or may
    not go on for its researcher. A message without a token (queued before tokens existed, or a
    caller running the job itself) makes its own chain the job's: the token is drawn anew here."""
    with transaction.atomic():
        job = GenerationJob.objects.select_for_update().get(pk=job_id)
        if chain is not None and chain != job.chain:
            return None  # a newer message carries the job's chain: this one's ends here
        if job.status in (Status.DONE, Status.FAILED, Status.CANCELLED):
            return None
        if job.cancel_requested:
            GenerationJob.STATUS.move(job, Status.CANCELLED)
            return None
        refusal = job_refusal(job)
        if refusal:  # its researcher lost the right to start jobs or to read its inputs: no further for them
            job_cancel(job, error=refusal)
            return None
        if job.batch_starts >= MAX_BATCH_STARTS:  # each start of this batch killed its worker
            generation_job_fail(job_id=job.pk, error=(
                f"the LM worker stopped {job.batch_starts} times in the same batch (killed: out of memory, or "
                "restarted?); not started again. Lower the job's batch size (or free memory on the worker) and "
                "resume it."))
            return None
        GenerationJob.objects.filter(pk=job.pk).update(batch_starts=F("batch_starts") + 1)
        if chain is None:
            GenerationJob.objects.filter(pk=job.pk).update(chain=F("chain") + 1)
            job.chain += 1
        if job.status == Status.QUEUED:
            GenerationJob.STATUS.move(job, Status.RUNNING, started_at=job.started_at or timezone.now())
        return job


def _hand_on(job_id: int, chain: int) -> int | None:
    """Advance the job's chain token from ``chain`` (the token the batch that just ran was started
    with) and return the new one, which the next message carries; None, and no next message, when
    the token moved meanwhile (the job was queued again, or another copy of this message handed on
    first). The token moves when the batch hands on, not when it starts: a message delivered again
    after this (its worker died before acking it) finds a newer token and does nothing, while one
    delivered again because its worker died mid-batch still finds its own and runs the batch again,
    as ``acks_late`` and ``reject_on_worker_lost`` mean it to (a fine-tuning job, which the stalled-job
    check leaves alone, has no other way back). One conditional UPDATE, so of two copies only one
    hands on."""
    moved = GenerationJob.objects.filter(pk=job_id, chain=chain).update(chain=F("chain") + 1, batch_starts=0)
    return chain + 1 if moved else None


def generation_job_run_batch(*, job_id: int) -> bool:
    """Process the job's next batch. Returns True while work remains (the task re-queues itself).

    Idempotent: a finished, failed or cancelled job is left alone; items with outputs are skipped.
    Generation happens outside any transaction; the writes of one batch are atomic. Any exception
    of the batch marks the job failed with its error (then propagates), whoever runs it: the lm
    worker, ``manage.py quark_train`` or ``finetune_t5`` in the foreground, a test; a transient
    backend error says to resume once the endpoint answers. A caller running the job itself runs
    it as its one chain (:func:`generation_job_run_message` without a token)."""
    return generation_job_run_message(job_id=job_id) is not None


def generation_job_run_message(*, job_id: int, chain: int | None = None) -> int | None:
    """Run the batch one message of the job asks for (:func:`generation_job_run_batch`); returns
    the chain token its next message carries while work remains (the job's token, advanced:
    :func:`_hand_on`), None when the chain ends here. ``chain``: the message's token. One that is no
    longer the job's (a newer message was sent meanwhile, or this message was delivered again after
    its batch handed on) ends at once: no batch, no request, no next message. None (a message queued
    before tokens existed): the batch runs, and its chain becomes the job's with a token drawn anew."""
    job = _start(job_id, chain)
    if job is None:
        return None
    try:
        more = HANDLERS[job.kind].run_batch(job)
    except TransientBackendError as exc:
        generation_job_fail(job_id=job_id, error=f"{exc}; resume the job when the endpoint answers again")
        raise
    except Exception as exc:
        generation_job_fail(job_id=job_id, error=describe_exception(exc))
        raise
    return _hand_on(job_id, job.chain) if more else None


def generation_job_run(*, job_id: int) -> GenerationJob:
    """Run a job to the end in this process (management commands, tests, the eager mode)."""
    while generation_job_run_batch(job_id=job_id):
        pass
    return GenerationJob.objects.get(pk=job_id)


def describe_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
