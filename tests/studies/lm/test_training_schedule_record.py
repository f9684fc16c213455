"""A fine-tuned checkpoint records the optimizer and schedule it was trained with (AdamW, weight
decay, linear warm-up then constant, gradient clipping), read from the constants of
``studies.lm.training`` that the training loop itself uses: change one and the loop, the job's
params, the checkpoint's record and the presets' descriptions all follow. No training of a real
model here (tests/studies/lm/test_finetune.py trains tiny checkpoints and reads their record)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from studies.lm import training
from studies.models import GenerationJob
from studies.services.generation import finetune

pytestmark = pytest.mark.django_db


class _Quadratic(torch.nn.Module):
    """The smallest model the loop trains: its loss is the squared weight."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, input_ids, attention_mask, labels):
        return SimpleNamespace(loss=(self.w ** 2).sum())


def _run_loop(monkeypatch, steps: int) -> dict:
    """Run the shared loop on the toy model; what it handed the optimizer, scheduler and clipping."""
    seen: dict = {"clip": []}
    optimizer_class = getattr(torch.optim, training.OPTIMIZER)

    class Recording(optimizer_class):
        def __init__(self, params, **kw):
            seen["optimizer"] = (training.OPTIMIZER, kw)
            super().__init__(params, **kw)

    real_clip, real_schedule = torch.nn.utils.clip_grad_norm_, training._schedule
    monkeypatch.setattr(torch.optim, training.OPTIMIZER, Recording)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_",
                        lambda params, max_norm, **kw: seen["clip"].append(max_norm) or real_clip(params, max_norm, **kw))
    monkeypatch.setattr(training, "_schedule",
                        lambda optimizer, warmup: seen.setdefault("warmup", warmup) and real_schedule(optimizer, warmup))
    batch = (torch.zeros(1, 1, dtype=torch.long),) * 3
    training._optimize(_Quadratic(), 1, lambda indices: batch, steps=steps, batch_size=1, lr=0.1, seed=0, on_step=None)
    return seen


def test_the_loop_uses_the_recorded_constants(monkeypatch):
    monkeypatch.setattr(training, "WEIGHT_DECAY", 0.25)
    monkeypatch.setattr(training, "CLIP_GRAD_NORM", 0.5)
    monkeypatch.setattr(training, "WARMUP_PERCENT", 50)
    seen = _run_loop(monkeypatch, steps=4)
    assert seen["optimizer"][0] == "AdamW" and seen["optimizer"][1]["weight_decay"] == 0.25
    assert seen["warmup"] == 2 and seen["clip"] == [0.5] * 4
    assert training.training_schedule(4) == {
        "optimizer": "AdamW", "weight_decay": 0.25, "clip_grad_norm": 0.5,
        "warmup": {"shape": "linear", "percent_of_steps": 50, "steps": 2, "then": "constant"}}


def test_the_schedule_is_what_it_was_torchs_adamw_default_decay_a_tenth_warm_up_clip_one(monkeypatch):
    assert (training.OPTIMIZER, training.WEIGHT_DECAY, training.WARMUP_PERCENT, training.CLIP_GRAD_NORM) == \
        ("AdamW", 0.01, 10, 1.0)
    assert training.WEIGHT_DECAY == torch.optim.AdamW([torch.nn.Parameter(torch.ones(1))]).defaults["weight_decay"]
    assert [training.warmup_steps(n) for n in (1, 9, 10, 95, 300)] == [1, 1, 1, 9, 30]  # max(1, steps // 10)
    seen = _run_loop(monkeypatch, steps=30)
    assert seen["warmup"] == 3 and seen["optimizer"][1]["weight_decay"] == 0.01 and set(seen["clip"]) == {1.0}


def test_a_finetune_job_shows_and_its_checkpoint_records_the_schedule(strategyqa_dataset, train_items):
    params = finetune.finetune_params(dataset=strategyqa_dataset, split="train",
                                      params={"base_model": "local-t5", "mode": "answer_i"})
    schedule = training.training_schedule(params["steps"])
    assert {key: params[key] for key in schedule} == schedule  # shown with the job from its creation
    assert {"optimizer", "weight_decay", "warmup", "clip_grad_norm"} <= set(finetune.RECORDED)
    job = GenerationJob.objects.create(kind="finetune", dataset=strategyqa_dataset, split="train", params=params,
                                       total=params["steps"])
    record = finetune.training_record(job=job, params=params, final_loss=0.5, device="cpu")
    assert record["optimizer"] == "AdamW" and record["weight_decay"] == 0.01 and record["clip_grad_norm"] == 1.0
    assert record["warmup"] == {"shape": "linear", "percent_of_steps": 10, "steps": max(1, params["steps"] // 10),
                                "then": "constant"}
    # A job queued before the schedule was in its params records what the loop uses all the same.
    older = {k: v for k, v in params.items() if k not in schedule}
    assert {k: finetune.training_record(job=job, params=older, final_loss=0.5, device="cpu")[k] for k in schedule} \
        == schedule


def test_each_preset_says_the_schedule_and_where_its_values_come_from():
    for name, preset in finetune.PRESETS.items():
        assert training.schedule_description() in preset["description"], name
        assert "released FEB command" not in preset["description"], name
        values = preset["all"]
        # Every training value is either the paper's (STATED_IN says where) or named in NOT_FROM_PAPER.
        for key in ("epochs", "lr", "batch_size", "seed"):
            assert (key in finetune.STATED_IN[name]) != (key in finetune.NOT_FROM_PAPER[name]), (name, key)
        assert (values["lr"], values["batch_size"], values["seed"]) == ((3e-5, 4, 0) if name != "quick" else
                                                                        (3e-4, 8, 0))
    for name in ("paper-answerers", "paper-quark-start", "feb-few-shot"):
        assert "FEB's few-shot script" in finetune.PRESETS[name]["description"]
        assert "allenai/feb scripts/exp.py" in finetune.NOT_FROM_PAPER[name]["lr"]
        assert finetune.NOT_FROM_PAPER[name]["seed"] == "ours"
    assert "epochs" in finetune.STATED_IN["paper-quark-start"]  # the paper's 25 epochs for F (issue 21)
    assert "300 steps" in finetune.PRESETS["feb-few-shot"]["description"]
