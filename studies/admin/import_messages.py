"""What the *Import data* page says after an import: the counts of every import, and what the
generalization import merged or left in conflict (with a link to those questions), which its
summary holds but a researcher should not have to read as JSON."""
from __future__ import annotations

from django.urls import reverse
from django.utils.html import format_html

from studies.models import ImportRecord


def import_message(record: ImportRecord) -> str:
    """The success message of ``record``; safe HTML when it links to rows."""
    text = (f"Imported {record.filename}: {record.created:,} created, {record.updated:,} updated, "
            f"{record.unchanged:,} unchanged.")
    summary = record.summary or {}
    merged = summary.get("identical_duplicates_merged") or 0
    conflicts = summary.get("conflicting_answers") or []
    if merged and "rows_in_file" in summary:
        text += (f" Of its {summary['rows_in_file']:,} rows, {merged:,} repeated an earlier row exactly and were "
                 f"merged ({summary.get('questions', 0):,} distinct questions).")
    if not conflicts:
        return text
    url = (reverse("admin:studies_generalizationquestion_changelist") + "?"
           + (f"item__dataset__id__exact={record.dataset_id}&" if record.dataset_id else "")
           + "metadata__has_key=conflicting_answers")
    n = len({(c.get("original"), c.get("question"), c.get("type")) for c in conflicts})
    first = conflicts[0]
    where = f"line {first.get('line')}" + (f", column {first['column']}" if first.get("column") else "")
    return format_html(
        '{} {} question(s) were given more than once with different answers ({} line(s), e.g. {}: '
        '"{}" answered {} there, {} at {}): the first answer was kept and each is flagged for validation. '
        '<a href="{}" id="import-conflicts-link">Show them</a> or read the <a href="{}">import record</a>.',
        text, f"{n:,}", f"{len(conflicts):,}", where, first.get("question"), first.get("dropped"),
        first.get("kept"), first.get("first_at"), url, reverse("admin:studies_importrecord_change", args=[record.pk]),
    )
