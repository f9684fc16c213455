"""The Celery app. Queues: ``default`` for web-side work, ``lm`` for GPU/LM workers.

Run a worker for both queues with ``celery -A config worker -Q default,lm``; on GPU machines run
``celery -A config worker -Q lm --concurrency 1`` so a model is loaded once per process."""
import os
import socket

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("rationale_lab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="rationale_lab.ping")
def ping(value: str = "pong") -> dict:
    """Health check: a worker answers with the value and its hostname."""
    return {"value": value, "host": socket.gethostname()}

