"""What a job reads is checked for its researcher when it is created (``generation_job_inputs_check``)
and again whenever it runs (``generation_job_inputs_refusal``, through ``lifecycle.job_refusal``):
at each batch's start, at fine-tuning's progress reports, on a resume and on beat's requeue of a
stalled job. A share revoked after a job started stops it with why, instead of leaving it reading
the hidden dataset batch after batch; a job so stopped is not resumed."""
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from studies.models import GenerationJob, RationaleSource, StudyShare
from studies.services.generation import (
    GenerationError,
    generation_job_cancel,
    generation_job_create,
    generation_job_resume,
    generation_job_run_batch,
    generation_jobs_resume_stalled,
)
from studies.services.generation.jobs import _start
from studies.services.generation.lifecycle import job_goes_on
from studies.services.studies import study_create
from tests.api.conftest import grant
from tests.factories import DatasetFactory, ItemFactory

from .test_job_rights import _train_pool

pytestmark = pytest.mark.django_db
STOPPED = "Cancelled: alice who started this job may no longer read what it reads (no dataset {} that you may use)."


@pytest.fixture
def shared():
    """Bob's private dataset, which Alice reads only through his study shared with her, and her job on it."""
    User = get_user_model()
    bob = User.objects.create_user(username="bob", password="pw", is_staff=True)
    alice = grant(User.objects.create_user(username="alice", password="pw", is_staff=True),
                  "studies.add_generationjob", "studies.view_generationjob", "studies.view_rationalesource")
    dataset = DatasetFactory(name="bobs-private")
    for _ in range(3):
        ItemFactory(dataset=dataset, split="dev")
    _train_pool(dataset)
    # Bob's study shows the dev items: a view share reads what the study shows (``items_for_jobs``).
    # A rationale job writes under its items, so Alice starts it while she may change Bob's study
    # (``items_to_build_on``); he has lowered her share to view since, which still reads the items.
    study = study_create(name="bobs-study", dataset=dataset, split="dev", owner=bob, user=None, consent_text="ok",
                         sources=[RationaleSource.objects.create(name="bob-imported", kind="imported")])
    share = StudyShare.objects.create(study=study, user=alice, level="change")
    source = RationaleSource.objects.create(name="alice-t5", kind="lm", backend="seq2seq", model_name_or_path="/nonexistent/t5-x")
    job = generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev",
                                user=grant(alice, "studies.change_study"), enqueue=False)
    StudyShare.objects.filter(pk=share.pk).update(level="view")
    share.refresh_from_db()
    return {"alice": alice, "dataset": dataset, "share": share, "job": job, "source": source}


def test_a_job_goes_on_while_its_researcher_still_reads_its_inputs(shared):
    assert _start(shared["job"].pk) is not None
    assert GenerationJob.objects.get(pk=shared["job"].pk).status == GenerationJob.Status.RUNNING


def test_a_revoked_share_stops_the_job_at_its_next_batch(shared):
    shared["share"].delete()
    assert generation_job_run_batch(job_id=shared["job"].pk) is False
    job = GenerationJob.objects.get(pk=shared["job"].pk)
    assert job.status == GenerationJob.Status.CANCELLED
    assert job.error == STOPPED.format(shared["dataset"].pk)
    assert generation_job_run_batch(job_id=job.pk) is False  # a second run changes nothing
    assert GenerationJob.objects.get(pk=job.pk).error == job.error


def test_a_job_stopped_so_is_not_resumed(shared):
    generation_job_cancel(job=shared["job"], user=shared["alice"])
    shared["share"].delete()
    alice = get_user_model().objects.get(pk=shared["alice"].pk)
    with pytest.raises(GenerationError, match=f"job {shared['job'].pk} cannot be resumed: alice who started this "
                                              "job may no longer read what it reads"):
        generation_job_resume(job=shared["job"], user=alice, enqueue=False)
    assert GenerationJob.objects.get(pk=shared["job"].pk).status == GenerationJob.Status.CANCELLED
    # With the share back, she resumes it.
    StudyShare.objects.create(study=shared["share"].study, user=alice, level="view")
    alice = get_user_model().objects.get(pk=alice.pk)
    assert generation_job_resume(job=shared["job"], user=alice, enqueue=False).status == GenerationJob.Status.QUEUED


def test_beat_cancels_a_stalled_job_whose_inputs_are_hidden_now(shared):
    shared["share"].delete()
    GenerationJob.objects.filter(pk=shared["job"].pk).update(updated_at=shared["job"].updated_at - timedelta(hours=1))
    assert generation_jobs_resume_stalled(stalled_after=timedelta(minutes=15), enqueue=False) == []
    job = GenerationJob.objects.get(pk=shared["job"].pk)
    assert job.status == GenerationJob.Status.CANCELLED and job.error == STOPPED.format(shared["dataset"].pk)


def test_a_long_job_stops_at_its_next_progress_report_once_its_source_is_hidden(shared):
    """Fine-tuning and Quark ask ``job_goes_on`` while they train: a source (here the policy) that
    the researcher no longer reads stops them too."""
    for _ in range(2):  # a held-out split of its own (Quark refuses one that shares items with validation)
        ItemFactory(dataset=shared["dataset"], split="test")
    # Training reads the train split, which no study shows: Alice may change Bob's study, so she may
    # build on its dataset (a view share reads only what the study shows: ``items_for_jobs``).
    StudyShare.objects.filter(pk=shared["share"].pk).update(level="change")
    alice = get_user_model().objects.get(pk=grant(shared["alice"], "studies.change_study").pk)
    job = generation_job_create(kind="quark", source=shared["source"], dataset=shared["dataset"], user=alice,
                                enqueue=False, params={"reward": "marker:is", "validation_split": "dev",
                                                       "heldout_split": "test"})
    assert job_goes_on(job.pk)
    alice.user_permissions.remove(*alice.user_permissions.filter(codename="view_rationalesource"))
    assert not job_goes_on(job.pk)
    job.refresh_from_db()
    assert job.status == GenerationJob.Status.CANCELLED
    assert f"no rationale source {shared['source'].pk} that you may use" in job.error
