"""The app behind PgBouncer in transaction mode (issue 25): every transaction may run on another
server connection, so nothing may outlive one: no server-side cursor across fetches, no prepared
statement reused, row locks (``SELECT ... FOR UPDATE SKIP LOCKED``) only inside a transaction.
``DATABASE_PGBOUNCER=1`` sets the database up for it (``config.settings.base.pgbouncer_database``).

Needs Debian's ``pgbouncer`` (``scripts/system_deps.sh`` installs it); skipped without it, and on
SQLite."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from django.db import connection, connections
from django.db.models import Count
from django.test import Client

from annotations.models import Annotation, Assignment, Claim, Unit
from config.settings.base import pgbouncer_database
from tests.annotations.factories import make_study
from tests.annotations.pages import complete_task, entry_url, start

PGBOUNCER = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)
pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PgBouncer fronts PostgreSQL"),
    pytest.mark.skipif(PGBOUNCER is None, reason="pgbouncer is not installed (apt-get install pgbouncer)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def pgbouncer():
    """A PgBouncer in transaction mode on a spare port in front of the test's PostgreSQL; yields
    its port. (PgBouncer refuses to run as root: it is started as the ``postgres`` user then.)"""
    settings = connection.settings_dict
    port = _free_port()
    folder = Path(tempfile.mkdtemp(prefix="rl-pgbouncer-"))  # not pytest's tmp_path: other users cannot enter it
    (folder / "users.txt").write_text(f'"{settings["USER"]}" ""\n')
    (folder / "pgbouncer.ini").write_text(f"""[databases]
* = host={settings["HOST"] or "127.0.0.1"} port={settings["PORT"] or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "users.txt"}
pool_mode = transaction
default_pool_size = 4
max_client_conn = 100
ignore_startup_parameters = extra_float_digits,options
logfile = {folder / "pgbouncer.log"}
pidfile = {folder / "pgbouncer.pid"}
""")
    command = [PGBOUNCER, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        for path in (folder, *folder.iterdir()):
            path.chmod(0o777 if path.is_dir() else 0o666)
        command[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None:
                pytest.fail(f"pgbouncer did not start: {process.stdout.read().decode()}")
            time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def through_pgbouncer(pgbouncer):
    """Every connection of this test (and of its threads) goes through PgBouncer, set up as
    DATABASE_PGBOUNCER=1 sets it."""
    connections.close_all()
    settings = connection.settings_dict  # the dict every thread's connection is made from
    saved = {key: settings.get(key) for key in ("PORT", "DISABLE_SERVER_SIDE_CURSORS")}
    saved_options = dict(settings.get("OPTIONS") or {})
    settings["PORT"] = str(pgbouncer)
    pgbouncer_database(settings)
    try:
        yield pgbouncer
    finally:
        connections.close_all()
        settings.update(saved)
        settings["OPTIONS"] = saved_options


@pytest.mark.django_db(transaction=True)
def test_workers_claim_answer_and_submit_through_pgbouncer(through_pgbouncer):
    study = make_study(n_items=6, n_sources=2, units_per_task=3, quota=2)
    assert connection.settings_dict["PORT"] == str(through_pgbouncer)

    # Six workers start at once: their claims lock units with SKIP LOCKED, each in its own transaction.
    tasks, errors = [], []

    def worker():
        try:
            client = Client()
            task = start(client, entry_url(study))
            complete_task(client, task)  # the same statements run far more than psycopg's prepare threshold
            assert client.post(task + "submit").status_code == 302
            tasks.append(task)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(repr(error))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert len(tasks) == 6
    assert Assignment.objects.filter(status=Assignment.Status.SUBMITTED).count() == 6
    for unit in Unit.objects.filter(study=study):
        assert unit.n_claimed == unit.n_completed == Claim.objects.filter(unit=unit).count() <= unit.quota
    assert not Claim.objects.values("participant_id", "question_key").annotate(n=Count("id")).filter(n__gt=1).exists()

    # An export's chunked read: without server-side cursors it is one client-side read, so a
    # fetch never lands on a server connection that does not hold the cursor.
    ids = list(Annotation.objects.order_by("id").values_list("id", flat=True).iterator(chunk_size=2))
    assert len(ids) == Annotation.objects.count() == 2 * Claim.objects.filter(completed_at__isnull=False).count() > 12
    assert connection.settings_dict["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert connection.connection.prepare_threshold is None  # psycopg prepares nothing


def test_the_environment_turns_it_on():
    """DATABASE_PGBOUNCER=1 in the environment: the settings module sets the database up for it."""
    out = subprocess.run(
        [sys.executable, "-c",
         "import os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings.base';"
         "from django.conf import settings; d=settings.DATABASES['default'];"
         "print(d['DISABLE_SERVER_SIDE_CURSORS'], d['OPTIONS']['prepare_threshold'])"],
        capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "DATABASE_PGBOUNCER": "1",
             "DATABASE_URL": "postgres://postgres@127.0.0.1:6432/rationale_lab"},
    )
    assert out.stdout.split() == ["True", "None"], out.stderr
