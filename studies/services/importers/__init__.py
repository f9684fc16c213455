"""Dataset importers: every one validates the whole file first, reports every bad row in one
:class:`ImportValidationError`, and otherwise applies all rows in one transaction, idempotently.

Call the services directly, or :func:`import_run` with a kind (what the admin's import form and
the management commands do)."""
from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied

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


# The one right a file import needs, whoever calls (the admin's page, the API, a background job).
IMPORT_PERMISSION = "studies.add_importrecord"


def import_permission_check(user) -> None:
    """Refuse a researcher without ``studies.add_importrecord`` (``PermissionDenied``). The operator
    (None) is never refused, nor a background job whose researcher's account was deleted (it acts for
    nobody, an anonymous user, and stores only what no study shows: ``content.job_acts_for``)."""
    if user is not None and user.is_authenticated and not user.has_perm(IMPORT_PERMISSION):
        raise PermissionDenied("importing needs the permission studies.add_importrecord")


def import_run(*, kind: str, file: Any, **options: Any):
    """Run the importer of ``kind`` with its keyword options, for ``options["user"]`` (absent or
    None: the operator), who needs the import permission (``import_permission_check``); returns
    the ImportRecord."""
    import_permission_check(options.get("user"))
    try:
        _, service = IMPORT_KINDS[kind]
    except KeyError:
        raise ImportValidationError(f"unknown import kind {kind!r}: use one of {', '.join(IMPORT_KINDS)}") from None
    return service(file=file, **options)


__all__ = [
    "IMPORT_KINDS",
    "IMPORT_PERMISSION",
    "ImportValidationError",
    "ItemColumns",
    "RationaleColumns",
    "RowError",
    "generalization_questions_import",
    "import_permission_check",
    "import_run",
    "items_import_openbookqa",
    "items_import_strategyqa",
    "items_import_table",
    "normalize_question",
    "rationales_import",
    "read_import_file",
]
