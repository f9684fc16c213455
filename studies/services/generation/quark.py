"""Quark training jobs (SPEC section 9): a :class:`GenerationJob` of kind ``quark`` on the ``lm``
queue (:class:`QuarkHandler`), with the other kinds' progress, cancel, resume and finish
(:mod:`.lifecycle`).

One batch of the job is ``checkpoint_every`` optimizer steps (the trainer is
:class:`studies.lm.quark.QuarkTrainer`); after it the policy is evaluated on the validation
items and everything a run is made of (weights, optimizer and schedule, the pool, the step, the
history) is saved as the run's checkpoint, ``<RL_MODEL_DIR>/quark-runs/job<id>/last``. A worker
killed mid-batch loses only that batch: the job continues from the last checkpoint, with the same
pool, and since every random draw is seeded by (seed, step) it continues as the same run. Cancel
stops after the current step and saves a checkpoint there; *Resume job* continues from it. So does
a job whose researcher may no longer start LM jobs (:func:`.lifecycle.job_goes_on`, checked at every
step's report and again before the run's checkpoint is published and registered), cancelled with
why; a run stopped at its last step is not finished (nothing published) until it is resumed.

Model selection: the checkpoint with the highest mean validation reward whose validation task
accuracy is at most ``max_accuracy_drop`` below the original model's (greedy outputs; the original
reads its plain prompt, a checkpoint the best reward token). It is kept in ``best`` as it is found;
when the run ends it is evaluated on the held-out items, copied to ``<RL_MODEL_DIR>/<output_name>``
and registered as a rationale source whose template prepends the best token, ready for
*Generate rationales* and a utility study. ``params["report"]`` holds the before/after figures.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from django.conf import settings
from django.db import transaction

from studies.lm import genu as genu_rule
from studies.lm import quark
from studies.models import Dataset, GenerationJob, RationaleSource
from studies.services.model_paths import QUARK_RUNS, model_path_stored

from .common import Handler, Prepared, job_actor, ordered_item_ids
from .errors import GenerationError
from .lifecycle import (
    TRAINING_FILE,
    StepProgress,
    generation_job_fail,
    generation_job_finish,
    job_goes_on,
    job_touch,
    model_folder,
    model_folder_publish,
    model_source_register,
    output_name_check,
)
from .quark_policy import (
    ACCURACY_RULE,
    ACCURACY_RULE_PARSED_ONLY,
    PolicyPrompts,
    PolicySpec,
    accuracy_parsed_only,
    evaluate,
    resolve_policy,
)
from .quark_rewards import build_reward, dropped, items_with_questions, reward_rules
from .rationales import job_demonstrations

DEFAULTS = {"validation_split": "dev", "heldout_split": "test", "checkpoint_every": 50, "max_accuracy_drop": 0.02}
HISTORY_DIGITS = 5

# The run's parameters beside ``settings`` (:class:`studies.lm.quark.QuarkSettings` checks those)
# and ``reward`` (:func:`.quark_rewards.build_reward`), declared once and checked by one loop
# (:func:`_run_params`): each number with its type and bounds, the texts, the flags with defaults.
NUMBERS = {  # key: (type, lowest, highest or None)
    "answerer_i": (int, 1, 2**31 - 1), "answerer_ir": (int, 1, 2**31 - 1), "checkpoint_every": (int, 1, None),
    "max_accuracy_drop": (float, 0, 1), "train_limit": (int, 1, None), "validation_limit": (int, 1, None),
    "heldout_limit": (int, 1, None), "max_requests": (int, 1, None), "max_tokens": (int, 1, None),
}
TEXTS = ("validation_split", "heldout_split", "policy_path", "output_name")
FLAGS = {"only_valid": True, "register_without_gain": False}


def _number(params: dict, key: str, cast, *, low: float, high: float | None = None):
    """``params[key]`` as ``cast`` within [low, high]; a GenerationError naming the key otherwise."""
    value = params.get(key)
    try:
        if isinstance(value, bool) or (cast is int and isinstance(value, float) and not value.is_integer()):
            raise ValueError
        number = cast(value)
    except (TypeError, ValueError):
        raise GenerationError(f"{key} must be a number, not {value!r}") from None
    if number < low or (high is not None and number > high):
        raise GenerationError(f"{key} must be between {low} and {high}" if high is not None
                              else f"{key} must be at least {low}")
    return number


def _run_params(params: dict) -> dict:
    """``params`` (None values left out) over :data:`DEFAULTS`, every key checked and cast as
    declared: ``settings`` by :class:`QuarkSettings`, the others by :data:`NUMBERS`,
    :data:`TEXTS` and :data:`FLAGS`."""
    given = {k: v for k, v in params.items() if v is not None}
    if not isinstance(given.get("settings", {}), dict):
        raise GenerationError("settings must be an object of Quark settings")
    merged = {**DEFAULTS, **given}
    try:
        merged["settings"] = quark.QuarkSettings.from_json(given.get("settings")).as_json()
    except ValueError as exc:
        raise GenerationError(f"bad Quark settings: {exc}") from exc
    if not isinstance(merged.get("reward"), str):
        raise GenerationError("reward must be genu or marker:WORD")
    for key, (cast, low, high) in NUMBERS.items():
        if key in merged:
            merged[key] = _number(merged, key, cast, low=low, high=high)
    for key in TEXTS:
        if key in merged and not isinstance(merged[key], str):
            raise GenerationError(f"{key} must be text")
    for key, default in FLAGS.items():
        merged[key] = bool(merged.get(key, default))
    return merged


def _split_items(dataset: Dataset, split: str, limit, *, genu: bool, only_valid: bool, role: str,
                 item_ids: list[int] | None = None) -> tuple[list[int], int]:
    """The items of ``role`` (``train``, ``validation``, ``heldout``): ``item_ids``, else those of
    ``split`` that the job's researcher may read (``ordered_item_ids``, which counts the others
    under ``role``), with questions to reward for Gen-U, first ``limit``; and how many had none."""
    ids = ordered_item_ids(dataset=dataset, split=split, item_ids=item_ids, limit=None, role=role)
    excluded = 0
    if genu:
        ids, excluded = items_with_questions(ids, only_valid=only_valid)
        if not ids:
            which = "validated " if only_valid else ""
            raise GenerationError(f"no {split} item of {dataset.name!r} has {which}generalization questions: Gen-U "
                                  "cannot reward any (import or validate them, or include unvalidated ones)")
    if limit is not None:
        ids = ids[:limit]
    return ids, excluded


def _job_items(merged: dict, *, dataset: Dataset, split: str, train_limit: int | None,
               item_ids: list[int] | None) -> list[int]:
    """The training item ids; the validation and held-out ones, and how many items of each role
    have no generalization question to reward (Gen-U), go into ``merged``."""
    genu, only_valid, excluded = merged["reward"] == "genu", merged["only_valid"], {}
    train, excluded["train"] = _split_items(dataset, split or "train", train_limit, genu=genu,
                                            only_valid=only_valid, role="train", item_ids=item_ids)
    for role in ("validation", "heldout"):
        merged[f"{role}_item_ids"], excluded[role] = _split_items(
            dataset, merged[f"{role}_split"], merged.get(f"{role}_limit"), genu=genu, only_valid=only_valid,
            role=role)
    merged["excluded_without_questions"] = excluded
    _no_shared_items(merged, train=train, split=split or "train", given=item_ids is not None)
    return train


def _no_shared_items(merged: dict, *, train: list[int], split: str, given: bool) -> None:
    """Refuse a run whose training, validation and held-out items share any item: a run trained on
    the items it selects its checkpoint by, or is judged on, reports figures that say nothing (the
    default held-out split is ``test``, so a run asked to train on ``test`` would train on them all)."""
    roles = {"training": (train, "the item ids given" if given else f"split {split!r}"),
             "validation": (merged["validation_item_ids"], f"validation_split {merged['validation_split']!r}"),
             "held-out": (merged["heldout_item_ids"], f"heldout_split {merged['heldout_split']!r}")}
    names = list(roles)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            shared = sorted(set(roles[first][0]) & set(roles[second][0]))
            if shared:
                raise GenerationError(
                    f"the {first} items ({roles[first][1]}) and the {second} items ({roles[second][1]}) share "
                    f"{len(shared)} items (ids {shared[:10]}): a Quark run may not train on, select by, or be "
                    "judged on the same items; choose splits that do not overlap")


def quark_params(*, policy, dataset: Dataset | None, split: str, limit, params: dict,
                 item_ids: list[int] | None = None) -> tuple[list[int], dict]:
    """Check a new Quark job's inputs; (training item ids, completed params). ``item_ids`` (else
    the dataset's ``split``, the first ``limit`` unless ``train_limit`` is given) are the training
    items; ``params``: ``reward`` (``genu`` or ``marker:WORD``), ``answerer_i`` / ``answerer_ir`` /
    ``only_valid`` (genu), ``settings`` (:class:`studies.lm.quark.QuarkSettings`), ``policy_path``
    (a checkpoint folder when no source is given), ``validation_split`` / ``heldout_split`` and
    ``train_limit`` / ``validation_limit`` / ``heldout_limit``, ``checkpoint_every``,
    ``max_accuracy_drop``, ``output_name``, ``register_without_gain``, and ``max_requests`` /
    ``max_tokens``: the budget cap of the Gen-U reward's OpenAI-compatible answerers (both together;
    where they carry the operator's key, at most its caps per job, which a job setting none gets)."""
    if dataset is None:
        raise GenerationError("choose the dataset to train on")
    merged = _run_params(params)
    build_reward(merged)  # checks the spec and the answerers
    train_limit = merged.get("train_limit")
    if train_limit is None and limit is not None:
        train_limit = _number({"limit": limit}, "limit", int, low=1)
    spec = resolve_policy(policy if policy is not None else merged.get("policy_path", ""), dataset=dataset)
    merged["policy"] = spec.as_json()
    train = _job_items(merged, dataset=dataset, split=split, train_limit=train_limit, item_ids=item_ids)
    merged.setdefault("output_name", f"{spec.name}-quark-{merged['reward'].replace(':', '-')}")
    if not merged["output_name"].strip() or len(merged["output_name"]) > 200:
        raise GenerationError("output_name must be 1 to 200 characters")
    return train, merged


