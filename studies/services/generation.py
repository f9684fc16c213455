"""LM generation jobs: rationales, generalization questions, Gen-U answers (and fine-tuning,
whose work lives in :mod:`studies.services.finetune`).

A job freezes its item ids at creation. The worker calls :func:`generation_job_run_batch` until it
returns False; each call

1. picks the next ``batch_size`` items that have no output yet (a Rationale of the source, a
   question of the generator, both Gen-U predictions) and no failure recorded by this job,
2. generates outside any transaction (the slow part),
3. writes outputs and :class:`GenerationFailure` rows in one transaction, holding the job row
   with ``select_for_update`` and re-checking what exists, and updates done/total, rate and ETA.

So a batch is all-or-nothing, a re-run or a worker killed mid-batch continues where it stopped,
and two deliveries of the same task never write a duplicate.
"""
from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from studies.lm import templates
from studies.lm.backends import Backend, BackendError, Budget, Decoding, TransientBackendError, build_backend
from studies.lm.parsing import (
    ParseFailure,
    parse_causal_rationale,
    parse_generalization,
    parse_t5_answer,
    parse_t5_rationale,
)
from studies.lm.questions import Candidate, filter_questions
from studies.models import (
    YES_NO_CHOICES,
    Dataset,
    GeneralizationQuestion,
    GenerationFailure,
    GenerationJob,
    GenUPrediction,
    Item,
    QuestionGenerator,
    Rationale,
    RationaleSource,
)

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 16
RATIONALE_DECODING_DEFAULTS = {"do_sample": False, "max_new_tokens": 100, "num_return_sequences": 1}
ANSWER_DECODING = Decoding(do_sample=False, max_new_tokens=8, num_return_sequences=1)
QUESTION_STOP = ["\n\n"]


class GenerationError(Exception):
    """A job that cannot be created or run as asked; the message says what to change."""


Job = GenerationJob
Kind = GenerationJob.Kind
Status = GenerationJob.Status


# --- helpers --------------------------------------------------------------------------------
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


def _ordered_item_ids(*, dataset: Dataset | None, split: str, item_ids: list[int] | None,
                      limit: int | None) -> list[int]:
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


def _lm_source(source: RationaleSource | None, role: str) -> RationaleSource:
    if source is None:
        raise GenerationError(f"choose the {role}")
    if source.kind != RationaleSource.Kind.LM or not source.backend:
        raise GenerationError(
            f"{role} {source.name!r} is not a language model source: set kind to 'Language model' and a backend"
        )
    if source.backend in ("seq2seq", "causal") and not source.model_name_or_path:
        raise GenerationError(f"{role} {source.name!r} has no model name or path")
    if source.backend == "openai" and not (source.endpoint_url and source.model_name_or_path):
        raise GenerationError(f"{role} {source.name!r} needs an endpoint URL and a model name for the openai backend")
    return source


def _decoding(data: dict | None, **defaults: Any) -> Decoding:
    try:
        return Decoding.from_json(data, **defaults)
    except (TypeError, ValueError) as exc:
        raise GenerationError(f"bad decoding settings {data!r}: {exc}") from exc


def _budget(job: GenerationJob) -> Budget:
    usage = job.params.get("usage") or {}
    return Budget(max_requests=job.params.get("max_requests"), max_tokens=job.params.get("max_tokens"),
                  used_requests=int(usage.get("used_requests", 0)), used_tokens=int(usage.get("used_tokens", 0)))


def _backend_for(*, backend: str, model: str, endpoint_url: str, options: dict, budget: Budget | None) -> Backend:
    return build_backend(backend=backend, model_name_or_path=model, endpoint_url=endpoint_url,
                         options=options, budget=budget)


def _enqueue(job_id: int) -> None:
    from studies.tasks import run_generation_job

    result = run_generation_job.apply_async(args=[job_id], queue="lm")
    GenerationJob.objects.filter(pk=job_id).update(celery_task_id=result.id or "")


