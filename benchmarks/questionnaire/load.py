"""Bounded load test of the utility questionnaire over HTTP (gunicorn + PostgreSQL, loopback only).

Closed loop, no think time: each simulated worker opens the study link as a new participant
(fresh cookie jar), consents (claim), and for every question GETs the page, POSTs the first
answer, GETs the reveal, POSTs the second answer; then finishes and starts over. After each level
the database is checked: every unit within its quota, claim counters equal to the live claims,
distinct workers per unit, and no worker with a question twice.

Usage (see README.md):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rl_bench \
        .venv/bin/python benchmarks/questionnaire/load.py --levels 20 50 200 --seconds 15

Bounded: every level stops after ``--seconds`` (and when the study runs out of work); requests
time out after 30 s; only 127.0.0.1 is contacted.
"""
from __future__ import annotations

import argparse
import asyncio
import html
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
os.environ.setdefault("DJANGO_DEBUG", "0")

FIELD = {name: re.compile(rf'name="{name}" value="([^"]*)"'.encode()) for name in
         ("csrfmiddlewaretoken", "claim", "step", "shown", "nonce")}
STEPS = ("landing", "claim", "question", "before", "reveal", "after", "finish")


def django_setup():
    import django

    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("set DATABASE_URL=postgres://postgres@127.0.0.1:5432/rl_bench")
    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)


def seed(level: int, *, items: int, sources: int, quota: int, units_per_task: int) -> tuple[int, str]:
    """A fresh open utility study for one level; returns (study id, entry path)."""
    from annotations.platforms.handoff import study_token
    from annotations.services.units import study_units_build
    from studies.models import YES_NO_CHOICES, Dataset, Item, Rationale, RationaleSource, Study

    stamp = f"bench-{level}-{int(time.time())}"
    dataset = Dataset.objects.create(name=stamp, task_format=Dataset.TaskFormat.YES_NO)
    srcs = [RationaleSource.objects.create(name=f"{stamp}-src{s}") for s in range(sources)]
    objs = Item.objects.bulk_create([
        Item(dataset=dataset, external_id=f"q{i}", question=f"Benchmark question {i}: is it so?",
             choices=YES_NO_CHOICES, gold_answer="yes" if i % 2 else "no", split="test")
        for i in range(items)
    ])
    Rationale.objects.bulk_create([
        Rationale(item=item, source=src, text=f"Because of fact {item.pk} according to {src.name}.",
                  predicted_answer="yes")
        for item in objs for src in srcs
    ])
    study = Study.objects.create(name=stamp, dataset=dataset, status=Study.Status.OPEN,
                                 annotators_per_unit=quota, units_per_task=units_per_task)
    study.items.set(objs)
    study.sources.set(srcs)
    study_units_build(study=study)
    return study.pk, f"/w/s/{study_token(study.pk)}/"


def check(study_id: int) -> dict:
    """Quota and no-repeat checks on the database after a level."""
    from django.db.models import Count, Q

    from annotations.models import Claim, Unit
    from annotations.selectors import COUNTING_ASSIGNMENT_STATUSES

    counts = Q(claims__released=False, claims__completed_at__isnull=False,
               claims__assignment__status__in=COUNTING_ASSIGNMENT_STATUSES)  # claims_that_count
    units = Unit.objects.filter(study_id=study_id).annotate(
        live=Count("claims", filter=Q(claims__released=False)),
        workers=Count("claims__participant", filter=Q(claims__released=False), distinct=True),
        done=Count("claims", filter=counts),
    )
    problems = []
    for u in units:
        if not (u.n_claimed == u.live == u.workers <= u.quota and u.n_completed == u.done):
            problems.append((u.pk, u.n_claimed, u.live, u.workers, u.quota, u.n_completed, u.done))
    repeats = (
        Claim.objects.filter(study_id=study_id).values("participant_id", "question_key")
        .annotate(n=Count("id")).filter(n__gt=1).count()
    )
    from annotations.selectors import claims_that_count
    from studies.models import Study

    completed = claims_that_count(study=Study(pk=study_id)).count()
    return {"units": len(units), "unit_problems": problems[:5], "n_unit_problems": len(problems),
            "repeated_questions": repeats, "completed_claims_in_db": completed,
            "max_fill": max((u.n_claimed for u in units), default=0)}