# --- the run in a worker ------------------------------------------------------------------------
class Run:
    """A job's trainer, prompts and reward in this process, kept between its batches."""

    def __init__(self, job: GenerationJob):
        params = job.params
        self.job_id = job.pk
        self.owner = run_owner(job)
        self.spec = PolicySpec.from_json(params["policy"])
        self.settings = quark.QuarkSettings.from_json(params["settings"])
        self.folder = run_folder(job.pk)
        self.train_ids = list(job.item_ids)
        self.validation_ids = list(params["validation_item_ids"])
        self.heldout_ids = list(params["heldout_item_ids"])
        self.prompts = PolicyPrompts(self.spec, self.train_ids + self.validation_ids + self.heldout_ids)
        self.reward = build_reward(params, job=job)  # Gen-U's answerers spend the job's budget
        checkpoint = self.folder / "last"
        resume = params.get("checkpoint_step") is not None and (checkpoint / quark.STATE_FILE).is_file()
        policy, reference, ids = quark.load_models(self.spec.backend, self.spec.model, settings=self.settings,
                                                   checkpoint=checkpoint if resume else None)
        self.trainer = quark.QuarkTrainer(kind=self.spec.backend, policy=policy, reference=reference, reward_ids=ids,
                                          settings=self.settings, item_ids=self.train_ids, prompt=self.prompts.prompt,
                                          score=self.prompts.scorer(self.reward), stop=self.prompts.stop,
                                          model_name=self.spec.model)
        extra = self.trainer.restore(checkpoint) if resume else {}
        self.history: list[dict] = list(extra.get("history", []))
        self.evaluations: list[dict] = list(extra.get("evaluations", []))
        self.best: dict | None = extra.get("best")

    def evaluate(self, item_ids: list[int], *, reference: bool, tick=None, samples: int = 0) -> dict:
        return evaluate(self.trainer, self.prompts, self.reward, item_ids, reference=reference,
                        batch_size=self.settings.batch_size, tick=tick, samples=samples)

    def extra(self) -> dict:
        return {"history": self.history, "evaluations": self.evaluations, "best": self.best, "job": self.owner}