# --- creation -------------------------------------------------------------------------------
def _train_demonstrations(dataset: Dataset, *, seed: int, exclude_split: str = "") -> list[dict]:
    pool_items = list(Item.objects.filter(dataset=dataset, split="train").exclude(gold_rationale="").order_by("pk"))
    pool = [prompt_item(i, dataset.name) for i in pool_items]
    try:
        demos = templates.draw_demonstrations(pool, seed=seed)
    except ValueError as exc:
        raise GenerationError(
            f"dataset {dataset.name!r}: {exc}. Import its train split, or write six demonstrations "
            "on the rationale source"
        ) from exc
    return [d.as_json() for d in demos]


def _generator_demonstrations(generator: QuestionGenerator, dataset: Dataset) -> dict:
    """The generator's demonstrations per type; types without any are drawn (seeded) from the
    dataset's train-split generalization questions and saved on the generator."""
    demos = dict(generator.demonstrations or {})
    changed = False
    for index, qtype in enumerate(templates.QUESTION_TYPES):
        if demos.get(qtype):
            continue
        pool = list(
            GeneralizationQuestion.objects.filter(item__dataset=dataset, item__split="train", qtype=qtype)
            .exclude(validation_status=GeneralizationQuestion.Validation.INVALID)
            .select_related("item").order_by("item_id", "id")
        )
        by_item: dict[int, GeneralizationQuestion] = {}
        for question in pool:
            by_item.setdefault(question.item_id, question)
        candidates = list(by_item.values())
        if len(candidates) < templates.N_DEMONSTRATIONS:
            raise GenerationError(
                f"question generator {generator.name!r} has no demonstrations for type {qtype!r} and dataset "
                f"{dataset.name!r} has only {len(candidates)} train items with {qtype} questions to draw six from: "
                "add demonstrations in the generator's admin page or import the train generalization questions"
            )
        import random

        chosen = random.Random(generator.seed + index).sample(candidates, templates.N_DEMONSTRATIONS)
        demos[qtype] = [
            templates.QuestionDemo(
                question=q.item.question, output=q.text, answer=templates.bool_word(q.answer),
                context=prompt_item(q.item, dataset.name).facts,
            ).as_json()
            for q in chosen
        ]
        changed = True
    if changed:
        generator.demonstrations = demos
        generator.save(update_fields=["demonstrations", "updated_at"])
    return demos


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

    ``params`` per kind: rationales and questions take ``max_requests`` / ``max_tokens`` (budget
    cap for the openai backend); Gen-U answers take ``answerer_i`` and ``answerer_ir`` (ids of
    seq2seq sources) and ``only_valid`` (default False: every question not marked invalid);
    fine-tuning takes what :func:`studies.services.finetune.finetune_params` accepts."""
    params = dict(params or {})
    if batch_size < 1:
        raise GenerationError("batch size must be at least 1")
    if dataset is None and item_ids:
        first = Item.objects.filter(pk=item_ids[0]).select_related("dataset").first()
        dataset = first.dataset if first else None

    if kind == Kind.RATIONALES:
        _lm_source(source, "rationale source")
        ids = _ordered_item_ids(dataset=dataset, split=split, item_ids=item_ids, limit=limit)
        if source.backend in ("causal", "openai"):
            if source.demonstrations:
                params["demonstrations"] = list(source.demonstrations)
            else:
                params["demonstrations"] = _train_demonstrations(dataset, seed=source.seed)
        _decoding(source.decoding, **RATIONALE_DECODING_DEFAULTS)
    elif kind == Kind.GENERALIZATION_QUESTIONS:
        if generator is None:
            raise GenerationError("choose a question generator")
        if dataset is None:
            raise GenerationError("choose a dataset")
        if not dataset.is_yes_no:
            raise GenerationError(
                f"dataset {dataset.name!r} is multiple choice: generalization questions are yes/no (True/False) "
                "questions, generate them for a yes/no dataset"
            )
        if generator.backend == "openai" and not generator.endpoint_url:
            raise GenerationError(f"generator {generator.name!r} needs an endpoint URL for the openai backend")
        ids = _ordered_item_ids(dataset=dataset, split=split, item_ids=item_ids, limit=limit)
        _generator_demonstrations(generator, dataset)
        _decoding(generator.decoding)
    elif kind == Kind.GENU_ANSWERS:
        _lm_source(source, "rationale source")
        answerers = {}
        for role in ("answerer_i", "answerer_ir"):
            answerer = RationaleSource.objects.filter(pk=params.get(role)).first()
            _lm_source(answerer, f"{role} (F^I)" if role == "answerer_i" else f"{role} (F^IR)")
            if answerer.backend != "seq2seq":
                raise GenerationError(f"{role} {answerer.name!r} must be a seq2seq (T5) source; it is {answerer.backend}")
            answerers[role] = answerer.pk
        params.update(answerers)
        ids = _ordered_item_ids(dataset=dataset, split=split, item_ids=item_ids, limit=None)
        with_rationale = set(Rationale.objects.filter(source=source, item_id__in=ids).values_list("item_id", flat=True))
        questions = GeneralizationQuestion.objects.filter(item_id__in=with_rationale).exclude(
            validation_status=GeneralizationQuestion.Validation.INVALID)
        if params.get("only_valid"):
            questions = questions.filter(validation_status=GeneralizationQuestion.Validation.VALID)
        with_questions = set(questions.values_list("item_id", flat=True))
        ids = [i for i in ids if i in with_questions][: limit or None]
        if not ids:
            raise GenerationError(
                f"no item has both a rationale from {source.name!r} and generalization questions to answer"
            )
    elif kind == Kind.FINETUNE:
        from studies.services.finetune import finetune_params

        if dataset is None:
            raise GenerationError("choose the dataset to fine-tune on")
        params = finetune_params(dataset=dataset, split=split or "train", params=params)
        ids = []
        split = split or "train"
    else:
        raise GenerationError(f"unknown job kind {kind!r}")

    job = GenerationJob(
        kind=kind, source=source, generator=generator, dataset=dataset, split=split, item_ids=ids,
        batch_size=batch_size, params=params, total=len(ids) if kind != Kind.FINETUNE else int(params["steps"]),
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )
    job.full_clean()
    job.save()
    if enqueue:
        transaction.on_commit(lambda: _enqueue(job.pk))
    return job


@transaction.atomic
def generation_job_cancel(*, job: GenerationJob) -> GenerationJob:
    """Ask a job to stop. It stops at the end of its current batch; a queued job never starts."""
    job = GenerationJob.objects.select_for_update().get(pk=job.pk)
    if not job.is_active:
        raise GenerationError(f"job {job.pk} is {job.get_status_display().lower()}: only queued or running jobs can be cancelled")
    job.cancel_requested = True
    job.status = Status.CANCELLED
    job.eta_seconds = None
    job.finished_at = timezone.now()
    job.save(update_fields=["cancel_requested", "status", "eta_seconds", "finished_at", "updated_at"])
    return job


@transaction.atomic
def generation_job_resume(*, job: GenerationJob, enqueue: bool = True) -> GenerationJob:
    """Queue a failed, cancelled or stalled job again; it continues where it stopped."""
    job = GenerationJob.objects.select_for_update().get(pk=job.pk)
    if job.status == Status.DONE:
        raise GenerationError(f"job {job.pk} is done: nothing to resume")
    job.status = Status.QUEUED
    job.cancel_requested = False
    job.error = ""
    job.finished_at = None
    job.save(update_fields=["status", "cancel_requested", "error", "finished_at", "updated_at"])
    if enqueue:
        transaction.on_commit(lambda: _enqueue(job.pk))
    return job


@transaction.atomic
def generation_jobs_resume_stalled(*, stalled_after: timedelta, enqueue: bool = True) -> list[int]:
    """Queue again the batched jobs that say they are queued or running but have not moved for
    ``stalled_after``: their message was lost with a killed worker (the filesystem broker has no
    redelivery; Redis redelivers only after its visibility timeout). Beat runs this every minute,
    so a job continues soon after a worker comes back. Safe if the job was merely slow: batches
    skip stored items and write under the job's row lock, so a second chain only finds less to do.
    Fine-tuning is one long batch and is left to the admin's "Resume job"."""
    cutoff = timezone.now() - stalled_after
    ids = list(
        GenerationJob.objects.filter(status__in=[Status.QUEUED, Status.RUNNING], updated_at__lt=cutoff)
        .exclude(kind=GenerationJob.Kind.FINETUNE)
        .values_list("pk", flat=True)
    )
    for job_id in ids:
        # Touch the job so the next beat tick does not queue it again while this message waits.
        GenerationJob.objects.filter(pk=job_id).update(updated_at=timezone.now())
        if enqueue:
            transaction.on_commit(lambda job_id=job_id: _enqueue(job_id))
    return ids


