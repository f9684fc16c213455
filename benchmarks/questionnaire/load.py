"""Bounded load test of the utility questionnaire over HTTP (gunicorn + PostgreSQL, loopback only).

Each simulated worker opens the study link as a new participant (fresh cookie jar), consents
(claim), GETs its first question page, and for every question POSTs the first answer, GETs the
reveal, POSTs the second answer and GETs the next page; then finishes and starts over. Answers are
sent as the step page's script sends them (header ``X-RL-Inline: 1``: the reply is the next page
itself, so the reveal and the next question come with the answers and have no rows of their own);
``--plain-forms`` sends them as a browser without JavaScript does (POST, redirect, GET). By default
closed loop (no think time, all workers at once); ``--think MIN MAX`` waits a random human time
before every step, ``--arrival N`` starts the workers at random moments within the first N
seconds (a launch burst). After each level the database is checked (every unit within its quota,
claim counters equal to the live claims and to the distinct workers, completed counters equal to
the answers that count, no worker with a question twice) and the run fails if a check does.

Usage (see README.md):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rl_bench \
        .venv/bin/python benchmarks/questionnaire/load.py --levels 20 50 200 --seconds 15
    # launch burst at human pace, planner statistics gathered before the study was seeded:
    ... load.py --levels 200 --seconds 30 --arrival 2 --think 3 7 --analyze

    # the claim query's cost by study size (900 / 9,000 / 90,000 units, fresh and analysed;
    # EXPLAIN ANALYZE, no server): claim_cost.py, whose options follow
    ... load.py --claim-cost --sizes 900 9000 90000 --runs 15

Bounded: every level stops after ``--seconds`` (and when the study runs out of work); requests
time out after 30 s; only 127.0.0.1 is contacted.
"""
from __future__ import annotations

import argparse
import asyncio
import html
import json
import logging
import math
import os
import random
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
         ("csrfmiddlewaretoken", "claim", "step", "shown", "nonce", "consent_sha256")}
