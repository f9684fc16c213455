"""Gen-U answering (SPEC section 4): the answerers F^I (question only) and F^IR (question plus
the original item's rationale) answer generalization questions; each question gets its score
and each item the mode (:mod:`studies.lm.genu` holds the definition and the tie rule).

Callable without a job: :func:`genu_score` takes (item, rationale text) pairs and the two
answerers and returns per-question scores and per-pair Gen-U, storing nothing, so a trainer can
use Gen-U as its reward. The ``genu_answers`` job (:class:`GenUHandler`, below) uses
the same :func:`genu_questions` and :func:`genu_answer` and stores the predictions for scoring.

Answerers are rationale sources of any backend (seq2seq with FEB's answer-given-the-explanation
template for F^IR and our plain answer template for F^I, causal or
OpenAI-compatible with ``Question: / Choices: [/ Explanation:] / Answer:`` prompts), all through
the one backend interface. The job records in its params (``answering``, per role) the backend,
template and decoding each answerer used (:func:`answerer_settings`): scoring names them beside
every Gen-U figure.

The ``genu_answers`` job's handler lives here too: F^I and F^IR answer the generalization questions of
the items that have a rationale from the source; one stored prediction per (question, source, answerer),
recording the source that answered (``answerer_source``) beside its model path (``answerer_model``).
An item's predictions that a study the job's researcher may not change would read are not stored
(:meth:`GenUHandler.store`).

Each stored prediction records what its answerer was given (:func:`genu_inputs`, ``GenUPrediction.inputs``):
fingerprints of the question and, for F^IR, of the rationale, and the answerer's checkpoint with its
training record. A prediction whose question or rationale was edited since, or whose answerer's
checkpoint was replaced since (:func:`prediction_stale`), counts as not answered: a rerun of the job
answers it again and replaces it in place (one prediction per question, source and role). Scoring
(``scoring.services.genu``) leaves out the predictions whose question or rationale changed.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db.models import Q, QuerySet
from django.utils import timezone

from lab.jsontext import json_fingerprint
from studies.choices import YES_NO_CHOICES
from studies.lm import genu, templates
from studies.lm.backends import Budget, Decoding
from studies.lm.parsing import ParseFailure, parse_causal_answer, parse_t5_answer
from studies.models import (
    GeneralizationQuestion,
    GenerationFailure,
    GenerationJob,
    GenUPrediction,
    Item,
    Rationale,
    RationaleSource,
)
from studies.selectors import VIEW, generation_jobs_for_user, sources_for_user
from studies.services.content import gen_u_added_refusals, gen_u_parent_refusals
from studies.services.grading import prediction_correct

from .common import (
    NOT_TO_BUILD_ON,
    NOT_YOURS_TO_CHANGE,
    BatchOutput,
    GenerationError,
    ItemHandler,
    Prepared,
    decoding_from,
    failed_item_ids,
    job_actor,
    job_budget,
    lm_source,
    ordered_item_ids,
    rationale_gone_failures,
    source_backend,
    store_failures,
    yes_no_prompt_item,
)
from .inputs import source_checkpoints, source_to_build_on_check
from .lifecycle import generation_job_fail

ANSWERER_BACKENDS = ("seq2seq", "causal", "openai")
ANSWER_DECODING = Decoding(do_sample=False, max_new_tokens=8, num_return_sequences=1)
ROLES = {"I": "answerer_i", "IR": "answerer_ir"}
QUESTION_FILTERS = {
    True: "validated questions only",
    False: "every question not marked invalid (unvalidated questions included)",
}
# Why the default is validated questions only, in the words every page, help text and warning that
# offers the choice uses: SPEC section 4 says only that humans validate the questions and answers
# and gives the released (validated) counts; restricting Gen-U to them is our reading, not a rule
# SPEC states.
VALIDATED_ONLY_READING = ("validated questions only (our reading of SPEC section 4: its released questions are the "
                          "validated ones)")


def genu_questions(*, item_ids, only_valid: bool = True) -> QuerySet[GeneralizationQuestion]:
    """The generalization questions Gen-U answers: by default only those validated as valid
    (:data:`VALIDATED_ONLY_READING`); ``only_valid=False`` adds the unvalidated ones, an explicit choice that the job's
    parameters and the score report state. Questions marked invalid never count."""
    qs = GeneralizationQuestion.objects.filter(item_id__in=item_ids).exclude(
        validation_status=GeneralizationQuestion.Validation.INVALID)
    if only_valid:
        qs = qs.filter(validation_status=GeneralizationQuestion.Validation.VALID)
    return qs


# The prompt template each answerer backend and role uses (a function of :mod:`studies.lm.templates`),
# and where it comes from. SPEC states FEB's T5 answer-given-the-explanation template (section 8,
# "F^IR style") and no template for F^I nor any causal answerer: those are our choice.
TEMPLATES = {
    (True, "I"): "t5_answer_input",
    (True, "IR"): "t5_answer_with_rationale_input",
    (False, "I"): "causal_answer_input",
    (False, "IR"): "causal_answer_with_rationale_input",
}
TEMPLATE_ORIGINS = {
    "t5_answer_input": "ours (SPEC states no prompt template for F^I)",
    "t5_answer_with_rationale_input": "FEB's answer-given-the-explanation template (SPEC section 8)",
    "causal_answer_input": "ours (SPEC states no prompt template for F^I)",
    "causal_answer_with_rationale_input": "ours (SPEC states no causal template for F^IR)",
}
# The key of a Gen-U job's params that records, per answerer role ("I", "IR"), each distinct
# (backend, template, decoding) the job answered with (:func:`answerer_settings`). The job writes
# it as it runs; a caller may not give it (not in ``params_accepted``).
ANSWERING_KEY = "answering"


def answerer_settings(answerer: RationaleSource, role: str) -> dict:
    """How ``answerer`` answers as ``role`` ("I" or "IR"): its ``backend``, the prompt ``template``
    (a :mod:`studies.lm.templates` function name) with ``template_origin``, and the ``decoding``
    actually used: :data:`ANSWER_DECODING` (greedy, 8 new tokens; ours) under the source's own
    ``decoding`` settings, with a stop at the first newline for causal and OpenAI-compatible
    answerers that set no stop. Every Gen-U figure depends on these, so the job records them."""
    if role not in ROLES:
        raise ValueError(f"role must be 'I' or 'IR', not {role!r}")
    seq2seq = answerer.backend == "seq2seq"
    decoding = decoding_from(answerer.decoding, **ANSWER_DECODING.as_json())
    if not seq2seq and not decoding.stop:
        decoding.stop = ["\n"]
    template = TEMPLATES[(seq2seq, role)]
    return {"backend": answerer.backend, "template": template, "template_origin": TEMPLATE_ORIGINS[template],
            "decoding": decoding.as_json()}


def genu_answerer_check(source: RationaleSource | None, role: str) -> RationaleSource:
    """``source`` if it can answer as F^I (``role`` "I") or F^IR ("IR"); else a GenerationError."""
    label = "answerer_i (F^I)" if role == "I" else "answerer_ir (F^IR)"
    return lm_source(source, label, backends=ANSWERER_BACKENDS)


# What a Gen-U prediction records of its answerer's inputs (``GenUPrediction.inputs``, written by
# :func:`genu_inputs`): a fingerprint (``lab.jsontext.json_fingerprint``) of the question as its prompt
# shows it (:func:`question_fingerprint`), of the rationale F^IR was shown (absent for F^I), of the answerer's
# checkpoint (``inputs._checkpoints_of``: the training record of each checkpoint it loads, as a job's
# settings snapshot records it) and the answerer's own training record, by which scoring names the
# checkpoint that answered once another replaced it.
INPUT_QUESTION, INPUT_RATIONALE, INPUT_CHECKPOINT, INPUT_TRAINING = "question", "rationale", "checkpoint", "training"
# Why a recorded prediction no longer answers the question as it is now (:func:`inputs_changed`).
QUESTION_CHANGED, RATIONALE_CHANGED = "question_changed", "rationale_changed"


def question_fingerprint(text: str) -> str:
    """The fingerprint of a generalization question as an answerer's prompt shows it (:func:`genu_answer`:
    ``common.yes_no_prompt_item``): its text, whitespace aside as the templates write it on one line,
    with the yes/no choices every Gen-U prompt offers. Nothing else of the question reaches the
    answerer (its own choices in ``metadata`` do not), so an edit of nothing else stales no prediction."""
    return json_fingerprint({"text": " ".join(str(text).split()),
                             "choices": [choice["text"] for choice in YES_NO_CHOICES]})


def rationale_fingerprint(text: str) -> str:
    """The fingerprint of the rationale text F^IR is shown."""
    return json_fingerprint(text)


def genu_inputs(*, question: GeneralizationQuestion, rationale: str | None, answerer: RationaleSource,
                checkpoint: dict[str, str]) -> dict:
    """What a prediction of ``answerer`` on ``question`` records of its inputs (``rationale``: the text
    F^IR was shown; None for F^I; ``checkpoint``: ``inputs.source_checkpoints`` of the answerer, computed once a batch)."""
    out = {INPUT_QUESTION: question_fingerprint(question.text), INPUT_CHECKPOINT: checkpoint,
           INPUT_TRAINING: answerer.training or {}}
    if rationale is not None:
        out[INPUT_RATIONALE] = rationale_fingerprint(rationale)
    return out


def inputs_recorded(inputs) -> bool:
    """Whether a prediction records its inputs (one stored before they were recorded, or imported
    from a bundle made before bundles carried them, does not: it is kept and counted as inputs not
    recorded)."""
    return isinstance(inputs, dict) and INPUT_QUESTION in inputs


def inputs_changed(inputs, *, question_text: str, rationale: str | None) -> list[str]:
    """Which of :data:`QUESTION_CHANGED` and :data:`RATIONALE_CHANGED` hold for a prediction's
    recorded ``inputs`` against the question and (for F^IR) the rationale now (``rationale``: its text
    now; None where it records none or the rationale is gone). Empty where nothing changed or
    nothing was recorded (:func:`inputs_recorded`)."""
    if not inputs_recorded(inputs):
        return []
    changed = []
    if inputs[INPUT_QUESTION] != question_fingerprint(question_text):
        changed.append(QUESTION_CHANGED)
    if INPUT_RATIONALE in inputs and (rationale is None or inputs[INPUT_RATIONALE] != rationale_fingerprint(rationale)):
        changed.append(RATIONALE_CHANGED)
    return changed


def checkpoint_replaced(inputs, *, checkpoint_now: dict[str, str], answerer_id: int | None) -> bool:
    """Whether the checkpoint a prediction records (``inputs``) is no longer the one its answerer
    loads (``checkpoint_now``: ``inputs.source_checkpoints`` of the answerer now): a training record
    it recorded changed or went (a fine-tuning or Quark job registered under the answerer's name
    published new weights into its folder), or the answerer has its own record now and had none.
    False where nothing was recorded. A source merely added over the same folder replaces nothing."""
    if not inputs_recorded(inputs) or not isinstance(inputs.get(INPUT_CHECKPOINT), dict):
        return False
    recorded = inputs[INPUT_CHECKPOINT]
    if any(checkpoint_now.get(pk) != fingerprint for pk, fingerprint in recorded.items()):
        return True
    return answerer_id is not None and str(answerer_id) in checkpoint_now and str(answerer_id) not in recorded


def prediction_stale(inputs, *, question: GeneralizationQuestion, rationale: str | None, role: str,
                     checkpoint_now: dict[str, str] | None, answerer_id: int | None) -> bool:
    """Whether a stored prediction is no longer an answer to the question as a job would ask it now:
    its question or (F^IR) rationale changed since (:func:`inputs_changed`), or its answerer's
    checkpoint was replaced (:func:`checkpoint_replaced`; ``checkpoint_now`` None: its answerer is
    not known). A prediction that records no inputs stands (:func:`inputs_recorded`)."""
    if inputs_changed(inputs, question_text=question.text, rationale=rationale if role == "IR" else None):
        return True
    return checkpoint_now is not None and checkpoint_replaced(inputs, checkpoint_now=checkpoint_now,
                                                              answerer_id=answerer_id)


class AnswererCheckpoints:
    """Each answerer's checkpoint now (``inputs.source_checkpoints``), read once per answerer source id:
    None for an answerer gone. What :func:`genu_predictions_standing` and scoring's reading of the
    stored predictions compare a prediction's recorded checkpoint with."""

    def __init__(self):
        self._now: dict[int, dict[str, str] | None] = {}

    def now(self, answerer_id: int) -> dict[str, str] | None:
        if answerer_id not in self._now:
            answerer = RationaleSource.objects.filter(pk=answerer_id).first()
            self._now[answerer_id] = source_checkpoints(answerer) if answerer is not None else None
        return self._now[answerer_id]


