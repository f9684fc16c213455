from django.apps import AppConfig


class AnnotationsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "annotations"
    verbose_name = "Annotations: workers, assignments and answers"

    def ready(self):
        # Register the app's Celery tasks in every process (web included): services send some of
        # them by name (``annotations.services.stopping.CLOSE_TASK``) and must find them registered,
        # so that eager mode and routing apply as for a task imported directly.
        from annotations import tasks  # noqa: F401 (the package registers both task modules)
