"""LM jobs: rationales, generalization questions, Gen-U answers, faithfulness probabilities,
fine-tuning and Quark training, each kind in a handler of its own (:mod:`.jobs` lists them), run
batch by batch on the ``lm`` queue through one lifecycle (:mod:`.lifecycle`). The modules build
in one direction: ``errors`` < ``lifecycle`` < ``common`` < the kinds (``rationales``,
``questions``, ``genu``, ``faithfulness``, ``finetune``, ``quark`` with ``quark_policy`` and
``quark_rewards``) < ``jobs`` < ``training``."""
from .common import DEFAULT_BATCH_SIZE, prompt_item, yes_no_prompt_item
from .errors import GenerationError
from .jobs import (
    HANDLERS,
    describe_exception,
    generation_job_cancel,
    generation_job_create,
    generation_job_resume,
    generation_job_run,
    generation_job_run_batch,
    generation_jobs_resume_stalled,
)
from .lifecycle import generation_job_fail
from .training import finetune_t5, quark_train

__all__ = [
    "DEFAULT_BATCH_SIZE", "HANDLERS", "GenerationError", "describe_exception", "finetune_t5", "generation_job_cancel",
    "generation_job_create", "generation_job_fail", "generation_job_resume", "generation_job_run",
    "generation_job_run_batch", "generation_jobs_resume_stalled", "prompt_item", "quark_train", "yes_no_prompt_item",
]
