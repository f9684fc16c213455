"""The report as one zip: what the report page shows, in files a researcher can put in a paper.

- ``results.json``: the run's whole results (``ScoreRun.results``);
- ``tables/<name>.csv``: every table of the page (the same rows, unrounded; a CI is two columns);
- ``figures/<name>.png`` and ``figures/<name>.svg``: every figure the run has data for;
- ``README.txt``: the study, the run, and each section left out with the reason.

Cells of the CSV files are neutralised against formula injection (source names and notes can
come from imported files)."""
from __future__ import annotations

import io
import json
import re
import zipfile

from lab.spreadsheet import csv_writer
from scoring import plots
from scoring.models import ScoreRun
from scoring.reports.sections import render_figure, report_sections
from scoring.reports.tables import Table


def table_csv(table: Table) -> str:
    buf = io.StringIO()
    writer = csv_writer(buf)
    writer.writerow(table.header())
    writer.writerows(table.csv_rows())
    return buf.getvalue()


def zip_name(run: ScoreRun) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", run.study.name).strip("-")[:60] or "study"
    return f"report-{slug}-run{run.pk}.zip"


def _readme(run: ScoreRun, sections) -> str:
    lines = [f"Scoring report of study {run.study.name!r} (id {run.study_id}), score run {run.pk}",
             f"finished {run.finished_at.isoformat() if run.finished_at else '-'}", ""]
    for section in sections:
        if section.absent:
            lines.append(f"- {section.title}: not in this report. {section.absent}")
        else:
            files = [f"tables/{t.name}.csv" for t in section.tables]
            files += [f"figures/{f}.png, figures/{f}.svg" for f in section.figures]
            lines.append(f"- {section.title}: {', '.join(files)}")
            lines += [f"    {note}" for note in section.notes]
    warnings = (run.results or {}).get("warnings") or []
    if warnings:
        lines += ["", "What was missing when scoring:"] + [f"- {w}" for w in warnings]
    return "\n".join(lines) + "\n"


def report_zip(run: ScoreRun, *, both_directions: bool = True) -> bytes:
    """The zip's bytes (a finished run). The download carries both directions of Theil's U."""
    sections = report_sections(run, both_directions=both_directions)
    results = run.results or {}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("README.txt", _readme(run, sections))
        zf.writestr("results.json", json.dumps(results, indent=2))
        for section in sections:
            for table in section.tables:
                zf.writestr(f"tables/{table.name}.csv", table_csv(table))
        for name in plots.available(results):
            for fmt in plots.FORMATS:
                zf.writestr(f"figures/{name}.{fmt}", render_figure(name, results, fmt))
    return buf.getvalue()
