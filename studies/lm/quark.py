"""Quark (Lu et al. 2022; SPEC section 9): reward-conditioned training of a self-rationalizer.

The torch parts, free of Django: what the job (:mod:`studies.services.generation.quark`) and the tests drive.

- K reward tokens (``<|reward_0|>`` best .. ``<|reward_{K-1}|>`` worst) are added to the tokenizer,
  each a single new token id, their embedding rows drawn from a normal with the existing rows'
  per-dimension mean and standard deviation (as Quark does); generation suppresses them.
- A growing data pool of (item, sampled rationale, reward). :func:`assign_bins` sorts it by reward
  and cuts it into K quantiles; each sample is trained with its quantile's token before its prompt.
- The loss per response token is ``-log p + kl_coef * KL(policy || reference) - entropy_coef *
  entropy``, averaged over the batch's response tokens. The reference is a frozen copy of the
  starting model and sees the prompt without a reward token, as in Quark.
- Adam with linear warm-up (then linear decay to zero at the last step, Quark's schedule).
- Every ``sample_interval`` steps the policy samples new rationales with the best token prepended;
  the first round is sampled by the reference, without a token.

Prompts come from the caller's ``prompt(item_id, token)`` (the FEB templates the generation job
uses; the token goes where :func:`control_template` puts it) and rewards from its
``score(item_ids, responses)``. Generation and decoding go through :mod:`studies.lm.backends`.
Every random draw is seeded by (seed, step), so a run resumed from a checkpoint continues exactly
as the uninterrupted run would have.
"""
from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from . import templates
from .backends import (
    CausalBackend,
    Decoding,
    LoadedModel,
    Seq2SeqBackend,
    load_trainable_model,
    max_new_tokens_allowed,
    temperature_problem,
    top_p_problem,
)

REWARD_TOKEN = "<|reward_{}|>"
STATE_FILE = "quark_state.json"
MAX_STEPS = 1_000_000
TIES = ("split", "together")
OPTIMIZER_FILE = "optimizer.pt"


def reward_token(index: int) -> str:
    return REWARD_TOKEN.format(index)


# Named starting points for :class:`QuarkSettings`; options given override them.
# ``default``: ours (see QuarkSettings). ``reference``: GXimingLu/Quark's ``arguments.py`` / ``main.py``
# values where they differ from ours (sample interval 500, warm-up 500, batch 128, top-p 1.0, no
# gradient clipping, Adam eps 1e-5); K, KL, entropy, lr and temperature are the same in both. The
# reference's length (3M episodes / batch 128 = 23,438 steps) is not copied: steps stay the run's.
PRESETS: dict[str, dict] = {
    "default": {},
    "reference": {"sample_interval": 500, "warmup_steps": 500, "batch_size": 128, "top_p": 1.0,
                  "clip_grad_norm": 0.0, "adam_eps": 1e-5},
}


