from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_save, pre_save


class StudiesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "studies"
    verbose_name = "Studies: datasets, rationales and designs"

    def ready(self) -> None:
        # Register the app's Celery tasks in every process (web included): services queue them by
        # name (``studies.services.generation.jobs.RUN_TASK``, ``studies.services.importers.jobs.IMPORT_TASK``)
        # instead of importing the tasks, which import those services. A name Celery knows runs
        # inline under CELERY_TASK_ALWAYS_EAGER, as a task imported directly.
        # studies.signals: a password change ends the user's API tokens, as it ends their sessions.
        from studies import signals, tasks  # noqa: F401

        pre_save.connect(signals.note_password_made_unusable, sender=settings.AUTH_USER_MODEL,
                         dispatch_uid="studies.note_password_made_unusable")
        post_save.connect(signals.end_api_tokens_on_password_change, sender=settings.AUTH_USER_MODEL,
                          dispatch_uid="studies.end_api_tokens_on_password_change")
