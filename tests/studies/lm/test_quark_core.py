"""The Quark trainer's torch parts on tiny local models: reward tokens, quantile bins, the loss
and its KL term, and training moving the loss."""
import copy

import pytest

from studies.lm import quark, templates
from studies.lm.rewards import MarkerReward, RewardSample, parse_reward_spec

pytestmark = pytest.mark.lm
torch = pytest.importorskip("torch")


def test_bins_give_each_quantile_n_over_k_and_the_remainder_to_the_worst_as_the_reference_code():
    # GXimingLu/Quark's DataPool: sorted best first, n // k samples per token, the n % k left over
    # take the worst token. 11 samples into 5: 2, 2, 2, 2 and 3.
    rewards = [0.5, 0.9, 0.1, 0.7, 0.3, 1.0, 0.0, 0.8, 0.2, 0.6, 0.4]
    bins = quark.assign_bins(rewards, 5)
    by_rank = [bins[i] for i in sorted(range(11), key=lambda i: -rewards[i])]
    assert by_rank == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
    # 7 into 3: 2, 2, 3. Fewer samples than tokens: n // k is 0, all in the worst token (as the reference).
    assert [quark.assign_bins(list(range(7)), 3)[i] for i in (6, 5, 4, 3, 2, 1, 0)] == [0, 0, 1, 1, 2, 2, 2]
    assert quark.assign_bins([0.2, 0.9, 0.5], 5) == [4, 4, 4]
    # Ties keep pool order (oldest first) and may straddle a cut, as in Quark.
    assert quark.assign_bins([1, 0, 0, 1, 0, 0], 3) == [0, 1, 1, 0, 2, 2]
    assert quark.assign_bins([], 5) == []


def test_tied_rewards_can_share_one_token():
    # A binary reward rarer than 1/K: with "split" token 0 also marks unrewarded samples; with
    # "together" equal rewards take the quantile of their middle rank, so token 0 marks exactly the
    # rewarded ones.
    rewards = [1, 0, 0, 1, 0, 0, 0, 0]
    assert quark.assign_bins(rewards, 2) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert quark.assign_bins(rewards, 2, ties="together") == [0, 1, 1, 0, 1, 1, 1, 1]
    assert quark.assign_bins([1, 1, 1, 1], 2, ties="together") == [0, 0, 0, 0]  # middle rank 1 of 4: first half
    assert quark.assign_bins([3, 2, 2, 2, 1, 0], 3) == [0, 0, 1, 1, 2, 2]
    assert quark.assign_bins([3, 2, 2, 2, 1, 0], 3, ties="together") == [0, 1, 1, 1, 2, 2]
    assert quark.assign_bins(list(range(7)), 3, ties="together") == quark.assign_bins(list(range(7)), 3)
    # 7 into 3 (2, 2, 3): the middle rank of ranks 3-6 is 4, in the second quantile.
    assert quark.assign_bins([5, 4, 4, 4, 4, 0, 0], 3, ties="together") == [0, 1, 1, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="ties must be one of split, together"):
        quark.assign_bins(rewards, 2, ties="sometimes")
    with pytest.raises(ValueError, match="ties must be one of"):
        quark.QuarkSettings.from_json({"ties": "sometimes"})
    assert quark.QuarkSettings.from_json({"ties": "together"}).ties == "together"


def test_pool_bins_follow_the_growing_pool():
    pool = quark.DataPool()
    pool.add([quark.PoolEntry(item=1, response="a", reward=0.0, step=0),
              quark.PoolEntry(item=2, response="b", reward=1.0, step=0)])
    assert pool.bins(2) == [1, 0]
    pool.add([quark.PoolEntry(item=3, response="c", reward=2.0, step=5)])
    assert pool.bins(2) == [1, 1, 0]  # 3 into 2 quantiles: one each, the one left over in the worst
    assert quark.DataPool.from_json(pool.as_json()).entries == pool.entries


