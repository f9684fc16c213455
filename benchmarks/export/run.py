"""Benchmark of the streamed annotation export: time and peak memory (RSS) for CSV, JSON lines and
Parquet over a synthetic study of N annotations.

    # 1. build the database once (SQLite file by default; DATABASE_URL for PostgreSQL)
    .venv/bin/python benchmarks/export/run.py build --rows 1000000
    # 2. export in a fresh process per format (peak RSS is per process)
    .venv/bin/python benchmarks/export/run.py export --format csv
    .venv/bin/python benchmarks/export/run.py export --format parquet --source bench-gpt3

The export goes through the real view (token auth, filters, StreamingHttpResponse) with Django's
test client; the body is consumed chunk by chunk and thrown away, as a client writing to disk would.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
DEFAULT_DB = ROOT / "var" / "bench" / "rl_api_bench.sqlite3"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
os.environ.setdefault("DJANGO_DEBUG", "0")
os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "testserver,localhost")
if not os.environ.get("DATABASE_URL"):
    DEFAULT_DB.parent.mkdir(parents=True, exist_ok=True)
    os.environ["DATABASE_URL"] = f"sqlite:///{DEFAULT_DB}"


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_seconds() -> float:
    """User + system CPU time of this process: what the export costs the web worker, whatever else
    the machine is doing (the database server's time is not in it)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def build(rows: int) -> None:
    import django

    django.setup()

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from annotations.models import Annotation, Unit
    from scoring.models import UnitScore
    from studies.models import YES_NO_CHOICES, Dataset, Item, Rationale, RationaleSource, Study

    call_command("migrate", verbosity=0)
    if Study.objects.filter(name="bench-study").exists():
        print("bench-study exists; delete the database to rebuild")
        return
    started = time.perf_counter()
    n_items, per_assignment = 500, 100
    claims_needed = rows // 2  # a before and an after answer per claim
    user = get_user_model().objects.create_user("bench", password="bench")
    with transaction.atomic():
        dataset = Dataset.objects.create(name="bench-dataset", task_format="yes_no")
        items = Item.objects.bulk_create(
            Item(dataset=dataset, external_id=f"q{i}", question=f"Question {i}?", choices=YES_NO_CHOICES,
                 gold_answer="yes" if i % 2 else "no", split="test")
            for i in range(n_items)
        )
        sources = [RationaleSource.objects.create(name=f"bench-{n}") for n in ("gpt3", "t5")]
        study = Study.objects.create(name="bench-study", dataset=dataset, owner=user, status="closed")
        study.items.set(items)
        study.sources.set(sources)
        rationales = Rationale.objects.bulk_create(
            Rationale(item=i, source=s, text=f"Because {i.pk}.") for i in items for s in sources
        )
        units = Unit.objects.bulk_create(
            Unit(study=study, item=r.item, source=r.source, rationale=r, question_key=f"{r.item_id}:{r.source_id}",
                 quota=10_000, n_claimed=0, n_completed=0)
            for r in rationales
        )
        UnitScore.objects.bulk_create(
            UnitScore(study=study, item=u.item, source=u.source, n_annotators=5, utility=(u.pk % 3) - 1,
                      task_correct=bool(u.pk % 2))
            for u in units
        )
    now = timezone.now()
    n_participants = -(-claims_needed // per_assignment)
    if connection.vendor == "postgresql":
        _build_claims_sql(study, n_participants, per_assignment, claims_needed, len(units), now)
    else:
        _build_claims_orm(study, units, n_participants, per_assignment, claims_needed, now)
    print(f"built {Annotation.objects.count():,} annotations in {time.perf_counter() - started:.0f} s")


def _build_claims_orm(study, units, n_participants, per_assignment, claims_needed, now) -> None:
    from datetime import timedelta

    from django.db import transaction

    from annotations.models import Annotation, Assignment, Claim, Participant

    made = 0
    for p0 in range(0, n_participants, 200):
        with transaction.atomic():
            participants = Participant.objects.bulk_create(
                Participant(platform="prolific", external_id=f"PID{p}") for p in range(p0, min(p0 + 200, n_participants))
            )
            assignments = Assignment.objects.bulk_create(
                Assignment(study=study, participant=p, status="submitted", expires_at=now + timedelta(hours=1),
                           submitted_at=now)
                for p in participants
            )
            claims = []
            for a_index, assignment in enumerate(assignments):
                offset = ((p0 + a_index) * per_assignment) % len(units)
                for position in range(per_assignment):
                    if made + len(claims) >= claims_needed:
                        break
                    unit = units[(offset + position) % len(units)]
                    claims.append(Claim(
                        assignment=assignment, unit=unit, study=study, participant=assignment.participant,
                        question_key=unit.question_key, position=position, completed_at=now,
                    ))
            claims = Claim.objects.bulk_create(claims, batch_size=5000)
            Annotation.objects.bulk_create(
                (Annotation(claim=c, step=step, answer=ans, shown_at=now, duration_ms=4000 + (c.pk % 5000))
                 for c in claims for step, ans in (("before", "no"), ("after", "yes"))),
                batch_size=5000,
            )
            made += len(claims)
        if made >= claims_needed:
            break


def _build_claims_sql(study, n_participants, per_assignment, claims_needed, n_units, now) -> None:
    """The same rows as ``_build_claims_orm`` (workers and tasks through the ORM; claims and answers,
    the big tables, by INSERT ... SELECT on the server: minutes instead of most of an hour on a
    loaded 2-core machine), then ANALYZE so that the planner knows the tables."""
    from datetime import timedelta

    from django.db import connection, transaction

    from annotations.models import Annotation, Assignment, Claim, Participant

    with transaction.atomic():
        participants = Participant.objects.bulk_create(
            (Participant(platform="prolific", external_id=f"PID{p}") for p in range(n_participants)), batch_size=5000
        )
        Assignment.objects.bulk_create(
            (Assignment(study=study, participant=p, status="submitted", expires_at=now + timedelta(hours=1),
                        submitted_at=now) for p in participants), batch_size=5000
        )
        claim, ann = Claim._meta.db_table, Annotation._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                WITH a AS (SELECT id, participant_id, row_number() OVER (ORDER BY id) - 1 AS n
                           FROM {Assignment._meta.db_table} WHERE study_id = %(study)s),
                     u AS (SELECT id, question_key, row_number() OVER (ORDER BY id) - 1 AS n
                           FROM annotations_unit WHERE study_id = %(study)s)
                INSERT INTO {claim} (question_key, position, completed_at, released, assignment_id, study_id,
                                     participant_id, unit_id)
                SELECT u.question_key, p, %(now)s, false, a.id, %(study)s, a.participant_id, u.id
                FROM a CROSS JOIN generate_series(0, %(last)s) AS p
                JOIN u ON u.n = (a.n * %(per)s + p) %% %(n_units)s
                WHERE a.n * %(per)s + p < %(claims)s
                ORDER BY a.id, p
                """,
                {"study": study.pk, "now": now, "last": per_assignment - 1, "per": per_assignment,
                 "n_units": n_units, "claims": claims_needed},
            )
            cursor.execute(
                f"""
                INSERT INTO {ann} (step, answer, payload, shown_at, answered_at, duration_ms, claim_id)
                SELECT s.step, s.answer, '{{}}'::jsonb, %(now)s, %(now)s, 4000 + (c.id %% 5000), c.id
                FROM {claim} c CROSS JOIN (VALUES (1, 'before', 'no'), (2, 'after', 'yes')) AS s(k, step, answer)
                WHERE c.study_id = %(study)s ORDER BY c.id, s.k
                """,
                {"study": study.pk, "now": now},
            )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def export(file_format: str, source: str | None) -> None:
    import django

    django.setup()
    import pyarrow.parquet  # noqa: F401
    from rest_framework.test import APIClient

    from annotations.models import Annotation  # noqa: F401 (imports done before the baseline)
    from studies.api.tokens import api_token_create
    from studies.models import Study

    study = Study.objects.get(name="bench-study")
    _, key = api_token_create(user=study.owner, name="bench", by=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    params = {"file_format": file_format}
    if source:
        params["source"] = source
    baseline = rss_mib()
    cpu_before = cpu_seconds()
    started = time.perf_counter()
    response = client.get(f"/api/v1/studies/{study.pk}/export/annotations/", params)
    assert response.status_code == 200, response.status_code
    n_bytes = n_chunks = 0
    for chunk in response.streaming_content:
        n_bytes += len(chunk)
        n_chunks += 1
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds() - cpu_before
    print(
        f"format={file_format} source={source or 'all'} seconds={elapsed:.1f} cpu_seconds={cpu:.1f} "
        f"MiB_out={n_bytes / 2**20:.1f} "
        f"chunks={n_chunks} rss_before_MiB={baseline:.0f} peak_rss_MiB={peak_rss_mib():.0f} "
        f"peak_minus_before_MiB={peak_rss_mib() - baseline:.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("--rows", type=int, default=1_000_000)
    e = sub.add_parser("export")
    e.add_argument("--format", choices=["csv", "jsonl", "parquet"], default="csv")
    e.add_argument("--source", default=None)
    args = parser.parse_args()
    if args.command == "build":
        build(args.rows)
    else:
        export(args.format, args.source)


if __name__ == "__main__":
    main()