def generation_job_fail(*, job_id: int, error: str) -> None:
    """Record why a job stopped (shown in the admin); it can be resumed."""
    with transaction.atomic():
        job = GenerationJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status in (Status.DONE, Status.CANCELLED):
            return
        job.status = Status.FAILED
        job.error = error[:5000]
        job.eta_seconds = None
        job.finished_at = timezone.now()
        job.save(update_fields=["status", "error", "eta_seconds", "finished_at", "updated_at"])


# --- the batch loop ---------------------------------------------------------------------------
@dataclass
class BatchOutput:
    """What a handler generated for one batch, written in one transaction."""

    units: int = 0
    rationales: list[Rationale] = field(default_factory=list)
    questions: list[GeneralizationQuestion] = field(default_factory=list)
    predictions: list[GenUPrediction] = field(default_factory=list)
    failures: list[GenerationFailure] = field(default_factory=list)


class _Handler:
    def pending(self, job: GenerationJob) -> tuple[list[int], int]:
        """(next item ids to process, number of items already processed)."""
        raise NotImplementedError

    def generate(self, job: GenerationJob, item_ids: list[int]) -> BatchOutput:
        raise NotImplementedError

    def store(self, job: GenerationJob, output: BatchOutput) -> None:
        raise NotImplementedError


