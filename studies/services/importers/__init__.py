"""Dataset importers: every one validates the whole file first, reports every bad row in one
:class:`ImportValidationError`, and otherwise applies all rows in one transaction, idempotently.

Call the services directly, or :func:`import_run` with a kind (what the admin's import form and
the management commands do)."""
from __future__ import annotations

from typing import Any

from .errors import ImportValidationError, RowError  # noqa: F401
from .generalization import generalization_questions_import
from .generic import ItemColumns, items_import_table
from .openbookqa import items_import_openbookqa
from .rationales import RationaleColumns, rationales_import
from .reading import read_import_file  # noqa: F401
from .strategyqa import items_import_strategyqa
from .values import normalize_question  # noqa: F401

IMPORT_KINDS = {
    "strategyqa": ("StrategyQA questions (JSON list)", items_import_strategyqa),
    "openbookqa": ("OpenBookQA questions (original JSON lines or the (a)-(d) object form)", items_import_openbookqa),
    "items": ("Items from CSV / JSON lines with a column mapping", items_import_table),
    "rationales": ("Rationales (CSV / JSON lines)", rationales_import),
    "generalization": ("Generalization questions (generalisation_final_*.json shape)", generalization_questions_import),
}


def import_run(*, kind: str, file: Any, **options: Any):
    """Run the importer of ``kind`` with its keyword options; returns the ImportRecord."""
    try:
        _, service = IMPORT_KINDS[kind]
    except KeyError:
        raise ImportValidationError(f"unknown import kind {kind!r}: use one of {', '.join(IMPORT_KINDS)}") from None
    return service(file=file, **options)


__all__ = [
    "IMPORT_KINDS",
    "ImportValidationError",
    "ItemColumns",
    "RationaleColumns",
    "RowError",
    "generalization_questions_import",
    "import_run",
    "items_import_openbookqa",
    "items_import_strategyqa",
    "items_import_table",
    "normalize_question",
    "rationales_import",
    "read_import_file",
]
