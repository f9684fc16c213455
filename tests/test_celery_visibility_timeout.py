"""Redis hands a message that a worker took and has not acknowledged (every task is ``acks_late``)
to another worker after the transport's visibility timeout: Redis's default, one hour, is shorter
than the time limits of an LM job, an import or a score run, so a task still running after an
hour ran twice. The visibility timeout (``CELERY_BROKER_TRANSPORT_OPTIONS``) must exceed the time
limit of every registered task."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from kombu.transport.redis import Channel

from config.celery import app
from tests.conftest import ROOT

# What a process with the deployment's settings reports: its broker, its transport options and the
# time limit each registered task runs under (its own, or the app's default).
REPORT = """
import json, django
django.setup()
from config.celery import app
app.loader.import_default_modules()
limits = {name: task.time_limit or app.conf.task_time_limit for name, task in app.tasks.items()}
print(json.dumps({"broker": app.conf.broker_url, "options": app.conf.broker_transport_options, "limits": limits}))
"""


def settings_report(**env_overrides: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "REDIS_URL")}
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings.test", **env_overrides})
    result = subprocess.run([sys.executable, "-c", REPORT], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_under_redis_the_visibility_timeout_exceeds_every_tasks_time_limit():
    report = settings_report(REDIS_URL="redis://127.0.0.1:1/0")  # nothing is connected to
    assert report["broker"].startswith("redis://")
    assert "visibility_timeout" in Channel.from_transport_options  # what kombu's Redis channel reads
    timeout = report["options"].get("visibility_timeout")
    assert timeout is not None, "Redis's default visibility timeout (3600 s) applies"
    limits = report["limits"]
    assert {"studies.tasks.run_generation_job", "studies.tasks.run_import_job",
            "scoring.tasks.score_study_task"} <= set(limits)
    too_long = {name: limit for name, limit in limits.items() if limit >= timeout}
    assert too_long == {}, f"visibility timeout {timeout} s is not above these tasks' time limits"


def test_the_configured_broker_gets_the_same_timeout():
    # The tests' own broker (filesystem without REDIS_URL, Redis in CI) has it too: the filesystem
    # transport ignores it (tests/test_celery_roundtrip.py sends a task through it).
    app.loader.import_default_modules()
    timeout = app.conf.broker_transport_options.get("visibility_timeout")
    assert timeout is not None
    assert all((task.time_limit or app.conf.task_time_limit) < timeout for task in app.tasks.values())