_RUNS: dict[int, Run] = {}


def run_folder(job_id: int) -> Path:
    return Path(settings.RL_MODEL_DIR) / QUARK_RUNS / f"job{job_id}"


def run_owner(job: GenerationJob) -> dict:
    """What a run's checkpoint records of its job (``extra["job"]`` of its state file): the job's id
    and creation time, so a folder under ``job<id>`` that another job of that id left (a database
    restored or reset beside the same ``RL_MODEL_DIR``) is never taken for this job's."""
    return {"id": job.pk, "created_at": job.created_at.isoformat()}


def _checkpoint_is_jobs(state: dict, job: GenerationJob) -> bool:
    """The checkpoint ``state`` (:func:`studies.lm.quark.checkpoint_state`) continues ``job``'s
    recorded run: it names the job (:func:`run_owner`), has its settings, and its history and
    evaluations begin with those the job recorded."""
    extra = state.get("extra") or {}
    params = job.params
    history, evaluations = params.get("history") or [], params.get("evaluations") or []
    return (extra.get("job") == run_owner(job)
            and state.get("settings") == quark.QuarkSettings.from_json(params["settings"]).as_json()
            and (extra.get("history") or [])[:len(history)] == history
            and (extra.get("evaluations") or [])[:len(evaluations)] == evaluations)


