from django.apps import AppConfig


class StudiesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "studies"
    verbose_name = "Studies: datasets, rationales and designs"

    def ready(self):
        # Register the app's Celery tasks in every process (web included): services send some of
        # them by name (``studies.services.importers.jobs.IMPORT_TASK``) and must find them
        # registered, so that eager mode and routing apply as for a task imported directly.
        from studies import tasks  # noqa: F401
