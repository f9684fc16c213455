"""Quark training as an LM job (SPEC section 9): a :class:`GenerationJob` of kind ``quark`` on the
``lm`` queue, with generation's progress, cancel and resume.

One batch of the job is ``checkpoint_every`` optimizer steps (the trainer is
:class:`studies.lm.quark.QuarkTrainer`); after it the policy is evaluated on the validation
items and everything a run is made of (weights, optimizer and schedule, the pool, the step, the
history) is saved as the run's checkpoint, ``<RL_MODEL_DIR>/quark-runs/job<id>/last``. A worker
killed mid-batch loses only that batch: the job continues from the last checkpoint, with the same
pool, and since every random draw is seeded by (seed, step) it continues as the same run. Cancel
stops after the current step and saves a checkpoint there; *Resume job* continues from it.

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
import time
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from studies.lm import genu as genu_rule
from studies.lm import quark
from studies.models import Dataset, GenerationJob, RationaleSource
from studies.services.finetune import model_slug
from studies.services.generation.common import GenerationError, ordered_item_ids
from studies.services.quark_policy import (
    PolicyPrompts,
    PolicySpec,
    evaluate,
    resolve_policy,
    source_by_name_or_id,
)
from studies.services.quark_rewards import build_reward, items_with_questions

Status = GenerationJob.Status
DEFAULTS = {"validation_split": "dev", "heldout_split": "test", "checkpoint_every": 50, "max_accuracy_drop": 0.02}
TRAINING_FILE = "rationale_lab_training.json"
HISTORY_DIGITS = 5


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


def _split_items(dataset: Dataset, split: str, limit, *, genu: bool, only_valid: bool,
                 item_ids: list[int] | None = None) -> tuple[list[int], int]:
    ids = ordered_item_ids(dataset=dataset, split=split, item_ids=item_ids, limit=None)
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


def quark_params(*, policy, dataset: Dataset | None, split: str, limit, params: dict,
                 item_ids: list[int] | None = None) -> tuple[list[int], dict]:
    """Check a new Quark job's inputs; (training item ids, completed params). ``item_ids`` (else
    the dataset's ``split``) are the training items; ``params``: ``reward`` (``genu`` or
    ``marker:WORD``), ``answerer_i`` / ``answerer_ir`` / ``only_valid`` (genu), ``settings``
    (:class:`studies.lm.quark.QuarkSettings`), ``policy_path`` (a checkpoint folder when no source
    is given), ``validation_split`` / ``heldout_split`` and ``train_limit`` / ``validation_limit`` /
    ``heldout_limit``, ``checkpoint_every``, ``max_accuracy_drop``, ``output_name``."""
    if dataset is None:
        raise GenerationError("choose the dataset to train on")
    given = {k: v for k, v in params.items() if v is not None}
    merged = {**DEFAULTS, **given}
    if not isinstance(given.get("settings", {}), dict):
        raise GenerationError("settings must be an object of Quark settings")
    try:
        merged["settings"] = quark.QuarkSettings.from_json(given.get("settings")).as_json()
    except ValueError as exc:
        raise GenerationError(f"bad Quark settings: {exc}") from exc
    if not isinstance(merged.get("reward"), str):
        raise GenerationError("reward must be genu or marker:WORD")
    for key in ("answerer_i", "answerer_ir"):
        if key in given:
            merged[key] = _number(given, key, int, low=1, high=2**31 - 1)
    merged["only_valid"] = bool(merged.get("only_valid", True))
    build_reward(merged)  # checks the spec and the answerers
    genu = merged["reward"] == "genu"
    merged["checkpoint_every"] = _number(merged, "checkpoint_every", int, low=1)
    merged["max_accuracy_drop"] = _number(merged, "max_accuracy_drop", float, low=0, high=1)
    limits = {role: _number(given, f"{role}_limit", int, low=1) if f"{role}_limit" in given else None
              for role in ("train", "validation", "heldout")}
    if limits["train"] is None and limit is not None:
        limits["train"] = _number({"limit": limit}, "limit", int, low=1)
    merged["register_without_gain"] = bool(merged.get("register_without_gain", False))
    for key in ("validation_split", "heldout_split", "policy_path", "output_name"):
        if key in merged and not isinstance(merged[key], str):
            raise GenerationError(f"{key} must be text")
    spec = resolve_policy(policy if policy is not None else merged.get("policy_path", ""), dataset=dataset)
    merged["policy"] = spec.as_json()
    excluded = {}
    train, excluded["train"] = _split_items(dataset, split or "train", limits["train"], genu=genu,
                                            only_valid=merged["only_valid"], item_ids=item_ids)
    for role in ("validation", "heldout"):
        ids, excluded[role] = _split_items(dataset, merged[f"{role}_split"], limits[role], genu=genu,
                                           only_valid=merged["only_valid"])
        merged[f"{role}_item_ids"] = ids
    merged["excluded_without_questions"] = excluded
    reward_slug = merged["reward"].replace(":", "-")
    merged.setdefault("output_name", f"{spec.name}-quark-{reward_slug}")
    if not merged["output_name"].strip() or len(merged["output_name"]) > 200:
        raise GenerationError("output_name must be 1 to 200 characters")
    existing = RationaleSource.objects.filter(name=merged["output_name"]).first()
    if existing is not None and existing.kind != RationaleSource.Kind.LM:
        raise GenerationError(f"a non-LM rationale source is already named {merged['output_name']!r}: pick another "
                              "output_name")
    return train, merged


# --- the run in a worker ------------------------------------------------------------------------
class Run:
    """A job's trainer, prompts and reward in this process, kept between its batches."""

    def __init__(self, job: GenerationJob):
        params = job.params
        self.job_id = job.pk
        self.spec = PolicySpec.from_json(params["policy"])
        self.settings = quark.QuarkSettings.from_json(params["settings"])
        self.folder = run_folder(job.pk)
        self.train_ids = list(job.item_ids)
        self.validation_ids = list(params["validation_item_ids"])
        self.heldout_ids = list(params["heldout_item_ids"])
        self.prompts = PolicyPrompts(self.spec, self.train_ids + self.validation_ids + self.heldout_ids)
        self.reward = build_reward(params)
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
        return {"history": self.history, "evaluations": self.evaluations, "best": self.best}


