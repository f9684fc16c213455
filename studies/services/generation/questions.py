"""Generalization question jobs: a question generator writes rephrase, similar and counterfactual
questions for each item, answers each one, and the questions are stored unvalidated. Samples that
do not parse are stored as failures; samples the filter drops (:mod:`studies.lm.questions`) as
:class:`DroppedQuestion` rows with their reason, and the job's ``params["dropped"]`` counts them.

The prompt is frozen when the job is created, as rationale jobs freeze theirs: the job's
``params["instructions"]`` and ``params["demonstrations"]`` hold, per type, the instruction and the
demonstrations every batch prompts with, whatever is edited on the generator afterwards. Each
question's metadata records its type's ``instruction`` (the text) and ``demonstrations_sha256``
(:func:`demonstrations_digest` of the job's frozen copy), and the seeds named for what they do:
``sampling_seed`` (the decoding's, which the backend samples with), ``demonstration_seed`` (the one
that drew the type's demonstrations; None for the generator's own) and ``seed`` (the generator's,
as recorded before the two were told apart).

A type the generator has no demonstrations for gets six drawn from the dataset's train-split
generalization questions, as a rationale job draws its source's: only among the questions and items
the job's researcher may read (the operator's job: all of them), when the job is created
(:meth:`QuestionHandler.before_save`), into the job's params only, never onto the generator (which
may be another researcher's, or read by researchers who may not read those questions);
``params["demonstrations_from"]`` says, per type, where they came from. The draw leaves out the
items the job prompts for while six others remain (a job on the train split would otherwise show an
item its own question and answer); the items a type's demonstrations show anyway (too few others:
a job on the whole train split; or the generator's own, which show one by its question text) are
named there, and their questions record ``own_item_in_demonstrations``, by the rationale jobs' rule
(:func:`.rationales.items_shown_in_demonstrations`). Drawn demonstrations may be unvalidated LM
output (only questions marked invalid are left out): ``params["demonstrations_from"]`` says how many
of a type's six were unvalidated when any were."""
from __future__ import annotations

import hashlib
import json
import random
from collections import Counter

from django.db.models import Count

from studies.lm import templates
from studies.lm.backends import backend_run_info
from studies.lm.parsing import ParseFailure, parse_generalization
from studies.lm.questions import Candidate, filter_questions
from studies.models import (
    Dataset,
    DroppedQuestion,
    GeneralizationQuestion,
    GenerationFailure,
    GenerationJob,
    Item,
    QuestionGenerator,
)
from studies.selectors import generalization_questions_for_user, items_for_jobs

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
    ordered_item_ids,
    prompt_item,
    source_backend,
    store_failures,
)
from .rationales import items_shown_in_demonstrations, job_item_ids, job_items_shown, shown_keys

QUESTION_STOP = ["\n\n"]


GENERATOR_DEMONSTRATIONS = "the question generator's own demonstrations"
OPERATOR_QUESTION_DEMONSTRATIONS = ("drawn from the train-split {qtype} generalization questions of {dataset} "
                                    "(the operator's job: all of them)")
RESEARCHER_QUESTION_DEMONSTRATIONS = (
    "drawn from the train-split {qtype} generalization questions of {dataset} that {user}, who started the job, may "
    "read (generalization_questions_for_user, items_for_jobs)")
# Added to a drawn type's ``demonstrations_from`` when some of its six are unvalidated.
UNVALIDATED_QUESTION_DEMONSTRATIONS = ("; {n} of the six are unvalidated questions (LM output no one has validated "
                                       "yet: only questions marked invalid are left out of the draw)")
# Added to a type's ``demonstrations_from`` when its demonstrations show items the job prompts for.
OWN_ITEMS_IN_QUESTION_DEMONSTRATIONS = ("; {n} of them show items of this job itself ({keys}){why}, so these items' "
                                        "prompts show their own question (their questions say so: "
                                        "own_item_in_demonstrations)")
TOO_FEW_OUTSIDE = ": fewer than six train items with such questions lie outside the job"


