"""Benchmark of the study bundle: time, size and peak memory of bundling a study of N answers and
of importing the bundle back, to show that memory does not grow with the number of answers.

    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/rl_bundle_1m    # createdb first
    .venv/bin/python benchmarks/bundle/run.py build --rows 1000000   # the export benchmark's study
    .venv/bin/python benchmarks/bundle/run.py bundle --out var/bench/bundle-1m.zip
    .venv/bin/python benchmarks/bundle/run.py import --file var/bench/bundle-1m.zip
    # the same with --tracemalloc: Python's own peak allocation (slower: every allocation is traced)

The study is ``benchmarks/export/run.py build``'s: 500 items x 2 sources, one unit each, 100 units per
task, a before and an after answer per claim, N answers in all, with unit scores. ``bundle`` writes
the zip through ``scoring.services.bundle.bundle_stream`` to a file chunk by chunk (as the streamed
response hands it to a client); ``import`` reads it with ``bundle_import`` as a new study (the one
all-or-nothing transaction: checksums, schemas, then the rows). Each command runs in its own process,
so its peak RSS is its own.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
_spec = importlib.util.spec_from_file_location("export_bench", ROOT / "benchmarks" / "export" / "run.py")
export_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(export_bench)  # sets DJANGO_SETTINGS_MODULE and DATABASE_URL defaults


def _report(what: str, started: float, cpu_before: float, baseline: float, traced: bool, **extra) -> None:
    peak_traced = tracemalloc.get_traced_memory()[1] / 2**20 if traced else None
    fields = {
        "what": what, "seconds": f"{time.perf_counter() - started:.1f}",
        "cpu_seconds": f"{export_bench.cpu_seconds() - cpu_before:.1f}",
        "rss_before_MiB": f"{baseline:.0f}", "peak_rss_MiB": f"{export_bench.peak_rss_mib():.0f}",
        "peak_minus_before_MiB": f"{export_bench.peak_rss_mib() - baseline:.0f}",
        **({"tracemalloc_peak_MiB": f"{peak_traced:.1f}"} if traced else {}), **extra,
    }
    print(" ".join(f"{k}={v}" for k, v in fields.items()), flush=True)


def bundle(out: Path, traced: bool) -> None:
    import django

    django.setup()
    from annotations.models import Annotation
    from scoring.services.bundle import bundle_stream
    from studies.models import Study

    study = Study.objects.get(name="bench-study")
    n = Annotation.objects.filter(claim__study=study).count()
    out.parent.mkdir(parents=True, exist_ok=True)
    baseline, cpu_before = export_bench.rss_mib(), export_bench.cpu_seconds()
    if traced:
        tracemalloc.start()
    started = time.perf_counter()
    size = 0
    with out.open("wb") as fh:
        for chunk in bundle_stream(study=study, user=None):
            fh.write(chunk)
            size += len(chunk)
    _report("bundle", started, cpu_before, baseline, traced, answers=n, MiB=f"{size / 2**20:.1f}")


def import_(path: Path, traced: bool) -> None:
    import django

    django.setup()
    from annotations.models import Annotation
    from scoring.services.bundle import bundle_import

    name = f"bench-copy-{int(time.time())}"
    baseline, cpu_before = export_bench.rss_mib(), export_bench.cpu_seconds()
    if traced:
        tracemalloc.start()
    started = time.perf_counter()
    study = bundle_import(file=path, name=name, owner=None)
    n = Annotation.objects.filter(claim__study=study).count()
    _report("import", started, cpu_before, baseline, traced, answers=n, study=study.pk,
            bundle_MiB=f"{path.stat().st_size / 2**20:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("--rows", type=int, default=1_000_000)
    z = sub.add_parser("bundle")
    z.add_argument("--out", type=Path, required=True)
    z.add_argument("--tracemalloc", action="store_true")
    i = sub.add_parser("import")
    i.add_argument("--file", type=Path, required=True)
    i.add_argument("--tracemalloc", action="store_true")
    args = parser.parse_args()
    if args.command == "build":
        export_bench.build(args.rows)
    elif args.command == "bundle":
        bundle(args.out, args.tracemalloc)
    else:
        import_(args.file, args.tracemalloc)


if __name__ == "__main__":
    main()
