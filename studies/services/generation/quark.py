"""Quark training jobs: ``checkpoint_every`` steps per batch, evaluated and checkpointed after
each; the run is :mod:`studies.services.quark`'s."""
from __future__ import annotations

from studies.models import GenerationJob

from .common import Handler, Prepared


class QuarkHandler(Handler):
    kind = GenerationJob.Kind.QUARK

    def prepare(self, *, source, generator, dataset, split, item_ids, limit, params):
        from studies.services.quark import quark_params

        ids, params = quark_params(policy=source, dataset=dataset, split=split or "train", limit=limit, params=params,
                                   item_ids=item_ids)
        return Prepared(item_ids=ids, params=params, total=int(params["settings"]["steps"]), split=split or "train")

    def run_batch(self, job):
        from studies.services.quark import quark_job_run_batch

        return quark_job_run_batch(job)
