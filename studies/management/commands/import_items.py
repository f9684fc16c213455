from studies.services.importers import ItemColumns, items_import_table

from ._importing import ImportCommand


class Command(ImportCommand):
    help = (
        "Import items from CSV, JSON lines or a JSON list with a column mapping. Unmapped columns go to "
        "the item metadata. Multiple-choice choices: a JSON list of strings or of {label, text} objects."
    )

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--dataset", required=True, help="Dataset name.")
        parser.add_argument("--task-format", choices=["yes_no", "multiple_choice"],
                            help="Required when the dataset is new.")
        parser.add_argument("--choice-labels", help="Comma-separated option labels for a new multiple-choice dataset.")
        parser.add_argument("--split", help="Split for rows without a split column; default: from the file name.")
        parser.add_argument("--format", dest="file_format", choices=["csv", "jsonl", "json"],
                            help="Default: from the extension or the content.")
        defaults = ItemColumns()
        for field in ("id", "question", "answer", "choices", "rationale", "split"):
            parser.add_argument(f"--{field}-column", default=getattr(defaults, field),
                                help=f"Column holding the {field} (default {getattr(defaults, field)!r}; '' for none).")

    def run(self, path, options):
        columns = ItemColumns(**{f: options[f"{f}_column"] for f in ("id", "question", "answer", "choices",
                                                                     "rationale", "split")})
        labels = [x for x in (options["choice_labels"] or "").split(",") if x.strip()] or None
        return items_import_table(
            file=path, dataset_name=options["dataset"], task_format=options["task_format"], choice_labels=labels,
            columns=columns, split=options["split"], file_format=options["file_format"],
        )