def _failed_item_ids(job: GenerationJob, ids: list[int]) -> set[int]:
    return set(GenerationFailure.objects.filter(job=job, item_id__in=ids).values_list("item_id", flat=True))


def _split_pending(job: GenerationJob, processed: set[int]) -> tuple[list[int], int]:
    ids = list(job.item_ids)
    todo = [i for i in ids if i not in processed]
    return todo[: job.batch_size], len(ids) - len(todo)


def _store_failures(job: GenerationJob, failures: list[GenerationFailure]) -> None:
    # (job, item, unit) is unique: a failure another delivery already stored is skipped.
    GenerationFailure.objects.bulk_create(failures, ignore_conflicts=True)


class _RationaleHandler(_Handler):
    def pending(self, job):
        ids = list(job.item_ids)
        processed = set(Rationale.objects.filter(source_id=job.source_id, item_id__in=ids).values_list("item_id", flat=True))
        processed |= _failed_item_ids(job, ids)
        return _split_pending(job, processed)

    def generate(self, job, item_ids):
        source = job.source
        items = list(Item.objects.filter(pk__in=item_ids).select_related("dataset").order_by("pk"))
        decoding = _decoding(source.decoding, **RATIONALE_DECODING_DEFAULTS)
        if source.backend in ("causal", "openai") and not decoding.stop:
            decoding.stop = [templates.CAUSAL_STOP]
        budget = _budget(job)
        backend = _backend_for(backend=source.backend, model=source.model_name_or_path,
                               endpoint_url=source.endpoint_url, options=source.decoding or {}, budget=budget)
        demos = [templates.Demonstration(**{k: d.get(k) for k in ("question", "choices", "answer", "rationale", "key")})
                 for d in job.params.get("demonstrations", [])]
        pitems = [prompt_item(item) for item in items]
        if source.backend == "seq2seq":
            template_name = "t5_explain" if not source.template else "custom"
            prompts = [templates.t5_explain_input(p, source.template) for p in pitems]
            parse = parse_t5_rationale
        else:
            template_name = "causal_few_shot" if not source.template else "custom"
            prompts = [templates.causal_prompt(p, demos, source.template) for p in pitems]
            parse = parse_causal_rationale
        try:
            outputs = backend.generate(prompts, decoding)
        finally:
            job.params["usage"] = budget.as_json()
        info = {
            "backend": source.backend, "model": source.model_name_or_path, "endpoint_url": source.endpoint_url,
            "template": template_name, "template_text": source.template or (
                templates.T5_EXPLAIN if source.backend == "seq2seq" else templates.CAUSAL_QUERY),
            "decoding": decoding.as_json(), "seed": source.seed, "job_id": job.pk,
            "device": getattr(backend, "device", ""),
            "demonstrations": [d.key for d in demos] if demos else [],
        }
        out = BatchOutput(units=len(items))
        for item, pitem, samples in zip(items, pitems, outputs, strict=True):
            raw = samples[0] if samples else ""
            parsed = parse(raw, pitem)
            if isinstance(parsed, ParseFailure):
                out.failures.append(GenerationFailure(job=job, item=item, unit="", raw_output=raw, reason=parsed.reason))
                continue
            out.rationales.append(Rationale(
                item=item, source=source, text=parsed.rationale, predicted_answer=parsed.answer,
                prediction_correct=parsed.answer == item.gold_answer, raw_output=raw, generation_info=info,
            ))
        return out

    def store(self, job, output):
        # (item, source) is unique: rationales stored meanwhile by another delivery are kept as they are.
        Rationale.objects.bulk_create(output.rationales, ignore_conflicts=True)
        _store_failures(job, output.failures)


