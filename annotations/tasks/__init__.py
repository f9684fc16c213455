"""Celery tasks of the annotations app (found by ``app.autodiscover_tasks()``): the questionnaire's
(``assignments``) and the crowd platforms' (``platforms``). Importing the package registers both."""
from annotations.tasks import assignments, platforms  # noqa: F401
