from django.apps import AppConfig


class StudiesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "studies"
    verbose_name = "Studies: datasets, rationales and designs"

    def ready(self) -> None:
        # Register the app's Celery tasks in every process (web included): services queue them by
        # name (``studies.services.generation.jobs.RUN_TASK``, ``studies.services.importers.jobs.IMPORT_TASK``)
        # instead of importing the tasks, which import those services. A name Celery knows runs
        # inline under CELERY_TASK_ALWAYS_EAGER, as a task imported directly.
        from studies import tasks  # noqa: F401