def drawn_question_demonstrations(generator: QuestionGenerator, dataset: Dataset, qtype: str, *,
                                  user=None, exclude_ids=()) -> tuple[list[dict], str]:
    """(six ``qtype`` demonstrations drawn (seeded by the generator) from the dataset's train-split
    generalization questions of that type not marked invalid, one per item, and a note for
    ``demonstrations_from``: how many of them are unvalidated, empty when none). ``user``: only among
    the questions they may read (``generalization_questions_for_user``) on items their jobs may send
    to an LM (``items_for_jobs``, the rule of the job's own items: the demonstrations go to the same
    endpoint): a demonstration carries the item's question and facts and the question's text and
    answer; None: among all (the operator's job). ``exclude_ids``: not on these items (the job's own)
    while six others remain; else among all (the job names its items among them)."""
    by_item: dict[int, GeneralizationQuestion] = {}
    for question in _question_pool(dataset, qtype, user=user).order_by("item_id", "id"):
        by_item.setdefault(question.item_id, question)
    candidates = list(by_item.values())
    excluded = set(exclude_ids)
    outside = [q for q in candidates if q.item_id not in excluded]
    if len(outside) >= templates.N_DEMONSTRATIONS:
        candidates = outside
    if len(candidates) < templates.N_DEMONSTRATIONS:
        which = "" if user is None else " that the job's researcher may read"
        raise GenerationError(
            f"question generator {generator.name!r} has no demonstrations for type {qtype!r} and dataset "
            f"{dataset.name!r} has only {len(candidates)} train items with {qtype} questions{which} to draw six from: "
            "add demonstrations in the generator's admin page or import the train generalization questions"
        )
    index = templates.QUESTION_TYPES.index(qtype)
    chosen = random.Random(generator.seed + index).sample(candidates, templates.N_DEMONSTRATIONS)
    unvalidated = sum(q.validation_status == GeneralizationQuestion.Validation.UNVALIDATED for q in chosen)
    return ([_demonstration(q, dataset) for q in chosen],
            UNVALIDATED_QUESTION_DEMONSTRATIONS.format(n=unvalidated) if unvalidated else "")


def _question_pool(dataset: Dataset, qtype: str, *, user=None):
    """The questions a draw of ``qtype`` demonstrations takes from (``drawn_question_demonstrations``):
    the dataset's train-split ones of that type not marked invalid; for ``user``, only those they may
    read on items their jobs may send to an LM; None: all (the operator's)."""
    pool = (GeneralizationQuestion.objects.filter(item__dataset=dataset, item__split="train", qtype=qtype)
            .exclude(validation_status=GeneralizationQuestion.Validation.INVALID))
    if user is not None:
        pool = pool.filter(pk__in=generalization_questions_for_user(user=user).values("pk"),
                           item_id__in=items_for_jobs(user=user).values("pk"))
    return pool.select_related("item")


def _demonstration(question: GeneralizationQuestion, dataset: Dataset) -> dict:
    """A drawn question as a demonstration of its type (what a job's params freeze)."""
    return templates.QuestionDemo(
        question=question.item.question, output=question.text, answer=templates.bool_word(question.answer),
        context=prompt_item(question.item, dataset.name).facts,
    ).as_json()


def _drawn(where: dict, qtype: str) -> bool:
    """Whether a job's ``qtype`` demonstrations were drawn from the train questions (its
    ``demonstrations_from``), not the generator's own (a job without the note, from before it was
    written, prompts with its frozen ones as its generator's: ``generate``)."""
    return qtype in where and not str(where[qtype]).startswith(GENERATOR_DEMONSTRATIONS)


