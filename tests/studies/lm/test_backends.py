"""Transformers backends on tiny locally built models, loaded by path like real models."""
import pytest

from studies.lm import backends, parsing, templates
from studies.lm.backends import Decoding
from tests import tiny_models as tiny

pytestmark = pytest.mark.lm
pytest.importorskip("torch")

GREEDY = Decoding(max_new_tokens=24)


@pytest.fixture(scope="module")
def dev_prompt_items(strategyqa_dev_rows):
    return tiny.strategyqa_prompt_items(strategyqa_dev_rows[:16])


def test_seq2seq_batched_output_equals_one_by_one(lm_models, dev_prompt_items):
    b = backends.Seq2SeqBackend(str(lm_models["t5"]))
    prompts = [templates.t5_explain_input(p) for p in dev_prompt_items]
    batched = b.generate(prompts, GREEDY)
    single = [b.generate([p], GREEDY)[0] for p in prompts]
    assert batched == single
    assert all(parsing.parse_t5_rationale(out[0], p) for out, p in zip(batched, dev_prompt_items, strict=True))


def test_causal_batched_output_equals_one_by_one_with_left_padding(lm_models, dev_prompt_items, strategyqa_train_rows):
    b = backends.CausalBackend(str(lm_models["gpt2"]))
    assert b.loaded.tokenizer.padding_side == "left"
    demos = templates.draw_demonstrations(tiny.strategyqa_prompt_items(strategyqa_train_rows), seed=0)
    # Prompts of different lengths, so the batch really is padded.
    prompts = [templates.causal_prompt(p, demos[: 1 + i % 3]) for i, p in enumerate(dev_prompt_items)]
    decoding = Decoding(max_new_tokens=24, stop=["###"])
    batched = b.generate(prompts, decoding)
    single = [b.generate([p], decoding)[0] for p in prompts]
    assert batched == single
    assert all("###" not in out[0] for out in batched)


def test_sampling_returns_n_sequences_per_prompt_reproducibly(lm_models):
    b = backends.Seq2SeqBackend(str(lm_models["t5"]))
    decoding = Decoding(do_sample=True, temperature=0.7, num_return_sequences=5, max_new_tokens=12, seed=4)
    first = b.generate(["explain strategyqa question: Is ice cold? choice: yes choice: no <extra_id_0> because <extra_id_1>"] * 2, decoding)
    assert [len(group) for group in first] == [5, 5]
    assert first == b.generate(["explain strategyqa question: Is ice cold? choice: yes choice: no <extra_id_0> because <extra_id_1>"] * 2, decoding)


def test_model_loads_once_per_process(lm_models):
    a = backends.Seq2SeqBackend(str(lm_models["t5"]))
    b = backends.Seq2SeqBackend(str(lm_models["t5"]))
    assert a.loaded is b.loaded


def test_missing_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(backends.BackendError, match="cannot load seq2seq model"):
        backends.Seq2SeqBackend(str(tmp_path / "nope"))


def test_device_is_cuda_with_bf16_when_a_gpu_is_present(monkeypatch, settings):
    import torch

    settings.RL_LM_DEVICE = ""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert backends.select_device() == "cuda"
    assert backends.select_dtype("cuda") is torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert backends.select_device() == "cpu"
    assert backends.select_dtype("cpu") is torch.float32
    settings.RL_LM_DEVICE = "cuda:1"
    assert backends.select_device() == "cuda:1"


def test_a_gguf_file_loads_from_its_folder_and_a_missing_one_is_a_clear_error(tmp_path):
    model = tmp_path / "Model.Q4_1.GGUF"
    model.write_bytes(b"GGUF")
    assert backends.gguf_location(str(model)) == (str(tmp_path), {"gguf_file": "Model.Q4_1.GGUF"})
    assert backends.gguf_location("t5-small") == ("t5-small", {})
    for kind in ("causal", "seq2seq", "classifier"):  # every source that names a model path
        with pytest.raises(backends.BackendError, match="absent.gguf' does not exist"):
            backends.load_transformers_model(kind, str(tmp_path / "absent.gguf"))
