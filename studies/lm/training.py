"""Small, dependency-free training loops for seq2seq (T5) and causal models.

Used by the fine-tuning service and by the tiny models that tests and benchmarks build. AdamW
(:data:`OPTIMIZER`, :data:`WEIGHT_DECAY`) with a linear warm-up over the first
:data:`WARMUP_PERCENT` % of the steps then a constant rate, gradients clipped at
:data:`CLIP_GRAD_NORM`, teacher forcing, pad positions masked out of the loss. These constants are
what the loop uses and what :func:`training_schedule` reports (a fine-tuned checkpoint records it).
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

# The optimizer and schedule of every loop here: the loop reads these, and so do the record and the
# description of a fine-tuning job (studies.services.generation.finetune), so they cannot differ.
OPTIMIZER = "AdamW"  # torch.optim's class of that name
WEIGHT_DECAY = 0.01  # torch.optim.AdamW's default, passed explicitly
WARMUP_PERCENT = 10  # linear warm-up over the first 10% of the steps (at least one), then a constant rate
CLIP_GRAD_NORM = 1.0  # the gradients' total norm is clipped to this before each step


def warmup_steps(steps: int) -> int:
    """The warm-up steps of a run of ``steps`` optimizer steps."""
    return max(1, steps * WARMUP_PERCENT // 100)


def training_schedule(steps: int) -> dict:
    """The optimizer and schedule a run of ``steps`` steps uses, as recorded with a checkpoint."""
    return {
        "optimizer": OPTIMIZER,
        "weight_decay": WEIGHT_DECAY,
        "warmup": {"shape": "linear", "percent_of_steps": WARMUP_PERCENT, "steps": warmup_steps(steps),
                   "then": "constant"},
        "clip_grad_norm": CLIP_GRAD_NORM,
    }


def schedule_description() -> str:
    """The optimizer and schedule in words (the fine-tuning presets' descriptions say it)."""
    return (f"{OPTIMIZER} (weight decay {WEIGHT_DECAY}), linear warm-up over the first {WARMUP_PERCENT}% of the "
            f"steps then a constant rate, gradients clipped at norm {CLIP_GRAD_NORM}")


@dataclass
class TrainResult:
    steps: int
    final_loss: float
    cancelled: bool = False


def _schedule(optimizer, warmup: int):
    import torch

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / max(1, warmup)))


def _batches(n: int, batch_size: int, rng: random.Random):
    while True:
        order = list(range(n))
        rng.shuffle(order)
        for start in range(0, n, batch_size):
            yield order[start:start + batch_size]


def _masked_labels(input_ids, attention_mask):
    """Labels for teacher forcing: the input ids with pad positions set to -100 (out of the loss)."""
    labels = input_ids.clone()
    labels[attention_mask == 0] = -100
    return labels


def _optimize(model, n: int, make_batch: Callable[[list[int]], tuple], *, steps: int, batch_size: int,
              lr: float, seed: int, on_step: Callable[[int, float], bool] | None) -> TrainResult:
    """The shared loop: ``steps`` optimizer steps (:func:`training_schedule`: AdamW, linear warm-up
    then constant, gradients clipped) on shuffled batches of ``n`` examples; ``make_batch(indices)`` gives (input_ids, attention_mask, labels).
    Leaves the model in training mode: the caller puts it back in eval mode."""
    import torch

    torch.manual_seed(seed)
    rng = random.Random(seed)
    device = next(model.parameters()).device
    model.train()
    optimizer = getattr(torch.optim, OPTIMIZER)(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)
    scheduler = _schedule(optimizer, warmup=warmup_steps(steps))
    loss_value = float("nan")
    batches = _batches(n, batch_size, rng)
    for step in range(1, steps + 1):
        input_ids, attention_mask, labels = make_batch(next(batches))
        loss = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                     labels=labels.to(device)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_GRAD_NORM)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        loss_value = float(loss.detach())
        if on_step is not None and on_step(step, loss_value) is False:
            return TrainResult(steps=step, final_loss=loss_value, cancelled=True)
    return TrainResult(steps=steps, final_loss=loss_value)


def train_seq2seq(model, tokenizer, pairs: list[tuple[str, str]], *, steps: int, batch_size: int = 8,
                  lr: float = 3e-4, seed: int = 0, max_source_length: int = 256, max_target_length: int = 128,
                  on_step: Callable[[int, float], bool] | None = None) -> TrainResult:
    """Train on (input, target) pairs for ``steps`` optimizer steps. ``on_step(step, loss)``
    returning False stops early (cancellation)."""
    if not pairs:
        raise ValueError("no training examples")

    def make_batch(indices):
        chosen = [pairs[i] for i in indices]
        enc = tokenizer([s for s, _ in chosen], return_tensors="pt", padding=True, truncation=True,
                        max_length=max_source_length)
        tgt = tokenizer([t for _, t in chosen], return_tensors="pt", padding=True, truncation=True,
                        max_length=max_target_length)
        return enc["input_ids"], enc["attention_mask"], _masked_labels(tgt["input_ids"], tgt["attention_mask"])

    result = _optimize(model, len(pairs), make_batch, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                       on_step=on_step)
    model.eval()
    return result


def train_causal(model, tokenizer, texts: list[str], *, steps: int, batch_size: int = 8, lr: float = 3e-4,
                 seed: int = 0, max_length: int = 256,
                 on_step: Callable[[int, float], bool] | None = None) -> TrainResult:
    """Language-model training on whole texts, right padded (generation later pads left)."""
    if not texts:
        raise ValueError("no training examples")
    eos = tokenizer.eos_token or ""

    def make_batch(indices):
        chosen = [texts[i] + eos for i in indices]
        enc = tokenizer(chosen, return_tensors="pt", padding=True, truncation=True, max_length=max_length)
        return enc["input_ids"], enc["attention_mask"], _masked_labels(enc["input_ids"], enc["attention_mask"])

    side = tokenizer.padding_side
    tokenizer.padding_side = "right"
    try:
        return _optimize(model, len(texts), make_batch, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                         on_step=on_step)
    finally:
        tokenizer.padding_side = side
        model.eval()
