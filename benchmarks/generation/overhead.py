"""The generation pipeline's own cost per batch, with the model taken out.

The model (``--model tiny``: the tests' 44k-parameter T5; ``small``: the 8M-parameter T5 of
``bench_generation.py``) generates once for every batch, and that ``model.generate`` time is
recorded; then the same job runs again with ``model.generate`` replaying those recorded outputs,
so what is timed is everything else a batch does: choose the next items, render and tokenize the
prompts, decode and parse, write the rationales, the failures and the progress. Best of
``--repeats`` runs (noise only adds time), in ms per batch of 16, for a job of ``--items`` items
and one of ``--large`` items (the second shows whether the cost grows with the size of the job),
with the overhead's share of a batch (pipeline / (pipeline + generate)).

    .venv/bin/python benchmarks/generation/overhead.py [--model tiny] [--items 160] [--large 2000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
os.environ.setdefault("RL_SHARED_DATA", str(ROOT.parent / "shared" / "data"))

from benchmarks.generation.bench_generation import setup_db  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=160)
    parser.add_argument("--large", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", choices=("tiny", "small"), default="tiny")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    data = Path(os.environ["RL_SHARED_DATA"]) / "strategyqa"
    train = json.loads((data / "strategyqa_processed_train.json").read_text())
    rows = (train * (args.large // len(train) + 1))[: args.large]
    rows = [{**row, "qid": f"{row['qid']}-{i}"} for i, row in enumerate(rows)]
    dataset = setup_db(rows)
    from studies.lm import backends
    from studies.models import Item, RationaleSource
    from studies.services.generation import generation_job_create, generation_job_run
    from tests import tiny_models as tiny

    if args.model == "tiny":
        folder = tiny.build_tiny_t5(Path(tempfile.mkdtemp()) / "tiny", tiny.strategyqa_prompt_items(train[:60]),
                                    steps=50)
    else:
        from benchmarks.generation.bench_generation import build_models

        folder = build_models(Path(tempfile.mkdtemp()), train[:60])["small"]
    loaded = backends.load_transformers_model("seq2seq", str(folder))
    recorded: dict = {}
    generate_s: list[float] = []
    real = loaded.model.generate

    def replay(**kwargs):
        key = tuple(map(tuple, kwargs["input_ids"].tolist()))
        if key not in recorded:
            started = time.perf_counter()
            recorded[key] = real(**kwargs)
            generate_s.append(time.perf_counter() - started)
        return recorded[key]

    loaded.model.generate = replay
    ids = list(Item.objects.filter(dataset=dataset).order_by("pk").values_list("pk", flat=True))
    runs = iter(range(10**6))

    def run(n: int) -> float:
        source = RationaleSource.objects.create(name=f"s{next(runs)}", kind="lm", backend="seq2seq",
                                                model_name_or_path=str(folder), decoding={"max_new_tokens": 24})
        job = generation_job_create(kind="rationales", source=source, item_ids=ids[:n], batch_size=16,
                                    enqueue=False)
        started = time.perf_counter()
        generation_job_run(job_id=job.pk)
        return 1000 * (time.perf_counter() - started) / -(-n // 16)

    out = {"model": args.model, "params": sum(p.numel() for p in loaded.model.parameters())}
    for n in (args.items, args.large):
        run(n)  # record the model's outputs once
        out[f"{n}_items_ms_per_batch"] = round(min(run(n) for _ in range(args.repeats)), 1)
    generate_ms = 1000 * statistics.median(generate_s)
    out["generate_ms_per_batch_median"] = round(generate_ms, 1)
    out["overhead_share_pct"] = round(100 * out[f"{args.items}_items_ms_per_batch"]
                                      / (out[f"{args.items}_items_ms_per_batch"] + generate_ms), 1)
    out["load_average"] = os.getloadavg()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
