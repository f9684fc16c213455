"""``/api/v1/generation-jobs/`` shows a fine-tuning job's ``params`` with how many items it trains
on (``train_items``), not the ids it recorded (``train_item_ids``: one per item of the split, which
made one job's row 110 KB on a 20,000-item split). The ids stay in the job's record (its admin
page shows them)."""
import pytest

from studies.services.generation import generation_job_create
from tests.factories import DatasetFactory
from tests.studies.lm.test_job_rights import _train_pool

pytestmark = pytest.mark.django_db
URL = "/api/v1/generation-jobs/"


def test_a_finetune_jobs_row_counts_its_training_items_instead_of_listing_them(make_user, client_for):
    ds = DatasetFactory(name="ds-params")
    _train_pool(ds)
    job = generation_job_create(kind="finetune", dataset=ds, split="train", user=None, enqueue=False,
                                params={"mode": "rationalizer", "base_model": "t5-small", "output_name": "op-ft"})
    assert len(job.params["train_item_ids"]) == 6  # recorded on the job
    client = client_for(make_user("op", superuser=True))

    rows = client.get(URL).json()
    rows = rows["results"] if isinstance(rows, dict) else rows
    detail = client.get(f"{URL}{job.pk}/").json()
    for params in ([r for r in rows if r["id"] == job.pk][0]["params"], detail["params"]):
        assert "train_item_ids" not in params
        assert params["train_items"] == 6
        assert params["data"]["items"] == 6 and params["mode"] == "rationalizer"  # the rest as recorded
    job.refresh_from_db()
    assert len(job.params["train_item_ids"]) == 6
