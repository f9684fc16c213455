"""Fine-tune T5 as a self-rationalizer or as a Gen-U answerer and register it as a source.

    manage.py finetune_t5 --dataset StrategyQA --mode answer_i --base-model /models/t5-base
    manage.py finetune_t5 --dataset StrategyQA --mode answer_ir --base-model /models/t5-base
    manage.py finetune_t5 --dataset StrategyQA --mode rationalizer --base-model /models/t5-large
    manage.py finetune_t5 --dataset StrategyQA --mode rationalizer --base-model /models/t5-3b --preset feb-few-shot
    manage.py finetune_t5 ... --preset quick   # a smoke test
    manage.py finetune_t5 ... --queue          # hand it to an lm worker instead of training here

Settings come from a preset that says what it reproduces (default: ``paper-answerers`` for F^I and
F^IR, ``paper-quark-start`` for the rationalizer); options given override it and the checkpoint
records which, with the data it was trained on.
"""
from django.core.management.base import BaseCommand, CommandError

from studies.models import Dataset
from studies.services.generation import GenerationError, finetune_t5
from studies.services.generation.finetune import DEFAULT_PRESETS, MODES, PRESETS
from studies.services.generation.jobs import already_queued_message


class Command(BaseCommand):
    help = "Fine-tune a T5 self-rationalizer or an F^I / F^IR answerer; registers the checkpoint as a source."

    def add_arguments(self, parser):
        parser.add_argument("--dataset", required=True, help="dataset name")
        parser.add_argument("--mode", choices=sorted(MODES), default="rationalizer")
        parser.add_argument("--base-model", required=True, help="model name (e.g. t5-base) or a local folder")
        parser.add_argument("--preset", choices=sorted(PRESETS), default=None,
                            help=("default: " + ", ".join(f"{m} {p}" for m, p in DEFAULT_PRESETS.items()) + ". "
                                  # argparse %-formats help: the descriptions' "10% of the steps" must stay text
                                  + "; ".join(f"{k}: {v['description']}" for k, v in PRESETS.items())
                                  .replace("%", "%%")))
        parser.add_argument("--split", default="train")
        parser.add_argument("--n-shot", type=int, default=None, help="train on this many items (default: all)")
        parser.add_argument("--epochs", type=int, default=None)
        parser.add_argument("--steps", type=int, default=None, help="optimizer steps (overrides --epochs)")
        parser.add_argument("--batch-size", type=int, default=None)
        parser.add_argument("--lr", type=float, default=None)
        parser.add_argument("--seed", type=int, default=None)
        parser.add_argument("--output-name", default=None, help="name of the registered rationale source")
        parser.add_argument("--include-generalization", action="store_true",
                            help="answerers: also train on the split's generalization questions (SPEC does not say; "
                                 "recorded as an override)")
        parser.add_argument("--queue", action="store_true", help="queue on the lm workers instead of training here")

    def handle(self, *args, **opts):
        dataset = Dataset.objects.filter(name=opts["dataset"]).first()
        if dataset is None:
            names = ", ".join(Dataset.objects.values_list("name", flat=True)) or "none imported yet"
            raise CommandError(f"no dataset named {opts['dataset']!r} (datasets: {names})")
        try:
            job = finetune_t5(
                dataset=dataset, mode=opts["mode"], base_model=opts["base_model"], split=opts["split"], preset=opts["preset"],
                n_shot=opts["n_shot"], epochs=opts["epochs"], steps=opts["steps"], batch_size=opts["batch_size"],
                lr=opts["lr"], seed=opts["seed"], output_name=opts["output_name"],
                include_generalization=True if opts["include_generalization"] else None, run_now=not opts["queue"],
            )
        except GenerationError as exc:
            raise CommandError(str(exc)) from exc
        if opts["queue"]:
            self.stdout.write(already_queued_message(job) if job.already_queued
                              else f"queued fine-tuning job {job.pk} ({job.total} steps) on the lm queue")
            return
        if job.status != job.Status.DONE:
            raise CommandError(f"fine-tuning job {job.pk} ended {job.status}: {job.error}")
        self.stdout.write(self.style.SUCCESS(
            f"job {job.pk}: preset {job.params['preset']!r}, {job.params['steps']} steps on {job.params['examples']} examples, final loss "
            f"{job.params['final_loss']:.4f}; checkpoint {job.params['checkpoint']} registered as source "
            f"{job.params['output_name']!r} (id {job.params['output_source_id']})"))