class _QuestionHandler(_Handler):
    def pending(self, job):
        ids = list(job.item_ids)
        processed = set(GeneralizationQuestion.objects.filter(item_id__in=ids, origin=job.generator.origin)
                        .values_list("item_id", flat=True))
        processed |= _failed_item_ids(job, ids)
        return _split_pending(job, processed)

    def generate(self, job, item_ids):
        generator = job.generator
        items = list(Item.objects.filter(pk__in=item_ids).select_related("dataset").order_by("pk"))
        decoding = _decoding(generator.decoding)
        if generator.backend in ("causal", "openai") and not decoding.stop:
            decoding.stop = list(QUESTION_STOP)
        demos_by_type = {t: [templates.QuestionDemo.from_json(d) for d in (generator.demonstrations or {}).get(t, [])]
                         for t in templates.QUESTION_TYPES}
        instructions = {**templates.DEFAULT_INSTRUCTIONS, **(generator.instructions or {})}
        units: list[tuple[Item, templates.PromptItem, str]] = []
        prompts: list[str] = []
        for item in items:
            pitem = prompt_item(item)
            for qtype in templates.QUESTION_TYPES:
                units.append((item, pitem, qtype))
                prompts.append(templates.generalization_prompt(
                    qtype, instruction=instructions[qtype], demonstrations=demos_by_type[qtype],
                    question=pitem.question, context=pitem.facts))
        budget = _budget(job)
        backend = _backend_for(backend=generator.backend, model=generator.model_name_or_path,
                               endpoint_url=generator.endpoint_url, options=generator.decoding or {}, budget=budget)
        try:
            outputs = backend.generate(prompts, decoding)
        finally:
            job.params["usage"] = budget.as_json()
        existing: dict[tuple[int, str], list[str]] = {}
        for q in GeneralizationQuestion.objects.filter(item_id__in=item_ids).values("item_id", "qtype", "text"):
            existing.setdefault((q["item_id"], q["qtype"]), []).append(q["text"])
        info = {"generator": generator.name, "backend": generator.backend, "model": generator.model_name_or_path,
                "decoding": decoding.as_json(), "seed": generator.seed, "job_id": job.pk}
        out = BatchOutput(units=len(items))
        for (item, _pitem, qtype), samples in zip(units, outputs, strict=True):
            candidates: list[Candidate] = []
            for index, raw in enumerate(samples):
                parsed = parse_generalization(raw, qtype=qtype, original_answer=item.gold_answer)
                if isinstance(parsed, ParseFailure):
                    if not raw.strip():
                        continue  # an empty sample is dropped, as the protocol says
                    out.failures.append(GenerationFailure(job=job, item=item, unit=f"{qtype}#{index}", raw_output=raw,
                                                          reason=parsed.reason))
                    continue
                candidates.append(Candidate(text=parsed.text, answer=parsed.answer, raw=raw, index=index))
            kept, dropped = filter_questions(candidates, original=item.question,
                                             existing=existing.get((item.pk, qtype), []))
            for candidate in kept:
                out.questions.append(GeneralizationQuestion(
                    item=item, qtype=qtype, text=candidate.text, answer=candidate.answer, origin=generator.origin,
                    validation_status=GeneralizationQuestion.Validation.UNVALIDATED,
                    metadata={**info, "sample_index": candidate.index, "raw_output": candidate.raw},
                ))
            if not kept:
                out.failures.append(GenerationFailure(
                    job=job, item=item, unit=qtype, raw_output="\n---\n".join(samples),
                    reason=f"no usable {qtype} question from {len(samples)} samples "
                           f"(dropped: {', '.join(f'{k} {v}' for k, v in dropped.items() if v) or 'none'}; "
                           f"unparseable: {len(samples) - len(candidates) - sum(dropped.values())})",
                ))
        return out

    def store(self, job, output):
        existing = set(GeneralizationQuestion.objects.filter(item_id__in={q.item_id for q in output.questions})
                       .values_list("item_id", "qtype", "text"))
        GeneralizationQuestion.objects.bulk_create(
            [q for q in output.questions if (q.item_id, q.qtype, q.text) not in existing])
        _store_failures(job, output.failures)


