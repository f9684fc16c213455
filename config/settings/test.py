"""Test settings. DATABASE_URL / REDIS_URL from the environment pick PostgreSQL and Redis (CI);
without them the suite runs on SQLite with the embedded broker, as a newcomer's machine does."""
import os
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def xdist_redis_url(url: str, worker: str) -> str:
    """``url`` for pytest-xdist worker ``worker`` ("gw0", "gw1", ...): worker N uses the Redis
    database N above the configured one, since the tests clear their Redis database (throttle
    counts, the broker's queues) and two workers sharing one would clear each other's."""
    parts = urlsplit(url)
    base = int(parts.path.lstrip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{base + int(worker.removeprefix('gw'))}"))


# Before base reads REDIS_URL (cache, broker, result backend) and in the environment, so that a
# real Celery worker a test starts uses the same database; RL_TEST_REDIS_WORKER says it was done, so
# that worker (which inherits PYTEST_XDIST_WORKER too) does not move it once more.
_xdist_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _xdist_worker and os.environ.get("REDIS_URL") and os.environ.get("RL_TEST_REDIS_WORKER") != _xdist_worker:
    os.environ["REDIS_URL"] = xdist_redis_url(os.environ["REDIS_URL"], _xdist_worker)
    os.environ["RL_TEST_REDIS_WORKER"] = _xdist_worker

from .base import *  # noqa: E402, F403
from .base import DATABASES  # noqa: E402

DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
DATABASES["default"]["CONN_MAX_AGE"] = 0
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The test database in a file, as a deployment's is, not Django's default shared-cache memory
    # database: there SQLite locks whole tables and a second connection gets "database table is
    # locked" at once instead of waiting its timeout, so a test whose threads write together (a
    # batch's heartbeat beside its batch, simultaneous answers) failed on a loaded machine.
    DATABASES["default"]["TEST"] = {"NAME": str(Path(tempfile.mkdtemp(prefix="rl-sqlite-")) / "test.sqlite3")}
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
