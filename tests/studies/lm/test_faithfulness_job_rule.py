"""The faithfulness job stores what the task model gave only where it follows the rule every write
of ``Rationale.faithfulness`` follows (``studies.faithfulness_rules``): a probability that is not one
(NaN, as a model in half precision may give) is recorded as a failure with what was computed, and
the rationale keeps what it had, instead of being stored for scoring to leave out."""
from __future__ import annotations

import pytest

from studies import demo
from studies.models import GenerationFailure, Rationale, RationaleSource
from studies.services import generation
from studies.services.importers import rationales_import

from .test_faithfulness import demo_items, highlight_file
from .test_faithfulness_rights import IMPORTED, StubScorer

pytestmark = pytest.mark.django_db


class NaNWithoutScorer(StubScorer):
    """The stub task model, whose third pass (the question without the highlight) gives NaN."""

    def __init__(self, backend, model_name_or_path):
        super().__init__(backend, model_name_or_path)
        self.passes = 0

    def probabilities(self, items):
        self.passes += 1
        out = super().probabilities(items)
        return [dict.fromkeys(p, float("nan")) for p in out] if self.passes == 3 else out


def test_a_value_breaking_the_rule_is_a_failure_and_the_rationale_keeps_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr("studies.services.generation.faithfulness.LabelScorer", NaNWithoutScorer)
    items = demo_items()[:2]
    rationales_import(file=highlight_file(tmp_path, items, probabilities=[IMPORTED, IMPORTED]),
                      dataset_name=demo.DATASET_NAME)
    source = RationaleSource.objects.get(name="highlighter")
    before = dict(Rationale.objects.filter(source=source).values_list("item_id", "faithfulness"))

    job = generation.generation_job_run(job_id=generation.generation_job_create(
        kind="faithfulness", source=source, item_ids=[i.pk for i in items], enqueue=False,
        params={"task_model": "/models/task", "task_backend": "classifier"}).pk)

    assert dict(Rationale.objects.filter(source=source).values_list("item_id", "faithfulness")) == before
    failures = list(GenerationFailure.objects.filter(job=job).order_by("item_id"))
    assert [f.item_id for f in failures] == sorted(i.pk for i in items)
    assert all(f.reason.startswith("faithfulness: p_without NaN is not a probability between 0 and 1")
               for f in failures), [f.reason for f in failures]
    assert '"p_without": NaN' in failures[0].raw_output
    assert job.failed == 2