class _GenUHandler(_Handler):
    def _questions(self, job, ids):
        qs = GeneralizationQuestion.objects.filter(item_id__in=ids).exclude(
            validation_status=GeneralizationQuestion.Validation.INVALID)
        if job.params.get("only_valid"):
            qs = qs.filter(validation_status=GeneralizationQuestion.Validation.VALID)
        return qs

    def pending(self, job):
        ids = list(job.item_ids)
        questions = list(self._questions(job, ids).values_list("pk", "item_id"))
        have = set(GenUPrediction.objects.filter(rationale_source_id=job.source_id,
                                                 generalization_question_id__in=[q for q, _ in questions])
                   .values_list("generalization_question_id", "answerer"))
        incomplete = {item for q, item in questions if (q, "I") not in have or (q, "IR") not in have}
        processed = {i for i in ids if i not in incomplete}
        return _split_pending(job, processed)

    def generate(self, job, item_ids):
        source = job.source
        rationales = {r.item_id: r for r in Rationale.objects.filter(source=source, item_id__in=item_ids)}
        questions = list(self._questions(job, item_ids).select_related("item__dataset").order_by("item_id", "pk"))
        have = set(GenUPrediction.objects.filter(rationale_source=source,
                                                 generalization_question__in=questions)
                   .values_list("generalization_question_id", "answerer"))
        out = BatchOutput(units=len(item_ids))
        for answerer_code, role in (("I", "answerer_i"), ("IR", "answerer_ir")):
            answerer = RationaleSource.objects.get(pk=job.params[role])
            todo = [q for q in questions if (q.pk, answerer_code) not in have and q.item_id in rationales]
            if not todo:
                continue
            pitems = [yes_no_prompt_item(q.text, dataset=q.item.dataset.name, answer=q.answer) for q in todo]
            if answerer_code == "I":
                prompts = [templates.t5_answer_input(p) for p in pitems]
            else:
                prompts = [templates.t5_answer_with_rationale_input(p, rationales[q.item_id].text)
                           for p, q in zip(pitems, todo, strict=True)]
            backend = _backend_for(backend=answerer.backend, model=answerer.model_name_or_path,
                                   endpoint_url=answerer.endpoint_url, options={}, budget=None)
            decoding = _decoding(answerer.decoding, **ANSWER_DECODING.as_json())
            outputs = backend.generate(prompts, decoding)
            for question, pitem, samples in zip(todo, pitems, outputs, strict=True):
                raw = samples[0] if samples else ""
                parsed = parse_t5_answer(raw, pitem)
                label = "" if isinstance(parsed, ParseFailure) else parsed.answer
                out.predictions.append(GenUPrediction(
                    generalization_question=question, rationale_source=source, answerer=answerer_code,
                    answerer_model=answerer.model_name_or_path, predicted_answer=label,
                    correct=bool(label) and label == question.answer, raw_output=raw,
                ))
                if isinstance(parsed, ParseFailure):
                    out.failures.append(GenerationFailure(
                        job=job, item=question.item, unit=f"{answerer_code}:q{question.pk}", raw_output=raw,
                        reason=f"{parsed.reason} (counted as a wrong answer)"))
        return out

    def store(self, job, output):
        existing = set(GenUPrediction.objects.filter(
            rationale_source_id=job.source_id,
            generalization_question_id__in={p.generalization_question_id for p in output.predictions},
        ).values_list("generalization_question_id", "answerer"))
        GenUPrediction.objects.bulk_create(
            [p for p in output.predictions if (p.generalization_question_id, p.answerer) not in existing])
        _store_failures(job, output.failures)