@pytest.mark.parametrize("kind", ["t5", "gpt2"])
def test_each_reward_token_is_one_new_token_id_with_embeddings_from_the_existing_statistics(lm_models, kind):
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    loader = AutoModelForSeq2SeqLM if kind == "t5" else AutoModelForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(lm_models[kind])
    model = loader.from_pretrained(lm_models[kind])
    vocab_before = len(tokenizer)
    existing = model.get_input_embeddings().weight[:vocab_before].detach().clone()

    ids = quark.add_reward_tokens(model, tokenizer, 5, seed=3)

    assert len(set(ids)) == 5 and min(ids) >= vocab_before
    for index, token_id in enumerate(ids):
        assert tokenizer(quark.reward_token(index), add_special_tokens=False)["input_ids"] == [token_id]
        prompt = tokenizer(f"{quark.reward_token(index)} explain strategyqa question: x", add_special_tokens=False)
        assert prompt["input_ids"][0] == token_id and token_id not in prompt["input_ids"][1:]
    weight = model.get_input_embeddings().weight.detach()
    assert torch.equal(weight[:vocab_before], existing)  # the old rows are untouched
    new = weight[ids]
    # Drawn around the existing rows' per-dimension mean with their spread: not zeros, not copies.
    assert (new - existing.mean(0)).abs().mean() < 3 * existing.std(0).mean()
    assert not any(torch.equal(row, other) for row in new for other in existing[:50])
    assert len({tuple(row.tolist()) for row in new}) == 5
    assert set(ids) <= set(model.generation_config.suppress_tokens)
    # A checkpoint that already has them keeps its trained rows.
    before = weight[ids].clone()
    assert quark.add_reward_tokens(model, tokenizer, 5, seed=99) == ids
    assert torch.equal(model.get_input_embeddings().weight.detach()[ids], before)


def _toy_trainer(lm_models, kind="t5", **overrides):
    """A trainer over a few StrategyQA-like prompts with the marker reward."""
    settings = quark.QuarkSettings.from_json({"steps": 40, "lr": 3e-3, "warmup_steps": 2, "batch_size": 8,
                                              "sample_interval": 20, "samples_per_item": 2, "max_new_tokens": 16,
                                              **overrides})
    policy, reference, ids = quark.load_models("seq2seq" if kind == "t5" else "causal", str(lm_models[kind]),
                                               settings=settings)
    items = {i: templates.PromptItem(question=f"Is thing number {i} heavy?", choices=(("yes", "yes"), ("no", "no")),
                                     dataset="strategyqa") for i in range(6)}

    def prompt(item_id, token):
        text = templates.t5_explain_input(items[item_id])
        return f"{token} {text}" if token else text

    marker = MarkerReward("the")

    def score(item_ids, responses):
        return marker.score([RewardSample(item=i, rationale=r) for i, r in zip(item_ids, responses, strict=True)])

    return quark.QuarkTrainer(kind="seq2seq" if kind == "t5" else "causal", policy=policy, reference=reference,
                              reward_ids=ids, settings=settings, item_ids=list(items), prompt=prompt, score=score)


def test_kl_is_zero_when_policy_equals_reference(lm_models):
    trainer = _toy_trainer(lm_models)
    trainer.sample_round()
    entries = trainer.pool.entries[:6]
    prompts = [trainer.prompt(e.item, None) for e in entries]
    responses = [e.response for e in entries]
    args = {"max_input_length": 512, "max_response_length": 24}
    with torch.no_grad():
        logits, labels = quark.response_logits("seq2seq", trainer.policy.model, trainer.policy.tokenizer, prompts,
                                               responses, **args)
        ref_logits, _ = quark.response_logits("seq2seq", trainer.reference.model, trainer.reference.tokenizer,
                                              prompts, responses, **args)
    _, stats = quark.quark_loss(logits, ref_logits, labels, kl_coef=0.05, entropy_coef=0.06)
    assert abs(stats["kl"]) < 1e-6 and stats["entropy"] > 0
    # ... and not once they differ: the token-level KL sees a changed policy.
    changed = copy.deepcopy(trainer.policy.model)
    with torch.no_grad():
        for parameter in changed.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
        other, _ = quark.response_logits("seq2seq", changed, trainer.policy.tokenizer, prompts, responses, **args)
    _, stats = quark.quark_loss(other, ref_logits, labels, kl_coef=0.05, entropy_coef=0.06)
    assert stats["kl"] > 1e-3


def test_loss_is_nll_plus_kl_minus_entropy_over_response_tokens():
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]]])
    ref = torch.tensor([[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]])
    labels = torch.tensor([[0, -100]])  # the second position is padding
    loss, stats = quark.quark_loss(logits, ref, labels, kl_coef=0.5, entropy_coef=0.25)
    logp = torch.log_softmax(logits[0, 0], -1)
    p = logp.exp()
    kl = float((p * (logp - torch.log_softmax(ref[0, 0], -1))).sum())
    entropy = float(-(p * logp).sum())
    assert stats["nll"] == pytest.approx(float(-logp[0]), abs=1e-6)
    assert stats["kl"] == pytest.approx(kl, abs=1e-6) and stats["entropy"] == pytest.approx(entropy, abs=1e-6)
    assert float(loss) == pytest.approx(-float(logp[0]) + 0.5 * kl - 0.25 * entropy, abs=1e-6)


