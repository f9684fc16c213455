"""The released StrategyQA test split and the released study's outcomes as the scoring tests build
them: items written directly from the shared data (the studies importers are another area's work)."""
from __future__ import annotations

from studies.models import YES_NO_CHOICES, Dataset, Item, Study


def strategyqa_items_create(rows: list[dict], *, name: str = "StrategyQA") -> Dataset:
    dataset = Dataset.objects.create(name=name, task_format=Dataset.TaskFormat.YES_NO)
    Item.objects.bulk_create([
        Item(dataset=dataset, external_id=r["qid"], question=r["question"], choices=list(YES_NO_CHOICES),
             gold_answer="yes" if r["answer"] else "no", gold_rationale=r["rationale"], split="test")
        for r in rows
    ])
    return dataset


def imported_study_create(dataset: Dataset, *, name: str = "Joshi et al. 2023 released outcomes") -> Study:
    return Study.objects.create(name=name, dataset=dataset, split="test")
