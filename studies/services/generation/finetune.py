"""Fine-tuning jobs: T5 as a self-rationalizer (FEB explain format) or as one of the two Gen-U
answerers (F^I: question only; F^IR: question plus the original item's rationale).

A :class:`GenerationJob` of kind ``finetune`` (:class:`FinetuneHandler`; started by the admin
action or ``manage.py finetune_t5``, see :mod:`.training`): one long batch that trains, then
publishes the checkpoint to ``settings.RL_MODEL_DIR/<name>`` and registers it as a rationale
source (kind lm, backend seq2seq, the folder as model path) through :mod:`.lifecycle`.

Training examples come from the dataset's split (``train`` by default); ``n_shot`` draws that
many items with ``seed``. F^IR trains on the items' gold rationales. The answerers train on the
split's items only; adding the split's generalization questions (not marked invalid, each paired
with its original's gold rationale for F^IR) is an explicit choice, ``include_generalization``,
that the checkpoint records as an override.

Settings come from a named preset (:data:`PRESETS`) that says what it reproduces; each value can
be overridden, and each preset serves the modes it names:

- ``paper-answerers`` (F^I, F^IR; their default): the paper's answerers are two T5-base models
  fine-tuned on StrategyQA, F^I on the question, F^IR on the question and a rationale. The rest is
  our reading, not the paper's word: the whole train split, F^IR with the items' gold rationales,
  no generalization questions; and the paper gives no epochs, learning rate or batch size for
  them: ours are 25 epochs (the paper's for F), lr 3e-5 and batch 4 (FEB's few-shot script), seed 0.
- ``paper-quark-start`` (the rationalizer's default): F as the paper's Quark starting point,
  T5-large for 25 epochs (SPEC section 9) on the full training set (issue 21's quote; SPEC does not
  say); lr 3e-5 and batch 4 from FEB's script, seed 0 ours.
- ``feb-few-shot`` (rationalizer): a few-shot T5-3B source (SPEC section 3 names T5-3B; that it is
  few-shot with FEB's 48 examples is issue 21's quote), 48 examples (which 48: our seeded draw);
  lr 3e-5 and batch 4 from FEB's script, but 25 epochs and our schedule, not the script's 300 steps
  at a constant rate without warm-up.
- ``quick`` (any mode): a smoke test that the pipeline runs; no published figure comes from it.

What each preset takes from the paper (``from_paper``) is only what SPEC.md states; ``STATED_IN``
says where, for each. What only issue 21's quote of the paper gives (SPEC does not) is
``from_issue_21``, with the quote in ``QUOTED_IN_ISSUE_21``; both are recorded with the checkpoint. Where the other values come from is in
:data:`NOT_FROM_PAPER` and each preset's description. The optimizer and schedule (AdamW, weight
decay, warm-up, gradient clipping) are the training loop's (:mod:`studies.lm.training`), the same
for every preset, and recorded with each checkpoint.

The settings used, the preset, which values were overridden and the data (dataset, split, items,
examples, generalization questions, which rationales) are recorded with each checkpoint: on its
rationale source (``RationaleSource.training``) and in ``rationale_lab_training.json`` in its folder.
"""
from __future__ import annotations

import json
import math
import random

from django.db.models import QuerySet

from studies.lm import templates
from studies.lm.backends import select_device
from studies.lm.training import schedule_description, train_seq2seq, training_schedule
from studies.models import Dataset, GeneralizationQuestion, GenerationJob, Item, RationaleSource
from studies.selectors import items_for_jobs
from studies.services.model_paths import model_location, model_path_stored

from .common import Handler, Prepared, job_actor, prompt_item
from .errors import GenerationError
from .inputs import TRAIN_ITEM_IDS
from .lifecycle import (
    TRAINING_FILE,
    StepProgress,
    generation_job_fail,
    generation_job_finish,
    job_goes_on,
    model_folder,
    model_folder_publish,
    model_source_register,
    output_name_check,
    slug,
)
from .quark import _number

