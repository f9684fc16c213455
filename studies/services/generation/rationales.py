"""Rationale jobs: an LM source writes an answer and a rationale for each item (FEB templates).

Each rationale's ``generation_info`` records what made it: backend, model, endpoint, the template
name and its full text (for a causal or OpenAI source the whole few-shot prompt,
``{demonstrations}`` standing for the blocks of ``demonstration_template``), the demonstrations'
keys (the job's ``params["demonstrations"]`` holds them frozen), decoding settings, the seeds (``sampling_seed``:
the decoding's, which seeds sampling and is sent to an OpenAI endpoint; ``demonstration_seed``: the
source's, which drew the demonstrations, None when none were drawn; ``seed``: the source's, as
recorded before the two were told apart), and what
the backend reports once per batch (:func:`studies.lm.backends.backend_run_info`): the device and
dtype the weights ran in with the torch and transformers versions, or the OpenAI ``api``.

A causal or OpenAI source without demonstrations of its own reads six drawn from the dataset's
train items with gold rationales (:func:`train_demonstrations`): only items the job's researcher
may send to an LM (``studies.selectors.items_for_jobs``, the rule of the job's own items: the
demonstrations go to the same endpoint; the operator's job: every item), and none of the
items the job prompts for while six lie outside them (a job on the train split would otherwise show
an item its own gold answer and rationale); a job on the whole train split draws from all, and
``params["demonstrations_from"]`` names its items among the six, whose rationales record
``own_item_in_demonstrations``. A source's own demonstrations are compared with the job's items
alike (:func:`items_shown_in_demonstrations`: by question text; by key too only for drawn ones, whose keys
are the job's dataset's external ids), and those that
show one are named there too. Each rationale also records ``demonstrations_fingerprint``, a
fingerprint of the demonstrations' full content (two prompts whose demonstrations differ only in
their text, not their keys, are told apart), and ``checkpoint``, the sorted distinct fingerprints of the
training records of the trained checkpoints the source loads, as the job's settings snapshot recorded
them (:func:`job_checkpoint`: new weights published under the same source name are told apart, a
source added over the same folder is not; None for a model no job here trained). The job has its
researcher once it is made, so the draw is made then, frozen into ``params["demonstrations"]``
(:meth:`RationaleHandler.before_save`); ``params["demonstrations_from"]`` says where they came
from."""
from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.db.models import QuerySet

from lab.jsontext import json_fingerprint
from studies.lm import templates
from studies.lm.backends import backend_run_info
from studies.lm.parsing import ParseFailure, parse_causal_rationale, parse_t5_rationale
from studies.models import Dataset, GenerationFailure, GenerationJob, Item, Rationale
from studies.selectors import items_for_jobs
from studies.services.grading import prediction_correct

from .common import (
    BatchOutput,
    GenerationError,
    ItemHandler,
    Prepared,
    decoding_from,
    failed_item_ids,
    job_actor,
    job_added_refusals,
    job_budget,
    lm_source,
    ordered_item_ids,
    prompt_item,
    source_backend,
    store_failures,
)
from .inputs import CHECKPOINT, SETTINGS_SNAPSHOT, source_checkpoint, source_to_build_on_check
from .lifecycle import generation_job_fail

RATIONALE_DECODING_DEFAULTS = {"do_sample": False, "max_new_tokens": 100, "num_return_sequences": 1}


def train_demonstrations(dataset: Dataset, *, seed: int, readable: QuerySet[Item] | None = None,
                         exclude_ids: Iterable[int] = ()) -> list[dict]:
    """Six demonstrations drawn (seeded) from the dataset's train items with gold rationales;
    ``readable``: only among these items (what the job's researcher may read), None: among all;
    ``exclude_ids``: not these items (the job's own) while six usable lie outside them; else all (a
    job on the whole train split: ``job_demonstrations`` names its items among the six)."""
    pool_items = Item.objects.filter(dataset=dataset, split="train").exclude(gold_rationale="")
    if readable is not None:
        pool_items = pool_items.filter(pk__in=readable.values("pk"))
    excluded = set(exclude_ids)
    candidates = list(pool_items.order_by("pk"))
    outside = [prompt_item(i, dataset.name) for i in candidates if i.pk not in excluded]
    try:
        # Outside the job's own items when six usable remain there; else (a job on the whole train
        # split) from all of them, and ``job_demonstrations`` names the job's items among them.
        demos = templates.draw_demonstrations(outside, seed=seed)
    except ValueError:
        demos = None
    if demos is not None:
        return [d.as_json() for d in demos]
    pool = [prompt_item(i, dataset.name) for i in candidates]
    try:
        demos = templates.draw_demonstrations(pool, seed=seed)
    except ValueError as exc:
        which = "" if readable is None else " (among the items the job's researcher may read)"
        raise GenerationError(
            f"dataset {dataset.name!r}{which}: {exc}. Import its train split, or write six demonstrations "
            "on the rationale source"
        ) from exc
    return [d.as_json() for d in demos]