# The header the pages' script sends with a consent or an answer (annotations.worker_pages.INLINE_HEADER).
INLINE = {"X-RL-Inline": "1"}
STEPS = ("landing", "claim", "first_question", "question", "before", "reveal", "after", "finish")
WINDOW = 10.0  # seconds per latency window


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

    stamp = f"bench-{level}-{time.time():.3f}"
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

    CONNECTION = "close"

    def encode(self, method: str, path: str, form: dict | None, headers: dict | None = None) -> bytes:
        """The request's bytes, with the jar's cookies (and ``headers``)."""
        body = urlencode(form).encode() if form is not None else b""
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", f"Connection: {self.CONNECTION}"]
        if self.cookies:
            head.append("Cookie: " + "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        if form is not None:
            head += ["Content-Type: application/x-www-form-urlencoded", f"Content-Length: {len(body)}"]
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode() + body

    def decode(self, header_blob: bytes, payload: bytes) -> tuple[int, dict, bytes]:
        """(status, headers, body) of a response, its cookies kept in the jar."""
        lines = header_blob.decode("latin-1").rstrip("\r\n").split("\r\n")
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

    async def request(self, method: str, path: str, form: dict | None = None,
                      headers: dict | None = None) -> tuple[int, dict, bytes]:
        raw = self.encode(method, path, form, headers)
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(raw)
            response = await asyncio.wait_for(reader.read(-1), timeout=30)
        finally:
            writer.close()
        header_blob, _, payload = response.partition(b"\r\n\r\n")
        return self.decode(header_blob, payload)


async def worker(host: str, port: int, entry: str, start: float, deadline: float, lat: dict, stats: Counter,
                 stop: asyncio.Event, *, arrival: float, think: tuple[float, float] | None, rng: random.Random,
                 http=Http, inline: bool = True):
    async def timed(step, coro):
        began, t0 = time.monotonic() - start, time.perf_counter()
        try:
            response = await coro
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):  # an error of the run, not its end
            stats[f"{step}_timeout"] += 1
            lat[step].append((began, time.perf_counter() - t0))
            return 599, {}, b""
        lat[step].append((began, time.perf_counter() - t0))
        return response

    async def pause():  # a human reading and answering
        if think:
            await asyncio.sleep(max(0.0, min(rng.uniform(*think), deadline - time.monotonic())))

    await asyncio.sleep(rng.uniform(0, arrival))
    while time.monotonic() < deadline and not stop.is_set():
        client = http(host, port)  # a new participant: fresh cookies
        status, _, page = await timed("landing", client.request("GET", entry))
        if status != 200:
            stats[f"landing_{status}"] += status != 599
            return
        token = FIELD["csrfmiddlewaretoken"].search(page).group(1).decode()
        nonce = html.unescape(FIELD["nonce"].search(page).group(1).decode())
        consent_sha256 = FIELD["consent_sha256"].search(page).group(1).decode()  # the consent text it shows
        await pause()
        if time.monotonic() >= deadline:
            return
        # Inline, the consent's reply is the first question, with the task's address in
        # Content-Location (the landing page's script); plain, a redirect to the task's page.
        status, headers, page = await timed("claim", client.request("POST", entry, {
            "consent": "yes", "csrfmiddlewaretoken": token, "nonce": nonce, "consent_sha256": consent_sha256},
            INLINE if inline else None))
        if status != (200 if inline else 302):
            if status == 409:  # no work left
                stop.set()
                return
            stats[f"claim_{status}"] += status != 599
            return
        if inline:
            task = headers["content-location"]
        else:
            task = headers["location"]
            status, _, page = await timed("first_question", client.request("GET", task))
            if status == 599:  # timed out (counted)
                return
        while True:
            await pause()
            if time.monotonic() >= deadline:
                return
            claim = FIELD["claim"].search(page)
            if claim is None:
                break
            step = FIELD["step"].search(page).group(1).decode()
            form = {"csrfmiddlewaretoken": token, "claim": claim.group(1).decode(), "step": step,
                    "shown": FIELD["shown"].search(page).group(1).decode(), "answer": "yes"}
            if inline:  # the reply is the next page
                status, _, page = await timed(step, client.request("POST", task + "answer", form, INLINE))
                if status != 200:
                    stats[f"{step}_{status}"] += status != 599
                    return
            else:
                status, _, _ = await timed(step, client.request("POST", task + "answer", form))
                if status != 302:
                    stats[f"{step}_{status}"] += status != 599
                    return
                status, _, page = await timed("reveal" if step == "before" else "question",
                                              client.request("GET", task))
                if status == 599:  # timed out (counted)
                    return
            if step == "after":
                stats["units"] += 1
                if time.monotonic() < deadline:
                    stats["units_in_window"] += 1
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


def summary(samples: list[tuple[float, float]]) -> dict:
    values = [seconds for _, seconds in samples]
    return {"n": len(values), "p50": round(pct(values, 50), 1), "p95": round(pct(values, 95), 1),
            "p99": round(pct(values, 99), 1)}


async def run_level(port: int, entry: str, n: int, seconds: float, *, arrival: float = 0.0,
                    think: tuple[float, float] | None = None, seed: int = 0, http=Http,
                    inline: bool = True) -> dict:
    lat: dict = defaultdict(list)  # step -> [(seconds since the level started, latency)]
    stats: Counter = Counter()
    stop = asyncio.Event()
    rng = random.Random(seed)
    start = time.monotonic()
    deadline = start + seconds
    await asyncio.gather(*(worker("127.0.0.1", port, entry, start, deadline, lat, stats, stop, arrival=arrival,
                                  think=think, rng=random.Random(rng.random()), http=http, inline=inline)
                           for _ in range(n)))
    elapsed = min(time.monotonic(), deadline) - start
    windows = []  # by when the request started
    for w in range(int(math.ceil(elapsed / WINDOW))):
        lo, hi = w * WINDOW, (w + 1) * WINDOW
        steps = {s: summary([x for x in lat[s] if lo <= x[0] < hi]) for s in STEPS}
        windows.append({"from_s": lo, "latency_ms": {s: v for s, v in steps.items() if v["n"]}})
    return {
        "workers": n, "seconds": round(elapsed, 2), "units": stats["units_in_window"],
        "units_per_s": round(stats["units_in_window"] / elapsed, 1), "tasks": stats["tasks"],
        "errors": {k: v for k, v in stats.items() if "_" in k and k != "units_in_window"},
        "requests": sum(len(v) for v in lat.values()),
        "latency_ms": {s: summary(lat[s]) for s in STEPS if lat[s]},
        "windows": windows,
    }


