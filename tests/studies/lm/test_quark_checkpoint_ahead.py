"""A Quark batch publishes its checkpoint (``last``) and then records its step under the job's row
lock: a crash between the two leaves the folder one checkpoint ahead of ``params["checkpoint_step"]``.
The next run adopts the folder's step, history and evaluations (it is this job's run) and finishes
the job from there, instead of training the next steps and throwing them away as another delivery's
work forever. A folder ahead of the job that is not this job's run is never adopted."""
import json
from datetime import timedelta

import pytest

from studies.lm import quark
from studies.models import RationaleSource
from studies.services.generation import (
    generation_job_resume,
    generation_job_run,
    generation_jobs_resume_stalled,
)
from studies.services.generation import quark as quark_service
from studies.services.generation.lifecycle import model_folder_publish

from .test_quark_job import _job

pytestmark = [pytest.mark.lm, pytest.mark.django_db, pytest.mark.usefixtures("fresh_quark_runs")]
torch = pytest.importorskip("torch")


def _state(folder):
    return json.loads((folder / quark.STATE_FILE).read_text())


@pytest.fixture
def t5_source(lm_models):
    return RationaleSource.objects.create(name="tiny-t5", kind="lm", backend="seq2seq",
                                          model_name_or_path=str(lm_models["t5"]))


@pytest.fixture
def crashed(t5_source, strategyqa_dataset, splits, monkeypatch):
    """A 6-step job (checkpoint every 2) whose second batch published its checkpoint at step 4 and
    crashed before recording it: the job failed, recorded at step 2, its folder at step 4."""
    job = _job(t5_source, strategyqa_dataset, output_name="quark-ahead")
    crashes = []

    def publish_then_crash(folder, write, **kwargs):
        published = model_folder_publish(folder, write, **kwargs)
        if folder.name == "last" and _state(folder)["step"] == 4 and not crashes:
            crashes.append(folder)
            raise RuntimeError("worker killed right after the rename")
        return published

    monkeypatch.setattr(quark_service, "model_folder_publish", publish_then_crash)
    with pytest.raises(RuntimeError, match="right after the rename"):
        generation_job_run(job_id=job.pk)
    job.refresh_from_db()
    last = quark_service.run_folder(job.pk) / "last"
    assert (job.status, job.params["checkpoint_step"]) == ("failed", 2)  # done: 4, the steps reported
    assert _state(last)["step"] == 4
    quark_service.forget_runs()  # the worker restarts
    return job


def test_a_checkpoint_published_but_not_recorded_is_adopted_and_the_job_finishes(crashed, admin_user):
    generation_job_resume(job=crashed, user=admin_user, enqueue=False)
    job = generation_job_run(job_id=crashed.pk)
    assert (job.status, job.done, job.params["checkpoint_step"]) == ("done", 6, 6), (job.status, job.error)
    assert [h["step"] for h in job.params["history"]] == [1, 2, 3, 4, 5, 6]  # steps 3-4 from the folder's record
    assert [e["step"] for e in job.params["evaluations"]] == [0, 2, 4, 6]
    assert job.params["report"]["steps_run"] == 6 and job.params["report"]["registered_source"]["name"] == "quark-ahead"
    assert crashed.pk not in generation_jobs_resume_stalled(stalled_after=timedelta(0), enqueue=False)  # beat: nothing


def test_a_folder_ahead_that_is_not_this_jobs_run_is_never_adopted(crashed, admin_user):
    last = quark_service.run_folder(crashed.pk) / "last"
    state = _state(last)
    state["extra"]["job"] = {**state["extra"]["job"], "created_at": "2001-01-01T00:00:00+00:00"}  # an old job's
    (last / quark.STATE_FILE).write_text(json.dumps(state))
    generation_job_resume(job=crashed, user=admin_user, enqueue=False)
    job = generation_job_run(job_id=crashed.pk)
    assert (job.status, job.params["checkpoint_step"]) == ("failed", 2)  # done: 4, the steps reported
    assert job.error.startswith(f"job {job.pk}: the run checkpoint {last} is at step 4, ahead of the job's recorded "
                                "step 2, and is not this job's run")
    assert [h["step"] for h in job.params["history"]] == [1, 2]
    assert _state(last)["step"] == 4  # left as it is
