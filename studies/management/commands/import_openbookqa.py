from studies.services.importers import items_import_openbookqa

from ._importing import ImportCommand


class Command(ImportCommand):
    help = "Import OpenBookQA questions: the original *_complete.jsonl or the {\"0\": {...}} (a)-(d) form."

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--dataset", default="OpenBookQA", help="Dataset name (created when new).")
        parser.add_argument("--split", help="train, dev, test or other; default: from the file name.")

    def run(self, path, options):
        return items_import_openbookqa(file=path, dataset_name=options["dataset"], split=options["split"])