def cells(latency: dict) -> list[str]:
    return [f"{latency[s]['p50']}/{latency[s]['p95']}/{latency[s]['p99']}" if s in latency else "-" for s in STEPS]


def main() -> None:
    if sys.argv[1:2] == ["--claim-cost"]:  # the study-size table of the claim query (claim_cost.py)
        from claim_cost import main as claim_cost

        return claim_cost(sys.argv[2:])
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
    parser.add_argument("--think", type=float, nargs=2, metavar=("MIN", "MAX"),
                        help="human pace: wait MIN-MAX seconds (uniform) before every step")
    parser.add_argument("--arrival", type=float, default=0.0,
                        help="burst: each worker starts at a random moment within the first N seconds")
    parser.add_argument("--analyze", action="store_true",
                        help="ANALYZE the database after the warm-up, before the measured studies are "
                             "seeded (the planner's statistics predate them, as after autovacuum)")
    parser.add_argument("--queries", choices=("precompiled", "orm"), default="precompiled",
                        help="orm: the worker pages run the ORM twins of annotations.precompiled")
    parser.add_argument("--out", default=str(Path(__file__).with_name("results.json")))
    # --- issue 25: the server as deployed, the client's connections, round trips per step ---
    parser.add_argument("--deployed", action="store_true",
                        help="run gunicorn with config/gunicorn.conf.py as the README deploys it (its workers, "
                             "threads and keepalive; --gunicorn-workers/--gunicorn-threads are then ignored "
                             "unless set through GUNICORN_WORKERS / GUNICORN_THREADS)")
    parser.add_argument("--keep-alive", action="store_true",
                        help="each simulated worker keeps one HTTP/1.1 connection open between its requests "
                             "(as a browser or a reverse proxy does; needs gthread workers to matter)")
    parser.add_argument("--plain-forms", action="store_true",
                        help="send answers as a browser without JavaScript does (POST, redirect, GET of the "
                             "next page) instead of as the step page's script does (the reply is the page)")
    parser.add_argument("--no-round-trips", action="store_true",
                        help="skip counting the database round trips per step (one task walked in-process)")
    args = parser.parse_args()
    seconds = min(args.seconds, 60.0)
    if any(n > 1000 for n in args.levels):
        sys.exit("at most 1,000 simulated workers")

    load_before = os.getloadavg()
    django_setup()
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True)
    design = {"items": args.items, "sources": args.sources, "quota": args.quota, "units_per_task": args.units_per_task}
    _warm_id, warm_entry = seed(0, **design)
    from django.db import connection, connections

    trips = None
    if not args.no_round_trips:  # one task of the warm-up study, in-process, before the server starts
        import round_trips

        trips = round_trips.summary(round_trips.walk_task(warm_entry, inline=not args.plain_forms))
    connections.close_all()

    cmd = [str(Path(sys.executable).with_name("gunicorn")), "config.wsgi:application", "-b",
           f"127.0.0.1:{args.port}", "-w", str(args.gunicorn_workers), "--threads", str(args.gunicorn_threads),
           "--backlog", "2048", "--log-level", "warning", "--timeout", "60"]
    if args.queries == "orm":
        cmd += ["-c", str(Path(__file__).with_name("gunicorn_orm.py"))]
    if args.deployed:  # the deployed configuration; only the address and log level differ
        cmd = [str(Path(sys.executable).with_name("gunicorn")), "-c", str(ROOT / "config" / "gunicorn.conf.py"),
               "config.wsgi:application", "-b", f"127.0.0.1:{args.port}", "--log-level", "warning"]
    http = Http
    if args.keep_alive:
        from keepalive import KeepAliveHttp

        http = KeepAliveHttp
    server = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ}, start_new_session=True)
    base = f"http://127.0.0.1:{args.port}"
    failed = []
    try:
        import httpx

        for _ in range(100):
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        # warm-up: a few tasks on a study of its own, not counted
        asyncio.run(run_level(args.port, warm_entry, 4, 2.0, http=http, inline=not args.plain_forms))
        if args.analyze:
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        studies = {n: seed(n, **design) for n in args.levels}
        connections.close_all()
        results = []
        for n in args.levels:
            study_id, entry = studies[n]
            load = os.getloadavg()
            server_cpu, client_cpu = group_cpu_seconds(server.pid), time.process_time()
            result = asyncio.run(run_level(args.port, entry, n, seconds, arrival=args.arrival,
                                           think=tuple(args.think) if args.think else None, seed=n, http=http,
                                           inline=not args.plain_forms))
            server_cpu = group_cpu_seconds(server.pid) - server_cpu
            client_cpu = time.process_time() - client_cpu
            done = max(1, result["units"])
            result["load_average"] = [load, os.getloadavg()]
            result["cpu_ms_per_unit"] = {"server": round(server_cpu * 1000 / done, 1),
                                         "client": round(client_cpu * 1000 / done, 1)}
            result["requests_per_unit"] = round(result["requests"] / done, 2)
            result["checks"] = checks = check(study_id)
            connections.close_all()
            if checks["n_unit_problems"] or checks["repeated_questions"]:
                failed.append((n, checks))
            results.append(result)
            print(json.dumps({k: v for k, v in result.items() if k != "windows"}), flush=True)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    meta = {"cpus": os.cpu_count(), "queries": args.queries, "load_average_at_start": load_before,
            "gunicorn": {"workers": args.gunicorn_workers, "threads": args.gunicorn_threads}, **design,
            "seconds": seconds, "think": args.think, "arrival": args.arrival, "analyze": args.analyze,
            "deployed": args.deployed, "keep_alive": args.keep_alive,
            "answers": "plain forms" if args.plain_forms else "inline", "round_trips_per_step": trips}
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    print(f"load average at start {load_before}; " + json.dumps({k: v for k, v in meta.items() if k != "cpus"}))
    print("| workers | units/s | units | errors | " + " | ".join(f"{s} p50/p95/p99 ms" for s in STEPS) + " |")
    for r in results:
        print(f"| {r['workers']} | {r['units_per_s']} | {r['units']} | {sum(r['errors'].values())} | "
              + " | ".join(cells(r["latency_ms"])) + " |")
    print("\nper 10-second window (by when the request started):")
    print("| workers | from s | " + " | ".join(f"{s} p50/p95/p99 ms (n)" for s in STEPS) + " |")
    for r in results:
        for w in r["windows"]:
            lat = w["latency_ms"]
            row = [f"{c} ({lat[s]['n']})" if s in lat else "-" for s, c in zip(STEPS, cells(lat), strict=True)]
            print(f"| {r['workers']} | {w['from_s']:.0f} | " + " | ".join(row) + " |")
    if trips:
        print("\ndatabase round trips per request, by step (statements through Django's cursor; round trips "
              "on the wire, BEGIN / COMMIT / health check included):")
        print("| step | " + " | ".join(trips) + " |")
        print("|---|" + "---|" * len(trips))
        for kind in ("statements", "round_trips"):
            print(f"| {kind} | " + " | ".join(str(trips[s][kind]) for s in trips) + " |")
    print("\nrequests per completed unit: " + ", ".join(f"{r['workers']} workers {r.get('requests_per_unit')}"
                                                      for r in results))
    if failed:
        sys.exit(f"database checks failed: {failed}")


if __name__ == "__main__":
    main()
