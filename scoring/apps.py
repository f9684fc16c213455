from django.apps import AppConfig


class ScoringConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "scoring"
    verbose_name = "Scoring"

    def ready(self):
        # Register the app's Celery tasks in every process (web included): the services send them
        # by name (``scoring.services.runs.SCORE_TASK``) and must find them registered, so that
        # eager mode and routing apply as for a task imported directly.
        from scoring import tasks  # noqa: F401