@pytest.mark.parametrize("kind", ["t5", "gpt2"])
def test_loss_falls_over_a_few_dozen_steps(lm_models, kind):
    trainer = _toy_trainer(lm_models, kind, steps=30, sample_interval=100)
    losses = [trainer.advance()["loss"] for _ in range(30)]
    assert trainer.step == 30 and len(trainer.pool) == 12  # sampled once, at step 0
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.8 * first, (first, last)


def test_sampling_rounds_prepend_the_best_token_and_grow_the_pool(lm_models):
    trainer = _toy_trainer(lm_models, steps=6, sample_interval=3)
    seen = []
    prompt = trainer.prompt
    trainer.prompt = lambda item_id, token: seen.append(token) or prompt(item_id, token)
    trainer.sample_round()  # the reference, without a token
    assert set(seen) == {None} and len(trainer.pool) == 12
    seen.clear()
    for _ in range(4):
        trainer.advance()
    # Step 3 sampled with token 0 (6 items x 2 samples); training prompts carry each sample's token.
    assert len(trainer.pool) == 24 and {e.step for e in trainer.pool.entries} == {0, 3}
    assert quark.reward_token(0) in seen and None in seen


def test_settings_are_checked():
    with pytest.raises(ValueError, match="kl_coef must not be negative"):
        quark.QuarkSettings.from_json({"kl_coef": -1})
    with pytest.raises(ValueError, match="unknown Quark setting"):
        quark.QuarkSettings.from_json({"klcoef": 1})
    with pytest.raises(ValueError, match="steps must be int"):
        quark.QuarkSettings.from_json({"steps": "many"})
    defaults = quark.QuarkSettings()
    assert (defaults.n_reward_tokens, defaults.kl_coef, defaults.entropy_coef, defaults.lr) == (5, 0.05, 0.06, 1e-5)
    with pytest.raises(ValueError, match="adam_eps must be positive"):
        quark.QuarkSettings.from_json({"adam_eps": 0})
    # the evaluation source a run registers decodes with its max_new_tokens: held to the operator's maximum
    with pytest.raises(ValueError, match=r"max_new_tokens 1025 is over the operator's maximum of 1024"):
        quark.QuarkSettings.from_json({"max_new_tokens": 1025})
    assert quark.QuarkSettings.from_json({"max_new_tokens": 1024}).max_new_tokens == 1024


def test_the_reference_preset_has_the_reference_codes_values_and_options_override_it(lm_models):
    ours = quark.QuarkSettings.from_json({})
    assert ours.preset == "default"
    assert (ours.sample_interval, ours.warmup_steps, ours.batch_size, ours.top_p, ours.clip_grad_norm,
            ours.adam_eps) == (100, 100, 8, 0.9, 1.0, 1e-8)
    reference = quark.QuarkSettings.from_json({"preset": "reference"})
    assert (reference.sample_interval, reference.warmup_steps, reference.batch_size, reference.top_p,
            reference.clip_grad_norm, reference.adam_eps) == (500, 500, 128, 1.0, 0.0, 1e-5)
    assert (reference.n_reward_tokens, reference.kl_coef, reference.entropy_coef, reference.lr,
            reference.temperature) == (5, 0.05, 0.06, 1e-5, 1.0)  # the same in both
    given = quark.QuarkSettings.from_json({"preset": "reference", "batch_size": 16, "steps": 7})
    assert (given.batch_size, given.steps, given.sample_interval, given.preset) == (16, 7, 500, "reference")
    assert quark.QuarkSettings.from_json(given.as_json()) == given  # a stored run restores as it ran
    with pytest.raises(ValueError, match="preset must be one of default, reference, not 'paper'"):
        quark.QuarkSettings.from_json({"preset": "paper"})
    # Adam's epsilon reaches the optimizer.
    trainer = _toy_trainer(lm_models, preset="reference", batch_size=8)
    assert trainer.optimizer.param_groups[0]["eps"] == 1e-5 and trainer.settings.clip_grad_norm == 0.0


def test_marker_reward_matches_whole_words_and_refuses_bad_specs():
    marker = MarkerReward("Sun")
    samples = [RewardSample(1, "The sun is hot."), RewardSample(2, "Sunday comes."), RewardSample(3, None),
               RewardSample(4, "SUN!")]
    assert marker.score(samples) == [1.0, 0.0, 0.0, 1.0]
    assert parse_reward_spec("marker:sun") == ("marker", "sun") and parse_reward_spec("genu") == ("genu", "")
    for bad in ("marker:", "marker:two words", "bleu", ""):
        with pytest.raises(ValueError):
            parse_reward_spec(bad)
