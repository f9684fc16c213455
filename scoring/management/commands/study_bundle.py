"""``manage.py study_bundle export STUDY_ID FILE`` writes a study's bundle (zip) to FILE, streamed;
``manage.py study_bundle import FILE --name NAME`` imports one as a new closed study (all or
nothing; every problem listed with its file, row and field), and says when the bundle cannot give
what Figure 4's ``by_utility`` borrowed from another study (a bundle made before it carried it)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from scoring.services.bundle import BundleError, bundle_import, bundle_stream, bundled_utility_missing
from studies.models import Study


def _write_bundle(study: Study, file: Path) -> int:
    """Stream the bundle into a temporary file beside ``file`` and move it onto ``file`` once whole
    (``os.replace``): a bundle already at ``file`` stays as it was until the new one is complete,
    and on any error the temporary file is removed and ``CommandError`` names ``file``. Returns the
    size written."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".part", dir=file.parent)
    except OSError as exc:
        raise CommandError(f"Cannot write {file}: {exc.strerror or exc}.") from None
    size = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in bundle_stream(study=study, user=None):
                fh.write(chunk)
                size += len(chunk)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open(file, "wb") would have made it (mkstemp: 0600)
        os.replace(tmp, file)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if not isinstance(exc, Exception):  # an interrupt: cleaned up, then stopped as asked
            raise
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise CommandError(f"Did not write {file}: {reason}; a file there before is left as it was.") from exc
    return size


class Command(BaseCommand):
    help = "Write a study's bundle (zip) to a file, or import a bundle as a new closed study."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        out = sub.add_parser("export", help="Write the bundle of a study.")
        out.add_argument("study_id", type=int)
        out.add_argument("file", type=Path)
        into = sub.add_parser("import", help="Import a bundle as a new closed study.")
        into.add_argument("file", type=Path)
        into.add_argument("--name", required=True, help="The new study's name.")

    def handle(self, *args, action, file, **options):
        if action == "export":
            study = Study.objects.filter(pk=options["study_id"]).first()
            if study is None:
                raise CommandError(f"No study with id {options['study_id']}.")
            size = _write_bundle(study, file)
            self.stdout.write(f"Wrote {file} ({size:,} bytes) for study {study.name!r}.")
            return
        try:
            study = bundle_import(file=file, name=options["name"], owner=None)  # the operator
        except BundleError as exc:
            raise CommandError("\n".join([exc.summary(), *exc.lines()[1:]])) from None
        self.stdout.write(f"Imported study {study.name!r} id={study.pk} (closed); score it with "
                          f"manage.py score_study {study.pk}.")
        missing = bundled_utility_missing(study)
        if missing:
            self.stdout.write(self.style.WARNING(
                f"Its Figure 4 by the original rationale's utility (by_utility) cannot be reproduced: {missing}."))
