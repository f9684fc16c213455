"""``lab.dblocks.transaction_lock``: a named lock held until the transaction ends, shared holders not
waiting for each other, refused outside a transaction."""
from __future__ import annotations

import pytest
from django.db import connection, transaction

from lab.dblocks import lock_keys, transaction_lock


def test_the_keys_are_fixed_32_bit_integers_that_tell_spaces_and_ids_apart():
    assert lock_keys("annotations.withdrawal", 7) == lock_keys("annotations.withdrawal", 7)
    assert lock_keys("annotations.withdrawal", 7) != lock_keys("annotations.withdrawal", 8)
    assert lock_keys("annotations.withdrawal", 7)[0] != lock_keys("studies.operator-job-create", 7)[0]
    for key in (0, 2 ** 31 - 1, 2 ** 31, 2 ** 40 + 5, -1):
        assert all(-2 ** 31 <= part < 2 ** 31 for part in lock_keys("x", key))


@pytest.mark.django_db(transaction=True)  # no transaction around the test
def test_outside_a_transaction_it_is_refused():
    with pytest.raises(RuntimeError, match="outside a transaction"):
        transaction_lock("x", 1)


def _other_connection():
    import psycopg

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


def _try(other, function: str, space: str, key: int) -> bool:
    """Whether ``other`` gets the lock now (taken and let go at once when it does)."""
    got = other.execute(f"SELECT {function}(%s, %s)", list(lock_keys(space, key))).fetchone()[0]
    if got:
        unlock = "pg_advisory_unlock_shared" if function.endswith("_shared") else "pg_advisory_unlock"
        other.execute(f"SELECT {unlock}(%s, %s)", list(lock_keys(space, key)))
    return got


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_it_holds_until_the_transaction_ends_and_shared_holders_share():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")
    with _other_connection() as other:
        with transaction.atomic():
            transaction_lock("test.space", 5)
            assert not _try(other, "pg_try_advisory_lock_shared", "test.space", 5)
            assert _try(other, "pg_try_advisory_lock", "test.space", 6)  # another key: free
        assert _try(other, "pg_try_advisory_lock", "test.space", 5)  # let go with the commit
        with transaction.atomic():
            transaction_lock("test.space", 5, shared=True)
            assert _try(other, "pg_try_advisory_lock_shared", "test.space", 5)
            assert not _try(other, "pg_try_advisory_lock", "test.space", 5)
        assert _try(other, "pg_try_advisory_lock", "test.space", 5)
