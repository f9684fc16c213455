"""Load the demo dataset through the importers and create the demo utility study and an admin.

Idempotent: running it again changes nothing (the admin's password is only reset when
DEMO_ADMIN_PASSWORD is set). It refuses, writing nothing, an existing ``admin`` that is not an active
superuser and a study of the demo's name that is not the demo's (``Command._admin``, ``_study``).
It lives in ``cockpit`` because it composes the apps: it imports with ``studies``, opens the study
and prints its worker link with ``annotations``."""
from __future__ import annotations

import secrets
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from annotations.platforms.handoff import study_entry_url
from annotations.selectors.entry import plain_link_starts_tasks
from annotations.services.opening import study_open
from annotations.services.platforms.access import OPERATOR
from studies import demo
from studies.models import Dataset, Platform, RationaleSource, Study
from studies.services.importers import ImportValidationError, items_import_strategyqa, rationales_import
from studies.services.studies import StudyError, study_create

INSTRUCTIONS = (
    "You will see a yes/no question. First answer it on your own. Then you will see an explanation "
    "written by a computer program, and you answer the same question again. The explanation may be "
    "wrong: use it only if it convinces you. You cannot change your first answer."
)
EXAMPLE = (
    "Question: Is a whale a fish?\n"
    "Your first answer: No.\n"
    "Explanation shown: Whales breathe air and feed their young with milk, so they are mammals.\n"
    "Your second answer: No."
)
CONSENT = (
    "This is a demo study of Rationale Lab. You will answer short yes/no questions. No personal "
    "information is collected beyond your answers and the time they take. You may stop at any time."
)


class Command(BaseCommand):
    help = "Load the demo questions and rationales, create the demo utility study and the admin user."

    def handle(self, *args, **options):
        # One transaction: an ``admin`` or a "Demo utility study" that is not the demo's is refused
        # (``_admin``, ``_study``) with nothing written, the demo questions included.
        with transaction.atomic():
            try:
                items = items_import_strategyqa(file=demo.QUESTIONS_FILE, dataset_name=demo.DATASET_NAME, split="test")
                rationales = rationales_import(
                    file=demo.RATIONALES_FILE, dataset_name=demo.DATASET_NAME, split="test"
                )
            except ImportValidationError as exc:  # the demo files ship with the code: this is a bug
                raise CommandError("the demo files do not import:\n" + "\n".join(exc.lines())) from None
            admin, password = self._admin()
            study = self._study(admin)
        self.stdout.write(
            f"Demo questions: {items.created} created, {items.updated} updated, {items.unchanged} unchanged."
        )
        self.stdout.write(
            f"Demo rationales: {rationales.created} created, {rationales.updated} updated, "
            f"{rationales.unchanged} unchanged."
        )
        status_note = ""
        if study.status == Study.Status.DRAFT:
            try:
                study = study_open(study=study, user=OPERATOR)  # a command: the operator acts
            except StudyError as exc:
                status_note = f" (left as draft: {exc})"
        url = f"{settings.RL_PUBLIC_URL}/admin/"
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS("Demo ready."))
        self.stdout.write(f"Admin: {url}")
        self.stdout.write(f"Login: {admin.username}")
        self.stdout.write(f"Password: {password}")
        self.stdout.write(f"Study: {study.name!r} id={study.pk} status={study.status}{status_note}")
        self.stdout.write(f"Study page: {url}studies/study/{study.pk}/change/")
        if study.status == Study.Status.OPEN and plain_link_starts_tasks(study=study):
            self.stdout.write(
                f"Worker link (open it in a private window; each new browser is a new worker): "
                f"{study_entry_url(study, platform=Platform.LINK)}"
            )
        elif study.status == Study.Status.OPEN:
            # Single-person links were made for it: its plain link starts no task any more.
            self.stdout.write(
                "Worker links: this study takes part by single-person links only (its plain link starts no "
                f"task); they are listed on its publish page: {url}annotations/publication/publish/{study.pk}/ "
                "(make an open link there to admit anonymous workers)"
            )

    def _admin(self):
        User = get_user_model()
        env_password = settings.DEMO_ADMIN_PASSWORD
        with transaction.atomic():
            user = User.objects.filter(username="admin").first()
            if user is None:
                password = env_password or secrets.token_urlsafe(12)
                user = User.objects.create_superuser(username="admin", email="admin@example.org", password=password)
                return user, password if env_password else f"{password} (generated; keep it)"
            # An existing account is never promoted: an ``admin`` someone made (a researcher, a
            # deactivated account) is not the demo's, and its flags are not this command's to change.
            missing = [flag for flag in ("is_active", "is_staff", "is_superuser") if not getattr(user, flag)]
            if missing:
                raise CommandError(
                    f"user 'admin' (id {user.pk}) exists and is not an active superuser ({', '.join(missing)} "
                    "false): the demo does not change an existing account; make it one or rename it, then run "
                    "load_demo again. Nothing was written.")
            if env_password and not user.check_password(env_password):
                user.set_password(env_password)
                user.save(update_fields=["password"])
            if env_password:
                return user, "from DEMO_ADMIN_PASSWORD"
            return user, "unchanged (the admin user already existed; set DEMO_ADMIN_PASSWORD to reset it)"

    def _study(self, owner) -> Study:
        """The demo study: the one named ``demo.STUDY_NAME`` if it is the demo's (``owner``'s, a
        utility study of the demo dataset), made if missing; a study of that name that is not the
        demo's (another researcher's, another kind or dataset) is refused, never opened."""
        study = Study.objects.select_related("owner", "dataset").filter(name=demo.STUDY_NAME).first()
        if study is not None:
            if (study.owner_id, study.kind, study.dataset.name) != (owner.pk, Study.Kind.UTILITY, demo.DATASET_NAME):
                holder = study.owner.get_username() if study.owner is not None else "the operator (no owner)"
                raise CommandError(
                    f"study {demo.STUDY_NAME!r} (id {study.pk}) exists and is not the demo's: owner {holder}, kind "
                    f"{study.kind}, dataset {study.dataset.name!r}, where the demo's is owned by {owner.get_username()!r}, "
                    f"kind {Study.Kind.UTILITY}, dataset {demo.DATASET_NAME!r}; rename that study, then run load_demo "
                    "again. Nothing was written.")
            return study
        return study_create(
            name=demo.STUDY_NAME,
            dataset=Dataset.objects.get(name=demo.DATASET_NAME),
            kind=Study.Kind.UTILITY,
            split="test",
            sources=list(RationaleSource.objects.filter(name__in=demo.SOURCES).order_by("name")),
            annotators_per_unit=5,
            units_per_task=5,
            reward=Decimal("1.50"),
            hourly_pay_floor=Decimal("15.00"),
            estimated_minutes_per_task=Decimal("4.0"),
            owner=owner,
            consent_text=CONSENT,
            instructions=INSTRUCTIONS,
            example=EXAMPLE,
        )