def genu_predictions_standing(*, source_id: int, questions: Sequence[GeneralizationQuestion],
                              rationales: dict[int, str], answered_by: Q | None = None) -> set[tuple[int, str]]:
    """The (question id, role) of ``source_id``'s stored predictions on ``questions`` that still
    answer them as asked now (not :func:`prediction_stale`; ``rationales``: the source's rationale
    text of each item), among those ``answered_by`` made when given. One checkpoint read per answerer."""
    by_id = {q.pk: q for q in questions}
    stored = GenUPrediction.objects.filter(rationale_source_id=source_id, generalization_question_id__in=list(by_id))
    if answered_by is not None:
        stored = stored.filter(answered_by)
    checkpoints = AnswererCheckpoints()
    standing = set()
    for question_id, role, answerer_id, inputs in stored.values_list(
            "generalization_question_id", "answerer", "answerer_source_id", "inputs"):
        now = checkpoints.now(answerer_id) if answerer_id is not None and inputs_recorded(inputs) else None
        question = by_id[question_id]
        if not prediction_stale(inputs, question=question, rationale=rationales.get(question.item_id), role=role,
                                checkpoint_now=now, answerer_id=answerer_id):
            standing.add((question_id, role))
    return standing


@dataclass(frozen=True)
class GenUAnswer:
    """One answerer's answer to one question. ``parsed`` False: the output named no choice;
    ``predicted`` is then blank and the question is left out of Gen-U."""

    question_id: int
    item_id: int
    answerer: str  # "I" or "IR"
    predicted: str
    correct: bool
    parsed: bool
    raw: str
    reason: str = ""


