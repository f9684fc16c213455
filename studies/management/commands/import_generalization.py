from studies.services.importers import generalization_questions_import

from ._importing import ImportCommand


class Command(ImportCommand):
    help = (
        "Import generalization questions in the generalisation_final_*.json shape "
        "({original question: [[question, answer, type], ...]}) for items of an existing dataset."
    )

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--dataset", default="StrategyQA", help="Dataset the originals belong to.")
        parser.add_argument("--split", help="Match originals in this split; default: from the file name.")
        parser.add_argument("--validation-status", choices=["unvalidated", "valid", "invalid"],
                            help="Set on every question of the file (default: leave as is; new ones unvalidated).")

    def run(self, path, options):
        return generalization_questions_import(
            file=path, dataset_name=options["dataset"], split=options["split"],
            validation_status=options["validation_status"],
        )