_RUNS: dict[int, Run] = {}


def run_folder(job_id: int) -> Path:
    return Path(settings.RL_MODEL_DIR) / "quark-runs" / f"job{job_id}"


def forget_runs() -> None:
    """Drop the runs held in this process (what a worker restart does)."""
    _RUNS.clear()


def _run_for(job: GenerationJob) -> Run:
    run = _RUNS.get(job.pk)
    if run is None or run.trainer.step != int(job.params.get("checkpoint_step") or 0):
        _RUNS.clear()  # one run in memory per worker
        run = _RUNS[job.pk] = Run(job)
    return run


def _swap_in(partial: Path, folder: Path) -> None:
    old = folder.with_name(folder.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if folder.exists():
        folder.rename(old)
    partial.rename(folder)
    if old.exists():
        shutil.rmtree(old)


def _save_weights(run: Run, folder: Path) -> None:
    partial = folder.with_name(folder.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    run.trainer.policy.model.save_pretrained(partial)
    run.trainer.policy.tokenizer.save_pretrained(partial)
    _swap_in(partial, folder)


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


def quark_job_run_batch(job: GenerationJob) -> bool:
    """Train up to the next checkpoint, evaluate, save; finish the run after the last step.
    Returns True while steps remain."""
    run = _run_for(job)
    started_from = run.trainer.step
    total = run.settings.steps
    every = int(job.params["checkpoint_every"])
    if started_from >= total:  # the last checkpoint is saved: only the finish was lost
        quark_job_finish(job_id=job.pk, run=run)
        return False

    def touch():
        GenerationJob.objects.filter(pk=job.pk).update(updated_at=timezone.now())

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
    began, cancelled = time.monotonic(), False
    while run.trainer.step < target:
        stats = run.trainer.advance()
        run.history.append(_rounded({"step": run.trainer.step, **stats}))
        rate = (run.trainer.step - started_from) / max(time.monotonic() - began, 1e-6)
        GenerationJob.objects.filter(pk=job.pk).update(done=run.trainer.step, rate=rate,
                                                       eta_seconds=(total - run.trainer.step) / rate,
                                                       updated_at=timezone.now())
        if GenerationJob.objects.filter(pk=job.pk, cancel_requested=True).exists():
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
        partial = run.folder / "last.partial"
        if partial.exists():
            shutil.rmtree(partial)
        run.trainer.save(partial, extra=run.extra())
        _swap_in(partial, run.folder / "last")
        locked.params = {**locked.params, "checkpoint_step": step, "history": run.history,
                         "evaluations": run.evaluations, "best": run.best, "run_folder": str(run.folder)}
        locked.done = step
        locked.save(update_fields=["params", "done", "updated_at"])
    if step < total:
        return not cancelled
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
             "parsed": result["parsed"], "model": "checkpoint",
             "eligible": keeps_accuracy(result["accuracy"], before=before, max_drop=drop)}
    run.evaluations.append(entry)
    chosen = choose_checkpoint(run.evaluations, before=before, max_drop=drop)
    if chosen is entry:
        run.best = dict(entry)
        _save_weights(run, run.folder / "best")


def quark_job_finish(*, job_id: int, run: Run | None = None) -> RationaleSource | None:
    """Evaluate the selected checkpoint on the held-out items, register it when it beats the
    original on validation reward (:func:`registration`) and write the report. Idempotent: a job
    whose checkpoint is evaluated (and registered, if it is to be) just finishes."""
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
        after = {"validation": {k: best.get(k) for k in ("reward", "accuracy")},
                 "heldout": evaluate(final, run.prompts, run.reward, run.heldout_ids, reference=False,
                                     batch_size=run.settings.batch_size, samples=run.settings.eval_samples)}
        if register:
            source = _register(job, run, best_folder, after)
    report = quark_report(job, after=after, source=source)
    with transaction.atomic():
        locked = GenerationJob.objects.select_for_update().get(pk=job_id)
        locked.params = {**locked.params, "report": report,
                         **({"output_source_id": source.pk, "checkpoint": source.model_name_or_path} if source else {})}
        locked.done = locked.total
        locked.save(update_fields=["params", "done", "updated_at"])
        if locked.status == Status.RUNNING:
            GenerationJob.STATUS.move(locked, Status.DONE, finished_at=timezone.now(), eta_seconds=0.0)
    _RUNS.pop(job_id, None)
    return source


def _register(job: GenerationJob, run: Run, best_folder: Path, after: dict) -> RationaleSource:
    params = job.params
    folder = Path(settings.RL_MODEL_DIR) / model_slug(params["output_name"])
    partial = folder.with_name(folder.name + f".job{job.pk}.partial")
    if partial.exists():
        shutil.rmtree(partial)
    shutil.copytree(best_folder, partial)
    before = params["before"]
    training = {
        "method": "quark", "job_id": job.pk, "policy": run.spec.as_json(), "reward": params["reward"],
        "settings": run.settings.as_json(), "selected_step": params["best"]["step"],
        "checkpoint_every": params["checkpoint_every"], "max_accuracy_drop": params["max_accuracy_drop"],
        "base_template": run.spec.template, "reward_token": quark.reward_token(0),
        "validation_accuracy_before": before["validation"]["accuracy"],
        "validation_accuracy_after": after["validation"]["accuracy"],
        "heldout_reward_before": before["heldout"]["reward"], "heldout_reward_after": after["heldout"]["reward"],
        "heldout_sampled_reward_before": before["heldout"].get("sampled_reward"),
        "heldout_sampled_reward_after": after["heldout"].get("sampled_reward"),
    }
    (partial / TRAINING_FILE).write_text(json.dumps(training, indent=2) + "\n")
    _swap_in(partial, folder)
    source, _ = RationaleSource.objects.update_or_create(
        name=params["output_name"],
        defaults={
            "kind": RationaleSource.Kind.LM, "backend": run.spec.backend, "model_name_or_path": str(folder),
            "template": run.prompts.template(quark.reward_token(0)), "demonstrations": run.spec.demonstrations,
            "decoding": {"do_sample": False, "max_new_tokens": run.settings.max_new_tokens, "num_return_sequences": 1},
            "seed": run.spec.seed, "training": training,
            "description": (f"Quark ({params['reward']} reward) from {run.spec.name}: step {params['best']['step']} of "
                            f"{run.settings.steps} selected by validation reward; job {job.pk}. Prompts start with "
                            f"{quark.reward_token(0)}, the best reward token."),
        },
    )
    return source


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
    return {
        "job_id": job.pk, "policy": params["policy"], "reward": params["reward"], "dataset": job.dataset.name,
        "reward_tie_rule": genu_rule.TIE_RULE_TEXT if params["reward"] == "genu" else None,
        "steps_run": int(params.get("checkpoint_step") or 0), "steps": params["settings"]["steps"],
        "settings": params["settings"],
        "run": {k: params.get(k) for k in ("checkpoint_every", "max_accuracy_drop", "register_without_gain",
                                           "only_valid", "validation_split", "heldout_split", "answerer_i",
                                           "answerer_ir")},
        "items": {"train": len(job.item_ids), "validation": len(params["validation_item_ids"]),
                  "heldout": len(params["heldout_item_ids"])},
        "excluded_without_questions": params.get("excluded_without_questions"),
        "heldout": {"before": part(before, "heldout"), "after": part(after, "heldout"),
                    "reward_before": (before.get("heldout") or {}).get("reward"),
                    "reward_after": ((after or {}).get("heldout") or {}).get("reward"),
                    "sampled_reward_before": (before.get("heldout") or {}).get("sampled_reward"),
                    "sampled_reward_after": ((after or {}).get("heldout") or {}).get("sampled_reward")},
        "validation": {"accuracy_before": (before.get("validation") or {}).get("accuracy"),
                       "accuracy_after": ((after or {}).get("validation") or {}).get("accuracy"),
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


def quark_train(*, policy: str, dataset: Dataset, reward: str, steps: int | None = None, split: str = "train",
                settings_overrides: dict | None = None, params: dict | None = None, user=None,
                run_now: bool = True) -> GenerationJob:
    """Create a Quark job for ``policy`` (a rationale source's name or id, or a checkpoint folder);
    ``run_now`` runs it to the end in this process (``manage.py quark_train``), otherwise it is
    queued on the ``lm`` queue. ``params`` take what :func:`quark_params` accepts."""
    from studies.services.generation import generation_job_create, generation_job_run

    text = str(policy).strip()
    source = source_by_name_or_id(text)
    given = {**(settings_overrides or {}), **({"steps": steps} if steps is not None else {})}
    job_params = {**(params or {}), "reward": reward, "settings": {k: v for k, v in given.items() if v is not None}}
    if source is None:
        job_params["policy_path"] = text
    job = generation_job_create(kind=GenerationJob.Kind.QUARK, source=source, dataset=dataset, split=split,
                                params=job_params, user=user, enqueue=not run_now, batch_size=1)
    if run_now:
        return generation_job_run(job_id=job.pk)
    return job
