"""Quark training jobs: ``checkpoint_every`` steps per batch, evaluated and checkpointed after
each; the run is :mod:`studies.services.quark`'s."""
from __future__ import annotations

from studies.models import GenerationJob

from .common import Handler, Prepared


class QuarkHandler(Handler):
    kind = GenerationJob.Kind.QUARK
    # What ``studies.services.quark.quark_params`` documents; ``settings`` is checked key by key by
    # ``QuarkSettings.from_json``.
    params_accepted = frozenset({"reward", "answerer_i", "answerer_ir", "only_valid", "settings", "policy_path",
                                 "validation_split", "heldout_split", "train_limit", "validation_limit",
                                 "heldout_limit", "checkpoint_every", "max_accuracy_drop", "output_name",
                                 "register_without_gain"})

    def prepare(self, *, source, generator, dataset, split, item_ids, limit, params):
        from studies.services.quark import quark_params

        ids, params = quark_params(policy=source, dataset=dataset, split=split or "train", limit=limit, params=params,
                                   item_ids=item_ids)
        return Prepared(item_ids=ids, params=params, total=int(params["settings"]["steps"]), split=split or "train")

    def run_batch(self, job):
        from studies.services.quark import quark_job_run_batch

        return quark_job_run_batch(job)
