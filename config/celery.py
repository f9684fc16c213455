"""The Celery app. Queues: ``default`` for web-side work, ``lm`` for GPU/LM workers."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("rationale_lab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