MODES = {
    "rationalizer": "T5 self-rationalizer (answer and rationale)",
    "answer_i": "Gen-U answerer F^I (question only)",
    "answer_ir": "Gen-U answerer F^IR (question and rationale)",
}
# The shared values of the paper presets, and where each comes from. FEB's authors' few-shot
# script (their repository allenai/feb, scripts/exp.py: learning_rate 3e-5, per_device_train_batch_size 4) gives lr
# and batch size; it trains max_steps 300 with warmup_steps 0 and a constant rate over 60 seeds, not
# epochs. 25 epochs is the paper's for F, the self-rationalizer (issue 21, SPEC.md section 9), used
# for the other presets too; seed 0 is ours.
FEB_SCRIPT = {"batch_size": 4, "lr": 3e-5}
PAPER_PRESET_VALUES = {"epochs": 25, **FEB_SCRIPT, "seed": 0}
FROM_FEB_SCRIPT = ("the FEB authors' few-shot script (their repository, allenai/feb scripts/exp.py: learning_rate "
                   "3e-5, batch size 4)")
SCHEDULE = schedule_description()
# Each preset: what it reproduces (description), the modes it serves, its values, and which of
# them SPEC says the paper states (from_paper, each with where it is stated: STATED_IN), which only
# issue 21's quote gives (from_issue_21: QUOTED_IN_ISSUE_21); the others are ours or FEB's script's
# (NOT_FROM_PAPER), and the description says which.
PRESETS = {
    "paper-answerers": {
        "description": ("Gen-U's F^I and F^IR: T5-base, as in the paper (two T5-base models fine-tuned on "
                        "StrategyQA), F^I on question -> answer, F^IR on question + rationale -> answer. Our reading, "
                        "which the paper does not state: the whole train split, F^IR with the items' gold "
                        "rationales, no generalization questions. The paper gives no epochs, learning rate or batch "
                        "size for them: ours are 25 epochs (the paper's for F, the self-rationalizer), lr 3e-5 and "
                        f"batch 4 (FEB's few-shot script), seed 0; {SCHEDULE} (ours)"),
        "modes": ("answer_i", "answer_ir"),
        "all": {**PAPER_PRESET_VALUES, "n_shot": None, "include_generalization": False,
                "base_model_in_paper": "t5-base"},
        "from_paper": ("base_model_in_paper",),
    },
    "paper-quark-start": {
        "description": ("the self-rationalizer F as the paper's Quark starting point: T5-large for 25 epochs (SPEC "
                        "section 9) on the full training set (issue 21's quote; SPEC does not say); lr 3e-5 and "
                        f"batch 4 from FEB's few-shot script, seed 0 ours; {SCHEDULE} (ours)"),
        "modes": ("rationalizer",),
        "all": {**PAPER_PRESET_VALUES, "n_shot": None, "include_generalization": False,
                "base_model_in_paper": "t5-large"},
        "from_paper": ("base_model_in_paper", "epochs"),
        "from_issue_21": ("n_shot",),
    },
    "feb-few-shot": {
        "description": ("a few-shot T5-3B source (SPEC section 3 names T5-3B; few-shot with FEB's 48 training "
                        "examples is issue 21's quote; which 48: our draw with the seed); lr 3e-5 and batch 4 from FEB's "
                        "few-shot script; 25 epochs (the "
                        f"paper's for F) and seed 0 ours; {SCHEDULE} (ours: FEB's script trains 300 steps at a "
                        "constant rate without warm-up, over 60 seeds)"),
        "modes": ("rationalizer",),
        "all": {**PAPER_PRESET_VALUES, "n_shot": 48, "include_generalization": False, "base_model_in_paper": "t5-3b"},
        "from_paper": ("base_model_in_paper",),
        "from_issue_21": ("n_shot",),
    },
    "quick": {
        "description": (f"a smoke test (3 epochs at lr 3e-4, batch 8; {SCHEDULE}) that shows the pipeline runs; "
                        "no published figure should come from it"),
        "modes": tuple(MODES),
        "all": {"epochs": 3, "batch_size": 8, "lr": 3e-4, "seed": 0, "n_shot": None, "include_generalization": False},
        "from_paper": (),
    },
}
# Where the paper's word for each ``from_paper`` value is in SPEC.md (with issue 21 where it agrees);
# a value SPEC does not give is not in ``from_paper``: issue 21's quote (``QUOTED_IN_ISSUE_21``) or ours.
STATED_IN = {
    "paper-answerers": {
        "base_model_in_paper": "SPEC.md section 4 ('the paper fine-tunes two T5-base models on StrategyQA'); issue 21",
    },
    "paper-quark-start": {
        "base_model_in_paper": "SPEC.md section 9 ('The paper fine-tuned T5-large for 25 epochs first'); issue 21",
        "epochs": "SPEC.md section 9; issue 21",
    },
    "feb-few-shot": {
        "base_model_in_paper": "SPEC.md section 3 (T5-3B is one of the paper's LMs); issue 21",
    },
    "quick": {},
}
# Preset values that only issue 21's quote of the paper gives (SPEC.md does not): ``from_issue_21``.
QUOTED_IN_ISSUE_21 = {
    "paper-quark-start": {
        "n_shot": "issue 21 ('T5-large fine-tuned on the whole training set for 25 epochs before Quark')",
    },
    "feb-few-shot": {
        "n_shot": "issue 21 ('the paper's T5-3B source is few-shot (FEB, 48 examples)')",
    },
}
# Where each preset value that is not the paper's comes from: FEB's script, or ours.
NOT_FROM_PAPER = {
    "paper-answerers": {"epochs": "ours (the paper's 25 epochs for F, the self-rationalizer)",
                        "lr": FROM_FEB_SCRIPT, "batch_size": FROM_FEB_SCRIPT, "seed": "ours"},
    "paper-quark-start": {"lr": FROM_FEB_SCRIPT, "batch_size": FROM_FEB_SCRIPT, "seed": "ours"},
    "feb-few-shot": {"epochs": "ours (the paper's 25 epochs for F; FEB's script trains 300 steps)",
                     "lr": FROM_FEB_SCRIPT, "batch_size": FROM_FEB_SCRIPT, "seed": "ours"},
    "quick": {"epochs": "ours", "lr": "ours", "batch_size": "ours", "seed": "ours"},
}
DEFAULT_PRESETS = {"rationalizer": "paper-quark-start", "answer_i": "paper-answerers", "answer_ir": "paper-answerers"}
LENGTHS = {"max_source_length": 512, "max_target_length": 128}
RECORDED = ("preset", "preset_description", "overrides", "mode", "base_model", "base_model_in_paper", "n_shot",
            "include_generalization", "epochs", "steps", "batch_size", "lr", "seed", "examples",
            "max_source_length", "max_target_length", "data", "from_paper", "from_issue_21",
            # the training loop's optimizer and schedule (studies.lm.training.training_schedule)
            "optimizer", "weight_decay", "warmup", "clip_grad_norm")