def drawn_demonstrations_drawable(job: GenerationJob, params: dict) -> bool:
    """Whether every demonstration ``params`` drew from the train questions is one a draw for ``job``
    (its researcher, or the operator) could take now: a question of the pool (readable by them, not
    marked invalid) as it reads now. A queued job whose draw holds a question marked invalid since,
    or one its researcher may no longer read, is not the same request as ``job``; nor is one whose
    draw shows items of the job itself (fewer than six others were there to draw) while six others
    are there now, which a draw leaves out (``drawn_question_demonstrations``)."""
    where = params.get("demonstrations_from") or {}
    actor = job_actor(job)
    own_ids = set(job_item_ids(job))
    for qtype, demos in (params.get("demonstrations") or {}).items():
        if not _drawn(where, qtype) or not demos:
            continue
        texts = [d.get("output") for d in demos if isinstance(d, dict)]
        pool = {json.dumps(_demonstration(q, job.dataset), sort_keys=True): q.item_id
                for q in _question_pool(job.dataset, qtype, user=actor).filter(text__in=texts)}
        keys = [json.dumps(d, sort_keys=True) for d in demos]
        if any(key not in pool for key in keys):
            return False
        if own_ids & {pool[key] for key in keys} and (
                _question_pool(job.dataset, qtype, user=actor).exclude(item_id__in=own_ids)
                .values("item_id").distinct().count() >= templates.N_DEMONSTRATIONS):
            return False
    return True


def job_question_demonstrations(job: GenerationJob) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """(the demonstrations of each type that ``job`` prompts with, where each type's came from): the
    generator's own where it has them, else drawn (:func:`drawn_question_demonstrations`) for the
    job's researcher from what they may read, for the operator's job from everything. Nothing is
    written on the generator: it may be another researcher's, or read by researchers who may not
    read what this job's researcher drew from. A draw leaves out the job's own items while six
    others remain; the items a type's demonstrations show anyway are named (by the rationale jobs'
    rule, :func:`.rationales.job_items_shown`)."""
    generator, dataset = job.generator, job.dataset
    own_ids = job_item_ids(job)
    own = generator.demonstrations if isinstance(generator.demonstrations, dict) else {}
    actor = job_actor(job)
    demos: dict[str, list[dict]] = {}
    where: dict[str, str] = {}
    for qtype in templates.QUESTION_TYPES:
        if own.get(qtype):
            demos[qtype], where[qtype] = list(own[qtype]), GENERATOR_DEMONSTRATIONS
        elif actor is None:
            demos[qtype], unvalidated = drawn_question_demonstrations(generator, dataset, qtype, exclude_ids=own_ids)
            where[qtype] = OPERATOR_QUESTION_DEMONSTRATIONS.format(qtype=qtype, dataset=dataset.name) + unvalidated
        else:
            demos[qtype], unvalidated = drawn_question_demonstrations(generator, dataset, qtype, user=actor,
                                                                      exclude_ids=own_ids)
            where[qtype] = RESEARCHER_QUESTION_DEMONSTRATIONS.format(qtype=qtype, dataset=dataset.name,
                                                                     user=job.created_by or "nobody") + unvalidated
        mine = job_items_shown(job, demos[qtype])
        if mine:
            why = "" if where[qtype] == GENERATOR_DEMONSTRATIONS else TOO_FEW_OUTSIDE
            where[qtype] += OWN_ITEMS_IN_QUESTION_DEMONSTRATIONS.format(n=len(mine), keys=shown_keys(mine), why=why)
    return demos, where


