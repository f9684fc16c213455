"""Simultaneous first answers on a SQLite file database, each through the whole request stack
(run by ``tests/annotations/test_sqlite_parallel.py`` in its own process, because the test
database of the suite is an in-memory one).

Usage: python sqlite_crowd.py <database file> <tasks> <parallel posts per task>
Prints one JSON object: the status codes of the answer POSTs and the answers stored per claim."""
from __future__ import annotations

import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def main() -> None:
    db, n_tasks, n_parallel = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.environ["DATABASE_URL"] = f"sqlite:///{db}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    import django

    django.setup()
    from django.test.utils import setup_test_environment

    setup_test_environment()  # allows the test client's host, as the suite does
    from django.core.management import call_command
    from django.db import connections
    from django.test import Client

    from annotations.models import Annotation
    from annotations.platforms.handoff import study_token
    from tests.annotations.factories import make_study
    from tests.annotations.pages import start

    call_command("migrate", verbosity=0)
    study = make_study(n_items=n_tasks, n_sources=1, quota=1, units_per_task=1)
    entry = f"/w/s/{study_token(study.pk)}/"
    tasks = []
    for _ in range(n_tasks):
        client = Client()
        task = start(client, entry)
        page = client.get(task).content.decode()
        claim = page.split('name="claim" value="', 1)[1].split('"', 1)[0]
        shown = page.split('name="shown" value="', 1)[1].split('"', 1)[0]
        tasks.append((client.cookies, task, claim, shown))
    connections.close_all()

    codes: Counter = Counter()
    errors: list[str] = []

    def post(cookies, task, claim, shown, barrier):
        client = Client(raise_request_exception=False)
        client.cookies = cookies
        try:
            barrier.wait()
            response = client.post(task + "answer", {"claim": claim, "step": "before", "answer": "yes",
                                                     "shown": shown})
            codes[response.status_code] += 1
            if response.status_code >= 500:
                errors.append(response.content.decode(errors="replace")[:200])
        finally:
            connections.close_all()

    for cookies, task, claim, shown in tasks:
        barrier = threading.Barrier(n_parallel)
        threads = [threading.Thread(target=post, args=(cookies, task, claim, shown, barrier))
                   for _ in range(n_parallel)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    stored = Counter(Annotation.objects.filter(step="before", answer="yes").values_list("claim_id", flat=True))
    print(json.dumps({"codes": {str(k): v for k, v in codes.items()}, "errors": errors[:3],
                      "claims_answered": len(stored), "max_answers_per_claim": max(stored.values(), default=0)}))


if __name__ == "__main__":
    main()