def preset_values(preset: str, mode: str) -> dict:
    """The settings of ``preset`` for ``mode``; a preset made for other modes is refused."""
    if preset not in PRESETS:
        raise GenerationError(f"unknown fine-tuning preset {preset!r}: choose one of {', '.join(PRESETS)}")
    chosen = PRESETS[preset]
    if mode not in chosen["modes"]:
        fits = ", ".join(name for name, p in PRESETS.items() if mode in p["modes"])
        raise GenerationError(f"preset {preset!r} is for {', '.join(chosen['modes'])}, not {mode}: for {mode} "
                              f"choose {fits}")
    return {**LENGTHS, **chosen["all"]}


def _items(dataset: Dataset, split: str, n_shot: int | None, seed: int,
           readable: QuerySet[Item] | None = None, item_ids: list[int] | None = None) -> tuple[list[Item], int]:
    """(the split's items to train on, how many of the split's items were left out because the
    job's researcher may not read them): ``readable`` the items they may read, None: all (the
    operator's job); ``n_shot`` of them drawn with ``seed``. ``item_ids``: the items a job recorded
    when it was created (:data:`TRAIN_ITEM_IDS`): those of them still in the split and readable,
    in their recorded order, with no new draw (items added to the split since change nothing;
    fewer items than recorded are the caller's to refuse)."""
    split_items = Item.objects.filter(dataset=dataset, split=split)
    in_split = split_items.count() if readable is not None else None
    if readable is not None:
        split_items = split_items.filter(pk__in=readable.values("pk"))
    items = list(split_items.order_by("pk"))
    left_out = in_split - len(items) if in_split is not None else 0
    if item_ids is not None:
        by_pk = {item.pk: item for item in items}
        return [by_pk[pk] for pk in dict.fromkeys(item_ids) if type(pk) is int and pk in by_pk], left_out
    if n_shot is not None:
        if n_shot < 1:
            raise GenerationError("n_shot must be at least 1 (leave it empty for the full split)")
        if n_shot > len(items):
            which = (f" that the job's researcher may read ({left_out} of the split's {in_split} left out)"
                     if left_out else "")
            raise GenerationError(f"n_shot {n_shot} is more than the {len(items)} items of {dataset.name!r} {split}"
                                  f"{which}")
        items = random.Random(seed).sample(items, n_shot)
    return items, left_out


