"""A heartbeat for long work in a worker: while the body of :func:`heartbeat` runs, a thread calls
``beat`` every few seconds, so that beat's stall detection (which queues again the work that
stopped moving) sees the work move. Score runs (``scoring.services.runs.heartbeat``) and LM job
batches (``studies.services.generation.common.ItemHandler``) use it.

The thread uses its own database connections (Django's are per thread) and closes them when it
ends. A ``beat`` that raises (a busy or restarting database) is logged and tried again at the next
beat: the work itself never fails for its heartbeat.

What it cannot tell: a process whose worker thread hangs while this thread still runs keeps
beating; Celery's hard ``time_limit`` (which kills the process) bounds that. A process frozen as a
whole (stopped, suspended) beats no more, and beat may queue its work again."""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from django.db import connections

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def heartbeat(beat: Callable[[], object], *, every: float, name: str) -> Iterator[None]:
    """Call ``beat`` every ``every`` seconds from a daemon thread while the body runs (not at
    once: the first call comes ``every`` seconds in). ``name`` says whose heartbeat it is, in the
    thread's name and the log. On leaving, the thread is stopped and joined (a beat in progress
    finishes first)."""
    every = float(every)
    stop = threading.Event()

    def run() -> None:
        try:
            while not stop.wait(every):
                try:
                    beat()
                except Exception:  # a busy database: the next beat tries again
                    logger.warning("%s: heartbeat not written", name, exc_info=True)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=f"{name} heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every + 5)
