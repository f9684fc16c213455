"""Test settings. DATABASE_URL / REDIS_URL from the environment pick PostgreSQL and Redis (CI);
without them the suite runs on SQLite with the embedded broker, as a newcomer's machine does."""
import tempfile
from pathlib import Path

from .base import *  # noqa: F403
from .base import DATABASES

DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
DATABASES["default"]["CONN_MAX_AGE"] = 0
DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
MEDIA_ROOT = Path(tempfile.mkdtemp(prefix="rl-media-"))
RL_MODEL_DIR = Path(tempfile.mkdtemp(prefix="rl-models-"))
# Static files are served from the app folders in tests; there is no collectstatic output.
WHITENOISE_AUTOREFRESH = True
WHITENOISE_USE_FINDERS = True
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Tasks run inline unless a test starts a real worker (see tests/test_celery_roundtrip.py).
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