def genu_answer(*, questions: Sequence[GeneralizationQuestion], answerer: RationaleSource, role: str,
                rationales: Sequence[str] = (), settings: dict | None = None,
                budget: Budget | None = None) -> list[GenUAnswer]:
    """Answer ``questions`` with ``answerer`` as F^I (``role="I"``) or F^IR (``role="IR"``, with
    ``rationales[i]`` shown beside ``questions[i]``). One batched backend call.

    ``settings``: ``answerer_settings(answerer, role)`` when the caller has it already (a Gen-U
    batch records it for its job), so the answers follow the very settings recorded; computed here
    when not given. ``budget``: the job's (:func:`.common.job_budget`) that an OpenAI-compatible
    answerer's requests count against (bounded by the operator's caps where they carry its key)."""
    if role not in ROLES:
        raise ValueError(f"role must be 'I' or 'IR', not {role!r}")
    if role == "IR" and len(rationales) != len(questions):
        raise ValueError(f"F^IR needs one rationale per question: {len(questions)} questions, {len(rationales)} rationales")
    if not questions:
        return []
    pitems = [yes_no_prompt_item(q.text, dataset=q.item.dataset.name, answer=q.answer) for q in questions]
    seq2seq = answerer.backend == "seq2seq"
    settings = answerer_settings(answerer, role) if settings is None else settings
    make = getattr(templates, settings["template"])
    if role == "I":
        prompts = [make(p) for p in pitems]
    else:
        prompts = [make(p, r) for p, r in zip(pitems, rationales, strict=True)]
    decoding = decoding_from(settings["decoding"])
    parse = parse_t5_answer if seq2seq else parse_causal_answer
    outputs = source_backend(answerer, budget=budget).generate(prompts, decoding)
    answers = []
    for question, pitem, samples in zip(questions, pitems, outputs, strict=True):
        raw = samples[0] if samples else ""
        parsed = parse(raw, pitem)
        failed = isinstance(parsed, ParseFailure)
        label = "" if failed else parsed.answer
        answers.append(GenUAnswer(
            question_id=question.pk, item_id=question.item_id, answerer=role, predicted=label,
            correct=bool(prediction_correct(label, question.answer)), parsed=not failed, raw=raw,
            reason=parsed.reason if failed else "",
        ))
    return answers


