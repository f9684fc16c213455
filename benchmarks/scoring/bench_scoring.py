"""Scoring benchmark: synthetic annotations scored end to end through ``scoring.metrics.pipeline.score_frames``,
the composition ``study_score`` runs on a study's rows once they are loaded (there without the
database's per-unit columns: the synthetic units carry their task accuracy), and relative
consistency for large numbers of bundles.

    .venv/bin/python benchmarks/scoring/bench_scoring.py            # 200,000 units x 5 workers
    .venv/bin/python benchmarks/scoring/bench_scoring.py --units 20000

No Django database: the frames are built in memory exactly as the service builds them from
Annotation rows (one row per answer: unit_id, participant_id, step, answer)."""
from __future__ import annotations

import argparse
import gc
import platform
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scoring.metrics import (
    pipeline,  # noqa: E402
    relative_consistency,  # noqa: E402
)


def synthetic(n_units: int, workers: int, n_sources: int = 3, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    unit_id = np.arange(n_units)
    gold = rng.choice(np.array(["yes", "no"], dtype=object), size=n_units)
    units = pd.DataFrame({
        "unit_id": unit_id,
        "item_id": unit_id // n_sources,
        "source_id": unit_id % n_sources,
        "source": pd.Categorical.from_codes(unit_id % n_sources, [f"lm{i}" for i in range(n_sources)]).astype(str),
        "gold": gold,
        "task_correct": rng.random(n_units) < 0.7,
    })
    n = n_units * workers
    u = np.repeat(unit_id, workers)
    p_before = 0.6 + 0.1 * (u % n_sources == 0)
    correct_before = rng.random(n) < p_before
    correct_after = rng.random(n) < np.where(units["task_correct"].to_numpy()[u], 0.8, 0.5)
    g = gold[u]
    other = np.where(g == "yes", "no", "yes")
    before = np.where(correct_before, g, other)
    after = np.where(correct_after, g, other)
    participant = (u * 7 + np.tile(np.arange(workers), n_units)) % 50_000
    annotations = pd.DataFrame({
        "unit_id": np.concatenate([u, u]),
        "participant_id": np.concatenate([participant, participant]),
        "step": np.repeat(np.array(["before", "after"], dtype=object), n),
        "answer": np.concatenate([before, after]),
    })
    return units, annotations


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--units", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=5)
    parser.add_argument("--rc", type=int, nargs="*", default=[1_000, 100_000, 1_000_000])
    args = parser.parse_args()

    print(f"python {platform.python_version()}, pandas {pd.__version__}, numpy {np.__version__}, "
          f"{platform.machine()}, {platform.processor() or 'cpu'}")
    print(f"load average before the run: {__import__('os').getloadavg()[0]:.2f} on {__import__('os').cpu_count()} CPUs")
    t = time.perf_counter()
    units, annotations = synthetic(args.units, args.workers)
    print(f"synthetic data: {args.units:,} units x {args.workers} workers = {args.units * args.workers:,} annotations "
          f"({len(annotations):,} answer rows, before + after) built in {time.perf_counter() - t:.2f} s")
    print(f"peak RSS after building the data: {peak_rss_mib():.0f} MiB")

    gc.collect()
    t, cpu = time.perf_counter(), time.process_time()
    scored = pipeline.score_frames(units, annotations, expected_raters=args.workers)
    elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
    print(f"score_frames end to end (majorities, utility, shares + bootstrap CIs, Theil's U, "
          f"Krippendorff alpha, Fleiss kappa): {elapsed:.2f} s wall, {cpu:.2f} s CPU; peak RSS {peak_rss_mib():.0f} MiB")
    results = scored.results
    shares = results["utility_shares"]["all"]
    print(f"  units scored {results['n_units_scored']:,}; useful {shares['useful']:.4f} "
          f"unsure {shares['unsure']:.4f} not useful {shares['not_useful']:.4f}; "
          f"U(utility|task acc) {results['theils_u_utility_given_task_accuracy']['all']:.4f}; "
          f"alpha(before) {results['agreement']['before']['krippendorff_alpha']:.4f}; "
          f"kappa(before) {results['agreement']['before']['fleiss_kappa']:.4f}")
    # The other readings of which answers count (``pipeline.other_readings``, as ``study_score`` runs
    # them): tasks are whole workers here; 5% failed an attention check (one check of several) and
    # 2% every check, 30% are not yet reviewed. Each reading is the same composition again.
    rng = np.random.default_rng(1)
    worker = annotations["participant_id"].to_numpy()
    draw = rng.random(int(worker.max()) + 1)
    keep = {"without_tasks_failing_any_check": draw[worker] >= 0.05,
            "without_tasks_failing_every_check": draw[worker] >= 0.02,
            "approved_tasks_only": draw[worker] >= 0.35}
    gc.collect()
    t, r_cpu = time.perf_counter(), time.process_time()
    readings = pipeline.other_readings(units, annotations, keep, scored, expected_raters=args.workers)
    r_elapsed, r_cpu = time.perf_counter() - t, time.process_time() - r_cpu
    print(f"other_readings (3 readings: the composition on each kept subset): {r_elapsed:.2f} s wall, "
          f"{r_cpu:.2f} s CPU, {r_cpu / cpu:.2f}x the published scoring's CPU; peak RSS {peak_rss_mib():.0f} MiB")
    for name, row in readings.items():
        print(f"  {name}: {row['answers_left_out']:,} answers left out; useful "
              f"{row['utility_shares']['all']['useful']:.4f}")
    del scored, results, readings
    gc.collect()

    tracemalloc.start()
    t = time.perf_counter()
    pipeline.score_frames(units, annotations, expected_raters=args.workers)
    traced = time.perf_counter() - t
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"  under tracemalloc: {traced:.2f} s, peak traced allocation during scoring {peak / 2**20:.0f} MiB")

    for n in args.rc:
        a = int(1.2 * n)
        c = int(n * (a / (2 * n)) ** 2)  # about the consistency a random model of that accuracy gets
        relative_consistency(n, a, c)  # warm up
        reps = 5
        t = time.perf_counter()
        for _ in range(reps):
            value = relative_consistency(n, a, c)
        per = (time.perf_counter() - t) / reps
        tracemalloc.start()
        relative_consistency(n, a, c)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"RC(n={n:,}, a={a:,}, c={c:,}, k=2) = {value:.6f}: {per * 1000:.2f} ms, peak {peak / 2**20:.1f} MiB")
    for n in (200, 2_000):
        a, c = int(1.5 * n), int(0.15 * n)
        t = time.perf_counter()
        value = relative_consistency(n, a, c, bundle_size=3)
        print(f"RC(n={n:,}, a={a:,}, c={c:,}, k=3) = {value:.6f}: {(time.perf_counter() - t) * 1000:.1f} ms")
    print(f"overall peak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
