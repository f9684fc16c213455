"""The claim's unit query by study size (PostgreSQL): ``EXPLAIN (ANALYZE, BUFFERS)`` of what a new
worker's claim reads, for studies of 900, 9,000 and 90,000 units, fresh (no ``ANALYZE`` since the
study was seeded) and after ``ANALYZE``, for the query shape before issue 25 (every eligible unit
sorted by fill and a salted hash of its id) and the one of ``annotations.services.assignment``
(index ranges from a random point of the units' random keys).

A claim of the new shape runs up to three reads (``assignment.candidate_reads``) and stops once it
has its candidates; its time here is the sum of the reads it ran. Each run draws a new pivot (new
shape) or salt (old shape) and is rolled back, so every run sees the same study.

Usage (also ``load.py --claim-cost ...``):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rl_bench \\
        .venv/bin/python benchmarks/questionnaire/claim_cost.py --sizes 900 9000 90000 --runs 15
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
os.environ.setdefault("DJANGO_DEBUG", "0")

SOURCES = 3


def seed(units: int, *, quota: int, units_per_task: int) -> int:
    """An open utility study of ``units`` units (items x 3 sources), built by the service."""
    from annotations.services.units import study_units_build
    from studies.models import YES_NO_CHOICES, Dataset, Item, Rationale, RationaleSource, Study

    stamp = f"claim-cost-{units}-{time.time():.3f}"
    dataset = Dataset.objects.create(name=stamp, task_format=Dataset.TaskFormat.YES_NO)
    srcs = [RationaleSource.objects.create(name=f"{stamp}-src{s}") for s in range(SOURCES)]
    items = Item.objects.bulk_create([
        Item(dataset=dataset, external_id=f"q{i}", question=f"Benchmark question {i}: is it so?",
             choices=YES_NO_CHOICES, gold_answer="yes" if i % 2 else "no", split="test")
        for i in range(units // SOURCES)
    ], batch_size=2000)
    Rationale.objects.bulk_create([
        Rationale(item=item, source=src, text=f"Because of fact {item.pk} according to {src.name}.",
                  predicted_answer="yes")
        for item in items for src in srcs
    ], batch_size=2000)
    study = Study.objects.create(name=stamp, dataset=dataset, status=Study.Status.OPEN,
                                 annotators_per_unit=quota, units_per_task=units_per_task)
    study.items.set(items)
    study.sources.set(srcs)
    study_units_build(study=study)
    return study.pk


def old_read(eligible, *, salt: int):
    """The claim's unit query before issue 25 (``annotations/services/assignment.py`` at 8d96f68)."""
    from django.db.models import F
    from django.db.models.functions import Mod

    return (eligible.order_by("n_claimed", Mod(F("id") * 7919 + salt, 1_000_003), "id")
            .select_for_update(skip_locked=True, of=("self",))
            .values_list("id", "source_id", "question_key", "n_claimed"))


def nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def explain(queryset) -> dict:
    """Run ``queryset`` under ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)``: its times and plan facts."""
    from django.db import connection

    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
        out = cursor.fetchone()[0]
    out = json.loads(out) if isinstance(out, str) else out
    plan = out[0]["Plan"]
    every = list(nodes(plan))
    return {
        "execution_ms": out[0]["Execution Time"], "planning_ms": out[0]["Planning Time"],
        "rows": plan["Actual Rows"],
        "sorts": [n.get("Sort Method", "") for n in every if n["Node Type"] == "Sort"],
        "indexes": sorted({n["Index Name"] for n in every if "Index Name" in n}),
        "temp_blocks": sum(n.get("Temp Read Blocks", 0) + n.get("Temp Written Blocks", 0) for n in every),
        "shared_blocks": plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0),
    }


def one_claim(study_id: int, *, shape: str, limit: int, rng: random.Random) -> dict:
    """The reads of one new worker's claim, explained and rolled back."""
    from django.db import transaction

    from annotations.models.core import RAND_KEY_SPAN
    from annotations.services.assignment import candidate_reads, eligible_units

    eligible = eligible_units(study_id=study_id, seen=[])
    reads = []
    with transaction.atomic():
        if shape == "old":
            reads.append(explain(old_read(eligible, salt=rng.randrange(1, 1_000_003))[:limit]))
        else:
            got = 0
            for read in candidate_reads(eligible, pivot=rng.randrange(RAND_KEY_SPAN)):
                reads.append(explain(read[: limit - got]))
                got += reads[-1]["rows"]
                if got >= limit:
                    break
        transaction.set_rollback(True)
    return {
        "ms": sum(r["execution_ms"] for r in reads), "planning_ms": sum(r["planning_ms"] for r in reads),
        "statements": len(reads), "rows": sum(r["rows"] for r in reads),
        "sorts": sorted({s for r in reads for s in r["sorts"]}),
        "indexes": sorted({i for r in reads for i in r["indexes"]}),
        "temp_blocks": sum(r["temp_blocks"] for r in reads),
        "shared_blocks": sum(r["shared_blocks"] for r in reads),
    }


