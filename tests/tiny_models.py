"""Tiny T5 and GPT-2 models built from a config with a locally trained tokenizer: nothing is
downloaded. Tests and benchmarks train them briefly on a few items in the FEB
formats, save them with ``save_pretrained`` and then load them by path through the same backend
code a real model uses.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from studies.lm import templates
from studies.lm.training import train_causal, train_seq2seq

N_SENTINELS = 10
SPECIALS = ["<pad>", "</s>", "<unk>"]


def unigram_vocab(texts: Iterable[str], specials: list[str], vocab_size: int) -> list[tuple[str, float]]:
    """A Unigram vocabulary counted from ``texts``, the same on every run: the special tokens, every
    character seen (alone and after the word mark), then the pieces (substrings of the marked words,
    up to 8 characters) that save the most characters, frequency x (length - 1), ties in alphabetical
    order; each piece scored with its log frequency.

    ``tokenizers``' own UnigramTrainer gives a different vocabulary from run to run (its ties follow
    Rust's randomly seeded hash maps), and so a different tiny model: a test that depends on what a
    tiny model writes then passes or fails by chance. Viterbi segmentation over these pieces keeps
    the code path of a trained Unigram (T5's SentencePiece) model."""
    import math
    from collections import Counter

    words, chars = Counter(), Counter()
    for text in texts:
        for word in filter(None, text.split(" ")):  # Metaspace splits on spaces only: newlines are pieces
            words[MARK + word] += 1
            chars.update(word)
    pieces = Counter({MARK + c: n for c, n in chars.items()})
    pieces.update(chars)
    pieces[MARK] += sum(words.values())
    candidates = Counter()
    for word, n in words.items():
        for start in range(len(word)):
            for end in range(start + 2, min(len(word), start + 8) + 1):
                candidates[word[start:end]] += n
    budget = max(0, vocab_size - len(specials) - len(pieces))
    ranked = sorted((c for c in candidates if c not in pieces),
                    key=lambda c: (-candidates[c] * (len(c) - 1), c))[:budget]
    pieces.update({c: candidates[c] for c in ranked})
    total = sum(pieces.values())
    return [(s, 0.0) for s in specials] + [
        (piece, math.log(n / total)) for piece, n in sorted(pieces.items(), key=lambda kv: (-kv[1], kv[0]))]


MARK = "\u2581"  # SentencePiece's word mark, what the Metaspace pre-tokenizer puts before each word


def build_tokenizer(texts: Iterable[str], *, vocab_size: int = 800, sentinels: bool = True,
                    model_max_length: int = 512):
    """A Unigram tokenizer with Metaspace pre-tokenization: ``<pad>``=0, ``</s>``=1, ``<unk>``=2,
    then ``<extra_id_0..9>`` (T5 sentinels) when asked, wrapped as ``PreTrainedTokenizerFast``.
    Its vocabulary comes from :func:`unigram_vocab`, so the same texts give the same tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    extra = [f"<extra_id_{i}>" for i in range(N_SENTINELS)] if sentinels else []
    tokenizer = Tokenizer(models.Unigram(unigram_vocab(texts, SPECIALS + extra, vocab_size), unk_id=2))
    tokenizer.add_special_tokens(SPECIALS + extra)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    if sentinels:  # T5 appends </s> to every sequence
        tokenizer.post_processor = processors.TemplateProcessing(
            single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
        additional_special_tokens=extra or None, model_max_length=model_max_length,
    )
    return fast


def strategyqa_prompt_items(rows: list[dict], dataset: str = "strategyqa") -> list[templates.PromptItem]:
    from studies.models import YES_NO_CHOICES

    choices = tuple((c["label"], c["text"]) for c in YES_NO_CHOICES)
    return [
        templates.PromptItem(question=row["question"], choices=choices, dataset=dataset,
                             answer="yes" if row["answer"] else "no", rationale=row.get("rationale", ""),
                             facts=" ".join(row.get("facts", [])), key=row.get("qid"))
        for row in rows
    ]


def build_tiny_t5(folder: Path, items: list[templates.PromptItem], *, steps: int = 50, seed: int = 0,
                  lr: float = 1e-2, batch_size: int = 8, extra_pairs: list[tuple[str, str]] | None = None,
                  max_source_length: int = 256) -> Path:
    """A 2+2 layer T5 (d_model 32) trained on the FEB explain format (plus ``extra_pairs``)."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    pairs = [(templates.t5_explain_input(i), templates.t5_explain_target(i)) for i in items]
    pairs += list(extra_pairs or [])
    tokenizer = build_tokenizer([s for pair in pairs for s in pair])
    tokenizer.truncation_side = "left"  # long few-shot inputs keep the query, as in generation
    torch.manual_seed(seed)
    config = T5Config(
        vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, dropout_rate=0.0,
    )
    model = T5ForConditionalGeneration(config)
    train_seq2seq(model, tokenizer, pairs, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                  max_source_length=max_source_length)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_gpt2(folder: Path, items: list[templates.PromptItem], *, steps: int = 50, seed: int = 0,
                    lr: float = 1e-2, batch_size: int = 8, n_positions: int = 1024) -> Path:
    """A 2-layer GPT-2 (n_embd 32) trained on single FEB few-shot blocks (answer, then Reason:)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    texts = [templates.CAUSAL_HEADER] + [templates.causal_training_text(i) for i in items]
    tokenizer = build_tokenizer(texts, sentinels=False, model_max_length=n_positions)
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=n_positions,
        bos_token_id=1, eos_token_id=1, pad_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )
    model = GPT2LMHeadModel(config)
    train_causal(model, tokenizer, [t for t in texts[1:]], steps=steps, batch_size=batch_size, lr=lr, seed=seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_classifier(folder: Path, items: list[templates.PromptItem], *, steps: int = 40, seed: int = 0,
                          lr: float = 1e-2, batch_size: int = 8) -> Path:
    """A 2-layer BERT sequence classifier (hidden 32) over the questions of yes/no items, its
    classes named ``no`` and ``yes`` so they match the choice labels."""
    import random

    import torch
    from transformers import BertConfig, BertForSequenceClassification

    texts = [i.question for i in items]
    tokenizer = build_tokenizer(texts, sentinels=False, vocab_size=400)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=256, pad_token_id=0, num_labels=2,
                        id2label={0: "no", 1: "yes"}, label2id={"no": 0, "yes": 1})
    model = BertForSequenceClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    labels = [1 if i.answer == "yes" else 0 for i in items]
    rng = random.Random(seed)
    model.train()
    for _ in range(steps):
        chosen = rng.sample(range(len(items)), min(batch_size, len(items)))
        enc = tokenizer([texts[k] for k in chosen], return_tensors="pt", padding=True, truncation=True,
                        max_length=128)
        loss = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                     labels=torch.tensor([labels[k] for k in chosen])).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_gguf(folder: Path, texts: list[str], *, seed: int = 0) -> Path:
    """A 2-layer Llama (hidden 32) written as a GGUF file, the format of the README's real model
    (SmolLM2-135M-Instruct, Q4_1): a byte-level BPE tokenizer (GGUF's ``gpt2`` tokenizer) learnt
    from ``texts``, random weights, the linear layers quantized to Q8_0 and the rest float32.
    transformers loads it through its GGUF quantizer, as it loads the real file. Returns the
    ``.gguf`` path."""
    import gguf
    import numpy as np
    from gguf.quants import quantize
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(sorted(set(texts)), trainer)
    spec = json.loads(tokenizer.to_str())["model"]
    tokens = [token for token, _ in sorted(spec["vocab"].items(), key=lambda kv: kv[1])]
    merges = [" ".join(m) if isinstance(m, list) else m for m in spec["merges"]]
    vocab, dim, layers, heads, kv_heads, ffn = len(tokens), 32, 2, 4, 2, 64
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tiny-llama.Q8_0.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(1024)
    writer.add_embedding_length(dim)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(dim // heads)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_types([gguf.TokenType.CONTROL if t == "<|endoftext|>" else gguf.TokenType.NORMAL for t in tokens])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)
    rng = np.random.default_rng(seed)

    def dense(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    def linear(name, rows, cols):
        writer.add_tensor(name, quantize(dense(rows, cols), gguf.GGMLQuantizationType.Q8_0),
                          raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    writer.add_tensor("token_embd.weight", dense(vocab, dim))
    for block in range(layers):
        writer.add_tensor(f"blk.{block}.attn_norm.weight", np.ones(dim, np.float32))
        linear(f"blk.{block}.attn_q.weight", dim, dim)
        linear(f"blk.{block}.attn_k.weight", kv_heads * dim // heads, dim)
        linear(f"blk.{block}.attn_v.weight", kv_heads * dim // heads, dim)
        linear(f"blk.{block}.attn_output.weight", dim, dim)
        writer.add_tensor(f"blk.{block}.ffn_norm.weight", np.ones(dim, np.float32))
        linear(f"blk.{block}.ffn_gate.weight", ffn, dim)
        linear(f"blk.{block}.ffn_up.weight", ffn, dim)
        linear(f"blk.{block}.ffn_down.weight", dim, ffn)
    writer.add_tensor("output_norm.weight", np.ones(dim, np.float32))
    writer.add_tensor("output.weight", dense(vocab, dim))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