def demonstrations_digest(demonstrations: list[dict]) -> str:
    """SHA-256 of one type's demonstrations (canonical JSON: sorted keys, no spaces)."""
    text = json.dumps(demonstrations, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def generator_instructions(generator: QuestionGenerator) -> dict[str, str]:
    """The instruction per type: the generator's where it has one, else the default
    (:data:`templates.DEFAULT_INSTRUCTIONS`)."""
    given = generator.instructions if isinstance(generator.instructions, dict) else {}
    return {t: given[t] if isinstance(given.get(t), str) else templates.DEFAULT_INSTRUCTIONS[t]
            for t in templates.QUESTION_TYPES}


def no_question_reason(qtype: str, *, samples: int, unparseable: int, dropped: dict[str, int]) -> str:
    """Why a (item, type) produced no question: every sample is either unparseable (empty ones
    included) or dropped by the filter, and each is counted once."""
    dropped_text = ", ".join(f"{k} {v}" for k, v in dropped.items() if v) or "none"
    return (f"no usable {qtype} question from {samples} samples "
            f"(unparseable or not a question: {unparseable}; dropped: {dropped_text})")


class QuestionHandler(ItemHandler):
    kind = GenerationJob.Kind.GENERALIZATION_QUESTIONS
    params_accepted = frozenset({"max_requests", "max_tokens"})  # the openai budget cap
    # Each batch prompts its question generator as it stands (backend, model, endpoint, decoding):
    # the job runs only while they are those it was created with (inputs.job_settings_refusal).
    settings_read_live = ("generator",)
    # Its questions hang from its items: only those its researcher may build on.
    builds_on_items = True

    def prepare(self, *, source, generator, dataset, split, item_ids, limit, params):
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
        # Only what a job reads: a generator's demonstrations that are no object are not read (its
        # types are drawn), as before.
        demonstrations = generator.demonstrations if isinstance(generator.demonstrations, dict) else {}
        problem = templates.question_demonstrations_problem(demonstrations)
        if problem:
            raise GenerationError(f"generator {generator.name!r}: its demonstrations {problem}: correct them on the "
                                  "generator")
        ids = ordered_item_ids(dataset=dataset, split=split, item_ids=item_ids, limit=limit,
                               build_on=self.builds_on_items)
        decoding_from(generator.decoding)
        # The job's prompt, frozen (as rationale jobs freeze their demonstrations): the instructions
        # here, the demonstrations once the job's researcher is known (before_save).
        params["instructions"] = generator_instructions(generator)
        return Prepared(item_ids=ids, params=params, total=len(ids), split=split)

    def before_save(self, job):
        """Freeze the demonstrations of each type into the job (``params["demonstrations"]``, and
        ``params["demonstrations_from"]`` per type): the generator's own, or drawn for the job's
        researcher from the train generalization questions they may read
        (:func:`job_question_demonstrations`)."""
        demonstrations, where = job_question_demonstrations(job)
        job.params = {**job.params, "demonstrations": demonstrations, "demonstrations_from": where}

    def request_params(self, params):
        """Without the demonstrations drawn from the train questions: the pool they are drawn from
        grows while question jobs run (this one, or another generator's on the same dataset), so the
        same request asked again draws others. A type's demonstrations that are the generator's own
        stay (edited, they make another request). What the twin drew must still be drawable
        (``twin_prompts_allowed``)."""
        where = params.get("demonstrations_from") or {}
        own = {qtype: demos for qtype, demos in (params.get("demonstrations") or {}).items()
               if not _drawn(where, qtype)}
        return {**{k: v for k, v in params.items() if k not in ("demonstrations", "demonstrations_from")},
                "demonstrations_own": own}

    def twin_prompts_allowed(self, job, other):
        return drawn_demonstrations_drawable(job, other.params)

    def processed_among(self, job, ids):
        return self._answered_among(job, ids) | failed_item_ids(job, ids)

    def _answered_among(self, job, ids):
        """Of ``ids``, the items with a question of the job's generator (its origin)."""
        return set(GeneralizationQuestion.objects.filter(item_id__in=ids, origin=job.generator.origin)
                   .values_list("item_id", flat=True))

    def generate(self, job, item_ids):
        generator = job.generator
        items = list(Item.objects.filter(pk__in=item_ids).select_related("dataset").order_by("pk"))
        decoding = decoding_from(generator.decoding)
        if generator.backend in ("causal", "openai") and not decoding.stop:
            decoding.stop = list(QUESTION_STOP)
        # Jobs created before prompts were frozen read the generator's current ones, and their
        # questions then carry the demonstrations themselves (there is no frozen copy to point at).
        frozen = "demonstrations" in job.params and "instructions" in job.params
        raw_demos = job.params["demonstrations"] if frozen else (generator.demonstrations or {})
        instructions = job.params["instructions"] if frozen else generator_instructions(generator)
        demo_json = {t: list(raw_demos.get(t) or []) for t in templates.QUESTION_TYPES}
        demos_by_type = {t: [templates.QuestionDemo.from_json(d) for d in demo_json[t]]
                         for t in templates.QUESTION_TYPES}
        drawn_from = job.params.get("demonstrations_from") if frozen else None
        drawn_from = drawn_from if isinstance(drawn_from, dict) else {}
        # The seed of a type's draw (drawn_question_demonstrations: the generator's plus the type's
        # index); None for a type prompted with the generator's own demonstrations.
        demonstration_seed = {t: None if str(drawn_from.get(t, GENERATOR_DEMONSTRATIONS)).startswith(
                              GENERATOR_DEMONSTRATIONS) else generator.seed + index
                              for index, t in enumerate(templates.QUESTION_TYPES)}
        # The items each type's demonstrations show (their own question in their prompt).
        shown = {t: {i.pk for i in items_shown_in_demonstrations(demo_json[t], items)} for t in templates.QUESTION_TYPES}
        prompt_info = {t: {"instruction": instructions[t], "demonstrations_sha256": demonstrations_digest(demo_json[t]),
                           "demonstration_seed": demonstration_seed[t],
                           **({} if frozen else {"demonstrations": demo_json[t]})}
                       for t in templates.QUESTION_TYPES}
        units: list[tuple[Item, str]] = []
        prompts: list[str] = []
        for item in items:
            pitem = prompt_item(item)
            for qtype in templates.QUESTION_TYPES:
                units.append((item, qtype))
                prompts.append(templates.generalization_prompt(
                    qtype, instruction=instructions[qtype], demonstrations=demos_by_type[qtype],
                    question=pitem.question, context=pitem.facts))
        budget = job_budget(job)
        backend = source_backend(generator, budget=budget)
        try:
            outputs = backend.generate(prompts, decoding)
        finally:
            job.params["usage"] = budget.as_json()
        existing: dict[tuple[int, str], list[str]] = {}
        for q in GeneralizationQuestion.objects.filter(item_id__in=item_ids).values("item_id", "qtype", "text"):
            existing.setdefault((q["item_id"], q["qtype"]), []).append(q["text"])
        info = {"generator": generator.name, "backend": generator.backend, "model": generator.model_name_or_path,
                "endpoint_url": generator.endpoint_url, "decoding": decoding.as_json(),
                # The seeds, named for what they do: the decoding's seeds sampling (and is sent to an
                # OpenAI endpoint); ``demonstration_seed`` (per type, in prompt_info) drew the type's
                # demonstrations. ``seed`` keeps what it always recorded (the generator's).
                "sampling_seed": decoding.seed, "seed": generator.seed,
                "job_id": job.pk, "answer_origin": "lm", **backend_run_info(backend)}
        out = BatchOutput(units=len(items))
        for (item, qtype), samples in zip(units, outputs, strict=True):
            candidates: list[Candidate] = []
            unparseable = 0
            for index, raw in enumerate(samples):
                parsed = parse_generalization(raw)
                if isinstance(parsed, ParseFailure):
                    unparseable += 1
                    if not raw.strip():
                        continue  # an empty sample is dropped, as the protocol says
                    out.failures.append(GenerationFailure(job=job, item=item, unit=f"{qtype}#{index}", raw_output=raw,
                                                          reason=parsed.reason))
                    continue
                candidates.append(Candidate(text=parsed.text, answer=parsed.answer, raw=raw, index=index))
            kept, dropped = filter_questions(candidates, original=item.question,
                                             existing=existing.get((item.pk, qtype), []))
            existing.setdefault((item.pk, qtype), []).extend(candidate.text for candidate in kept)
            out.dropped.extend(DroppedQuestion(
                job=job, item=item, qtype=qtype, sample_index=d.candidate.index, text=d.candidate.text,
                answer=d.candidate.answer, reason=d.reason, matched=d.matched, raw_output=d.candidate.raw,
            ) for d in dropped)
            for candidate in kept:
                metadata = {**info, **prompt_info[qtype], "sample_index": candidate.index, "raw_output": candidate.raw}
                if item.pk in shown[qtype]:
                    metadata["own_item_in_demonstrations"] = True
                if qtype == templates.COUNTERFACTUAL:
                    # A counterfactual should flip the original's answer; the LM's answer may not.
                    metadata["flips_original_answer"] = candidate.answer != item.gold_answer
                out.questions.append(GeneralizationQuestion(
                    item=item, qtype=qtype, text=candidate.text, answer=candidate.answer, origin=generator.origin,
                    validation_status=GeneralizationQuestion.Validation.UNVALIDATED, metadata=metadata,
                ))
            if not kept:
                out.failures.append(GenerationFailure(
                    job=job, item=item, unit=qtype, raw_output="\n---\n".join(samples),
                    reason=no_question_reason(qtype, samples=len(samples), unparseable=unparseable,
                                              dropped=dict(Counter(d.reason for d in dropped))),
                ))
        return out

    def store(self, job, output):
        """Write ``output`` (call holding the job's row lock: :meth:`ItemHandler._store_batch`). Two
        copies of one batch (a worker frozen past ``RL_LM_STALL_SECONDS``, then woken, after beat
        queued the job again) each generate its items; an endpoint that samples gives each copy
        other texts, which the exact-text check below would all keep (two sets of questions per
        item and type). So, as for rationales, the copy that stores questions first wins: of the
        items that have a question of the generator's already (:meth:`_answered_among`), this one
        stores no question, failure or dropped question. A failure is no output: an item another
        copy stored only as failed takes this copy's questions (as a rationale job stores a later
        copy's rationale over an earlier copy's failure), and its failure rows stay, as a
        rationale job's do (so the job's failed count still counts it, beside done); this copy's
        own failures of such an item are not added (one copy's failures of an item, not two, when
        the later copy's units differ: ``#<sample>`` units are not unique across copies)."""
        mine = {row.item_id for rows in (output.questions, output.failures, output.dropped) for row in rows}
        answered = self._answered_among(job, sorted(mine))
        failed = failed_item_ids(job, sorted(mine - answered))
        if answered:
            output.questions = [q for q in output.questions if q.item_id not in answered]
            output.dropped = [d for d in output.dropped if d.item_id not in answered]
        if answered or failed:
            output.failures = [f for f in output.failures if f.item_id not in answered | failed]
        existing = set(GeneralizationQuestion.objects.filter(item_id__in={q.item_id for q in output.questions})
                       .values_list("item_id", "qtype", "text"))
        created = GeneralizationQuestion.objects.bulk_create(
            [q for q in output.questions if (q.item_id, q.qtype, q.text) not in existing])
        # The job acts for the researcher who started it: a question under an item they may no
        # longer build on, or that a study they may not change would show, is not theirs to add
        # (studies.services.content), and is kept as a failure saying which.
        refused = job_added_refusals(job, GeneralizationQuestion, [q.pk for q in created], what="question")
        if refused:
            GeneralizationQuestion.objects.filter(pk__in=refused).delete()
            units = {(q.item_id, q.qtype): refused[q.pk] for q in created if q.pk in refused}
            output.failures.extend(GenerationFailure(job=job, item_id=item_id, unit=qtype, raw_output="",
                                                     reason=reason)
                                   for (item_id, qtype), reason in sorted(units.items()))
            output.questions = [q for q in output.questions if q.pk not in refused]
        store_failures(job, output.failures)
        if output.dropped:
            # (job, item, type, sample) is unique: a drop another delivery already stored is skipped.
            DroppedQuestion.objects.bulk_create(output.dropped, ignore_conflicts=True)
            counts = DroppedQuestion.objects.filter(job=job).order_by().values_list("reason").annotate(n=Count("id"))
            job.params = {**job.params, "dropped": dict(sorted(counts))}