def training_pairs(*, dataset: Dataset, split: str, mode: str, n_shot: int | None = None, seed: int = 0,
                   include_generalization: bool = False,
                   readable: QuerySet[Item] | None = None,
                   item_ids: list[int] | None = None) -> tuple[list[tuple[str, str]], dict, list[int]]:
    """(input, target) pairs in the FEB formats the generation code reads back, what they
    were made of (recorded with the checkpoint): dataset, split, items, examples, generalization
    questions, which rationales, and for a researcher's job ``items_left_out``: how many of the
    split's items were left out because they may not read them (``readable``: the items they may
    read, ``studies.selectors.items_for_jobs``; None: every item, the operator's job, which records
    no such count); and the ids of the items trained on (the job's :data:`TRAIN_ITEM_IDS`, not the
    checkpoint's record). ``item_ids``: those a job recorded, trained on again rather than drawn
    anew (:func:`_items`)."""
    if mode not in MODES:
        raise GenerationError(f"unknown fine-tuning mode {mode!r}: choose one of {', '.join(MODES)}")
    items, left_out = _items(dataset, split, n_shot, seed, readable, item_ids)
    pairs: list[tuple[str, str]] = []
    for item in items:
        p = prompt_item(item, dataset.name)
        if mode == "rationalizer":
            if item.gold_rationale.strip():
                pairs.append((templates.t5_explain_input(p), templates.t5_explain_target(p)))
        elif mode == "answer_i":
            pairs.append((templates.t5_answer_input(p), templates.t5_answer_target(p)))
        elif item.gold_rationale.strip():
            pairs.append((templates.t5_answer_with_rationale_input(p, item.gold_rationale), templates.t5_answer_target(p)))
    from_items = len(pairs)
    if mode != "rationalizer" and include_generalization and dataset.is_yes_no:
        by_item = {i.pk: i for i in items}
        questions = GeneralizationQuestion.objects.filter(item_id__in=by_item).exclude(
            validation_status=GeneralizationQuestion.Validation.INVALID).order_by("pk")
        for q in questions:
            original = by_item[q.item_id]
            gp = templates.PromptItem(question=q.text, choices=tuple((c["label"], c["text"]) for c in original.choices),
                                      dataset=dataset.name, answer=q.answer)
            if mode == "answer_i":
                pairs.append((templates.t5_answer_input(gp), templates.t5_answer_target(gp)))
            elif original.gold_rationale.strip():
                pairs.append((templates.t5_answer_with_rationale_input(gp, original.gold_rationale),
                              templates.t5_answer_target(gp)))
    if not pairs:
        raise GenerationError(
            f"no training examples for {mode} in {dataset.name!r} {split}"
            + (f" among the items the job's researcher may read ({left_out} left out)" if left_out else "")
            + (": the items have no gold rationale" if mode != "answer_i" and items else "")
        )
    rationales = {
        "rationalizer": f"gold rationales of {dataset.name} {split} (targets)",
        "answer_i": None,
        "answer_ir": f"gold rationales of {dataset.name} {split}",
    }[mode]
    data = {"dataset": dataset.name, "split": split, "items": len(items), "examples_from_items": from_items,
            "generalization_questions": len(pairs) - from_items, "rationales": rationales}
    if readable is not None:  # a researcher's job: how many of the split's items they may not read
        data["items_left_out"] = left_out
    return pairs, data, [item.pk for item in items]


# Each number a fine-tuning job takes: its type and bounds (checked and cast by ``_number``, as
# Quark's parameters are); None (or left out) takes the preset's.
MAX_INT = 2**31 - 1  # the job's ``total`` (its steps) is a database integer
NUMBERS = {  # key: (type, lowest, highest or None)
    "epochs": (int, 1, MAX_INT), "steps": (int, 1, MAX_INT), "batch_size": (int, 1, MAX_INT),
    "n_shot": (int, 1, MAX_INT), "lr": (float, -math.inf, None),  # lr: positive and finite, checked below
    "seed": (int, 0, 2**32 - 1), "max_source_length": (int, 1, MAX_INT), "max_target_length": (int, 1, MAX_INT),
}
TEXTS = ("mode", "preset", "base_model", "output_name")