def _published_checkpoint(job: GenerationJob) -> GenerationJob | None:
    """``job`` with the run's published checkpoint recorded. A batch publishes its checkpoint
    (``last``) and then records its step under the job's row lock; a crash between the two leaves
    the folder ahead of ``params["checkpoint_step"]``, and the run, which resumes from the folder,
    would never match the job again (each batch's work thrown away as another delivery's). Such a
    checkpoint is adopted here, under the row lock: its step, history, evaluations and selected
    checkpoint become the job's, as the batch would have recorded them. One that is not this job's
    (:func:`_checkpoint_is_jobs`) is never adopted: a job with a recorded step, which would resume
    from it, fails naming it (None); one without starts afresh and its first checkpoint replaces it."""
    folder = run_folder(job.pk) / "last"
    with transaction.atomic():
        locked = GenerationJob.objects.select_for_update().get(pk=job.pk)
        recorded = locked.params.get("checkpoint_step")
        state = quark.checkpoint_state(folder)
        if state is None or (recorded is not None and int(state["step"]) <= int(recorded)):
            return locked
        step = int(state["step"])
        ours = _checkpoint_is_jobs(state, locked)
        if not ours and recorded is None:  # the run starts afresh, not from it, and its first checkpoint replaces it
            return locked
        if ours:
            extra = state.get("extra") or {}
            locked.params = {**locked.params, "checkpoint_step": step, "history": extra.get("history") or [],
                             "evaluations": extra.get("evaluations") or [], "best": extra.get("best"),
                             "run_folder": model_path_stored(folder.parent)}
            locked.done = step
            locked.save(update_fields=["params", "done", "updated_at"])
            return locked
    generation_job_fail(job_id=job.pk, error=(
        f"job {job.pk}: the run checkpoint {folder} is at step {step}, ahead of the job's recorded step {recorded}, "
        "and is not this job's run (its job, settings or history differ), so the job does not resume from it; "
        "it was left as it is: start a new job"))
    return None


def forget_runs() -> None:
    """Drop the runs held in this process (what a worker restart does)."""
    _RUNS.clear()


def _run_for(job: GenerationJob) -> Run:
    run = _RUNS.get(job.pk)
    if run is None or run.trainer.step != int(job.params.get("checkpoint_step") or 0):
        _RUNS.clear()  # one run in memory per worker
        run = _RUNS[job.pk] = Run(job)
    return run


def _save_weights(run: Run, folder: Path) -> None:
    def write(partial: Path) -> None:
        run.trainer.policy.model.save_pretrained(partial)
        run.trainer.policy.tokenizer.save_pretrained(partial)

    model_folder_publish(folder, write)


def _rounded(stats: dict) -> dict:
    return {k: float(f"{v:.{HISTORY_DIGITS}g}") if isinstance(v, float) else v for k, v in stats.items()}


def _write(job_id: int, **changes) -> GenerationJob:
    with transaction.atomic():
        locked = GenerationJob.objects.select_for_update().get(pk=job_id)
        locked.params = {**locked.params, **changes.pop("params", {})}
        for key, value in changes.items():
            setattr(locked, key, value)
        locked.save(update_fields=["params", "updated_at", *changes])
        return locked


