"""``manage.py sync_study <id>``: fetch assignments / submissions from the platform, match them to the
stored answers, flag the ones with none, and reconcile calls left unconfirmed."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from annotations.platforms.base import PlatformError
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.sync import study_sync
from studies.models import Study


class Command(BaseCommand):
    help = "Sync a study with its crowd platform."

    def add_arguments(self, parser):
        parser.add_argument("study_id", type=int)

    def handle(self, *args, **options):
        study = Study.objects.filter(pk=options["study_id"]).first()
        if study is None:
            raise CommandError(f"no study with id {options['study_id']}")
        try:
            report = study_sync(study=study)
        except (PlatformServiceError, PlatformError) as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"{report.remote} on the platform, {report.matched} matched, {report.flagged} flagged, "
                          f"{report.status_updates} status updates; reconciled calls: {report.reconciled}")
        for flag in report.flags:
            self.stdout.write(self.style.WARNING(
                f"flagged {flag['platform_assignment_id']} (worker {flag['worker_id']}): {flag['flag']}"))