@dataclass
class QuarkSettings:
    """Every knob of a run. SPEC section 9 gives Quark's defaults, which both presets use: K = 5
    reward tokens, KL coefficient 0.05, entropy coefficient 0.06, Adam at lr 1e-5 with a linear
    warm-up (its length is not given: 100 steps in ``default``, 500 in ``reference``). Temperature 1
    is the reference code's (GXimingLu/Quark); the ``default`` preset's sample interval 100,
    warm-up 100, batch 8, top-p 0.9, gradient clipping at 1.0 and Adam eps 1e-8 are ours (the README
    says why); the ``reference`` preset has the reference code's; the rest (decay to zero after the
    warm-up, lengths, samples per item, seed, ties) are the reference code's or ours."""

    preset: str = "default"
    n_reward_tokens: int = 5
    kl_coef: float = 0.05
    entropy_coef: float = 0.06
    lr: float = 1e-5
    warmup_steps: int = 100
    steps: int = 1000
    batch_size: int = 8
    sample_interval: int = 100
    samples_per_item: int = 1
    top_p: float = 0.9
    temperature: float = 1.0
    max_new_tokens: int = 100
    max_input_length: int = 512
    clip_grad_norm: float = 1.0
    adam_eps: float = 1e-8
    seed: int = 0
    ties: str = "split"
    eval_samples: int = 0

    @classmethod
    def from_json(cls, data: dict | None) -> QuarkSettings:
        """Settings from ``data``: its ``preset`` (``default`` when absent) gives the starting
        values, every other key given overrides them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data or {}) - known)
        if unknown:
            raise ValueError(f"unknown Quark setting(s) {', '.join(unknown)}")
        preset = (data or {}).get("preset") or "default"
        if not isinstance(preset, str) or preset not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(PRESETS)}, not {preset!r}")
        data = {**PRESETS[preset], **{k: v for k, v in (data or {}).items() if v is not None}, "preset": preset}
        values = {}
        for f in fields(cls):
            if data and data.get(f.name) is not None:
                caster = {"int": int, "float": float, "str": str}[f.type]
                try:
                    values[f.name] = caster(data[f.name])
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"{f.name} must be {f.type}, not {data[f.name]!r}") from exc
        settings = cls(**values)
        settings.check()
        return settings

    def check(self) -> None:
        at_least_one = ["n_reward_tokens", "steps", "batch_size", "sample_interval", "samples_per_item",
                        "max_new_tokens", "max_input_length"]
        for name in at_least_one:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for f in fields(self):
            if f.type == "float" and not math.isfinite(getattr(self, f.name)):
                raise ValueError(f"{f.name} must be a finite number")
        if self.steps > MAX_STEPS:
            raise ValueError(f"steps must be at most {MAX_STEPS}")
        most = max_new_tokens_allowed()
        if most and self.max_new_tokens > most:  # the evaluation source it registers decodes with it too
            raise ValueError(f"max_new_tokens {self.max_new_tokens} is over the operator's maximum of {most} "
                             "tokens an output (RL_LM_MAX_NEW_TOKENS)")
        if self.adam_eps <= 0:
            raise ValueError("adam_eps must be positive")
        for name in ("kl_coef", "entropy_coef", "warmup_steps", "clip_grad_norm", "eval_samples"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.lr <= 0:
            raise ValueError("lr must be positive")
        # Quark always samples: the decoding rules of every job (studies.lm.backends.decoding_problem).
        problem = top_p_problem(self.top_p, "top_p") or temperature_problem(self.temperature, name="temperature")
        if problem:
            raise ValueError(problem)
        if self.ties not in TIES:
            raise ValueError(f"ties must be one of {', '.join(TIES)}, not {self.ties!r}")

    def as_json(self) -> dict:
        return asdict(self)


# --- reward tokens ---------------------------------------------------------------------------
def add_reward_tokens(model, tokenizer, k: int, *, seed: int = 0) -> list[int]:
    """Add ``k`` reward tokens (each one new special token id) and return their ids, best first.

    New embedding rows are drawn from N(mean, std) of the rows the tokenizer already used
    (per dimension, seeded). Tokens the tokenizer already has (a Quark checkpoint trained further)
    keep their trained rows. The model's generation config suppresses them: the policy reads them,
    it never writes them."""
    import torch
    from transformers import AddedToken

    tokens = [reward_token(i) for i in range(k)]
    vocab = tokenizer.get_vocab()
    used_rows = len(tokenizer)
    missing = [t for t in tokens if t not in vocab]
    if missing:
        tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in missing], special_tokens=True)
    ids = [tokenizer.convert_tokens_to_ids(t) for t in tokens]
    for token, token_id in zip(tokens, ids, strict=True):
        encoded = tokenizer(token, add_special_tokens=False)["input_ids"]
        if encoded != [token_id]:
            raise ValueError(f"reward token {token} is not a single token id (encodes as {encoded})")
    embeddings = model.get_input_embeddings()
    if max(ids) >= embeddings.weight.shape[0]:
        model.resize_token_embeddings(max(ids) + 1, mean_resizing=False)
        embeddings = model.get_input_embeddings()
    new_ids = [tokenizer.convert_tokens_to_ids(t) for t in missing]
    if new_ids:
        with torch.no_grad():
            weight = embeddings.weight
            existing = weight[: min(used_rows, weight.shape[0])].float()
            keep = torch.ones(existing.shape[0], dtype=torch.bool)
            keep[[i for i in new_ids if i < existing.shape[0]]] = False
            existing = existing[keep]
            mean, std = existing.mean(dim=0), existing.std(dim=0)
            generator = torch.Generator().manual_seed(seed)
            draws = torch.normal(mean.expand(len(new_ids), -1).cpu(), std.expand(len(new_ids), -1).cpu(),
                                 generator=generator)
            weight[new_ids] = draws.to(weight.device, weight.dtype)
    suppressed = set(model.generation_config.suppress_tokens or [])
    model.generation_config.suppress_tokens = sorted(suppressed | set(ids))
    return ids


def control_template(backend: str, base_template: str, token: str) -> str:
    """The prompt template with ``token`` in front of the query: at the start of a T5 input; for a
    causal few-shot prompt, right before the query block (left truncation keeps it). A source
    registered from a Quark run carries this template, so the generation job prepends the token."""
    if backend == "seq2seq":
        return f"{token} {base_template or templates.T5_EXPLAIN}"
    if base_template:
        return f"{token} {base_template}"
    return f"{templates.CAUSAL_HEADER}\n{{demonstrations}}\n{token} {templates.CAUSAL_QUERY}"


# --- the pool and its quantiles --------------------------------------------------------------
def _chunk_of(rank: int, n: int, k: int) -> int:
    """Which quantile of ``n`` ranks holds ``rank``, as the reference code's ``DataPool`` cuts
    them: each of the ``k`` quantiles gets ``n // k`` ranks and the ``n % k`` left over go to the
    last (worst) one; a pool smaller than ``k`` is all in the worst."""
    size = n // k
    return k - 1 if size == 0 else min(rank // size, k - 1)


def assign_bins(rewards: list[float], k: int, *, ties: str = "split") -> list[int]:
    """The reward token (0 = best) of each sample, as Quark's reference code does it: sort by
    reward, highest first, give each of the ``k`` quantiles ``n // k`` ranks and the remainder to
    the worst token. Samples with equal rewards keep pool order (oldest first), so a tie can
    straddle two quantiles; when the best reward is rarer than 1/k of the pool, token 0 holds all
    of it plus the next best samples.

    ``ties="together"`` gives equal rewards one token, the quantile of their middle rank: with a
    binary reward and K = 2, token 0 then marks exactly the rewarded samples while they are fewer
    than half the pool (with ``"split"`` it marks them plus unrewarded ones)."""
    if ties not in TIES:
        raise ValueError(f"ties must be one of {', '.join(TIES)}, not {ties!r}")
    n = len(rewards)
    order = sorted(range(n), key=lambda i: -rewards[i])  # stable: ties keep pool order
    bins = [0] * n
    start = 0
    while start < n:
        end = start
        if ties == "together":
            while end + 1 < n and rewards[order[end + 1]] == rewards[order[start]]:
                end += 1
        for rank in range(start, end + 1):
            bins[order[rank]] = _chunk_of((start + end) // 2 if ties == "together" else rank, n, k)
        start = end + 1
    return bins


@dataclass
class PoolEntry:
    item: int
    response: str
    reward: float
    step: int


@dataclass
class DataPool:
    """Every sample so far; it only grows. ``bins()`` recomputes the quantiles on the whole pool."""

    entries: list[PoolEntry] = field(default_factory=list)

    def add(self, entries: list[PoolEntry]) -> None:
        self.entries.extend(entries)

    def bins(self, k: int, *, ties: str = "split") -> list[int]:
        return assign_bins([e.reward for e in self.entries], k, ties=ties)

    def as_json(self) -> list[dict]:
        return [asdict(e) for e in self.entries]

    @classmethod
    def from_json(cls, data: list[dict]) -> DataPool:
        return cls([PoolEntry(**row) for row in data])

    def __len__(self) -> int:
        return len(self.entries)


# --- the loss ----------------------------------------------------------------------------------
def token_terms(logits, ref_logits, labels):
    """Per response token: negative log-likelihood of the label, KL(policy || reference) over the
    vocabulary, and the policy's entropy. ``labels`` -100 marks padding (terms there are junk;
    the caller masks them)."""
    import torch.nn.functional as F

    logp = F.log_softmax(logits.float(), dim=-1)
    ref_logp = F.log_softmax(ref_logits.float(), dim=-1)
    nll = -logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    p = logp.exp()
    kl = (p * (logp - ref_logp)).sum(-1)
    entropy = -(p * logp).sum(-1)
    return nll, kl, entropy


def quark_loss(logits, ref_logits, labels, *, kl_coef: float, entropy_coef: float):
    """(loss, stats): the token-level mean of NLL + kl_coef * KL - entropy_coef * entropy."""
    nll, kl, entropy = token_terms(logits, ref_logits, labels)
    mask = (labels != -100).float()
    count = mask.sum().clamp(min=1.0)

    def mean(values):
        return (values * mask).sum() / count

    loss = mean(nll + kl_coef * kl - entropy_coef * entropy)
    stats = {"loss": float(loss.detach()), "nll": float(mean(nll).detach()), "kl": float(mean(kl).detach()),
             "entropy": float(mean(entropy).detach())}
    return loss, stats


def response_logits(kind: str, model, tokenizer, prompts: list[str], responses: list[str], *,
                    max_input_length: int, max_response_length: int):
    """(logits [B, R, V], labels [B, R]) of ``model`` scoring each response after its prompt:
    the T5 decoder's logits for the target, or a causal model's logits at the positions that
    predict the response tokens (prompt and response concatenated, right padded)."""
    import torch

    device = next(model.parameters()).device
    if kind == "seq2seq":
        enc = tokenizer(prompts, return_tensors="pt", padding=True, truncation=True, max_length=max_input_length)
        tgt = tokenizer(responses, return_tensors="pt", padding=True, truncation=True,
                        max_length=max_response_length)
        labels = tgt["input_ids"].masked_fill(tgt["attention_mask"] == 0, -100).to(device)
        out = model(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device),
                    decoder_input_ids=model.prepare_decoder_input_ids_from_labels(labels))
        return out.logits, labels
    side = tokenizer.truncation_side
    tokenizer.truncation_side = "left"
    try:
        prompt_ids = tokenizer(prompts, truncation=True, max_length=max_input_length)["input_ids"]
    finally:
        tokenizer.truncation_side = side
    response_ids = [ids[:max_response_length] or [tokenizer.eos_token_id]
                    for ids in tokenizer(responses, add_special_tokens=False)["input_ids"]]
    rows = [p + r for p, r in zip(prompt_ids, response_ids, strict=True)]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device)
    attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
    logits = model(input_ids=input_ids, attention_mask=attention).logits
    longest = max(len(r) for r in response_ids)
    positions = torch.zeros(len(rows), longest, dtype=torch.long, device=device)
    labels = torch.full((len(rows), longest), -100, dtype=torch.long, device=device)
    for row, (p, r) in enumerate(zip(prompt_ids, response_ids, strict=True)):
        positions[row, :len(r)] = torch.arange(len(p) - 1, len(p) - 1 + len(r), device=device)
        labels[row, :len(r)] = torch.tensor(r, device=device)
    gathered = logits.gather(1, positions.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    return gathered, labels


# --- the trainer -------------------------------------------------------------------------------
PromptFn = Callable[[int, "str | None"], str]
ScoreFn = Callable[[list[int], list[str]], "list[float | None]"]


class QuarkTrainer:
    """A policy, its frozen reference, the pool and the optimizer; one step at a time.

    ``prompt(item_id, token)`` renders an item's prompt with a reward token (``None``: the plain
    prompt the reference sees); ``score(item_ids, responses)`` returns one reward per response
    (``None``: no reward, the sample stays out of the pool);
    ``stop`` cuts causal samples (and is appended to them for training, so the policy keeps
    stopping)."""

    def __init__(self, *, kind: str, policy: LoadedModel, reference: LoadedModel, reward_ids: list[int],
                 settings: QuarkSettings, item_ids: list[int], prompt: PromptFn, score: ScoreFn,
                 stop: list[str] | None = None, model_name: str = "policy"):
        import torch

        if kind not in {"seq2seq", "causal"}:
            raise ValueError(f"Quark trains seq2seq or causal models, not {kind!r}")
        self.kind = kind
        self.policy = policy
        self.reference = reference
        self.reward_ids = reward_ids
        self.settings = settings
        self.item_ids = list(item_ids)
        self.prompt = prompt
        self.score = score
        self.stop = list(stop or [])
        self.step = 0
        self.sampled_at: int | None = None
        self.pool = DataPool()
        self._bins: list[int] | None = None
        backend_class = Seq2SeqBackend if kind == "seq2seq" else CausalBackend
        self.policy_backend = backend_class(model_name, loaded=policy)
        self.reference_backend = backend_class(model_name, loaded=reference)
        reference.model.eval()
        for parameter in reference.model.parameters():
            parameter.requires_grad_(False)
        self.optimizer = torch.optim.Adam(policy.model.parameters(), lr=settings.lr, eps=settings.adam_eps)
        warmup, total = settings.warmup_steps, settings.steps

        def factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / (warmup + 1)
            return max(0.0, (total - step) / max(1, total - warmup))

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, factor)

    # sampling ----------------------------------------------------------------------------------
    def sampling_decoding(self) -> Decoding:
        s = self.settings
        return Decoding(do_sample=True, top_p=s.top_p, temperature=s.temperature, max_new_tokens=s.max_new_tokens,
                        num_return_sequences=s.samples_per_item, stop=self.stop, seed=s.seed * 1_000_003 + self.step)

    def generate(self, item_ids: list[int], token: str | None, decoding: Decoding, *,
                 reference: bool = False) -> list[list[str]]:
        """Outputs of the policy (or the reference) for the items' prompts with ``token``."""
        backend = self.reference_backend if reference else self.policy_backend
        backend.loaded.model.eval()
        return backend.generate([self.prompt(i, token) for i in item_ids], decoding)

    def sample_round(self) -> dict:
        """Sample every item (the reference at step 0, then the policy with the best token), score
        the samples and add them to the pool. Returns the round's mean reward."""
        first = self.sampled_at is None
        token = None if first else reward_token(0)
        outputs = self.generate(self.item_ids, token, self.sampling_decoding(), reference=first)
        items = [i for i, group in zip(self.item_ids, outputs, strict=True) for _ in group]
        responses = [text for group in outputs for text in group]
        rewards = list(self.score(items, responses))
        kept = [PoolEntry(item=i, response=t, reward=float(r), step=self.step)
                for i, t, r in zip(items, responses, rewards, strict=True) if r is not None]
        self.pool.add(kept)
        self.sampled_at = self.step
        self._bins = None
        mean = sum(e.reward for e in kept) / len(kept) if kept else None
        return {"reward": mean, "samples": len(responses), "unrewarded": len(responses) - len(kept),
                "pool": len(self.pool)}

    def due_for_sampling(self) -> bool:
        return self.sampled_at is None or (self.step % self.settings.sample_interval == 0
                                           and self.sampled_at != self.step)

    # training ----------------------------------------------------------------------------------
    def bins(self) -> list[int]:
        if self._bins is None:
            self._bins = self.pool.bins(self.settings.n_reward_tokens, ties=self.settings.ties)
        return self._bins

    def _target(self, response: str) -> str:
        if self.kind == "causal" and self.stop:
            return response + self.stop[0]
        return response

    def batch_loss(self, entries: list[PoolEntry], bins: list[int]):
        """The Quark loss of a batch: the policy reads each prompt after its sample's reward token,
        the reference reads the plain prompt."""
        import torch

        s = self.settings
        responses = [self._target(e.response) for e in entries]
        policy_prompts = [self.prompt(e.item, reward_token(b)) for e, b in zip(entries, bins, strict=True)]
        ref_prompts = [self.prompt(e.item, None) for e in entries]
        kwargs = {"max_input_length": s.max_input_length, "max_response_length": s.max_new_tokens + 8}
        logits, labels = response_logits(self.kind, self.policy.model, self.policy.tokenizer, policy_prompts,
                                         responses, **kwargs)
        with torch.no_grad():
            ref_logits, _ = response_logits(self.kind, self.reference.model, self.reference.tokenizer, ref_prompts,
                                            responses, **kwargs)
        return quark_loss(logits, ref_logits, labels, kl_coef=s.kl_coef, entropy_coef=s.entropy_coef)

    def train_step(self) -> dict:
        """One optimizer step on a batch drawn (seeded by the step) from the pool."""
        import torch

        s = self.settings
        if not self.pool.entries:
            raise ValueError("the pool is empty: no sample has a reward yet")
        bins = self.bins()
        rng = random.Random(s.seed * 1_000_003 + self.step)
        chosen = rng.sample(range(len(self.pool)), min(s.batch_size, len(self.pool)))
        torch.manual_seed(s.seed * 1_000_003 + self.step)  # dropout
        self.policy.model.train()
        loss, stats = self.batch_loss([self.pool.entries[i] for i in chosen], [bins[i] for i in chosen])
        loss.backward()
        if s.clip_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.policy.model.parameters(), s.clip_grad_norm)
        stats["lr"] = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return stats

    def advance(self) -> dict:
        """Sample when due, then one training step: what a run repeats ``settings.steps`` times.
        Returns the step's stats (with ``sample_reward`` on steps that sampled)."""
        sampled = self.sample_round() if self.due_for_sampling() else None
        stats = self.train_step()
        if sampled is not None:
            stats.update({"sample_reward": sampled["reward"], "pool": sampled["pool"]})
        return stats

    # checkpoints -------------------------------------------------------------------------------
    def save(self, folder: Path, *, extra: dict | None = None) -> None:
        """Policy weights and tokenizer, optimizer and schedule, the pool and the step (plus the
        caller's ``extra``), written into ``folder`` (the caller makes the swap atomic)."""
        import torch

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.policy.model.save_pretrained(folder)
        self.policy.tokenizer.save_pretrained(folder)
        torch.save({"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()},
                   folder / OPTIMIZER_FILE)
        state = {"step": self.step, "sampled_at": self.sampled_at, "settings": self.settings.as_json(), "reward_ids": self.reward_ids,
                 "pool": self.pool.as_json(), "extra": extra or {}}
        (folder / STATE_FILE).write_text(json.dumps(state))

    def restore(self, folder: Path) -> dict:
        """Load the optimizer, schedule, pool and step saved with the policy in ``folder``;
        returns the caller's ``extra``."""
        import torch

        folder = Path(folder)
        state = checkpoint_state(folder)
        saved = torch.load(folder / OPTIMIZER_FILE, map_location=self.policy.device, weights_only=True)
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        self.step = int(state["step"])
        self.sampled_at = state.get("sampled_at")
        self.pool = DataPool.from_json(state["pool"])
        self._bins = None
        return state.get("extra") or {}


def checkpoint_state(folder: Path) -> dict | None:
    """What :meth:`QuarkTrainer.save` wrote into ``folder`` beside the weights (the step, the
    settings, the pool and the caller's ``extra``); None when ``folder`` holds no checkpoint."""
    path = Path(folder) / STATE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def load_models(kind: str, base: str, *, settings: QuarkSettings,
                checkpoint: Path | None = None) -> tuple[LoadedModel, LoadedModel, list[int]]:
    """(policy, reference, reward token ids). The reference is ``base`` with the reward tokens
    added (seeded: the same rows every time) and never trained; the policy is the checkpoint when
    one is given, else a copy of the reference."""
    reference = load_trainable_model(kind, base)
    reward_ids = add_reward_tokens(reference.model, reference.tokenizer, settings.n_reward_tokens,
                                   seed=settings.seed)
    if checkpoint is not None:
        policy = load_trainable_model(kind, str(checkpoint))
        saved_ids = [policy.tokenizer.convert_tokens_to_ids(reward_token(i)) for i in range(settings.n_reward_tokens)]
        if saved_ids != reward_ids:
            raise ValueError(f"checkpoint {checkpoint} has reward token ids {saved_ids}, the base gives {reward_ids}")
    else:
        policy = LoadedModel(model=copy.deepcopy(reference.model), tokenizer=copy.deepcopy(reference.tokenizer),
                             device=reference.device, dtype=reference.dtype)
    return policy, reference, reward_ids

