"""Named locks held until the current transaction ends, for two writers that share no row to lock.

A row lock serialises two transactions only when both touch a row that exists before either
begins. Some pairs have none: one writer decides that something may no longer be stored (a
withdrawal, say) while the other stores a row that does not exist yet. ``transaction_lock`` gives
such a pair a lock of its own, named by a space (a short text) and a key (an id, say of a study):

- on PostgreSQL a transaction-scoped advisory lock (``pg_advisory_xact_lock``, or its shared form:
  holders of the shared lock do not wait for each other, only for the exclusive one), released at
  the transaction's commit or rollback;
- on SQLite nothing is taken: the app's writing transactions are ``IMMEDIATE`` (``config/settings``),
  so a writer holds the database's write lock from its ``BEGIN`` to its end, and two writers never
  interleave.

Take it first in the transaction and read what it guards after it: under READ COMMITTED each
statement after the lock sees what the other holder committed before letting go."""
from __future__ import annotations

import zlib

from django.db import DEFAULT_DB_ALIAS, connections

_INT4 = 2 ** 32


def _int4(value: int) -> int:
    """``value`` folded into PostgreSQL's ``integer`` range (two ids that fold together share a lock:
    they wait for each other, never miss each other)."""
    return (value + 2 ** 31) % _INT4 - 2 ** 31


def lock_keys(space: str, key: int = 0) -> tuple[int, int]:
    """The two 32-bit keys of the lock named ``(space, key)``: a digest of ``space`` (the same in every
    process, unlike ``hash``) and ``key``."""
    return _int4(zlib.crc32(space.encode())), _int4(key)


def transaction_lock(space: str, key: int = 0, *, shared: bool = False, using: str = DEFAULT_DB_ALIAS) -> None:
    """Hold the lock named ``(space, key)`` until the current transaction ends, waiting for it (an
    exclusive holder, or with ``shared`` False any holder, makes it wait). Refused outside a
    transaction, where the lock would end with the statement."""
    connection = connections[using]
    if not connection.in_atomic_block:
        raise RuntimeError(f"transaction_lock({space!r}) outside a transaction would hold nothing")
    if connection.vendor != "postgresql":
        return  # SQLite: the writing transaction already holds the database's write lock
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s, %s)", list(lock_keys(space, key)))
