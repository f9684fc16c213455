"""Fine-tuning jobs: one long batch that trains, saves and registers a checkpoint. The work is
:mod:`studies.services.finetune`'s."""
from __future__ import annotations

from studies.models import GenerationJob

from .common import GenerationError, Handler, Prepared


class FinetuneHandler(Handler):
    kind = GenerationJob.Kind.FINETUNE
    # What ``studies.services.finetune.finetune_t5`` takes (``finetune_params`` completes them).
    params_accepted = frozenset({"mode", "preset", "base_model", "n_shot", "epochs", "steps", "batch_size", "lr",
                                 "seed", "output_name", "include_generalization"})

    def prepare(self, *, source, generator, dataset, split, item_ids, limit, params):
        from studies.services.finetune import finetune_params

        if dataset is None:
            raise GenerationError("choose the dataset to fine-tune on")
        split = split or "train"
        params = finetune_params(dataset=dataset, split=split, params=params)
        return Prepared(item_ids=[], params=params, total=int(params["steps"]), split=split)

    def run_batch(self, job):
        from studies.services.finetune import finetune_job_run

        finetune_job_run(job=job)
        return False