@dataclass(frozen=True)
class QuestionScore:
    pair: int  # index into the pairs given to genu_score
    question_id: int
    i: GenUAnswer
    ir: GenUAnswer
    score: int | None  # None: an answer did not parse, the question is left out

    @property
    def counted(self) -> bool:
        return self.score is not None


@dataclass
class GenUResult:
    questions: list[QuestionScore]
    scores: list[int | None]  # Gen-U per pair; None where no question of its item counted
    unparseable: dict[str, int] = field(default_factory=dict)  # {"F^I": n, "F^IR": n}
    question_filter: str = ""
    tie_rule: str = genu.TIE_RULE_TEXT


def genu_score(*, pairs: Sequence[tuple[Item, str]], answerer_i: RationaleSource, answerer_ir: RationaleSource,
               only_valid: bool = True, i_answers: dict[int, GenUAnswer] | None = None,
               budget: Budget | None = None) -> GenUResult:
    """Gen-U of each (item, rationale text) pair, storing nothing. ``budget``: the job's whose
    requests the answerers spend (``genu_answer``; a Quark job's reward).

    F^I answers depend on the question alone: pass the same ``i_answers`` dict to later calls and
    it is filled and reused (a trainer scoring new rationales of the same items asks F^I once).
    Items may repeat (several rationales of one item)."""
    genu_answerer_check(answerer_i, "I")
    genu_answerer_check(answerer_ir, "IR")
    cache = {} if i_answers is None else i_answers
    item_ids = {item.pk for item, _ in pairs}
    questions = list(genu_questions(item_ids=item_ids, only_valid=only_valid)
                     .select_related("item__dataset").order_by("item_id", "pk"))
    by_item: dict[int, list[GeneralizationQuestion]] = {}
    for q in questions:
        by_item.setdefault(q.item_id, []).append(q)
    missing_i = [q for q in questions if q.pk not in cache]
    for answer in genu_answer(questions=missing_i, answerer=answerer_i, role="I", budget=budget):
        cache[answer.question_id] = answer
    ir_questions, ir_rationales, ir_pairs = [], [], []
    for index, (item, rationale) in enumerate(pairs):
        for q in by_item.get(item.pk, []):
            ir_questions.append(q)
            ir_rationales.append(rationale)
            ir_pairs.append(index)
    ir_answers = genu_answer(questions=ir_questions, answerer=answerer_ir, role="IR", rationales=ir_rationales,
                             budget=budget)
    scored: list[QuestionScore] = []
    per_pair: dict[int, list[int]] = {}
    unparseable = {"F^I": 0, "F^IR": 0}
    for pair, ir in zip(ir_pairs, ir_answers, strict=True):
        i = cache[ir.question_id]
        unparseable["F^I"] += not i.parsed
        unparseable["F^IR"] += not ir.parsed
        score = genu.question_score(i.correct, ir.correct) if i.parsed and ir.parsed else None
        scored.append(QuestionScore(pair=pair, question_id=ir.question_id, i=i, ir=ir, score=score))
        if score is not None:
            per_pair.setdefault(pair, []).append(score)
    scores = [genu.mode_score(per_pair[i]) if per_pair.get(i) else None for i in range(len(pairs))]
    return GenUResult(questions=scored, scores=scores, unparseable=unparseable,
                      question_filter=QUESTION_FILTERS[bool(only_valid)])


