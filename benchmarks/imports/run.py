"""Peak memory of one import of a large CSV (issue 20 item 12).

    python benchmarks/imports/run.py make --rows 500000          # writes var/bench/items-500000.csv
    python benchmarks/imports/run.py import --rows 500000        # a fresh database, one import, its figures

``import`` runs the generic items importer (``studies.services.importers.import_run``, what
``POST /api/v1/imports/`` and the admin's import page call, and the background import job runs)
in this process on a fresh SQLite database under ``var/bench/`` (``DATABASE_URL`` to choose
another) and prints the wall time, the peak RSS of the process over its RSS before the import
(``ru_maxrss``), and what the import answered (its counts, or the refusal). ``--max-rows`` sets
``RL_IMPORT_MAX_ROWS`` for the run (0: the setting's default)."""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "var" / "bench"


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def make(rows: int) -> Path:
    BENCH.mkdir(parents=True, exist_ok=True)
    path = BENCH / f"items-{rows}.csv"
    with open(path, "w") as fh:
        fh.write("id,question,answer\n")
        for n in range(rows):
            fh.write(f"q{n},Is item {n} true?,{'yes' if n % 2 else 'no'}\n")
    print(f"{path}: {rows} rows, {path.stat().st_size / 1e6:.1f} MB")
    return path


def run_import(rows: int, max_rows: int) -> None:
    path = BENCH / f"items-{rows}.csv"
    if not path.exists():
        make(rows)
    db = BENCH / f"imports-{os.getpid()}.sqlite3"
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{db}")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    if max_rows:
        os.environ["RL_IMPORT_MAX_ROWS"] = str(max_rows)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from studies.services.importers import ImportValidationError, import_run

    call_command("migrate", verbosity=0)
    before = rss_mib()
    start = time.perf_counter()
    try:
        record = import_run(kind="items", file=path, dataset_name="bench", task_format="yes_no")
        outcome = f"imported: created={record.created} updated={record.updated} unchanged={record.unchanged}"
    except ImportValidationError as exc:
        outcome = f"refused: {exc.summary()[:200]}"
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rows={rows} file_mb={path.stat().st_size / 1e6:.1f} max_rows={getattr(settings, 'RL_IMPORT_MAX_ROWS', None)} "
          f"wall_s={wall:.1f} rss_before_mib={before:.0f} peak_rss_mib={peak:.0f} "
          f"peak_minus_before_mib={peak - before:.0f}")
    print(outcome)
    if db.exists():
        db.unlink()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["make", "import"])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--max-rows", type=int, default=0)
    args = parser.parse_args()
    if args.what == "make":
        make(args.rows)
    else:
        run_import(args.rows, args.max_rows)


if __name__ == "__main__":
    main()
