"""The annotation export's read-ahead turns JIT and parallel workers off for its own reads only
(``export_annotations.export_read_settings``: SET LOCAL, inside the transaction it reads in).
Behind PgBouncer in transaction mode (``DATABASE_PGBOUNCER``) a plain SET in autocommit stayed on
the server connection it ran on, which PgBouncer then hands to other clients."""
from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from scoring.api.export_annotations import annotation_rows
from tests.scoring.test_export_rows import answered_by_two_workers
from tests.test_pgbouncer import pgbouncer, pytestmark, through_pgbouncer  # noqa: F401 - the fixtures

SHOWN = ("jit", "max_parallel_workers_per_gather")
POOL = 4  # tests.test_pgbouncer's default_pool_size: every server connection PgBouncer may hand out


def _shown() -> tuple[str, ...]:
    with connection.cursor() as cursor:
        values = []
        for name in SHOWN:
            cursor.execute(f"SHOW {name}")
            values.append(cursor.fetchone()[0])
        return tuple(values)


def _on_every_server_connection() -> set[tuple[str, ...]]:
    """``SHOWN`` as each of the pool's server connections has them: ``POOL`` clients each hold a
    transaction (so each holds its own server connection) at once."""
    seen, errors, together = set(), [], threading.Barrier(POOL)

    def client():
        try:
            with transaction.atomic():
                seen.add(_shown())
                together.wait(30)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(repr(error))
        finally:
            connection.close()

    threads = [threading.Thread(target=client) for _ in range(POOL)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return seen


@pytest.mark.django_db(transaction=True)
def test_the_read_aheads_settings_never_reach_another_client_through_pgbouncer(through_pgbouncer):  # noqa: F811
    study, queryset = answered_by_two_workers("pgbouncer-settings")
    before = _shown()
    if before == ("off", "0"):
        pytest.skip("this PostgreSQL has JIT and parallel workers off already: nothing to tell apart")

    rows = list(annotation_rows(queryset, study=study, user=None, raw_worker_ids=False, page_rows=5))
    connection.close()

    assert len(rows) == queryset.count() == 12
    assert _on_every_server_connection() == {before}
