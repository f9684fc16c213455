"""The faithfulness job records, with the probabilities, the highlight spans its three passes read
(``studies.faithfulness_rules.SPANS_KEY``): scoring leaves the probabilities out once the rationale's
highlights differ from them."""
from __future__ import annotations

import pytest

from studies import demo
from studies.faithfulness_rules import DIFFER, MATCH, spans_state
from studies.models import Rationale, RationaleSource
from studies.services import generation
from studies.services.importers import rationales_import

from .test_faithfulness import demo_items, highlight_file

pytestmark = pytest.mark.django_db


@pytest.mark.lm
def test_the_job_records_the_spans_it_scored(tmp_path, lm_models):
    pytest.importorskip("torch")
    items = demo_items()[:2]
    rationales_import(file=highlight_file(tmp_path, items), dataset_name=demo.DATASET_NAME)
    source = RationaleSource.objects.get(name="highlighter")
    job = generation.generation_job_run(job_id=generation.generation_job_create(
        kind="faithfulness", source=source, dataset=items[0].dataset, enqueue=False,
        params={"task_model": str(lm_models["classifier"]), "task_backend": "classifier"}).pk)
    assert (job.status, job.done, job.failed) == ("done", 2, 0)
    for r in Rationale.objects.filter(source=source):
        assert r.faithfulness["job_id"] == job.pk and r.faithfulness["highlights"] == r.highlights
        assert spans_state(r.faithfulness, r.highlights) == MATCH
    Rationale.objects.filter(source=source).update(highlights=[[0, 1]])  # edited since (admin, API, import)
    assert all(spans_state(r.faithfulness, r.highlights) == DIFFER for r in Rationale.objects.filter(source=source))