class Http:
    """A minimal HTTP/1.1 client on asyncio streams (one connection per request, as gunicorn's sync
    workers close them), with a cookie jar. httpx costs several ms of CPU per request, which on a
    2-core machine would be taken from the server being measured."""

    def __init__(self, host: str, port: int):
        self.host, self.port, self.cookies = host, port, {}

    async def request(self, method: str, path: str, form: dict | None = None) -> tuple[int, dict, bytes]:
        body = urlencode(form).encode() if form is not None else b""
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Connection: close"]
        if self.cookies:
            head.append("Cookie: " + "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        if form is not None:
            head += ["Content-Type: application/x-www-form-urlencoded", f"Content-Length: {len(body)}"]
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            raw = await asyncio.wait_for(reader.read(-1), timeout=30)
        finally:
            writer.close()
        header_blob, _, payload = raw.partition(b"\r\n\r\n")
        lines = header_blob.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers: dict = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name, value = name.lower(), value.strip()
            if name == "set-cookie":
                key, _, rest = value.partition("=")
                self.cookies[key] = rest.split(";", 1)[0]
            headers[name] = value
        return status, headers, payload


async def worker(host: str, port: int, entry: str, deadline: float, lat: dict, stats: Counter,
                 stop: asyncio.Event):
    async def timed(step, coro):
        t0 = time.perf_counter()
        response = await coro
        lat[step].append(time.perf_counter() - t0)
        return response

    while time.monotonic() < deadline and not stop.is_set():
        client = Http(host, port)  # a new participant: fresh cookies
        _, _, page = await timed("landing", client.request("GET", entry))
        token = FIELD["csrfmiddlewaretoken"].search(page).group(1).decode()
        nonce = html.unescape(FIELD["nonce"].search(page).group(1).decode())
        status, headers, _ = await timed("claim", client.request("POST", entry, {
            "consent": "yes", "csrfmiddlewaretoken": token, "nonce": nonce}))
        if status != 302:
            if status == 409:  # no work left
                stop.set()
                return
            stats[f"claim_{status}"] += 1
            return
        task = headers["location"]
        _, _, page = await timed("question", client.request("GET", task))
        while time.monotonic() < deadline:
            claim = FIELD["claim"].search(page)
            if claim is None:
                break
            step = FIELD["step"].search(page).group(1).decode()
            form = {"csrfmiddlewaretoken": token, "claim": claim.group(1).decode(), "step": step,
                    "shown": FIELD["shown"].search(page).group(1).decode(), "answer": "yes"}
            status, _, _ = await timed(step, client.request("POST", task + "answer", form))
            if status != 302:
                stats[f"{step}_{status}"] += 1
                return
            _, _, page = await timed("reveal" if step == "before" else "question", client.request("GET", task))
            if step == "after":
                stats["units"] += 1
                if time.monotonic() < deadline:
                    stats["units_in_window"] += 1
        else:
            return
        status, _, _ = await timed("finish", client.request("POST", task + "submit", {"csrfmiddlewaretoken": token}))
        stats["tasks"] += status == 302


def group_cpu_seconds(pgid: int) -> float:
    """CPU seconds (user + system) of the live processes of a process group (the gunicorn workers)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] * 1000


async def run_level(port: int, entry: str, n: int, seconds: float) -> dict:
    lat: dict = defaultdict(list)
    stats: Counter = Counter()
    stop = asyncio.Event()
    start = time.monotonic()
    deadline = start + seconds
    await asyncio.gather(*(worker("127.0.0.1", port, entry, deadline, lat, stats, stop) for _ in range(n)))
    elapsed = min(time.monotonic(), deadline) - start
    return {
        "workers": n, "seconds": round(elapsed, 2), "units": stats["units_in_window"],
        "units_per_s": round(stats["units_in_window"] / elapsed, 1), "tasks": stats["tasks"],
        "errors": {k: v for k, v in stats.items() if "_" in k and k != "units_in_window"},
        "requests": sum(len(v) for v in lat.values()),
        "latency_ms": {s: {"n": len(lat[s]), "p50": round(pct(lat[s], 50), 1), "p95": round(pct(lat[s], 95), 1),
                           "p99": round(pct(lat[s], 99), 1)} for s in STEPS if lat[s]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, nargs="+", default=[20, 50, 200])
    parser.add_argument("--seconds", type=float, default=15.0, help="measured time per level (max 60)")
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--sources", type=int, default=3)
    parser.add_argument("--quota", type=int, default=5)
    parser.add_argument("--units-per-task", type=int, default=10)
    parser.add_argument("--gunicorn-workers", type=int, default=3)
    parser.add_argument("--gunicorn-threads", type=int, default=1)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--queries", choices=("precompiled", "orm"), default="precompiled",
                        help="orm: the worker pages run the ORM twins of annotations.precompiled")
    parser.add_argument("--out", default=str(Path(__file__).with_name("results.json")))
    args = parser.parse_args()
    seconds = min(args.seconds, 60.0)
    if any(n > 500 for n in args.levels):
        sys.exit("at most 500 simulated workers")

    load_before = os.getloadavg()
    django_setup()
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True)
    studies = {n: seed(n, items=args.items, sources=args.sources, quota=args.quota,
                       units_per_task=args.units_per_task) for n in args.levels}
    from django.db import connections

    connections.close_all()

    cmd = [str(Path(sys.executable).with_name("gunicorn")), "config.wsgi:application", "-b",
           f"127.0.0.1:{args.port}", "-w", str(args.gunicorn_workers), "--threads", str(args.gunicorn_threads),
           "--backlog", "2048", "--log-level", "warning", "--timeout", "60"]
    if args.queries == "orm":
        cmd += ["-c", str(Path(__file__).with_name("gunicorn_orm.py"))]
    server = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ}, start_new_session=True)
    base = f"http://127.0.0.1:{args.port}"
    try:
        import httpx

        for _ in range(100):
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        # warm-up: a few tasks on the first level's study, not counted
        warm_id, warm_entry = studies[args.levels[0]]
        asyncio.run(run_level(args.port, warm_entry, 4, 2.0))
        results = []
        for n in args.levels:
            study_id, entry = studies[n]
            server_cpu, client_cpu = group_cpu_seconds(server.pid), time.process_time()
            result = asyncio.run(run_level(args.port, entry, n, seconds))
            server_cpu = group_cpu_seconds(server.pid) - server_cpu
            client_cpu = time.process_time() - client_cpu
            done = max(1, result["units"])
            result["cpu_ms_per_unit"] = {"server": round(server_cpu * 1000 / done, 1),
                                         "client": round(client_cpu * 1000 / done, 1)}
            result["checks"] = check(study_id)
            results.append(result)
            print(json.dumps(result), flush=True)
        results[0]["checks_note"] = "level 1's study also held the warm-up tasks"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    meta = {"cpus": os.cpu_count(), "queries": args.queries, "load_average": load_before, "gunicorn": {"workers": args.gunicorn_workers, "threads": args.gunicorn_threads},
            "items": args.items, "sources": args.sources, "quota": args.quota, "units_per_task": args.units_per_task,
            "seconds": seconds}
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    print("| workers | units/s | units | errors | " + " | ".join(f"{s} p50/p95/p99 ms" for s in STEPS) + " |")
    for r in results:
        cells = [f"{r['latency_ms'][s]['p50']}/{r['latency_ms'][s]['p95']}/{r['latency_ms'][s]['p99']}"
                 if s in r["latency_ms"] else "-" for s in STEPS]
        print(f"| {r['workers']} | {r['units_per_s']} | {r['units']} | {sum(r['errors'].values())} | "
              + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