def _checked(given: dict) -> dict:
    """``given`` with each number checked and cast (:data:`NUMBERS`), the texts checked
    (:data:`TEXTS`) and ``include_generalization`` a flag; a GenerationError naming the parameter
    and why otherwise."""
    checked = dict(given)
    for key in TEXTS:
        if key in checked and not isinstance(checked[key], str):
            raise GenerationError(f"{key} must be text, not {checked[key]!r}")
    for key, (cast, low, high) in NUMBERS.items():
        if key not in checked:
            continue
        value = checked[key]
        if cast is int and isinstance(value, float) and not isinstance(value, bool) and not value.is_integer():
            raise GenerationError(f"{key} must be a whole number, not {value!r}")
        number = _number(checked, key, cast, low=low, high=high)
        if cast is float and not math.isfinite(number):
            raise GenerationError(f"{key} must be a finite number, not {value!r}")
        if key == "lr" and number <= 0:
            raise GenerationError(f"lr must be positive, not {value!r}")
        checked[key] = number
    if "include_generalization" in checked and not isinstance(checked["include_generalization"], bool):
        raise GenerationError(f"include_generalization must be true or false, not {checked['include_generalization']!r}")
    return checked


def finetune_settings(*, dataset: Dataset, split: str, params: dict) -> dict:
    """The settings part of :func:`finetune_params`: the preset's values, then the given ones,
    each checked and cast (:func:`_checked`); which given values differ from the preset; the output
    name. No data is read: that is :func:`finetune_data`'s, for the job's researcher."""
    given = _checked({k: v for k, v in params.items() if v is not None})
    mode = given.get("mode", "rationalizer")
    if mode not in MODES:
        raise GenerationError(f"unknown fine-tuning mode {mode!r}: choose one of {', '.join(MODES)}")
    preset = given.get("preset") or DEFAULT_PRESETS[mode]
    base = preset_values(preset, mode)
    merged = {**base, **given, "mode": mode, "preset": preset, "preset_description": PRESETS[preset]["description"]}
    overrides = {k for k, v in given.items() if k in base and base[k] != v}
    if split != "train":  # every preset trains on the train split
        overrides.add("split")
    merged["overrides"] = sorted(overrides)
    merged["from_paper"] = [k for k in PRESETS[preset]["from_paper"] if k not in overrides]
    merged["from_issue_21"] = [k for k in PRESETS[preset].get("from_issue_21", ()) if k not in overrides]
    if not merged.get("base_model"):
        hint = f" (the paper used {base['base_model_in_paper']})" if base.get("base_model_in_paper") else ""
        raise GenerationError(f"base_model is required: a model name or a local folder{hint}")
    shots = f"{merged['n_shot']}shot" if merged.get("n_shot") else "full"
    merged.setdefault("output_name", f"{dataset.name}-{mode}-{shots}-{slug(str(merged['base_model']).rstrip('/').split('/')[-1])}")
    merged["base_model"] = model_path_stored(merged["base_model"])  # a folder of RL_MODEL_DIR kept relative to it
    return merged


# ``TRAIN_ITEM_IDS`` (``inputs``): the key of a fine-tuning job's params holding the ids of the
# items it trains on, recorded when it is created: ``inputs._items_check`` checks at each of the
# job's progress reports that its researcher may still read each of them, as it checks other jobs'
# ``item_ids`` (a fine-tuning job has none), and :func:`_train` trains on exactly these (not a new
# draw, which an item added to the split since would change), refusing when some are gone.


