"""LM jobs: rationales, generalization questions, Gen-U answers, faithfulness probabilities and
fine-tuning, each kind in a handler of its own (:mod:`.jobs` lists them), run batch by batch on
the ``lm`` queue."""
from .common import (
    DEFAULT_BATCH_SIZE,
    GenerationError,
    generation_job_fail,
    prompt_item,
    yes_no_prompt_item,
)
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

__all__ = [
    "DEFAULT_BATCH_SIZE", "HANDLERS", "GenerationError", "describe_exception", "generation_job_cancel",
    "generation_job_create", "generation_job_fail", "generation_job_resume", "generation_job_run",
    "generation_job_run_batch", "generation_jobs_resume_stalled", "prompt_item", "yes_no_prompt_item",
]
