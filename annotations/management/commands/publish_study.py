"""``manage.py publish_study <id> [--platform mturk|prolific|link] [--dry-run]``: estimate the cost and
publish a study on its platform; with --dry-run, print every request that would be sent and send
nothing. ``--platform`` only confirms the study's platform: another one is refused, as the service
refuses it for every caller (``annotations.services.platforms.common.publish_platform``)."""
from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from annotations.platforms.base import PlatformError
from annotations.selectors.cost import study_cost_and_pay
from annotations.services.links import link_public_url
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from annotations.services.platforms.publish import study_publish
from studies.models import Platform, Study


class Command(BaseCommand):
    help = "Publish a study on MTurk, Prolific or as links (use --dry-run to see what would be sent)."

    def add_arguments(self, parser):
        parser.add_argument("study_id", type=int)
        parser.add_argument("--platform", choices=Platform.values, default=None,
                            help="The study's platform (the default); another one is refused: a study is "
                                 "published only on its own platform.")
        parser.add_argument("--dry-run", action="store_true", help="Print the requests; send nothing.")
        parser.add_argument("--link-mode", choices=["single", "open"], default="single")
        parser.add_argument("--max-assignments-per-hit", type=int, default=None,
                            help="MTurk: assignments per HIT (9 keeps the fee at 20%%).")

    def handle(self, *args, **options):
        study = Study.objects.filter(pk=options["study_id"]).first()
        if study is None:
            raise CommandError(f"no study with id {options['study_id']}")
        publish_options = {"link_mode": options["link_mode"]}
        if options["max_assignments_per_hit"] is not None:  # 0 or a negative: refused by the service
            publish_options["max_assignments_per_hit"] = options["max_assignments_per_hit"]
        try:
            publication = study_publish(study=study, user=OPERATOR, dry_run=options["dry_run"],
                                        platform_name=options["platform"], options=publish_options)
        except (PlatformServiceError, PlatformError) as exc:
            raise CommandError(exc.message) from exc
        # The one cost-and-pay reading, as the study page, the publish page and the API quote it; an
        # MTurk batch is quoted with the HIT size it records (a resumed one keeps the size it was made with).
        per_hit = (publication.plan or {}).get("max_assignments_per_hit",
                                               publish_options.get("max_assignments_per_hit"))
        cost = study_cost_and_pay(study=study, platform_name=publication.platform,
                                  max_assignments_per_hit=per_hit, n_tasks=publication.n_tasks)
        e = cost.estimate
        self.stdout.write(f"{study.name} on {publication.platform} ({publication.endpoint or 'no API'}), "
                          f"batch {publication.batch}: {e.n_tasks} tasks, rewards {e.rewards} + fee {e.fees} "
                          f"({e.fee_rate}) = {e.total} {e.currency}")
        self.stdout.write(f"effective pay: {cost.pay.figure}/hour ({cost.pay.basis}); floor {cost.pay.floor}/hour")
        for warning in (publication.plan or {}).get("warnings", cost.warnings):
            self.stdout.write(self.style.WARNING(f"warning: {warning}"))
        if publication.dry_run:
            self.stdout.write(self.style.NOTICE("DRY RUN: nothing was sent. Requests that would be sent:"))
            for request in publication.plan.get("requests", []):
                self.stdout.write(json.dumps(request, indent=2, default=str))
        elif publication.platform == Platform.LINK:
            for link in [*publication.open_links.all(), *publication.participant_links.all()]:
                self.stdout.write(f"{link_public_url(link)}\t{link.completion_code}")
            self.stdout.write(self.style.SUCCESS("published as links"))
        else:
            self.stdout.write(self.style.SUCCESS(f"published: {json.dumps(publication.external_ids)}"))