@dataclass
class GenUBatchOutput(BatchOutput):
    """A Gen-U batch's output and, per answerer role, how it answered (:func:`answerer_settings`)."""

    answering: dict[str, dict] = field(default_factory=dict)


def record_answering(params: dict, answering: dict[str, dict], roles) -> dict:
    """``params`` with each of ``roles``' settings from ``answering`` added to
    ``params[ANSWERING_KEY][role]`` (a list of the distinct settings the job answered with)."""
    recorded = {role: list(entries) for role, entries in (params.get(ANSWERING_KEY) or {}).items()}
    for role in sorted(roles):
        if role in answering and answering[role] not in recorded.setdefault(role, []):
            recorded[role].append(answering[role])
    return {**params, ANSWERING_KEY: recorded} if recorded else params


def _job_answerers(params: dict) -> dict[str, RationaleSource]:
    """The answerer of each role ("I", "IR") that a Gen-U job's ``params`` name."""
    return {role: RationaleSource.objects.get(pk=params[key]) for role, key in ROLES.items()}


def _answered_by(answerers: dict[str, RationaleSource]) -> Q:
    """The Gen-U predictions ``answerers`` (by role) made: those recording that source as their
    answerer, or, for a prediction that records no answerer source, its model path."""
    made = Q()
    for role, answerer in answerers.items():
        made |= Q(answerer=role) & (Q(answerer_source_id=answerer.pk)
                                    | Q(answerer_source__isnull=True, answerer_model=answerer.model_name_or_path))
    return made


def _source_rationales(source_id: int, questions: QuerySet[GeneralizationQuestion]) -> dict[int, str]:
    """``source_id``'s rationale text of each item of ``questions``."""
    return dict(Rationale.objects.filter(source_id=source_id, item_id__in=questions.values("item_id"))
                .values_list("item_id", "text"))


def genu_answerers_refusal(*, source: RationaleSource, questions: QuerySet[GeneralizationQuestion],
                           params: dict, user) -> str:
    """Why a Gen-U job on ``source`` with ``params``' answerers may not answer ``questions``: some
    already have a prediction of ``source`` as F^I or F^IR from another answerer (or, for a prediction
    that records no answerer source, another model path) that still stands (:func:`genu_predictions_standing`:
    a stale one is answered again by the job and replaced in place, whoever answered it). One prediction is stored per (question,
    source, answerer role), so such a job would skip them, end done and compute nothing of its own
    while its page names its answerers. Empty when none: a job with the answerers already stored
    (a rerun, a resume) answers only what is missing. Asked when the job is created and before each
    of its batches (:meth:`GenUHandler.run_batch`: another job may have stored its predictions since).

    ``user``: who the job reads for (``common.job_actor``; None: the operator). Every answerer of the
    stored predictions is named by its model path, once per role; its source id only to a ``user`` who
    may read that source (``sources_for_user``, as the admin's prediction page names it), another as
    "a source you may not read". The advice says when ``user`` may not use some of them as a job's
    answerer (the same rule, the job inputs check), since a job of theirs with those would be refused:
    only their owner can run it."""
    answerers = _job_answerers(params)
    stored = list((GenUPrediction.objects.filter(rationale_source=source, generalization_question__in=questions)
                   .exclude(_answered_by(answerers)))
                  .values_list("generalization_question_id", "answerer", "answerer_source_id", "answerer_model"))
    if stored:
        # Only those that still stand: a stale one (its question, rationale or checkpoint changed
        # since) is answered again by whichever answerers a job has, in place (GenUHandler.store).
        standing = genu_predictions_standing(
            source_id=source.pk, questions=list(questions.filter(pk__in={q for q, _, _, _ in stored})
                                                .only("pk", "item_id", "text")),
            rationales=_source_rationales(source.pk, questions))
        stored = [row for row in stored if (row[0], row[1]) in standing]
    if not stored:
        return ""
    answerer_ids = {answerer_id for _, _, answerer_id, _ in stored if answerer_id is not None}
    usable = answerer_ids if user is None else set(
        sources_for_user(user=user).filter(pk__in=answerer_ids).values_list("pk", flat=True))
    others: dict[str, set] = {}
    unusable_models: set[str] = set()
    for _, role, answerer_id, model in stored:
        if answerer_id is None:
            shown = f"{model} (source not recorded)"
        elif answerer_id in usable:
            shown = f"{model} (source #{answerer_id})"
        else:
            shown = f"{model} (a source you may not read)"
            unusable_models.add(model)
        others.setdefault(role, set()).add(shown)
    n_questions = len({question_id for question_id, _, _, _ in stored})
    named = "; ".join(f"{genu.ANSWERER_NAMES[role]}: {', '.join(sorted(others[role]))}" for role in sorted(others))
    if unusable_models:
        advice = (f"They were answered by answerers you may not use ({', '.join(sorted(unusable_models))}): "
                  f"ask their owner, who may run the Gen-U job of {source.name!r} with them; a job of yours with "
                  "them would be refused.")
    elif any(len(names) > 1 for names in others.values()):
        advice = ("They were answered by different answerers: run a job with each pair of stored answerers on the "
                  "items that pair answered to answer questions added since.")
    else:
        advice = "Run it with the stored answerers to answer questions added since."
    return (f"{n_questions} of this job's generalization questions already have Gen-U predictions of "
            f"{source.name!r} from other answerers ({named}). One prediction is kept per question, source and "
            f"answerer role, so this job would answer none of them with {answerers['I'].name!r} / "
            f"{answerers['IR'].name!r} and every Gen-U figure of {source.name!r} would stay the stored answerers'. "
            f"{advice} Gen-U predictions are read-only in the admin, so the stored ones cannot be deleted or "
            "replaced there.")