SOURCE_DEMONSTRATIONS = "the rationale source's own demonstrations"
OPERATOR_DEMONSTRATIONS = "drawn from the train items of {dataset} with gold rationales (the operator's job: all of them)"
RESEARCHER_DEMONSTRATIONS = ("drawn from the train items of {dataset} with gold rationales that {user}, who started the "
                             "job, may read (items_for_jobs)")


# Said where a source's own demonstrations come from when some of them show items the job prompts
# for (:func:`items_shown_in_demonstrations`): those items' prompts show their own answer and rationale.
SOURCE_SHOWS_OWN_ITEMS = ("; {n} of them show items of this job itself ({keys}), by question text: these items' "
                          "prompts show their own answer and rationale as the demonstrations give them (their "
                          "rationales say so: own_item_in_demonstrations)")


# Said where a job's demonstrations come from when too few train items lie outside the job (a job
# on the whole train split): those of its items drawn as demonstrations see their own gold answer
# and rationale in their prompt, and their rationales record it (``own_item_in_demonstrations``).
OWN_ITEMS_AMONG_DEMONSTRATIONS = ("; {n} of them are items of this job itself ({keys}): fewer than six train items "
                                  "with gold rationales lie outside the job, so these items' prompts show their own "
                                  "gold answer and rationale (their rationales say so: own_item_in_demonstrations)")


def job_item_ids(job: GenerationJob) -> set[int]:
    """Every item ``job`` prompts for: its items, and a Quark job's validation and held-out items."""
    ids = set(job.item_ids or [])
    for key in ("validation_item_ids", "heldout_item_ids"):
        ids.update(job.params.get(key) or [])
    return ids


def _one_line(text) -> str:
    return " ".join(str(text or "").split())


def items_shown_in_demonstrations(demonstrations: Iterable[dict], items: Iterable[Item], *,
                                  by_key: bool = False) -> list[Item]:
    """Those of ``items`` that one of ``demonstrations`` shows: one carrying its question's text
    (whitespace aside), or, with ``by_key`` (demonstrations drawn from the job's own dataset, whose
    keys are that dataset's external ids: ``templates.demonstration_from``), one naming the item by
    its key. A source's or generator's own demonstrations (written by hand or copied from items of
    any dataset) are tied to no dataset: their keys say nothing of the job's items, so they are
    matched by question text only (``by_key`` False). The one rule by which rationale and
    generalization question jobs tell which of their items see themselves in their prompt
    (``own_item_in_demonstrations``)."""
    demos = [d for d in demonstrations if isinstance(d, dict)]
    keys = {str(d["key"]) for d in demos if d.get("key") not in (None, "")} if by_key else set()
    questions = {_one_line(d.get("question")) for d in demos} - {""}
    return [i for i in items if (i.external_id and str(i.external_id) in keys) or _one_line(i.question) in questions]


def job_items_shown(job: GenerationJob, demonstrations: Iterable[dict], *, by_key: bool = False) -> list[Item]:
    """The items ``job`` prompts for (:func:`job_item_ids`) that ``demonstrations`` show
    (:func:`items_shown_in_demonstrations`; ``by_key``: drawn from the job's dataset), in id order."""
    items = (Item.objects.filter(pk__in=job_item_ids(job), dataset=job.dataset)
             .only("pk", "external_id", "question").order_by("pk"))
    return items_shown_in_demonstrations(list(demonstrations), items, by_key=by_key)


def shown_keys(items: Iterable[Item]) -> str:
    """The items' external ids (their id where they have none), sorted, for a note."""
    return ", ".join(sorted(str(i.external_id or f"id {i.pk}") for i in items))


def job_demonstrations(job: GenerationJob, *, seed: int) -> tuple[list[dict], str]:
    """(six demonstrations for ``job`` drawn with ``seed`` from its dataset's train items, where
    from): for a researcher's job only among the items they may send to an LM (``items_for_jobs``:
    the demonstrations go to the same endpoint as the job's own items, which that rule picks), for
    the operator's among all;
    never one of the items the job prompts for (:func:`job_item_ids`: a train-split job would
    otherwise show an item its own gold answer and rationale)."""
    actor = job_actor(job)
    own = job_item_ids(job)
    if actor is None:
        demos, where = (train_demonstrations(job.dataset, seed=seed, exclude_ids=own),
                        OPERATOR_DEMONSTRATIONS.format(dataset=job.dataset.name))
    else:
        demos, where = (train_demonstrations(job.dataset, seed=seed, readable=items_for_jobs(user=actor),
                                             exclude_ids=own),
                        RESEARCHER_DEMONSTRATIONS.format(dataset=job.dataset.name, user=job.created_by or "nobody"))
    mine = job_items_shown(job, demos, by_key=True)  # drawn from the job's own dataset
    if mine:
        where += OWN_ITEMS_AMONG_DEMONSTRATIONS.format(n=len(mine), keys=shown_keys(mine))
    return demos, where


