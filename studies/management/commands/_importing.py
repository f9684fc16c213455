"""What the import commands share: argument parsing for the file, printing the summary, and
turning an ImportValidationError into a CommandError that lists every bad row."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from studies.services.importers import ImportValidationError


def describe_record(record) -> list[str]:
    lines = [
        f"Imported {record.filename} ({record.kind}) into dataset "
        f"{record.dataset.name if record.dataset else '-'}: "
        f"{record.created} created, {record.updated} updated, {record.unchanged} unchanged."
    ]
    summary = dict(record.summary or {})
    conflicts = summary.pop("conflicting_answers", None)
    for key, value in summary.items():
        if value in (None, "", [], {}):
            continue
        text = json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else str(value)
        lines.append(f"  {key.replace('_', ' ')}: {text}")
    if conflicts:
        lines.append(f"  warning: {len(conflicts)} question(s) appear twice with different answers; the first answer "
                     "was kept and the question flagged (metadata conflicting_answers):")
        for c in conflicts:
            lines.append(f"    line {c['line']}, column {c['column']}: {c['question']!r} ({c['type']}): kept "
                         f"{c['kept']!r}, dropped {c['dropped']!r}")
    return lines


class ImportCommand(BaseCommand):
    """Subclasses implement ``run(path, options)`` returning the ImportRecord."""

    def add_arguments(self, parser):
        parser.add_argument("path", help="The file to import.")

    def run(self, path: str, options: dict[str, Any]):  # pragma: no cover - abstract
        raise NotImplementedError

    def handle(self, *args, **options):
        try:
            record = self.run(options["path"], options)
        except ImportValidationError as exc:
            lines = [str(e) for e in exc.errors]
            name = f"{exc.filename}: " if exc.filename else ""
            header = f"{name}nothing imported; {len(lines)} problem(s):" if len(lines) > 1 else f"{name}nothing imported:"
            raise CommandError("\n".join([header, *("  " + line for line in lines)])) from None
        for line in describe_record(record):
            self.stdout.write(line)