def genu_active_jobs_refusal(job: GenerationJob, *, user) -> str:
    """Why ``job`` may not be created or resumed: another Gen-U job on its source, queued or
    running, answers some of its items with other answerers. Whichever stored its predictions
    first, the other would skip them (:func:`genu_answerers_refusal`, which it then stops on).
    Empty when none; a job with the same answerers may run beside it (stored predictions are kept
    once).

    ``user``: who is told (None: the operator, told everything). A job they may read
    (``generation_jobs_for_user``: their own, or any with ``studies.view_generationjob``) is named
    by its id, status and answerers (each answerer's id only where they may read that source,
    ``sources_for_user``); another as another researcher's queued or running Gen-U job, without its
    id or answerers."""
    mine = (job.params.get("answerer_i"), job.params.get("answerer_ir"))
    items = set(job.item_ids)
    active = (GenerationJob.objects.filter(kind=GenerationJob.Kind.GENU_ANSWERS, source_id=job.source_id,
                                           status__in=[GenerationJob.Status.QUEUED, GenerationJob.Status.RUNNING])
              .exclude(pk=job.pk).order_by("pk").only("pk", "status", "params", "item_ids"))
    clashing = [other for other in active
                if (other.params.get("answerer_i"), other.params.get("answerer_ir")) != mine
                and items.intersection(other.item_ids or [])]
    if not clashing:
        return ""
    if user is None:
        readable_jobs = {other.pk for other in clashing}
        readable_sources = {other.params.get(key) for other in clashing for key in ROLES.values()}
    else:
        readable_jobs = set(generation_jobs_for_user(user=user, access=VIEW)
                            .filter(pk__in=[other.pk for other in clashing]).values_list("pk", flat=True))
        readable_sources = set(sources_for_user(user=user).filter(
            pk__in=[other.params.get(key) for other in clashing for key in ROLES.values()])
            .values_list("pk", flat=True))

    def answerer(pk) -> str:
        return f"source #{pk}" if pk in readable_sources else "a source you may not read"

    named = "; ".join(
        f"job {other.pk} ({other.get_status_display().lower()}; F^I: {answerer(other.params.get('answerer_i'))}, "
        f"F^IR: {answerer(other.params.get('answerer_ir'))})" if other.pk in readable_jobs
        else f"another researcher's {other.get_status_display().lower()} Gen-U job"
        for other in clashing)
    advice = ("Run this job with that job's answerers, or on other items, or once it has ended with the answerers "
              "it stored." if readable_jobs == {other.pk for other in clashing}
              else "Run this job on other items, or once that job has ended with the answerers it stored.")
    return (f"another Gen-U job on {job.source.name!r} answers some of this job's items with other answerers: "
            f"{named}. One prediction is kept per question, source and answerer role, so whichever job stored "
            f"its predictions first, the other would answer none of them. {advice}")


# What a rerun writes over a prediction it answered again (GenUHandler.store).
REPLACED_FIELDS = ("answerer_source", "answerer_model", "predicted_answer", "correct", "raw_output", "inputs",
                   "created_at")