def stats_state() -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT last_analyze, last_autoanalyze, n_mod_since_analyze FROM pg_stat_user_tables "
                       "WHERE relname = 'annotations_unit'")
        last, auto, mods = cursor.fetchone()
    return {"last_analyze": str(last), "last_autoanalyze": str(auto), "n_mod_since_analyze": mods}


def measure(study_id: int, *, runs: int, limit: int, seed: int) -> dict:
    rng = random.Random(seed)
    out = {}
    for shape in ("old", "new"):
        one_claim(study_id, shape=shape, limit=limit, rng=rng)  # warm the cache, not counted
        claims = [one_claim(study_id, shape=shape, limit=limit, rng=rng) for _ in range(runs)]
        times = [c["ms"] for c in claims]
        out[shape] = {
            "ms": {"min": round(min(times), 3), "median": round(statistics.median(times), 3),
                   "max": round(max(times), 3)},
            "planning_ms_median": round(statistics.median(c["planning_ms"] for c in claims), 3),
            "statements": sorted({c["statements"] for c in claims}),
            "rows": sorted({c["rows"] for c in claims}),
            "sorts": sorted({s for c in claims for s in c["sorts"]}),
            "indexes": sorted({i for c in claims for i in c["indexes"]}),
            "temp_blocks_max": max(c["temp_blocks"] for c in claims),
            "shared_blocks_median": statistics.median(c["shared_blocks"] for c in claims),
        }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[900, 9000, 90000], help="units per study")
    parser.add_argument("--runs", type=int, default=15, help="claims explained per shape and state")
    parser.add_argument("--quota", type=int, default=5)
    parser.add_argument("--units-per-task", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="keep the seeded studies (deleted by default)")
    parser.add_argument("--out", default=str(Path(__file__).with_name("claim_cost.json")))
    args = parser.parse_args(argv)
    if any(n > 150_000 for n in args.sizes):
        sys.exit("at most 150,000 units per study")
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("set DATABASE_URL=postgres://postgres@127.0.0.1:5432/rl_bench")
    import subprocess

    import django

    django.setup()
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True)
    from django.db import connection

    from annotations.services.assignment import candidates_wanted
    from studies.models import Study

    limit = candidates_wanted(want=args.units_per_task, n_sources=SOURCES)
    load_before = os.getloadavg()
    results = []
    for size in args.sizes:
        started = time.monotonic()
        study_id = seed(size, quota=args.quota, units_per_task=args.units_per_task)
        seeded_s = round(time.monotonic() - started, 1)
        for state in ("fresh", "analyzed"):
            if state == "analyzed":
                with connection.cursor() as cursor:
                    cursor.execute("ANALYZE")
            stats = stats_state()
            row = {"units": size, "state": state, "seed_s": seeded_s, "stats": stats,
                   **measure(study_id, runs=args.runs, limit=limit, seed=size)}
            results.append(row)
            print(json.dumps(row), flush=True)
        if not args.keep:
            Study.objects.filter(pk=study_id).delete()
    meta = {"cpus": os.cpu_count(), "load_average_at_start": load_before, "load_average_at_end": os.getloadavg(),
            "runs": args.runs, "quota": args.quota, "units_per_task": args.units_per_task, "sources": SOURCES,
            "candidates_per_claim": limit}
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    print(f"\nEXPLAIN (ANALYZE, BUFFERS) of a new worker's claim, {args.runs} runs each: execution ms "
          "min / median / max (statements per claim; sort nodes)")
    print("| units | statistics | old shape ms | new shape ms | new statements | old sort | new sort |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        old, new = r["old"], r["new"]
        print(f"| {r['units']:,} | {r['state']} | {old['ms']['min']} / {old['ms']['median']} / {old['ms']['max']} | "
              f"{new['ms']['min']} / {new['ms']['median']} / {new['ms']['max']} | "
              f"{'-'.join(map(str, new['statements']))} | {', '.join(old['sorts']) or 'none'} | "
              f"{', '.join(new['sorts']) or 'none'} |")


if __name__ == "__main__":
    main()
