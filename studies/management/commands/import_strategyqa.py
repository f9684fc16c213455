from studies.services.importers import items_import_strategyqa

from ._importing import ImportCommand


class Command(ImportCommand):
    help = "Import StrategyQA questions (official JSON list or the processed form with `rationale`)."

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--dataset", default="StrategyQA", help="Dataset name (created when new).")
        parser.add_argument("--split", help="train, dev, test or other; default: from the file name.")

    def run(self, path, options):
        return items_import_strategyqa(file=path, dataset_name=options["dataset"], split=options["split"])
