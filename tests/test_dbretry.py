"""A persistent PostgreSQL connection killed between two requests: the next request still succeeds
(lab.dbretry), with no health-check query per request (CONN_HEALTH_CHECKS off)."""
from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.db import OperationalError, connection
from django.test import Client, override_settings

from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, entry_url, form_fields, start

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL connections only")

RETRY = "lab.dbretry.RetryOnDeadConnectionMiddleware"


def _kill_backend() -> int:
    """Terminate this test's PostgreSQL backend from another connection, as a restart or a
    pooler dropping it would; returns its pid once it is gone."""
    import psycopg

    pid = connection.connection.info.backend_pid
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**{**params, "dbname": "postgres"}, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        for _ in range(100):
            if admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone() is None:
                break
            time.sleep(0.02)
    return pid


def test_health_checks_are_off_and_the_retry_middleware_is_last():
    from config.settings import base

    assert base.DATABASES["default"]["CONN_HEALTH_CHECKS"] is False
    assert settings.MIDDLEWARE[-1] == RETRY


@pytest.mark.django_db(transaction=True)
def test_a_request_on_a_killed_persistent_connection_succeeds():
    study = make_study()
    client = Client()
    task = start(client, entry_url(study))  # the connection is open and reused across requests
    page = client.get(task)
    assert page.status_code == 200
    fields = form_fields(page.content.decode())

    old_pid = _kill_backend()
    # A GET: its first query meets the dead connection, and is run again on a new one.
    page = client.get(task)
    assert page.status_code == 200
    assert 'name="claim"' in page.content.decode()
    assert connection.connection.info.backend_pid != old_pid

    # A POST (an answer): nothing was written by the failed try, the retry stores it once.
    _kill_backend()
    response = client.post(task + "answer", {**fields, "answer": "yes"})
    assert response.status_code == 302
    from annotations.models import Annotation

    assert Annotation.objects.filter(claim_id=fields["claim"]).count() == 1
    complete_task(client, task)
    assert client.post(task + "submit").status_code == 302


@pytest.mark.django_db(transaction=True)
def test_without_the_middleware_the_request_fails():
    """The test above fails without the middleware: the dead connection reaches the view."""
    study = make_study()
    client = Client()
    task = start(client, entry_url(study))
    _kill_backend()
    try:
        with override_settings(MIDDLEWARE=[m for m in settings.MIDDLEWARE if m != RETRY]):
            bare = Client(raise_request_exception=True)  # loads the middleware without the retry
            bare.cookies = client.cookies
            with pytest.raises(OperationalError):
                bare.get(task)
    finally:
        connection.close()  # the dead connection goes; the test database's teardown opens a new one