def _demonstrations_frozen(job: GenerationJob) -> bool:
    """Draw and freeze the job's demonstrations (:func:`job_demonstrations`) unless another delivery
    did; False, with the job failed with why, when its researcher reads too few."""
    try:
        demonstrations, where = job_demonstrations(job, seed=job.source.seed)
    except GenerationError as exc:
        generation_job_fail(job_id=job.pk, error=str(exc))
        return False
    with transaction.atomic():
        locked = GenerationJob.objects.select_for_update().defer("item_ids").get(pk=job.pk)
        if "demonstrations" not in locked.params:
            locked.params = {**locked.params, "demonstrations": demonstrations, "demonstrations_from": where}
            locked.save(update_fields=["params", "updated_at"])
        job.params = {**job.params, **{k: locked.params[k] for k in ("demonstrations", "demonstrations_from")
                                       if k in locked.params}}
    return True


def job_checkpoint(job: GenerationJob) -> list[str] | None:
    """The checkpoint ``job``'s source loads, as its rationales record it: the sorted, distinct
    fingerprints of the training records its settings snapshot recorded when the job was made
    (``inputs.job_settings_snapshot``, under the source's :data:`inputs.CHECKPOINT`; the job runs only
    while they hold, ``inputs.job_settings_refusal``), without the source ids they were read under,
    so the same weights hash the same in every job (a source added over the same folder adds an id,
    not weights). A job made before the snapshot named the checkpoint reads its source's now
    (``inputs.source_checkpoint``). None for a model no job here trained."""
    snapshot = job.params.get(SETTINGS_SNAPSHOT) if isinstance(job.params, dict) else None
    recorded = (snapshot.get("source") or {}).get(CHECKPOINT) if isinstance(snapshot, dict) else None
    if not isinstance(recorded, dict):
        return source_checkpoint(job.source)
    return sorted(set(recorded.values())) or None