HANDLERS: dict[str, _Handler] = {
    Kind.RATIONALES: _RationaleHandler(),
    Kind.GENERALIZATION_QUESTIONS: _QuestionHandler(),
    Kind.GENU_ANSWERS: _GenUHandler(),
}


def _start(job_id: int) -> GenerationJob | None:
    with transaction.atomic():
        job = GenerationJob.objects.select_for_update().get(pk=job_id)
        if job.status in (Status.DONE, Status.FAILED, Status.CANCELLED):
            return None
        if job.cancel_requested:
            job.status = Status.CANCELLED
            job.save(update_fields=["status", "updated_at"])
            return None
        if job.status == Status.QUEUED:
            job.status = Status.RUNNING
            job.started_at = job.started_at or timezone.now()
            job.save(update_fields=["status", "started_at", "updated_at"])
        return job


def _finish(job: GenerationJob, done: int) -> None:
    job.done = min(done, job.total)
    job.status = Status.DONE
    job.eta_seconds = 0.0
    job.finished_at = timezone.now()
    job.save(update_fields=["done", "status", "eta_seconds", "finished_at", "updated_at"])


def generation_job_run_batch(*, job_id: int) -> bool:
    """Process the job's next batch. Returns True while work remains (the task re-queues itself).

    Idempotent: a finished, failed or cancelled job is left alone; items with outputs are skipped.
    Generation happens outside any transaction; the writes of one batch are atomic."""
    job = _start(job_id)
    if job is None:
        return False
    if job.kind == Kind.FINETUNE:
        from studies.services.finetune import finetune_job_run

        finetune_job_run(job=job)
        return False
    handler = HANDLERS[job.kind]
    item_ids, processed = handler.pending(job)
    if not item_ids:
        with transaction.atomic():
            job = GenerationJob.objects.select_for_update().get(pk=job_id)
            if job.status == Status.RUNNING:
                _finish(job, processed)
        return False

    started = time.monotonic()
    try:
        output = handler.generate(job, item_ids)
    except TransientBackendError:
        raise  # the task retries with back-off
    except BackendError as exc:
        _save_usage(job)
        generation_job_fail(job_id=job.pk, error=str(exc))
        return False
    elapsed = max(time.monotonic() - started, 1e-6)

    with transaction.atomic():
        locked = GenerationJob.objects.select_for_update().get(pk=job_id)
        handler.store(locked, output)
        # Outputs are valid even when the job was cancelled meanwhile: keep them, stop after.
        _, processed = handler.pending(locked)
        locked.done = min(processed, locked.total)
        locked.failed = GenerationFailure.objects.filter(job=locked).values("item_id").distinct().count()
        batch_rate = output.units / elapsed
        locked.rate = batch_rate if locked.rate is None else 0.5 * locked.rate + 0.5 * batch_rate
        remaining = locked.total - locked.done
        locked.eta_seconds = remaining / locked.rate if locked.rate else None
        if "usage" in job.params:
            locked.params = {**locked.params, "usage": job.params["usage"]}
        fields = ["done", "failed", "rate", "eta_seconds", "params", "updated_at"]
        if locked.status == Status.RUNNING and remaining == 0:
            locked.status = Status.DONE
            locked.finished_at = timezone.now()
            locked.eta_seconds = 0.0
            fields += ["status", "finished_at"]
        locked.save(update_fields=fields)
        return locked.status == Status.RUNNING and not locked.cancel_requested


def _save_usage(job: GenerationJob) -> None:
    if "usage" in job.params:
        with transaction.atomic():
            locked = GenerationJob.objects.select_for_update().get(pk=job.pk)
            locked.params = {**locked.params, "usage": job.params["usage"]}
            locked.save(update_fields=["params", "updated_at"])


def generation_job_run(*, job_id: int) -> GenerationJob:
    """Run a job to the end in this process (management commands, tests, the eager mode)."""
    while generation_job_run_batch(job_id=job_id):
        pass
    return GenerationJob.objects.get(pk=job_id)


def describe_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
