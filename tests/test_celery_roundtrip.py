"""A task goes through the configured broker to a real worker process and its result comes back:
Redis when REDIS_URL is set (CI), the embedded filesystem broker otherwise."""
import os
import signal
import subprocess
import sys
import uuid

import pytest
from django.conf import settings

from config.celery import app
from tests.conftest import ROOT


@pytest.fixture
def celery_worker_process():
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "default", "--pool", "solo",
         "--loglevel", "WARNING", "--without-heartbeat", "--without-gossip", "--without-mingle",
         "-n", f"roundtrip-{uuid.uuid4().hex[:8]}@%h"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    yield proc
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_ping_round_trip_through_the_broker(celery_worker_process):
    value = uuid.uuid4().hex
    # send_task always goes through the broker, even with CELERY_TASK_ALWAYS_EAGER in test settings.
    result = app.send_task("rationale_lab.ping", args=[value], queue="default")
    try:
        answer = result.get(timeout=60)
    except Exception:
        celery_worker_process.terminate()
        output = celery_worker_process.communicate(timeout=10)[0]
        pytest.fail(f"no answer from the worker via {settings.CELERY_BROKER_URL}; worker said:\n{output}")
    assert answer["value"] == value


def test_broker_matches_the_environment():
    if os.environ.get("REDIS_URL"):
        assert settings.CELERY_BROKER_URL.startswith("redis://")
    else:
        assert settings.CELERY_BROKER_URL == "filesystem://"


def test_lm_work_is_routed_to_the_lm_queue_and_the_rest_to_default():
    app.loader.import_default_modules()
    assert app.amqp.router.route({}, "studies.tasks.run_generation_job", (), {})["queue"].name == "lm"
    assert app.amqp.router.route({}, "rationale_lab.ping", (), {})["queue"].name == "default"