class GenUHandler(ItemHandler):
    kind = GenerationJob.Kind.GENU_ANSWERS
    # max_requests / max_tokens: the budget cap of its OpenAI-compatible answerers' requests (both
    # answerers' together; bounded by the operator's caps where they carry its key: job_budget).
    params_accepted = frozenset({"answerer_i", "answerer_ir", "only_valid", "max_requests", "max_tokens"})
    # Its predictions hang from its items' questions and its source, and the studies on them score
    # those (one per question, source and answerer role): only items and a source its researcher
    # may build on, as for rationales and questions.
    builds_on_items = True

    def prepare(self, *, source, generator, dataset, split, item_ids, limit, params):

        if source is None:  # any source: imported rationales have a Gen-U as much as generated ones
            raise GenerationError("choose the rationale source")
        source_to_build_on_check(source)
        for role, key in ROLES.items():
            answerer = RationaleSource.objects.filter(pk=params.get(key)).first()
            params[key] = genu_answerer_check(answerer, role).pk
        params["only_valid"] = bool(params.get("only_valid", True))
        ids = ordered_item_ids(dataset=dataset, split=split, item_ids=item_ids, limit=None,
                               build_on=self.builds_on_items)
        with_rationale = set(Rationale.objects.filter(source=source, item_id__in=ids).values_list("item_id", flat=True))
        questions = genu_questions(item_ids=with_rationale, only_valid=params["only_valid"])
        with_questions = set(questions.values_list("item_id", flat=True))
        ids = [i for i in ids if i in with_questions][: limit or None]
        if not ids:
            which = "validated generalization questions" if params["only_valid"] else "generalization questions"
            hint = (" (validate questions with a question-validation study or in the admin, or choose to run on "
                    "unvalidated questions)" if params["only_valid"] else "")
            raise GenerationError(f"no item has both a rationale from {source.name!r} and {which} to answer{hint}")
        return Prepared(item_ids=ids, params=params, total=len(ids), split=split)

    def _answerers_refusal(self, job):
        """:func:`genu_answerers_refusal` on ``job``'s questions, for its researcher."""
        return genu_answerers_refusal(source=job.source, questions=self._questions(job, job.item_ids),
                                      params=job.params, user=job_actor(job))

    def before_save(self, job):
        """Refuse a job whose questions already have predictions of its source from other answerers
        (:func:`genu_answerers_refusal`, told which of those its researcher may not use), or that
        another active Gen-U job on its source answers with other answerers
        (:func:`genu_active_jobs_refusal`)."""
        refusal = self._answerers_refusal(job) or genu_active_jobs_refusal(job, user=job_actor(job))
        if refusal:
            raise GenerationError(refusal)

    def resume_refusal(self, job, *, user):
        """The creation check on other active Gen-U jobs again (:func:`genu_active_jobs_refusal`, told
        to ``user``, who resumes it): another job may have been created while this one was failed or
        cancelled, and both queued, whichever ran first the other would fail."""
        return genu_active_jobs_refusal(job, user=user)

    def run_batch(self, job):
        # The creation check again, before each batch: another job (created before this one stored
        # anything, or this one resumed after it) may have stored predictions of the source from other
        # answerers since. This job would never answer those questions (one prediction is kept per
        # question, source and role), so it stops, failed with why, instead of ending done with
        # nothing asked; processed_among counts only its own answerers' predictions, so a batch whose
        # items another job answered meanwhile leaves them to do and the next start stops here.
        refusal = self._answerers_refusal(job)
        if refusal:
            generation_job_fail(job_id=job.pk, error=refusal)
            return False
        return super().run_batch(job)

    def _questions(self, job, ids):

        return genu_questions(item_ids=ids, only_valid=job.params.get("only_valid", True))

    def processed_among(self, job, ids):
        # Only this job's answerers' predictions make an item done: one another job stored meanwhile
        # leaves it to do, and the next batch's start stops the job (run_batch). A prediction whose
        # question or rationale changed, or whose answerer's checkpoint was replaced, since it was
        # made leaves its item to do too: the batch answers it again (genu_predictions_standing).
        asked = self._questions(job, ids)
        questions = list(asked.only("pk", "item_id", "text"))
        have = genu_predictions_standing(source_id=job.source_id, questions=questions,
                                         rationales=_source_rationales(job.source_id, asked),
                                         answered_by=_answered_by(_job_answerers(job.params)))
        incomplete = {q.item_id for q in questions if (q.pk, "I") not in have or (q.pk, "IR") not in have}
        return {i for i in ids if i not in incomplete} | failed_item_ids(job, ids)

    def generate(self, job, item_ids):

        source = job.source
        rationales = {r.item_id: r.text for r in Rationale.objects.filter(source=source, item_id__in=item_ids)}
        questions = list(self._questions(job, item_ids).filter(item_id__in=rationales)
                         .select_related("item__dataset").order_by("item_id", "pk"))
        # What stands is kept; a prediction made on a question or rationale edited since, or by a
        # checkpoint replaced since, is answered again (store replaces it).
        have = genu_predictions_standing(source_id=source.pk, questions=questions, rationales=rationales)
        by_id = {q.pk: q for q in questions}
        out = GenUBatchOutput(units=len(item_ids))
        out.failures.extend(rationale_gone_failures(job, item_ids, with_rationale=rationales, what="answer"))
        budget = job_budget(job)  # one for the batch: both answerers' requests count against the job's caps
        for role, key in ROLES.items():
            answerer = RationaleSource.objects.get(pk=job.params[key])
            todo = [q for q in questions if (q.pk, role) not in have]
            out.answering[role] = settings = answerer_settings(answerer, role)  # once per answerer and batch
            checkpoint = source_checkpoints(answerer)
            answers = genu_answer(questions=todo, answerer=answerer, role=role, settings=settings, budget=budget,
                                  rationales=[rationales[q.item_id] for q in todo] if role == "IR" else ())
            for answer in answers:
                question = by_id[answer.question_id]
                out.predictions.append(GenUPrediction(
                    generalization_question=question, rationale_source=source, answerer=role,
                    answerer_source=answerer, answerer_model=answerer.model_name_or_path,
                    predicted_answer=answer.predicted,
                    correct=answer.correct, raw_output=answer.raw,
                    inputs=genu_inputs(question=question, answerer=answerer, checkpoint=checkpoint,
                                       rationale=rationales[question.item_id] if role == "IR" else None),
                ))
                if not answer.parsed:
                    out.failures.append(GenerationFailure(
                        job=job, item=question.item, unit=f"{role}:q{question.pk}", raw_output=answer.raw,
                        reason=f"{answer.reason} (the question is left out of Gen-U)"))
        return out

    def store(self, job, output):
        question_ids = {p.generalization_question_id for p in output.predictions}
        existing = dict((((q, role), pk) for pk, q, role in GenUPrediction.objects.filter(
            rationale_source_id=job.source_id, generalization_question_id__in=question_ids,
        ).values_list("pk", "generalization_question_id", "answerer")))
        # A stored prediction is replaced in place where it no longer stands (prediction_stale: its
        # question, rationale or answerer's checkpoint changed since), whichever answerer made it; one
        # that stands (stored meanwhile by another delivery, or recording no inputs) is kept. One row
        # per (question, source, role) either way. Read now, beside the write.
        questions = GeneralizationQuestion.objects.filter(pk__in=question_ids)
        standing = genu_predictions_standing(
            source_id=job.source_id, questions=list(questions.only("pk", "item_id", "text")),
            rationales=_source_rationales(job.source_id, questions)) if existing else set()
        new = []
        for p in output.predictions:
            key = (p.generalization_question_id, p.answerer)
            if key not in existing:
                new.append(p)
            elif key not in standing:
                p.pk = existing[key]
                new.append(p)
        # The job acts for the researcher who started it. A study's Gen-U is computed from the
        # predictions of its items for its sources, the ones whose rationale it shows: an item's
        # predictions are not theirs to add when a study they may not change uses the source's
        # rationale of that item (studies.services.content, its studies locked until this batch
        # commits); they are kept as one failure per item, in place of its unparsed-answer ones.
        # Nor are they theirs to add under an item or source they may not build on now (a share
        # lowered to view since the job was created), as for the kinds that write under items
        # (job_added_refusals); a job whose researcher's account was deleted was checked at creation.
        actor, pairs = job_actor(job), {(p.generalization_question.item_id, job.source_id) for p in new}
        parents = gen_u_parent_refusals(user=actor, pairs=pairs) if job.created_by_id is not None else {}
        refused = {item_id: NOT_TO_BUILD_ON.format(what="Gen-U prediction", reason=reason)
                   for (item_id, _), reason in parents.items()}
        refused.update({item_id: NOT_YOURS_TO_CHANGE.format(what="rationale") for item_id, _ in gen_u_added_refusals(
            user=actor, pairs=pairs - parents.keys())})
        if refused:
            new = [p for p in new if p.generalization_question.item_id not in refused]
            output.predictions = [p for p in output.predictions if p.generalization_question.item_id not in refused]
            output.failures = [f for f in output.failures if f.item_id not in refused]
            output.failures.extend(GenerationFailure(job=job, item_id=item_id, unit="", raw_output="",
                                                     reason=refused[item_id])
                                   for item_id in sorted(refused))
        replaced = [p for p in new if p.pk is not None]
        for p in replaced:
            p.created_at = timezone.now()
        GenUPrediction.objects.bulk_update(replaced, REPLACED_FIELDS)
        GenUPrediction.objects.bulk_create([p for p in new if p.pk is None])
        store_failures(job, output.failures)
        # How the stored predictions were answered: the job's own record (run_batch saves its params).
        answering = getattr(output, "answering", {})
        job.params = record_answering(job.params, answering, {p.answerer for p in new})
