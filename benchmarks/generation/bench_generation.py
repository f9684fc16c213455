"""Generation benchmark: rationales per second batched (16) vs one at a time, and the pipeline's
overhead over raw ``model.generate`` at batch size 16.

Runs on locally built models (nothing is downloaded): the tiny T5 of the tests (d_model 32) and a
"small" T5 (d_model 256, 4+4 layers) whose generate cost is closer to a real model's share.

    .venv/bin/python benchmarks/generation/bench_generation.py [--items 160] [--threads 2]

"Pipeline" is the whole service path of a job: select pending items, render the FEB prompts,
tokenize, generate, decode, parse, write rationales and progress in a transaction
(``generation_job_run``). "Raw" is ``model.generate`` alone on the same pre-tokenized batches with
the same decoding. Greedy decoding with a fixed number of new tokens (EOS suppressed) so both do
identical model work.
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


def build_models(folder: Path, rows: list[dict]) -> dict[str, Path]:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    from studies.lm import templates
    from studies.lm.training import train_seq2seq
    from tests import tiny_models as tiny

    items = tiny.strategyqa_prompt_items(rows)
    out = {"tiny": tiny.build_tiny_t5(folder / "tiny", items, steps=50)}
    pairs = [(templates.t5_explain_input(i), templates.t5_explain_target(i)) for i in items]
    tokenizer = tiny.build_tokenizer([s for p in pairs for s in p], vocab_size=2000)
    torch.manual_seed(0)
    config = T5Config(vocab_size=len(tokenizer), d_model=256, d_kv=32, d_ff=1024, num_layers=4, num_decoder_layers=4,
                      num_heads=8, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, dropout_rate=0.0)
    model = T5ForConditionalGeneration(config)
    train_seq2seq(model, tokenizer, pairs, steps=30, batch_size=8, lr=3e-3)
    model.save_pretrained(folder / "small")
    tokenizer.save_pretrained(folder / "small")
    out["small"] = folder / "small"
    return out


def setup_db(rows: list[dict]):
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()
    connection.creation.create_test_db(verbosity=0)
    from studies.models import YES_NO_CHOICES, Dataset, Item

    dataset = Dataset.objects.create(name="strategyqa", task_format="yes_no")
    Item.objects.bulk_create([
        Item(dataset=dataset, external_id=r["qid"], question=r["question"], choices=list(YES_NO_CHOICES),
             gold_answer="yes" if r["answer"] else "no", gold_rationale=r["rationale"], split="dev",
             metadata={"facts": r["facts"]}) for r in rows])
    return dataset


def run_pipeline(dataset, model_path: Path, name: str, batch_size: int, decoding: dict) -> tuple[float, int]:
    from studies.models import Rationale, RationaleSource
    from studies.services.generation import generation_job_create, generation_job_run

    source = RationaleSource.objects.create(name=name, kind="lm", backend="seq2seq",
                                            model_name_or_path=str(model_path), decoding=decoding)
    job = generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev",
                                batch_size=batch_size, enqueue=False)
    started = time.perf_counter()
    job = generation_job_run(job_id=job.pk)
    elapsed = time.perf_counter() - started
    return elapsed, Rationale.objects.filter(source=source).count() + job.failures.count()


def run_raw(dataset, model_path: Path, batch_size: int, decoding: dict) -> float:
    import torch

    from studies.lm.backends import load_transformers_model
    from studies.lm.templates import t5_explain_input
    from studies.models import Item
    from studies.services.generation import prompt_item

    loaded = load_transformers_model("seq2seq", str(model_path))
    prompts = [t5_explain_input(prompt_item(i)) for i in Item.objects.filter(dataset=dataset).order_by("pk")]
    batches = [loaded.tokenizer(prompts[s:s + batch_size], return_tensors="pt", padding=True, truncation=True,
                                max_length=512) for s in range(0, len(prompts), batch_size)]
    started = time.perf_counter()
    with torch.inference_mode():
        for batch in batches:
            loaded.model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                  do_sample=False, max_new_tokens=decoding["max_new_tokens"],
                                  min_new_tokens=decoding["max_new_tokens"])
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=160)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5, help="batched runs per model (median reported)")
    parser.add_argument("--small-repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=48)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    data = Path(os.environ["RL_SHARED_DATA"]) / "strategyqa"
    train = json.loads((data / "strategyqa_processed_train.json").read_text())[:60]
    dev = json.loads((data / "strategyqa_processed_dev.json").read_text())[: args.items]
    dataset = setup_db(dev)
    # a source's decoding takes only the keys the app knows (backends.DECODING_OPTION_KEYS): the
    # fixed number of new tokens (min = max) is applied by the patch below and by run_raw
    decoding = {"do_sample": False, "max_new_tokens": args.new_tokens}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        models = build_models(Path(tmp), train)
        # transformers' generate honours min_new_tokens; the app's backend is patched to pass it.
        from studies.lm import backends

        original = backends._TransformersBackend._generate_kwargs

        def with_min(self, decoding_, max_input):
            kwargs = original(self, decoding_, max_input)
            kwargs["min_new_tokens"] = decoding_.max_new_tokens
            return kwargs

        backends._TransformersBackend._generate_kwargs = with_min
        for label, path in models.items():
            run_pipeline(dataset, path, f"{label}-warmup", 16, decoding)  # load + warm up
            run_raw(dataset, path, 16, decoding)
            batched, single, raw = [], [], []
            repeats = args.repeats if label == "tiny" else args.small_repeats
            for r in range(repeats):  # interleaved, so load changes on a shared machine hit both alike
                raw.append(run_raw(dataset, path, 16, decoding))
                t, n = run_pipeline(dataset, path, f"{label}-b16-{r}", 16, decoding)
                assert n == args.items, n
                batched.append(t)
            t, n = run_pipeline(dataset, path, f"{label}-b1", 1, decoding)
            single.append(t)
            # Best of the repeats: the least disturbed run of each (noise only ever adds time).
            b, s, w = min(batched), min(single), min(raw)
            n_batches = -(-args.items // 16)
            results[label] = {
                "items": args.items, "new_tokens": args.new_tokens, "repeats": repeats,
                "rationales_per_s_batch16": round(args.items / b, 1),
                "rationales_per_s_one_at_a_time": round(args.items / s, 1),
                "batching_speedup": round(s / b, 2),
                "raw_generate_s_batch16": round(w, 3), "pipeline_s_batch16": round(b, 3),
                "pipeline_overhead_pct": round(100 * (b - w) / w, 1),
                "pipeline_overhead_ms_per_batch": round(1000 * (b - w) / n_batches, 1),
                "raw_generate_ms_per_batch": round(1000 * w / n_batches, 1),
                "median_pipeline_s": round(statistics.median(batched), 3),
                "median_raw_s": round(statistics.median(raw), 3),
            }
    print(json.dumps({"threads": args.threads, "torch": torch.__version__, "device": "cpu", "results": results},
                     indent=2))


if __name__ == "__main__":
    main()
