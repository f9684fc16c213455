from studies.services.importers import RationaleColumns, rationales_import

from ._importing import ImportCommand


class Command(ImportCommand):
    help = (
        "Import rationales (CSV or JSON lines) for items of an existing dataset, matched by item id or by "
        "question text. Sources that do not exist are created. Columns are found by their usual names "
        "(question, rationale, rationale_source, predicted_answer, ...) unless given."
    )

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--dataset", required=True, help="Dataset the items belong to.")
        parser.add_argument("--split", help="Match only items of this split.")
        parser.add_argument("--source", help="Put every row under this source (for one-model files).")
        parser.add_argument("--format", dest="file_format", choices=["csv", "jsonl", "json"])
        for role in ("item_id", "question", "source", "rationale", "predicted_answer", "gold_answer"):
            parser.add_argument(f"--{role.replace('_', '-')}-column", dest=f"{role}_column", default=None,
                                help=f"Column holding the {role.replace('_', ' ')} ('' for none).")

    def run(self, path, options):
        columns = RationaleColumns(**{role: options[f"{role}_column"] for role in (
            "item_id", "question", "source", "rationale", "predicted_answer", "gold_answer")})
        return rationales_import(
            file=path, dataset_name=options["dataset"], split=options["split"], source_name=options["source"],
            columns=columns, file_format=options["file_format"],
        )
