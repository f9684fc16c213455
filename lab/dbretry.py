"""A request whose first database statement failed on a dead persistent connection is run again
once, on a new connection, instead of answering 500.

Why: with persistent connections (``CONN_MAX_AGE``) a connection can die between two requests
(the database restarted, a pooler or firewall dropped it, ``pg_terminate_backend``). Django's
answer is ``CONN_HEALTH_CHECKS``: a ``SELECT 1`` at the start of every request that reuses a
connection, one more round trip on every page (about an eighth of a worker page's work).
Without it, the first statement of the request fails and Django closes the connection at the end
of that request, so only that one request fails. This middleware makes that request succeed too:

- it watches each database statement of the view (``connection.execute_wrapper``: one Python
  call per statement, no query of its own);
- when the view raises a connection-level error (``OperationalError`` / ``InterfaceError``)
  from the **first** statement it sent on that connection in this request, and the connection
  is no longer usable, nothing was read or written by this request, so it closes the connection
  and calls the view once more (Django opens a new connection);
- a request whose body was streamed away (not cached) or that carries uploaded files is not run
  again: its input cannot be read twice. A failure after a statement succeeded is never retried
  (something may have been written), and a second failure answers as Django does.

Put it last in ``MIDDLEWARE`` so its ``process_exception`` is the first to see a view's error.
"""
from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections

_WATCH_ATTR = "_rl_db_watch"


class _Watch:
    """Per request: statements that succeeded per connection, and the alias whose first
    statement failed with the connection gone."""

    def __init__(self):
        self.ok: dict[str, int] = {}
        self.dead_alias: str | None = None

    def wrapper(self, alias: str):
        def watch(execute, sql, params, many, context):
            try:
                result = execute(sql, params, many, context)
            except (OperationalError, InterfaceError):
                if not self.ok.get(alias) and self.dead_alias is None and not _usable(alias):
                    self.dead_alias = alias
                raise
            self.ok[alias] = self.ok.get(alias, 0) + 1
            return result

        return watch


def _usable(alias: str) -> bool:
    connection = connections[alias]
    return connection.connection is not None and connection.is_usable()


def _replayable(request) -> bool:
    """The request's input can be read again and carries no uploaded file: its body was never
    read, or is cached, or was parsed into ``request.POST`` (a form, multipart included)."""
    if getattr(request, "_files", None):
        return False
    return (not getattr(request, "_read_started", False) or hasattr(request, "_body")
            or hasattr(request, "_post"))


class RetryOnDeadConnectionMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        watch = _Watch()
        setattr(request, _WATCH_ATTR, watch)
        aliases = list(connections.settings) or [DEFAULT_DB_ALIAS]
        managers = [connections[alias].execute_wrapper(watch.wrapper(alias)) for alias in aliases]
        for manager in managers:
            manager.__enter__()
        try:
            return self.get_response(request)
        finally:
            for manager in reversed(managers):
                manager.__exit__(None, None, None)

    def process_exception(self, request, exception):
        watch = getattr(request, _WATCH_ATTR, None)
        if (watch is None or watch.dead_alias is None or getattr(request, "_rl_db_retried", False)
                or not isinstance(exception, (OperationalError, InterfaceError)) or not _replayable(request)):
            return None
        request._rl_db_retried = True
        alias, watch.dead_alias = watch.dead_alias, None
        connection = connections[alias]
        if not connection.in_atomic_block:
            connection.close()  # the next statement opens a new connection
        else:  # pragma: no cover - a view's atomic blocks have all exited when its error reaches here
            return None
        match = request.resolver_match
        return match.func(request, *match.args, **match.kwargs)
