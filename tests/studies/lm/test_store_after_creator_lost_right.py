"""A batch that is already generating when its researcher loses the right to start LM jobs stores
nothing for them: the check each batch's start makes (``lifecycle.creator_refusal``) is made again
under the job's lock where the batch would write its outputs (``ItemHandler._store_batch``), and the
job ends cancelled with the same reason; what the batch spent still counts against the job's budget."""
import pytest

from studies.models import GenerationFailure, GenerationJob, Rationale
from studies.services.generation import generation_job_run_batch
from studies.services.generation.rationales import RationaleHandler

from .test_job_rights import _hosted_source
from .test_job_start_rights import RESEARCHER, _job, _take_right, _user, dev_items, server  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("how", ["permission removed", "deactivated"])
def test_a_batch_generated_while_its_researcher_lost_the_right_is_not_stored_and_the_job_is_cancelled(
        dev_items, server, monkeypatch, how):  # noqa: F811
    bob = _user("bob", *RESEARCHER)
    source = _hosted_source(server)
    job = _job(source, dev_items, bob, batch_size=3)
    generate = RationaleHandler.generate

    def generate_then_lose_the_right(self, job, item_ids):
        output = generate(self, job, item_ids)  # the batch's requests were sent while Bob could start jobs
        _take_right(bob, how)
        return output

    monkeypatch.setattr(RationaleHandler, "generate", generate_then_lose_the_right)
    assert generation_job_run_batch(job_id=job.pk) is False
    assert len(server.requests) == 3  # the batch did generate

    job = GenerationJob.objects.get(pk=job.pk)
    why = "they no longer hold studies.add_generationjob" if how == "permission removed" else \
        "their account was deactivated"
    assert Rationale.objects.filter(source=source).count() == 0
    assert not GenerationFailure.objects.filter(job=job).exists()
    assert (job.status, job.cancel_requested, job.done) == ("cancelled", True, 0)
    assert job.error == f"Cancelled: bob who started this job may no longer start LM jobs ({why})."
    assert job.finished_at is not None
    assert job.params["usage"]["used_requests"] == 3  # what the batch spent still counts