def _policy_demonstrations(job: GenerationJob) -> GenerationJob | None:
    """``job`` with its causal policy's demonstrations: the policy's own, or six drawn from the
    dataset's train items with gold rationales that the job's researcher may read (the operator's
    job: all; :func:`.rationales.job_demonstrations`), frozen into ``params["policy"]``: at the job's
    creation (``QuarkHandler.before_save``), or here as its first batch starts for a job created
    without them (``params["demonstrations_from"]`` says where from). None when too few (the job is
    failed with why)."""
    policy = job.params["policy"]
    if policy.get("backend") != "causal" or policy.get("demonstrations"):
        return job
    try:
        demonstrations, where = job_demonstrations(job, seed=int(policy.get("seed") or 0))
    except GenerationError as exc:
        generation_job_fail(job_id=job.pk, error=str(exc))
        return None
    with transaction.atomic():
        locked = GenerationJob.objects.select_for_update().get(pk=job.pk)
        if not locked.params["policy"].get("demonstrations"):  # else another delivery drew them
            locked.params = {**locked.params, "policy": {**locked.params["policy"], "demonstrations": demonstrations},
                             "demonstrations_from": where}
            locked.save(update_fields=["params", "updated_at"])
        return locked


def quark_job_run_batch(job: GenerationJob) -> bool:
    """Train up to the next checkpoint, evaluate, save; finish the run after the last step.
    Returns True while steps remain."""
    job_id = job.pk
    job = _policy_demonstrations(job)
    if job is not None:
        job = _published_checkpoint(job)
    if job is None:
        _RUNS.pop(job_id, None)
        return False
    run = _run_for(job)
    started_from = run.trainer.step
    total = run.settings.steps
    every = int(job.params["checkpoint_every"])
    if started_from >= total:  # the last checkpoint is saved: only the finish was lost
        quark_job_finish(job_id=job.pk, run=run)
        return False

    def touch():
        job_touch(job.pk)

    if "before" not in job.params:
        before = {"validation": run.evaluate(run.validation_ids, reference=True, tick=touch),
                  "heldout": run.evaluate(run.heldout_ids, reference=True, tick=touch,
                                          samples=run.settings.eval_samples)}
        job = _write(job.pk, params={"before": before})
    if not run.evaluations:
        v = job.params["before"]["validation"]
        run.evaluations.append({"step": 0, "reward": v["reward"], "accuracy": v["accuracy"], "eligible": False,
                                "model": "original"})
    target = min(total, (started_from // every + 1) * every)
    # Each step's report also stops (and cancels, with why) a job whose researcher may no longer
    # start jobs: a batch is ``checkpoint_every`` steps, checked at its start by the batch runner.
    progress = StepProgress(job.pk, total=total, started_from=started_from, creator_checked=True)
    cancelled = False
    while run.trainer.step < target:
        stats = run.trainer.advance()
        run.history.append(_rounded({"step": run.trainer.step, **stats}))
        if not progress.report(run.trainer.step):
            cancelled = True
            break
    step = run.trainer.step
    if step == target:  # checkpoints are evaluated at the same steps whether or not the run stopped between
        _evaluate_checkpoint(run, job, touch)
    with transaction.atomic():
        locked = GenerationJob.objects.select_for_update().get(pk=job.pk)
        if int(locked.params.get("checkpoint_step") or 0) != started_from:
            _RUNS.pop(job.pk, None)  # another delivery of this job got here first: its work stands
            return False
        model_folder_publish(run.folder / "last", lambda partial: run.trainer.save(partial, extra=run.extra()))
        locked.params = {**locked.params, "checkpoint_step": step, "history": run.history,
                         "evaluations": run.evaluations, "best": run.best, "run_folder": model_path_stored(run.folder)}
        locked.done = step
        locked.save(update_fields=["params", "done", "updated_at"])
    if cancelled:  # stopped at a step (even the last): the checkpoint there stands; *Resume job* goes on from it
        return False
    if step < total:
        return True
    quark_job_finish(job_id=job.pk, run=run)
    return False


def keeps_accuracy(accuracy: float | None, *, before: float | None, max_drop: float) -> bool:
    """A checkpoint may be selected only when its validation task accuracy is at most
    ``max_drop`` below the original model's."""
    return accuracy is not None and (before or 0.0) - accuracy <= max_drop + 1e-9


def beats_original(reward: float | None, *, original: float | None) -> bool:
    """A checkpoint is worth registering only when its mean validation reward is above the
    original model's (``original`` None: the original had no reward to compare with)."""
    return reward is not None and (original is None or reward > original + 1e-9)


def choose_checkpoint(evaluations: list[dict], *, before: float | None, max_drop: float) -> dict | None:
    """The selected checkpoint: the highest validation reward among the checkpoints that keep task
    accuracy (the earliest on a tie); None when none does. Whether it beats the original is
    :func:`beats_original`'s question, asked when the run finishes."""
    best = None
    for entry in evaluations:
        if entry.get("model") != "checkpoint" or entry.get("reward") is None:
            continue
        if keeps_accuracy(entry.get("accuracy"), before=before, max_drop=max_drop) and (
                best is None or entry["reward"] > best["reward"]):
            best = entry
    return best


def registration(params: dict) -> tuple[bool, str]:
    """(register?, the report's selection sentence) for a run's selected checkpoint: registered
    when one keeps task accuracy and beats the original's validation reward, or, with
    ``register_without_gain``, whenever one keeps task accuracy."""
    best, drop = params.get("best"), params["max_accuracy_drop"]
    if best is None:
        return False, (f"no checkpoint kept validation task accuracy within {drop} of the original: "
                       "nothing registered")
    original = ((params.get("before") or {}).get("validation") or {}).get("reward")
    chosen = (f"step {best['step']}: highest validation reward ({best['reward']:.4g}) among checkpoints losing at "
              f"most {drop} validation task accuracy")
    if beats_original(best["reward"], original=original):
        return True, f"{chosen}; above the original's {_shown(original)}"
    if params.get("register_without_gain"):
        return True, (f"{chosen}; not above the original's {_shown(original)}, registered anyway "
                      "(register_without_gain)")
    return False, (f"{chosen}; not above the original's validation reward {_shown(original)}: nothing registered "
                   "(register_without_gain registers it anyway)")


def _shown(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _evaluate_checkpoint(run: Run, job: GenerationJob, touch) -> None:
    """Validation reward and accuracy of the policy now; its weights are kept in ``best`` when it
    becomes the selected checkpoint."""
    result = run.evaluate(run.validation_ids, reference=False, tick=touch)
    before = job.params["before"]["validation"]["accuracy"]
    drop = float(job.params["max_accuracy_drop"])
    entry = {"step": run.trainer.step, "reward": result["reward"], "accuracy": result["accuracy"],
             "parsed": result["parsed"], "items": result["items"], "rewarded": result["rewarded"], "model": "checkpoint",
             "accuracy_parsed_only": result.get("accuracy_parsed_only"),
             "eligible": keeps_accuracy(result["accuracy"], before=before, max_drop=drop)}
    run.evaluations.append(entry)
    chosen = choose_checkpoint(run.evaluations, before=before, max_drop=drop)
    if chosen is entry:
        run.best = dict(entry)
        _save_weights(run, run.folder / "best")


def quark_job_finish(*, job_id: int, run: Run | None = None) -> RationaleSource | None:
    """Evaluate the selected checkpoint on the held-out items, register it when it beats the
    original on validation reward (:func:`registration`) and write the report. Idempotent: a job
    whose checkpoint is evaluated (and registered, if it is to be) just finishes. A job that was
    cancelled, or whose researcher may no longer start jobs (:func:`.lifecycle.job_goes_on`, which
    then cancels it with why), is not finished: checked here and again right before the selected
    checkpoint is published and registered; nothing is written then, and *Resume job* (once the
    right is back) finishes it from the run's saved checkpoint."""
    if not job_goes_on(job_id):
        return None
    job = GenerationJob.objects.get(pk=job_id)
    params = job.params
    registered = RationaleSource.objects.filter(pk=params.get("output_source_id")).first()
    best = params.get("best")
    source, after = registered, (params.get("report") or {}).get("after")
    register = registration(params)[0]
    if best is not None and (after is None or (register and registered is None)):
        run = run or _run_for(job)
        best_folder = run.folder / "best"
        held = quark.load_models(run.spec.backend, run.spec.model, settings=run.settings, checkpoint=best_folder)
        final = quark.QuarkTrainer(kind=run.spec.backend, policy=held[0], reference=held[1], reward_ids=held[2],
                                   settings=run.settings, item_ids=run.train_ids, prompt=run.prompts.prompt,
                                   score=run.prompts.scorer(run.reward), stop=run.prompts.stop)
        after = {"validation": {k: best.get(k) for k in ("reward", "accuracy", "items", "rewarded") if k in best},
                 "heldout": evaluate(final, run.prompts, run.reward, run.heldout_ids, reference=False,
                                     batch_size=run.settings.batch_size, samples=run.settings.eval_samples)}
        if register:
            source = _register(job, run, best_folder, after)
            if source is None:  # stopped right before the write
                return None
    report = quark_report(job, after=after, source=source)
    generation_job_finish(job_id=job_id, params={
        "report": report,
        **({"output_source_id": source.pk, "checkpoint": source.model_name_or_path} if source else {})})
    _RUNS.pop(job_id, None)
    return source


def _register(job: GenerationJob, run: Run, best_folder: Path, after: dict) -> RationaleSource | None:
    params = job.params
    before = params["before"]
    training = {
        "method": "quark", "job_id": job.pk, "policy": run.spec.as_json(), "reward": params["reward"],
        "settings": run.settings.as_json(), "selected_step": params["best"]["step"],
        "checkpoint_every": params["checkpoint_every"], "max_accuracy_drop": params["max_accuracy_drop"],
        "train_split": job.split, "validation_split": params.get("validation_split"),
        "heldout_split": params.get("heldout_split"),
        "base_template": run.spec.template, "reward_token": quark.reward_token(0),
        "validation_accuracy_before": before["validation"]["accuracy"],
        "validation_accuracy_after": after["validation"]["accuracy"],
        "heldout_reward_before": before["heldout"]["reward"], "heldout_reward_after": after["heldout"]["reward"],
        "heldout_sampled_reward_before": before["heldout"].get("sampled_reward"),
        "heldout_sampled_reward_after": after["heldout"].get("sampled_reward"),
    }

    def write(partial: Path) -> None:
        shutil.copytree(best_folder, partial)
        (partial / TRAINING_FILE).write_text(json.dumps(training, indent=2) + "\n")

    if not job_goes_on(job.pk):  # right before the write: nothing is written for a researcher who lost the right
        return None
    actor = job_actor(job)
    output_name_check(params["output_name"], user=actor, job_id=job.pk)  # a study may have listed the source meanwhile
    folder = model_folder(params["output_name"])
    model_folder_publish(folder, write, partial_name=f"{folder.name}.job{job.pk}.partial")
    return model_source_register(
        name=params["output_name"], backend=run.spec.backend, folder=folder, user=actor,
        template=run.prompts.template(quark.reward_token(0)), demonstrations=run.spec.demonstrations,
        decoding={"do_sample": False, "max_new_tokens": run.settings.max_new_tokens, "num_return_sequences": 1},
        seed=run.spec.seed, training=training,
        description=(f"Quark ({params['reward']} reward) from {run.spec.name}: step {params['best']['step']} of "
                     f"{run.settings.steps} selected by validation reward; job {job.pk}. Prompts start with "
                     f"{quark.reward_token(0)}, the best reward token."),
    )


def settings_warnings(settings: dict) -> list[str]:
    """What in a run's settings keeps the policy from moving: no round sampled by the policy
    itself, or a learning rate still warming up at the last step."""
    steps, out = settings["steps"], []
    if settings["sample_interval"] >= steps:
        out.append(f"sample_interval ({settings['sample_interval']}) is not below steps ({steps}): the policy never "
                   "samples its own rationales; it trains only on the reference's first round")
    if settings["warmup_steps"] >= steps:
        out.append(f"warmup_steps ({settings['warmup_steps']}) is not below steps ({steps}): the learning rate never "
                   f"reaches lr ({settings['lr']})")
    return out


def quark_report(job: GenerationJob, *, after: dict | None, source: RationaleSource | None) -> dict:
    """What ``quark_train`` writes to ``report.json``: held-out reward and validation task
    accuracy before and after, the selection, the steps run and every setting used."""
    params = job.params
    before = params.get("before") or {}
    strip = ("examples",)

    def part(result: dict | None, role: str) -> dict | None:
        return None if not result else {k: v for k, v in result.get(role, {}).items() if k not in strip}

    best = params.get("best")

    def dropped_in(role: str) -> dict:
        b, a = before.get(role), (after or {}).get(role)
        out = {"before": dropped(b), "after": dropped(a)}
        if (b or {}).get("samples_per_item"):
            out.update(sampled_before=dropped(b, sampled=True), sampled_after=dropped(a, sampled=True))
        return out

    genu = params["reward"] == "genu"
    return {
        "job_id": job.pk, "policy": params["policy"], "reward": params["reward"], "dataset": job.dataset.name,
        "reward_tie_rule": genu_rule.TIE_RULE_TEXT if genu else None,
        # What a mean reward counts besides the rationales (quark_rewards owns both rules).
        **reward_rules(params["reward"]),
        "dropped_unscoreable": {role: dropped_in(role) for role in ("heldout", "validation")},
        "answerers": _answerer_names(params) if genu else None,
        "steps_run": int(params.get("checkpoint_step") or 0), "steps": params["settings"]["steps"],
        "settings": params["settings"],
        "run": {"train_split": job.split,
                **{k: params.get(k) for k in ("checkpoint_every", "max_accuracy_drop", "register_without_gain",
                                              "only_valid", "validation_split", "heldout_split", "answerer_i",
                                              "answerer_ir")}},
        "items": {"train": len(job.item_ids), "validation": len(params["validation_item_ids"]),
                  "heldout": len(params["heldout_item_ids"])},
        "excluded_without_questions": params.get("excluded_without_questions"),
        # Items of the chosen splits left out as only studies the researcher may not read show them.
        "items_left_out": params.get("items_left_out"),
        "heldout": {"before": part(before, "heldout"), "after": part(after, "heldout"),
                    "reward_before": (before.get("heldout") or {}).get("reward"),
                    "reward_after": ((after or {}).get("heldout") or {}).get("reward"),
                    "sampled_reward_before": (before.get("heldout") or {}).get("sampled_reward"),
                    "sampled_reward_after": ((after or {}).get("heldout") or {}).get("sampled_reward")},
        # Task accuracy counts an output that did not parse as wrong (the figure selection compares);
        # the other reading, such outputs left out (scoring's default), is given beside it.
        "accuracy_rule": ACCURACY_RULE, "accuracy_rule_other": ACCURACY_RULE_PARSED_ONLY,
        "validation": {"accuracy_before": (before.get("validation") or {}).get("accuracy"),
                       "accuracy_after": ((after or {}).get("validation") or {}).get("accuracy"),
                       "accuracy_parsed_only_before": accuracy_parsed_only(before.get("validation")),
                       "accuracy_parsed_only_after": accuracy_parsed_only((after or {}).get("validation")),
                       "reward_before": (before.get("validation") or {}).get("reward"),
                       "reward_after": ((after or {}).get("validation") or {}).get("reward")},
        "after": after,
        "selected_step": best["step"] if best else None,
        "selection": registration(params)[1],
        "evaluations": params.get("evaluations", []),
        "warnings": settings_warnings(params["settings"]),
        "registered_source": ({"id": source.pk, "name": source.name, "model_name_or_path": source.model_name_or_path}
                              if source else None),
    }


def _answerer_names(params: dict) -> dict:
    """The names of the F^I and F^IR sources a Gen-U run was rewarded by (None for one deleted since)."""
    names = dict(RationaleSource.objects.filter(pk__in=[params.get("answerer_i"), params.get("answerer_ir")])
                 .values_list("pk", "name"))
    return {genu_rule.ANSWERER_NAMES[role]: names.get(params.get(key))
            for key, role in (("answerer_i", "I"), ("answerer_ir", "IR"))}


class QuarkHandler(Handler):
    """``checkpoint_every`` steps per batch, evaluated and checkpointed after each (:func:`quark_job_run_batch`)."""

    kind = GenerationJob.Kind.QUARK
    # What :func:`quark_params` documents; ``settings`` is checked key by key by ``QuarkSettings.from_json``.
    params_accepted = frozenset({"reward", "answerer_i", "answerer_ir", "only_valid", "settings", "policy_path",
                                 "validation_split", "heldout_split", "train_limit", "validation_limit",
                                 "heldout_limit", "checkpoint_every", "max_accuracy_drop", "output_name",
                                 "register_without_gain", "max_requests", "max_tokens"})

    def prepare(self, *, source, generator, dataset, split, item_ids, limit, params):
        ids, params = quark_params(policy=source, dataset=dataset, split=split or "train", limit=limit, params=params,
                                   item_ids=item_ids)
        return Prepared(item_ids=ids, params=params, total=int(params["settings"]["steps"]), split=split or "train")

    def before_save(self, job):
        """A causal policy without demonstrations of its own gets them now, while the job's
        researcher is known, as a rationale job does (:meth:`.rationales.RationaleHandler.before_save`);
        too few readable items refuse the job."""
        policy = job.params.get("policy") or {}
        if policy.get("backend") == "causal" and not policy.get("demonstrations"):
            demonstrations, where = job_demonstrations(job, seed=int(policy.get("seed") or 0))
            job.params = {**job.params, "policy": {**policy, "demonstrations": demonstrations},
                          "demonstrations_from": where}

    def run_batch(self, job):
        return quark_job_run_batch(job)
