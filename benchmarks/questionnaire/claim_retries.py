"""How often the claim's top-up retry (``annotations.services.assignment._claim_task``: an empty
pass that skipped rows locked by other workers sleeps and tries again, up to ``TOP_UP_SECONDS``)
runs in a burst, on PostgreSQL, with threads calling the service directly (no HTTP).

Two shapes, each a burst of ``--workers`` threads released at once:
- launch: every worker starts one task on a study of ``--units`` units (new workers arriving);
- drain: every worker works until "no work" (start, answer every unit, submit, again), so the
  last units are fought over (the shape of ``tests/annotations/test_concurrency_postgres.py``).

Counted by wrapping the service's ``_claim_pass`` and its ``time.sleep`` in this process only.

Usage:
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rl_bench \\
        .venv/bin/python benchmarks/questionnaire/claim_retries.py --workers 50 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
os.environ.setdefault("DJANGO_DEBUG", "0")


class Counting:
    """Counts the claim's passes and sleeps (per thread, summed at the end)."""

    def __init__(self, assignment_module):
        self.lock = threading.Lock()
        self.counts: Counter = Counter()
        self.slept = 0.0
        self.local = threading.local()
        real_pass, real_time = assignment_module._claim_pass, assignment_module.time
        self.restore = lambda: (setattr(assignment_module, "_claim_pass", real_pass),
                                setattr(assignment_module, "time", real_time))
        counting = self

        def claim_pass(**kwargs):
            counting.local.passes = getattr(counting.local, "passes", 0) + 1
            return real_pass(**kwargs)

        class Time:
            monotonic = staticmethod(real_time.monotonic)

            @staticmethod
            def sleep(seconds):
                counting.local.sleeps = getattr(counting.local, "sleeps", 0) + 1
                counting.local.slept = getattr(counting.local, "slept", 0.0) + seconds
                real_time.sleep(seconds)

        assignment_module._claim_pass = claim_pass
        assignment_module.time = Time

    def start(self):
        self.local.passes = self.local.sleeps = 0
        self.local.slept = 0.0

    def end(self, outcome: str):
        with self.lock:
            self.counts["starts"] += 1
            self.counts[outcome] += 1
            self.counts["passes"] += self.local.passes
            self.counts["sleeps"] += self.local.sleeps
            self.counts["starts_that_slept"] += bool(self.local.sleeps)
            if outcome == "no_work" and self.local.sleeps:
                self.counts["no_work_after_sleeping"] += 1
            self.counts["max_sleeps_in_one_start"] = max(self.counts["max_sleeps_in_one_start"], self.local.sleeps)
            self.slept += self.local.slept


def burst(study, *, workers: int, drain: bool, counting: Counting) -> dict:
    from django.db import connections

    from annotations.services.answers import annotation_submit, assignment_submit
    from annotations.services.assignment import assignment_start
    from annotations.services.errors import NoWorkAvailable
    from annotations.services.participants import participant_get_or_create
    from studies.models import Platform

    barrier = threading.Barrier(workers)
    errors: list = []
    stamp = f"{time.time():.3f}"

    def work(i: int):
        try:
            participant = participant_get_or_create(platform=Platform.LINK, external_id=f"retry-{stamp}-{i}")
            barrier.wait()
            while True:
                counting.start()
                try:
                    assignment = assignment_start(study=study, participant=participant)
                except NoWorkAvailable:
                    counting.end("no_work")
                    return
                counting.end("task")
                if not drain:
                    return
                for claim in assignment.claims.order_by("position"):
                    annotation_submit(assignment=assignment, claim=claim, step="before", answer="yes")
                    annotation_submit(assignment=assignment, claim=claim, step="after", answer="no")
                assignment_submit(assignment=assignment)
        except Exception as error:  # noqa: BLE001 - reported
            errors.append(repr(error))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return {"seconds": round(time.monotonic() - started, 2), "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--launch-units", type=int, default=900)
    parser.add_argument("--drain-units", type=int, default=60, help="items x 3 sources; quota 5, 2 per task")
    parser.add_argument("--out", default=str(Path(__file__).with_name("claim_retries.json")))
    args = parser.parse_args()
    if args.workers > 80:
        sys.exit("at most 80 threads (one connection each)")
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("set DATABASE_URL=postgres://postgres@127.0.0.1:5432/rl_bench")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from claim_cost import seed

    from annotations.services import assignment
    from studies.models import Study

    results = []
    for shape, units, per_task in (("launch", args.launch_units, 10), ("drain", args.drain_units, 2)):
        for round_ in range(args.rounds):
            study = Study.objects.get(pk=seed(units, quota=5, units_per_task=per_task))
            counting = Counting(assignment)
            out = burst(study, workers=args.workers, drain=shape == "drain", counting=counting)
            open_slots = sum(max(0, q - n) for q, n in study.units.values_list("quota", "n_claimed"))
            row = {"shape": shape, "units": units, "units_per_task": per_task, "workers": args.workers,
                   "round": round_, **out, **dict(counting.counts), "slept_s": round(counting.slept, 3),
                   "open_slots_left": open_slots}
            results.append(row)
            print(json.dumps(row), flush=True)
            counting.restore()
            Study.objects.filter(pk=study.pk).delete()
    Path(args.out).write_text(json.dumps({"top_up_seconds": assignment.TOP_UP_SECONDS, "results": results},
                                         indent=2) + "\n")


if __name__ == "__main__":
    main()
