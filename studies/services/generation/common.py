"""What every job kind shares before and while it runs: prompt items, item selection, source
checks, decoding settings, the budget, the backend factory, and the handler interface with the
batch loop that item-by-item kinds run (how a job finishes, reports and fails is
:mod:`.lifecycle`'s)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from studies.lm import templates
from studies.lm.backends import Backend, BackendError, Budget, Decoding, TransientBackendError, build_backend
from studies.models import (
    YES_NO_CHOICES,
    Dataset,
    GeneralizationQuestion,
    GenerationFailure,
    GenerationJob,
    GenUPrediction,
    Item,
    Rationale,
    RationaleSource,
)
from studies.services.content import job_acts_for

from .errors import GenerationError
from .inputs import SOURCE_PARAMS
from .lifecycle import Status, eta_seconds, generation_job_fail, mark_done, smoothed_rate

DEFAULT_BATCH_SIZE = 16


def prompt_item(item: Item, dataset_name: str | None = None) -> templates.PromptItem:
    facts = item.metadata.get("facts") if isinstance(item.metadata, dict) else None
    facts_text = " ".join(facts) if isinstance(facts, list) else ""
    return templates.PromptItem(
        question=item.question, choices=tuple((c["label"], c["text"]) for c in item.choices),
        dataset=dataset_name or item.dataset.name, answer=item.gold_answer, rationale=item.gold_rationale,
        facts=facts_text or item.gold_rationale, key=item.external_id,
    )


def yes_no_prompt_item(text: str, *, dataset: str, answer: str | None = None) -> templates.PromptItem:
    return templates.PromptItem(question=text, choices=tuple((c["label"], c["text"]) for c in YES_NO_CHOICES),
                                dataset=dataset, answer=answer)


def ordered_item_ids(*, dataset: Dataset | None, split: str, item_ids: list[int] | None,
                     limit: int | None) -> list[int]:
    """The job's items in id order: the given ids (checked) or the dataset's split, first ``limit``."""
    if item_ids is not None:
        ids = sorted({int(i) for i in item_ids})
        found = Item.objects.filter(pk__in=ids)
        if dataset is not None:
            found = found.filter(dataset=dataset)
        found_ids = set(found.values_list("pk", flat=True))
        missing = [i for i in ids if i not in found_ids]
        if missing:
            where = f" in dataset {dataset.name!r}" if dataset else ""
            raise GenerationError(f"item ids {missing[:10]} do not exist{where}")
    else:
        if dataset is None:
            raise GenerationError("choose a dataset (and split) or give item ids")
        qs = Item.objects.filter(dataset=dataset)
        if split:
            qs = qs.filter(split=split)
        ids = list(qs.order_by("pk").values_list("pk", flat=True))
    if limit is not None:
        if limit < 1:
            raise GenerationError("limit must be at least 1")
        ids = ids[:limit]
    if not ids:
        raise GenerationError(
            f"no items to process in dataset {dataset.name if dataset else '?'!r} split {split or 'any'!r}"
        )
    return ids


def lm_source(source: RationaleSource | None, role: str,
              backends: tuple[str, ...] = ("seq2seq", "causal", "openai")) -> RationaleSource:
    """``source`` if it is a usable LM source with one of ``backends``; else a GenerationError."""
    if source is None:
        raise GenerationError(f"choose the {role}")
    if source.kind != RationaleSource.Kind.LM or not source.backend:
        raise GenerationError(
            f"{role} {source.name!r} is not a language model source: set kind to 'Language model' and a backend"
        )
    if source.backend not in backends:
        raise GenerationError(f"{role} {source.name!r} must use one of the backends {', '.join(backends)}; "
                              f"it uses {source.backend}")
    if source.backend in ("seq2seq", "causal") and not source.model_name_or_path:
        raise GenerationError(f"{role} {source.name!r} has no model name or path")
    if source.backend == "openai" and not (source.endpoint_url and source.model_name_or_path):
        raise GenerationError(f"{role} {source.name!r} needs an endpoint URL and a model name for the openai backend")
    return source


def decoding_from(data: dict | None, **defaults: Any) -> Decoding:
    try:
        return Decoding.from_json(data, **defaults)
    except (TypeError, ValueError) as exc:
        raise GenerationError(f"bad decoding settings {data!r}: {exc}") from exc


def job_budget(job: GenerationJob) -> Budget:
    usage = job.params.get("usage") or {}
    return Budget(max_requests=job.params.get("max_requests"), max_tokens=job.params.get("max_tokens"),
                  used_requests=int(usage.get("used_requests", 0)), used_tokens=int(usage.get("used_tokens", 0)))


def source_backend(source, *, budget: Budget | None = None, options: dict | None = None) -> Backend:
    """The backend of a rationale source or question generator record."""
    return build_backend(backend=source.backend, model_name_or_path=source.model_name_or_path,
                         endpoint_url=source.endpoint_url,
                         options=(source.decoding or {}) if options is None else options, budget=budget)


# --- handlers -----------------------------------------------------------------------------------
@dataclass
class Prepared:
    """What a handler settles when a job is created."""

    item_ids: list[int]
    params: dict
    total: int
    split: str = ""


@dataclass
class BatchOutput:
    """What a handler generated for one batch, written in one transaction."""

    units: int = 0
    rationales: list[Rationale] = field(default_factory=list)
    questions: list[GeneralizationQuestion] = field(default_factory=list)
    predictions: list[GenUPrediction] = field(default_factory=list)
    faithfulness: dict[int, dict] = field(default_factory=dict)  # rationale id -> probabilities
    failures: list[GenerationFailure] = field(default_factory=list)
    dropped: list = field(default_factory=list)  # DroppedQuestion rows (generalization question jobs)


class Handler:
    """One job kind: ``prepare`` checks a new job's inputs; ``run_batch`` does the next piece of
    work and says whether more remains (the task queues itself again while it does)."""

    kind: str = ""
    # The parameters a caller may give (``generation_job_create`` refuses any other key): the
    # handlers write their own keys (a cursor, budget usage, a Quark run's history and report)
    # into ``job.params`` as the job runs, and none of those may come from outside.
    params_accepted: frozenset[str] = frozenset()
    # The rows whose settings (where its prompts go and what comes back: ``inputs.SETTINGS_FIELDS``)
    # the kind reads as it runs, by role (``inputs.SETTINGS_ROLES``): ``generation_job_create``
    # records them (``inputs.job_settings_snapshot``) and the job stops if they change
    # (``inputs.job_settings_refusal``). By default the sources its params name by id (Gen-U's
    # answerers, Quark's genu reward), which every kind that names them reads live; a kind that
    # prompts its source or generator as it stands adds that role. Kinds that freeze what they read
    # into their params at creation (Quark's policy, faithfulness's task model) need nothing more.
    settings_read_live: tuple[str, ...] = SOURCE_PARAMS

    def prepare(self, *, source, generator, dataset, split: str, item_ids, limit, params: dict) -> Prepared:
        raise NotImplementedError

    def run_batch(self, job: GenerationJob) -> bool:
        raise NotImplementedError

    def before_save(self, job: GenerationJob) -> None:
        """What a new job records that needs its researcher (``job.created_by``; None: the
        operator's), called by ``generation_job_create`` before the job is saved: a
        ``GenerationError`` refuses the job. Nothing by default."""


class ItemHandler(Handler):
    """Kinds that process a frozen list of items in batches. Each batch

    1. picks the next ``batch_size`` items with no output yet and no failure recorded by this job
       (:meth:`next_batch`, which looks only from the job's cursor on),
    2. generates outside any transaction (the slow part; :meth:`generate`),
    3. writes the outputs and failures in one transaction holding the job row with
       ``select_for_update``, re-checking what exists (:meth:`store`), and updates done/total, rate
       and ETA.

    So a batch is all-or-nothing, a re-run or a worker killed mid-batch continues where it
    stopped, and two deliveries of the same task never write a duplicate."""

    # Items examined per query when looking for the next batch: the scan starts at the job's
    # cursor (every item before it is processed) instead of re-reading the whole job each batch.
    # The first window is one batch (usually all unprocessed: the cursor moved past the last
    # batch); each further window doubles, up to this, so a resumed job skips done items quickly.
    SCAN_WINDOW = 256

    def processed_among(self, job: GenerationJob, ids: list[int]) -> set[int]:
        """Of ``ids``, the items the job need not process (output stored or failure recorded)."""
        raise NotImplementedError

    def generate(self, job: GenerationJob, item_ids: list[int]) -> BatchOutput:
        raise NotImplementedError

    def processed_by(self, output: BatchOutput) -> set[int]:
        """Items that ``output``, once stored, certainly leaves processed (without a query);
        the batch's other items are checked in the database after the writes."""
        return set()

    def store(self, job: GenerationJob, output: BatchOutput) -> None:
        raise NotImplementedError

    def next_batch(self, job: GenerationJob) -> tuple[list[int], int, int]:
        """(the next ``batch_size`` unprocessed items in job order, the position of the first of
        them, how many items are known processed), scanning from ``params["cursor"]`` in windows."""
        ids = list(job.item_ids)
        start = min(int(job.params.get("cursor", 0)), len(ids))
        todo: list[int] = []
        first, known, pos = None, start, start
        size = job.batch_size
        while pos < len(ids) and len(todo) < job.batch_size:
            window = ids[pos:pos + size]
            size = min(2 * size, max(self.SCAN_WINDOW, job.batch_size))
            done = self.processed_among(job, window)
            for offset, item in enumerate(window):
                if item in done:
                    known += 1
                elif len(todo) < job.batch_size:
                    first = pos + offset if first is None else first
                    todo.append(item)
            pos += len(window)
        return todo, len(ids) if first is None else first, known

    def run_batch(self, job: GenerationJob) -> bool:
        item_ids, cursor, processed = self.next_batch(job)
        if not item_ids:
            with transaction.atomic():
                locked = GenerationJob.objects.select_for_update().defer("item_ids").get(pk=job.pk)
                mark_done(locked, done=min(processed, locked.total))
            return False

        started = time.monotonic()
        try:
            output = self.generate(job, item_ids)
        except TransientBackendError:
            # The requests spent before the endpoint gave out count against the job's budget: a
            # resumed job would otherwise start from the usage of its last stored batch and could
            # go past max_requests / max_tokens.
            _save_usage(job)
            raise  # the task records it; the job can be resumed
        except BackendError as exc:
            _save_usage(job)
            generation_job_fail(job_id=job.pk, error=str(exc))
            return False
        elapsed = max(time.monotonic() - started, 1e-6)

        with transaction.atomic():
            locked = GenerationJob.objects.select_for_update().defer("item_ids").get(pk=job.pk)
            self.store(locked, output)
            # Outputs are valid even when the job was cancelled meanwhile: keep them, stop after.
            newly = self.processed_by(output) & set(item_ids)
            unsure = [i for i in item_ids if i not in newly]
            if unsure:
                newly |= self.processed_among(locked, unsure)
            if len(newly) == len(item_ids):  # every item up to the batch's last is processed now
                cursor = job.item_ids.index(item_ids[-1], cursor) + 1
            locked.done = min(processed + len(newly), locked.total)
            if output.failures:  # failures are only written here, under this lock: else the count stands
                locked.failed = GenerationFailure.objects.filter(job=locked).values("item_id").distinct().count()
            locked.rate = smoothed_rate(locked.rate, output.units / elapsed)
            remaining = locked.total - locked.done
            locked.eta_seconds = eta_seconds(remaining, locked.rate)
            locked.params = {**locked.params, "cursor": cursor}
            if "usage" in job.params:
                locked.params["usage"] = job.params["usage"]
            locked.save(update_fields=["done", "failed", "rate", "eta_seconds", "params", "updated_at"])
            if remaining == 0:
                mark_done(locked)
            return locked.status == Status.RUNNING and not locked.cancel_requested


def _save_usage(job: GenerationJob) -> None:
    """Store the budget usage the batch's backend counted (``job.params["usage"]``, written by
    ``generate`` even when it raised) on the job, for a batch that stored nothing else."""
    if "usage" in job.params:
        with transaction.atomic():
            locked = GenerationJob.objects.select_for_update().get(pk=job.pk)
            locked.params = {**locked.params, "usage": job.params["usage"]}
            locked.save(update_fields=["params", "updated_at"])


def failed_item_ids(job: GenerationJob, ids: list[int]) -> set[int]:
    if not job.failed:  # kept under the job's row lock with every failure written: none yet
        return set()
    return set(GenerationFailure.objects.filter(job=job, item_id__in=ids).values_list("item_id", flat=True))


def job_actor(job: GenerationJob):
    """Who ``job`` stores what it makes for (``studies.services.content``): the researcher who
    started it; the operator (``None``) for a job a command started; for a job whose researcher's
    account was deleted meanwhile, nobody (an anonymous user, who may add nothing a study shows)."""
    return job_acts_for(created_by=job.created_by, by_operator=job.by_operator)


# Why a job's output was not stored: it would change what a study that the job's researcher may not
# change shows or scores (the not-yours clause of studies.services.content). TO_ADD: a new row that
# study would show (content_added_refusals); TO_CHANGE: a change to a row it uses, or an addition
# its scores would read (content_change_problems).
NOT_YOURS_TO_ADD = ("not stored: a study you may not change would show this {what}; only that study's "
                    "researchers may add to what it shows")
NOT_YOURS_TO_CHANGE = ("not stored: a study you may not change uses this {what}; only that study's "
                       "researchers may change what it shows or what its scores read")


def store_failures(job: GenerationJob, failures: list[GenerationFailure]) -> None:
    # (job, item, unit) is unique: a failure another delivery already stored is skipped.
    GenerationFailure.objects.bulk_create(failures, ignore_conflicts=True)
