"""``manage.py import_outcomes FILE --dataset NAME --study NAME``: a utility study run elsewhere
(aggregated before/after answers per question and source, as in ``rationale_utility.json``)
becomes a finished study that can be scored and compared with new ones."""
from __future__ import annotations

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from scoring.services import outcomes_study_create
from studies.models import Dataset
from studies.services.importers import ImportValidationError


class Command(BaseCommand):
    help = "Import the outcomes of a utility study collected elsewhere as a finished study."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--dataset", required=True, help="Dataset whose items the questions belong to.")
        parser.add_argument("--study", required=True, help="Name of the finished study (created if missing).")
        parser.add_argument("--split", default="test")
        parser.add_argument("--score", action="store_true",
                            help="Score the study right away and print the shares; similarity (BERTScore) is "
                                 "computed when its model is available (RL_SIMILARITY_MODEL or the lm extra).")
        parser.add_argument("--no-similarity", action="store_true", help="With --score: skip BERTScore similarity.")

    def handle(self, *args, file, dataset, study, split, score, no_similarity, **options):
        try:
            dataset_obj = Dataset.objects.get(name=dataset)
        except Dataset.DoesNotExist:
            raise CommandError(f"No dataset named {dataset!r}; import its items first.") from None
        try:
            study_obj, summary = outcomes_study_create(name=study, dataset=dataset_obj, file=file, split=split,
                                                        user=None)  # the operator
        except ImportValidationError as exc:
            raise CommandError("\n".join([exc.summary(), *exc.lines()[1:]])) from None
        self.stdout.write(f"Study {study_obj.name!r} id={study_obj.pk}: " + ", ".join(
            f"{key}={value}" for key, value in summary.items() if not isinstance(value, (list, dict))))
        if score:
            call_command("score_study", study_obj.pk, *(["--no-similarity"] if no_similarity else []),
                         stdout=self.stdout)
