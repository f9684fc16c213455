"""``manage.py make_links <study id> --count N`` (single-person links) or ``--open`` (one open link with
a completion code); prints the URLs. No money moves. It acts as the deployment's operator
(``OPERATOR``), like the other commands that act on a study."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from annotations.services.links import link_public_url, links_generate, open_link_create
from annotations.services.payments import PlatformServiceError
from annotations.services.platforms.access import OPERATOR
from studies.models import Study


class Command(BaseCommand):
    help = "Make participant links for a study and print their URLs."

    def add_arguments(self, parser):
        parser.add_argument("study_id", type=int)
        parser.add_argument("--count", type=int, default=1, help="Number of single-person links.")
        parser.add_argument("--label", default="", help="Label prefix, e.g. a lab session.")
        parser.add_argument("--open", action="store_true", help="Make one open link instead.")
        parser.add_argument("--completion-code", default="", help="Open link: the code shown at the end.")
        parser.add_argument("--max-participants", type=int, default=None, help="Open link: capacity.")

    def handle(self, *args, **options):
        study = Study.objects.filter(pk=options["study_id"]).first()
        if study is None:
            raise CommandError(f"no study with id {options['study_id']}")
        try:
            if options["open"]:
                link = open_link_create(study=study, user=OPERATOR, completion_code=options["completion_code"],
                                        max_participants=options["max_participants"])
                self.stdout.write(f"{link_public_url(link)}\tcompletion code {link.completion_code}")
                return
            for link in links_generate(study=study, n=options["count"], user=OPERATOR, label=options["label"]):
                self.stdout.write(f"{link_public_url(link)}\t{link.label}\t{link.completion_code}")
        except PlatformServiceError as exc:
            raise CommandError(exc.message) from exc