class RationaleHandler(ItemHandler):
    kind = GenerationJob.Kind.RATIONALES
    params_accepted = frozenset({"max_requests", "max_tokens"})  # the openai budget cap
    # Each batch prompts its source as it stands (backend, model, endpoint, decoding, template):
    # the job runs only while they are those it was created with (inputs.job_settings_refusal).
    settings_read_live = ("source",)
    # Its rationales hang from its items and its source: only those its researcher may build on.
    builds_on_items = True

    def prepare(self, *, source, generator, dataset, split, item_ids, limit, params):
        lm_source(source, "rationale source")
        source_to_build_on_check(source)
        ids = ordered_item_ids(dataset=dataset, split=split, item_ids=item_ids, limit=limit,
                               build_on=self.builds_on_items)
        if source.backend in ("causal", "openai") and source.demonstrations:
            problem = templates.demonstrations_problem(source.demonstrations)
            if problem:
                raise GenerationError(f"source {source.name!r}: its demonstrations {problem}: correct them on the source")
            params["demonstrations"] = list(source.demonstrations)
            params["demonstrations_from"] = SOURCE_DEMONSTRATIONS
        # Otherwise drawn from the train items the job's researcher may read (before_save).
        decoding_from(source.decoding, **RATIONALE_DECODING_DEFAULTS)
        return Prepared(item_ids=ids, params=params, total=len(ids), split=split)

    def before_save(self, job):
        """Draw the demonstrations of a source without its own now, while the job's researcher is
        known (an account deleted later leaves a job that acts for nobody, which may read none); of a
        source with its own, name the job's items they show (:data:`SOURCE_SHOWS_OWN_ITEMS`)."""
        if job.source.backend in ("causal", "openai") and "demonstrations" not in job.params:
            demonstrations, where = job_demonstrations(job, seed=job.source.seed)
            job.params = {**job.params, "demonstrations": demonstrations, "demonstrations_from": where}
        elif job.params.get("demonstrations_from") == SOURCE_DEMONSTRATIONS:
            mine = job_items_shown(job, job.params.get("demonstrations") or [])
            if mine:
                job.params = {**job.params, "demonstrations_from": SOURCE_DEMONSTRATIONS + SOURCE_SHOWS_OWN_ITEMS.format(
                    n=len(mine), keys=shown_keys(mine))}

    def run_batch(self, job):
        # A job created before the draw moved to its creation (``before_save``) draws at its first batch.
        if job.source.backend in ("causal", "openai") and "demonstrations" not in job.params:
            if not _demonstrations_frozen(job):
                return False
        return super().run_batch(job)

    def processed_among(self, job, ids):
        done = set(Rationale.objects.filter(source_id=job.source_id, item_id__in=ids).values_list("item_id", flat=True))
        return done | failed_item_ids(job, ids)

    def generate(self, job, item_ids):
        source = job.source
        items = list(Item.objects.filter(pk__in=item_ids).select_related("dataset").order_by("pk"))
        decoding = decoding_from(source.decoding, **RATIONALE_DECODING_DEFAULTS)
        if source.backend in ("causal", "openai") and not decoding.stop:
            decoding.stop = [templates.CAUSAL_STOP]
        budget = job_budget(job)
        backend = source_backend(source, budget=budget)
        demo_json = list(job.params.get("demonstrations", []))
        demos = [templates.demonstration_read(d) for d in demo_json]
        drawn = bool(demos) and not str(job.params.get("demonstrations_from", "")).startswith(SOURCE_DEMONSTRATIONS)
        # Drawn or the source's own, the items whose own question a demonstration shows (by key too
        # only where drawn from the job's dataset).
        shown = {i.pk for i in items_shown_in_demonstrations(demo_json, items, by_key=drawn)} if demos else set()
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
                templates.T5_EXPLAIN if source.backend == "seq2seq" else
                templates.CAUSAL_FEW_SHOT if demos else f"{templates.CAUSAL_HEADER}\n{templates.CAUSAL_QUERY}"),
            "decoding": decoding.as_json(), "job_id": job.pk,
            # The seeds, named for what they do: the decoding's seeds sampling (and is sent to an
            # OpenAI endpoint); the source's drew the demonstrations of a source without its own.
            # ``seed`` keeps what it always recorded (the source's) for what reads it (score reports).
            "sampling_seed": decoding.seed, "demonstration_seed": source.seed if drawn else None,
            "seed": source.seed,
            "demonstrations": [d.key for d in demos] if demos else [],
            # The demonstrations' full content (keys alone do not tell an edited text apart) and the
            # training record of each trained checkpoint the source loads (new weights published
            # under the same name), as fingerprints (``lab.jsontext.json_fingerprint``).
            "demonstrations_fingerprint": json_fingerprint(demo_json) if demos else None,
            "checkpoint": job_checkpoint(job),
            **backend_run_info(backend),  # device, dtype, torch/transformers versions, or the openai api
        }
        if source.backend != "seq2seq":
            info["demonstration_template"] = templates.CAUSAL_BLOCK
        out = BatchOutput(units=len(items))
        for item, pitem, samples in zip(items, pitems, outputs, strict=True):
            raw = samples[0] if samples else ""
            parsed = parse(raw, pitem)
            if isinstance(parsed, ParseFailure):
                out.failures.append(GenerationFailure(job=job, item=item, unit="", raw_output=raw, reason=parsed.reason))
                continue
            own = item.pk in shown  # its own answer and rationale was in its prompt
            out.rationales.append(Rationale(
                item=item, source=source, text=parsed.rationale, predicted_answer=parsed.answer,
                prediction_correct=prediction_correct(parsed.answer, item.gold_answer), raw_output=raw,
                generation_info={**info, "own_item_in_demonstrations": True} if own else info,
            ))
        return out

    def processed_by(self, output):
        # A rationale (stored now or by another delivery: the pair is unique) or a failure.
        return {r.item_id for r in output.rationales} | {f.item_id for f in output.failures}

    def store(self, job, output):
        # (item, source) is unique: rationales stored meanwhile by another delivery are kept as they are.
        items = {r.item_id for r in output.rationales}
        stored = set(Rationale.objects.filter(source=job.source, item_id__in=items).values_list("item_id", flat=True))
        Rationale.objects.bulk_create(output.rationales, ignore_conflicts=True)
        # The job acts for the researcher who started it: a rationale under an item or source they
        # may no longer build on, or that a study they may not change would show, is not theirs to
        # add (studies.services.content), and is kept as a failure saying which.
        added = dict(Rationale.objects.filter(source=job.source, item_id__in=items - stored)
                     .values_list("pk", "item_id"))
        refused = {added[pk]: reason for pk, reason in job_added_refusals(
            job, Rationale, list(added), what="rationale").items()}
        if refused:
            Rationale.objects.filter(source=job.source, item_id__in=refused).delete()
            output.failures.extend(GenerationFailure(job=job, item_id=r.item_id, unit="", raw_output=r.raw_output,
                                                     reason=refused[r.item_id])
                                   for r in output.rationales if r.item_id in refused)
            output.rationales = [r for r in output.rationales if r.item_id not in refused]
        store_failures(job, output.failures)
