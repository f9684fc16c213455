"""A fine-tuning job is one long batch, so the rule that stops a job whose researcher may no longer
start jobs (``lifecycle.creator_refusal``, applied when each batch starts) is also applied while it
trains: at each progress report (one step in 50, and the last) and once more right before the
checkpoint is written. A job stopped so is cancelled with the reason the other jobs get, and
writes nothing: no model folder (nor a partial one), no rationale source."""
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from studies.models import GenerationJob, RationaleSource
from studies.services.generation import finetune, finetune_t5, generation_job_create
from studies.services.generation.lifecycle import StepProgress
from tests.api.conftest import grant

from .conftest import make_items

pytestmark = pytest.mark.django_db
RESEARCHER = ("studies.view_generationjob", "studies.add_generationjob", "studies.view_dataset", "studies.view_item", "studies.view_rationalesource")
WHY = {"permission removed": "they no longer hold studies.add_generationjob",
       "deactivated": "their account was deactivated"}


def _researcher(name):
    return grant(get_user_model().objects.create_user(username=name, password="pw", is_staff=True), *RESEARCHER)


def _take_right(user, how: str) -> None:
    """What an administrator does to ``user`` (the running job holds its own copy of the user)."""
    user = get_user_model().objects.get(pk=user.pk)
    if how == "deactivated":
        user.is_active = False
        user.save(update_fields=["is_active"])
    else:
        user.user_permissions.remove(Permission.objects.get(content_type__app_label="studies",
                                                            codename="add_generationjob"))


def _refused(job: GenerationJob, how: str) -> str:
    return f"Cancelled: {job.created_by} who started this job may no longer start LM jobs ({WHY[how]})."


def _nothing_written(job: GenerationJob, output_name: str) -> None:
    assert "output_source_id" not in job.params and "checkpoint" not in job.params
    assert not RationaleSource.objects.filter(name=output_name).exists()
    assert not [p.name for p in settings.RL_MODEL_DIR.iterdir() if p.name.startswith(output_name)]


@pytest.fixture
def steps_seen(monkeypatch):
    """The training loop's steps as its ``on_step`` callback sees them, and a hook run at one step
    before the job's own callback: what an administrator does while the job trains."""
    seen = {"steps": [], "at": None, "do": None, "after": None}
    real = finetune.train_seq2seq

    def train(*args, on_step, **kwargs):
        def step(number, loss):
            seen["steps"].append(number)
            if number == seen["at"]:
                seen["do"]()
            return on_step(number, loss)

        result = real(*args, on_step=step, **kwargs)
        if seen["after"] is not None:  # training is over, the checkpoint not yet written
            seen["after"]()
        return result

    monkeypatch.setattr(finetune, "train_seq2seq", train)
    return seen


@pytest.mark.lm
@pytest.mark.parametrize("how", ["permission removed", "deactivated"])
def test_a_fine_tuning_job_stops_at_its_next_report_once_its_researcher_loses_the_right(
        lm_models, train_items, strategyqa_dataset, steps_seen, how):
    pytest.importorskip("torch")
    bob = _researcher("bob")
    name = f"bobs-answerer-{how.split()[0]}"
    # 100 steps: a report every 2 steps. Bob loses the right during step 3, which is not reported.
    steps_seen.update(at=3, do=lambda: _take_right(bob, how))
    job = finetune_t5(dataset=strategyqa_dataset, mode="answer_i", base_model=str(lm_models["t5"]), steps=100,
                      batch_size=2, output_name=name, user=bob)

    assert steps_seen["steps"] == [1, 2, 3, 4]  # stopped at the next report, not after 100 steps
    assert (job.status, job.cancel_requested, job.done) == ("cancelled", True, 4)
    assert job.error == _refused(job, how) and job.finished_at is not None
    _nothing_written(job, name)


@pytest.mark.lm
def test_a_fine_tuning_job_rechecks_the_right_right_before_writing_its_checkpoint(
        lm_models, train_items, strategyqa_dataset, steps_seen):
    pytest.importorskip("torch")
    bob = _researcher("bob")
    # Every step was reported while Bob held the right; he loses it before the checkpoint is written.
    steps_seen.update(after=lambda: _take_right(bob, "deactivated"))
    job = finetune_t5(dataset=strategyqa_dataset, mode="answer_i", base_model=str(lm_models["t5"]), steps=3,
                      batch_size=2, output_name="bobs-last-minute", user=bob)

    assert steps_seen["steps"] == [1, 2, 3]
    assert (job.status, job.done) == ("cancelled", 3)
    assert job.error == _refused(job, "deactivated")
    _nothing_written(job, "bobs-last-minute")


def test_a_report_reads_the_researchers_right_afresh_in_a_few_queries(
        strategyqa_dataset, strategyqa_train_rows, django_assert_num_queries, django_assert_max_num_queries):
    make_items(strategyqa_dataset, strategyqa_train_rows[:8], "train")
    bob = _researcher("bob")
    job = generation_job_create(kind="finetune", dataset=strategyqa_dataset, enqueue=False, user=bob,
                                params={"mode": "answer_i", "base_model": "t5-base", "preset": "quick", "steps": 10})
    progress = StepProgress(job.pk, total=10, every=2, creator_checked=True)
    with django_assert_num_queries(0):
        assert progress.report(1) is True  # not a reported step: nothing asked
    # the progress update, the job with Bob, Bob's permissions, the inputs check's read of the dataset
    with django_assert_max_num_queries(5):
        assert progress.report(2) is True

    _take_right(bob, "permission removed")
    assert progress.report(3) is True
    assert progress.report(4) is False
    job.refresh_from_db()
    assert (job.status, job.done, job.error) == ("cancelled", 4, _refused(job, "permission removed"))
