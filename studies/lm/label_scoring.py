"""Probabilities of an item's answer labels under a task model: what the faithfulness producer
runs three times per item (full input, highlight only, input without the highlight).

- ``classifier``: ``AutoModelForSequenceClassification`` on the (possibly reduced) question; its
  classes are matched to the item's choice labels by name (``id2label``: "yes"/"no", "True"/"False",
  "a".."d" or the choice texts); the softmax is taken over the matched classes.
- ``seq2seq``: our plain answer prompt (``answer {dataset} question: ... <extra_id_0>``,
  :data:`studies.lm.templates.T5_ANSWER`, the F^I input: not a FEB template, SPEC section 8 gives
  none for a plain answer); each choice's target ``<extra_id_0> {answer} <extra_id_1>`` is scored by
  its summed token log-probability.
- ``causal``: ``Question: ... / Choices: ... / Answer:``, each choice scored as the continuation
  `` {answer}``.

For the generative ones the probability of a label is the softmax of the choices' summed
log-probabilities (the label words compete only with each other). Models load once per process
through :func:`studies.lm.backends.load_transformers_model` (GGUF files included)."""
from __future__ import annotations

import math

from . import templates
from .backends import BackendError, load_transformers_model, loaded_run_info
from .parsing import match_answer

TASK_BACKENDS = ("classifier", "seq2seq", "causal")

# How each backend turns a task model into label probabilities (the code below), as the
# faithfulness job stores it with the probabilities (``"method"``), and the template its model
# reads (``"prompt"``: the question slot holds x, h or x \ h). Keep them in step with the code.
LABEL_METHODS = {
    "classifier": ("softmax over the classifier's classes matched to the choice labels by name (id2label), the "
                   "classes that match no choice left out; the input is the question alone (truncated to 512 "
                   "tokens)"),
    "seq2seq": ("softmax over the choices of each choice's summed token log-probability of the target "
                f"{templates.T5_ANSWER_TARGET!r} (answer: the label for yes/no, else the choice text; with the "
                "tokenizer's end token) given the prompt (truncated to 512 tokens)"),
    "causal": ("softmax over the choices of each choice's summed token log-probability of the continuation "
               "' {answer}' (the label for yes/no, else the choice text) after the prompt"),
}
LABEL_PROMPTS = {
    "classifier": "{question}",
    "seq2seq": templates.T5_ANSWER,
    "causal": templates.CAUSAL_ANSWER,
}


def _softmax(scores: list[float]) -> list[float]:
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


class LabelScorer:
    def __init__(self, backend: str, model_name_or_path: str):
        if backend not in TASK_BACKENDS:
            raise BackendError(f"task backend must be one of {', '.join(TASK_BACKENDS)}, not {backend!r}")
        self.backend = backend
        self.model_name = model_name_or_path
        self.loaded = load_transformers_model(backend, model_name_or_path)

    def run_info(self) -> dict:
        """The device, dtype and library versions its probabilities were computed with
        (``backends.loaded_run_info``), stored with them (``backends.backend_run_info``)."""
        return loaded_run_info(self.loaded)

    def probabilities(self, items: list[templates.PromptItem]) -> list[dict[str, float]]:
        """For each item, ``{choice label: probability}`` summing to 1."""
        import torch

        with torch.inference_mode():
            if self.backend == "classifier":
                return self._classify(items)
            return [self._generative(item) for item in items]

    # --- sequence classification -------------------------------------------------------------
    def _class_labels(self, item: templates.PromptItem) -> dict[str, int]:
        id2label = getattr(self.loaded.model.config, "id2label", None) or {}
        found: dict[str, int] = {}
        for index, name in id2label.items():
            label = match_answer(str(name), item)
            if label is not None and label not in found:
                found[label] = int(index)
        missing = [label for label, _ in item.choices if label not in found]
        if missing:
            raise BackendError(
                f"classifier {self.model_name!r}: its classes {sorted(map(str, id2label.values()))} name no class "
                f"for the choice(s) {missing}; set id2label in its config to the choice labels"
            )
        return found

    def _classify(self, items: list[templates.PromptItem]) -> list[dict[str, float]]:
        tokenizer, model = self.loaded.tokenizer, self.loaded.model
        batch = tokenizer([item.question for item in items], return_tensors="pt", padding=True, truncation=True,
                          max_length=min(int(tokenizer.model_max_length or 512), 512))
        batch = {k: v.to(self.loaded.device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
        logits = model(**batch).logits.float().cpu()
        out = []
        for item, row in zip(items, logits, strict=True):
            classes = self._class_labels(item)
            labels = [label for label, _ in item.choices]
            probs = _softmax([float(row[classes[label]]) for label in labels])
            out.append(dict(zip(labels, probs, strict=True)))
        return out

    # --- label words under a generative model -------------------------------------------------
    def _generative(self, item: templates.PromptItem) -> dict[str, float]:
        labels = [label for label, _ in item.choices]
        if self.backend == "seq2seq":
            scores = self._seq2seq_scores(item, labels)
        else:
            scores = self._causal_scores(item, labels)
        return dict(zip(labels, _softmax(scores), strict=True))

    def _seq2seq_scores(self, item: templates.PromptItem, labels: list[str]) -> list[float]:
        import torch

        tokenizer, model, device = self.loaded.tokenizer, self.loaded.model, self.loaded.device
        prompt = templates.t5_answer_input(item)
        targets = [templates.t5_answer_target(templates.PromptItem(
            question=item.question, choices=item.choices, dataset=item.dataset, answer=label)) for label in labels]
        enc = tokenizer([prompt] * len(labels), return_tensors="pt", truncation=True, max_length=512)
        tgt = tokenizer(targets, return_tensors="pt", padding=True)
        labels_ids = tgt["input_ids"].masked_fill(tgt["attention_mask"] == 0, -100)
        logits = model(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device),
                       labels=labels_ids.to(device)).logits.float().cpu()
        logp = torch.log_softmax(logits, dim=-1)
        mask = labels_ids != -100
        picked = logp.gather(-1, labels_ids.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return [float(v) for v in (picked * mask).sum(dim=1)]

    def _causal_scores(self, item: templates.PromptItem, labels: list[str]) -> list[float]:
        import torch

        tokenizer, model, device = self.loaded.tokenizer, self.loaded.model, self.loaded.device
        prompt_ids = tokenizer(templates.causal_answer_input(item), add_special_tokens=False)["input_ids"]
        conts = [tokenizer(" " + templates.answer_text(item, label), add_special_tokens=False)["input_ids"]
                 for label in labels]
        width = len(prompt_ids) + max(len(c) for c in conts)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(labels), width), pad, dtype=torch.long)
        mask = torch.zeros((len(labels), width), dtype=torch.long)
        for row, cont in enumerate(conts):  # right padded: real positions stay where they are
            seq = prompt_ids + cont
            ids[row, :len(seq)] = torch.tensor(seq)
            mask[row, :len(seq)] = 1
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float().cpu()
        logp = torch.log_softmax(logits, dim=-1)
        scores = []
        for row, cont in enumerate(conts):
            start = len(prompt_ids)
            scores.append(sum(float(logp[row, start + k - 1, token]) for k, token in enumerate(cont)))
        return scores