def finetune_data(*, dataset: Dataset, split: str, settings: dict, readable: QuerySet[Item] | None = None) -> dict:
    """``settings`` (:func:`finetune_settings`) completed with the data: the training pairs'
    record (``data``, with ``items_left_out``: the split's items the job's researcher may not read,
    ``readable``; None: every item, the operator's job), the ids of the items trained on
    (:data:`TRAIN_ITEM_IDS`), ``examples``, and ``steps`` computed from epochs unless given, with the
    schedule the loop will use."""
    merged = dict(settings)
    pairs, merged["data"], merged[TRAIN_ITEM_IDS] = training_pairs(
        dataset=dataset, split=split, mode=merged["mode"], n_shot=merged.get("n_shot"), seed=int(merged["seed"]),
        include_generalization=bool(merged["include_generalization"]), readable=readable)
    merged["examples"] = len(pairs)
    if not settings.get("steps"):
        merged["steps"] = max(1, -(-len(pairs) * int(merged["epochs"]) // int(merged["batch_size"])))
        if merged["steps"] > MAX_INT:
            raise GenerationError(f"epochs {merged['epochs']} make {merged['steps']} steps for {len(pairs)} examples "
                                  f"at batch size {merged['batch_size']}: at most {MAX_INT}")
    merged["steps"] = int(merged["steps"])
    merged.update(training_schedule(merged["steps"]))  # what the loop will use, shown with the job
    return merged


def finetune_params(*, dataset: Dataset, split: str, params: dict, readable: QuerySet[Item] | None = None) -> dict:
    """Validate and complete fine-tuning parameters: the preset's values, then the given ones, each
    number checked and cast (a GenerationError names the parameter and why); computes ``steps`` from
    epochs. Records which given values differ from the preset. ``readable``: train only on these of
    the split's items (the job's researcher's, ``items_for_jobs``); None: on all of them."""
    return finetune_data(dataset=dataset, split=split, settings=finetune_settings(dataset=dataset, split=split,
                                                                                  params=params),
                         readable=readable)


def job_readable_items(job: GenerationJob) -> QuerySet[Item] | None:
    """The items ``job`` may train on: those its researcher may read (``items_for_jobs``); None
    (every item) for the operator's job."""
    actor = job_actor(job)
    return None if actor is None else items_for_jobs(user=actor)


def training_record(*, job: GenerationJob, params: dict, final_loss: float, device: str) -> dict:
    """What is recorded with a checkpoint: every setting used, the preset, the data and the outcome."""
    record = {key: params.get(key) for key in RECORDED}
    record.update(training_schedule(int(params["steps"])))  # what the loop used (a job queued before it said)
    record.update({"dataset": job.dataset.name, "split": job.split or "train", "final_loss": final_loss,
                   "job_id": job.pk, "device": device})
    return record


def finetune_job_run(*, job: GenerationJob) -> RationaleSource | None:
    """Train, publish and register. Idempotent: a job whose source is registered just finishes.
    Reports step progress and, at each report, checks for cancellation and whether the researcher
    who started the job may still start jobs (:func:`.lifecycle.job_goes_on`: the rule each batch's
    start applies, here seen while the one long batch trains); checked once more right before the
    checkpoint is written. A job stopped so writes nothing: no folder, no source; one whose
    researcher lost the right is cancelled with why."""
    params = job.params
    registered = RationaleSource.objects.filter(pk=params.get("output_source_id")).first()
    if registered is not None:
        generation_job_finish(job_id=job.pk)
        return registered
    trained = _train(job)
    if trained is None:
        return None
    model, tokenizer, final_loss, device = trained
    training = training_record(job=job, params=params, final_loss=final_loss, device=device)

    def write(folder):
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / TRAINING_FILE).write_text(json.dumps(training, indent=2) + "\n")

    if not job_goes_on(job.pk):  # right before the write: nothing is written for a researcher who lost the right
        return None
    actor = job_actor(job)
    output_name_check(params["output_name"], user=actor, job_id=job.pk)  # a study may have listed the source meanwhile
    folder = model_folder(params["output_name"])
    model_folder_publish(folder, write, partial_name=f"{folder.name}.job{job.pk}.partial")
    is_answerer = params["mode"] != "rationalizer"
    source = model_source_register(
        name=params["output_name"], backend=RationaleSource.Backend.SEQ2SEQ, folder=folder, user=actor,
        description=_description(job, final_loss), training=training, seed=int(params["seed"]),
        decoding={"do_sample": False, "max_new_tokens": 8 if is_answerer else 100, "num_return_sequences": 1},
    )
    generation_job_finish(job_id=job.pk, params={"output_source_id": source.pk, "checkpoint": source.model_name_or_path,
                                                 "final_loss": final_loss})
    return source


def _train(job: GenerationJob):
    """(model, tokenizer, final loss, device) trained as the job says; None when the base model
    does not load (the job is failed with why) or the job was cancelled while training."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    params = job.params
    recorded_ids = params.get(TRAIN_ITEM_IDS)
    if not isinstance(recorded_ids, list):
        recorded_ids = None  # a job created before they were recorded: drawn again with its seed
    try:
        # The recorded items, not a new draw: an item added to the split since would change it.
        pairs, data, item_ids = training_pairs(
            dataset=job.dataset, split=job.split or "train", mode=params["mode"], n_shot=params.get("n_shot"),
            seed=int(params["seed"]), include_generalization=bool(params["include_generalization"]),
            readable=job_readable_items(job), item_ids=recorded_ids)
    except GenerationError as exc:
        generation_job_fail(job_id=job.pk, error=f"cannot make the training examples: {exc}")
        return None
    recorded = params.get("data") or {}
    if ((data["items"], data["examples_from_items"]) != (recorded.get("items"), recorded.get("examples_from_items"))
            or (recorded_ids is not None and sorted(item_ids) != sorted(recorded_ids))):
        # Some of its recorded items are no longer in the split or readable by its researcher (the
        # inputs check, ``inputs._items_check``, usually stopped the job first, saying why), or, for a
        # job that recorded none, the items its researcher may read changed since it was created (or
        # it was created before they were counted): it trains on no item they may not read, nor on
        # other data than the job shows.
        generation_job_fail(job_id=job.pk, error=(
            f"the items to train on changed since the job was created: {recorded.get('items')} items then, "
            f"{data['items']} now that its researcher may read ({data.get('items_left_out', 0)} of the split left "
            "out); start a new fine-tuning job"))
        return None
    device = select_device()
    location = model_location(params["base_model"])  # a stored ``models:`` form names a folder of RL_MODEL_DIR
    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
        # Weights stay float32 for training (plain AdamW on bf16 weights loses updates); generation
        # later loads the checkpoint in bf16 on a GPU that supports it.
        model = AutoModelForSeq2SeqLM.from_pretrained(location).to(device)
    except (OSError, ValueError) as exc:
        generation_job_fail(job_id=job.pk, error=f"cannot load base model {params['base_model']!r}: {exc}")
        return None
    # A report (one step in 50, and the last) is an update and a read of the job and its researcher.
    progress = StepProgress(job.pk, total=params["steps"], every=params["steps"] // 50, creator_checked=True)
    result = train_seq2seq(model, tokenizer, pairs, steps=params["steps"], batch_size=int(params["batch_size"]),
                           lr=float(params["lr"]), seed=int(params["seed"]),
                           max_source_length=int(params["max_source_length"]),
                           max_target_length=int(params["max_target_length"]),
                           on_step=lambda step, loss: progress.report(step))
    if result.cancelled:
        return None
    return model, tokenizer, result.final_loss, device


def _description(job: GenerationJob, final_loss: float) -> str:
    params = job.params
    return (f"{MODES[params['mode']]} fine-tuned from {params['base_model']} on {job.dataset.name} "
            f"{job.split or 'train'} with preset {params['preset']!r}"
            + (f" (overridden: {', '.join(params['overrides'])})" if params["overrides"] else "")
            + f": {params['examples']} examples"
            + (f" ({params['data']['generalization_questions']} of them generalization questions)"
               if params["data"]["generalization_questions"] else "")
            + (f", on {params['data']['rationales']}" if params["data"]["rationales"] else "")
            + f", {params['epochs']} epochs, {params['steps']} steps, "
            f"lr {params['lr']}, batch {params['batch_size']}, seed {params['seed']}; final loss "
            f"{final_loss:.4f}; job {job.pk}.")


class FinetuneHandler(Handler):
    """One long batch that trains, publishes and registers a checkpoint (:func:`finetune_job_run`)."""

    kind = GenerationJob.Kind.FINETUNE
    # What :func:`.training.finetune_t5` takes (:func:`finetune_params` completes them).
    params_accepted = frozenset({"mode", "preset", "base_model", "n_shot", "epochs", "steps", "batch_size", "lr",
                                 "seed", "output_name", "include_generalization"})

    def prepare(self, *, source, generator, dataset, split, item_ids, limit, params):
        if dataset is None:
            raise GenerationError("choose the dataset to fine-tune on")
        split = split or "train"
        # The settings now; the data once the job's researcher is known (before_save).
        params = finetune_settings(dataset=dataset, split=split, params=params)
        return Prepared(item_ids=[], params=params, total=int(params.get("steps") or 1), split=split)

    def before_save(self, job):
        """The training data, from the split's items the job's researcher may read (the operator's
        job: all); ``params["data"]["items_left_out"]`` says how many they may not."""
        job.params = finetune_data(dataset=job.dataset, split=job.split or "train", settings=job.params,
                                   readable=job_readable_items(job))
        job.total = int(job.params["steps"])

    def run_batch(self, job):
        finetune_job_run(job=job)
        return False
