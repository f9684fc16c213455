"""Fine-tuning and Quark training started from keyword arguments (``manage.py finetune_t5`` and
``quark_train``, the admin's fine-tuning form): each builds its kind's params, creates the job
(:func:`.jobs.generation_job_create`) and either queues it on the ``lm`` queue or runs it to the
end in this process."""
from __future__ import annotations

from studies.models import Dataset, GenerationJob

from .jobs import generation_job_create, generation_job_run
from .quark_policy import source_by_name_or_id


def finetune_t5(*, dataset: Dataset, mode: str, base_model: str, split: str = "train", preset: str | None = None,
                n_shot: int | None = None, epochs: int | None = None, steps: int | None = None,
                batch_size: int | None = None, lr: float | None = None, seed: int | None = None,
                output_name: str | None = None, include_generalization: bool | None = None, user=None,
                run_now: bool = True) -> GenerationJob:
    """Create a fine-tuning job; ``run_now`` trains in this process (the management command),
    otherwise it is queued on the ``lm`` queue. Values left None come from ``preset``
    (:func:`.finetune.finetune_params`)."""
    params = {"mode": mode, "preset": preset, "base_model": base_model, "n_shot": n_shot, "epochs": epochs, "steps": steps,
              "batch_size": batch_size, "lr": lr, "seed": seed, "output_name": output_name,
              "include_generalization": include_generalization}
    job = generation_job_create(kind=GenerationJob.Kind.FINETUNE, dataset=dataset, split=split,
                                params={k: v for k, v in params.items() if v is not None}, user=user,
                                enqueue=not run_now)
    if run_now:
        return generation_job_run(job_id=job.pk)
    return job


def quark_train(*, policy: str, dataset: Dataset, reward: str, steps: int | None = None, split: str = "train",
                settings_overrides: dict | None = None, params: dict | None = None, user=None,
                run_now: bool = True) -> GenerationJob:
    """Create a Quark job for ``policy`` (a rationale source's name or id, or a checkpoint folder);
    ``run_now`` runs it to the end in this process (``manage.py quark_train``), otherwise it is
    queued on the ``lm`` queue. ``params`` take what :func:`.quark.quark_params` accepts."""
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
