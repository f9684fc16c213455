"""A Quark batch is ``checkpoint_every`` steps, and the rule that stops a job whose researcher may no
longer start jobs (``lifecycle.creator_refusal``) is applied when each batch starts. So it is also
applied while a batch trains, at each step's progress report, and once more right before the
selected checkpoint is published and registered as a source. A job stopped so is cancelled with the
reason the other jobs get; its run keeps the checkpoint of the step it stopped at (as a cancel
does) but nothing is published: no model folder (nor a partial one), no rationale source, no
report. Once the right is back, *Resume job* finishes it as the same run."""
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from studies.lm import quark
from studies.models import GenerationJob, RationaleSource
from studies.services.generation import generation_job_create, generation_job_resume, generation_job_run
from studies.services.generation import quark as quark_service
from tests.api.conftest import grant

from .test_quark_job import TINY

pytestmark = [pytest.mark.lm, pytest.mark.django_db, pytest.mark.usefixtures("fresh_quark_runs")]
torch = pytest.importorskip("torch")
RESEARCHER = ("studies.view_generationjob", "studies.add_generationjob", "studies.view_dataset", "studies.view_item",
              "studies.view_rationalesource")
WHY = {"permission removed": "they no longer hold studies.add_generationjob",
       "deactivated": "their account was deactivated"}


@pytest.fixture
def t5_source(lm_models):
    return RationaleSource.objects.create(name="tiny-t5", kind="lm", backend="seq2seq",
                                          model_name_or_path=str(lm_models["t5"]))


def _researcher(name):
    return grant(get_user_model().objects.create_user(username=name, password="pw", is_staff=True), *RESEARCHER)


def _set_right(user, how: str, *, held: bool) -> None:
    """What an administrator does to ``user`` (the running job holds its own copy of the user)."""
    user = get_user_model().objects.get(pk=user.pk)
    if how == "deactivated":
        user.is_active = held
        user.save(update_fields=["is_active"])
        return
    permission = Permission.objects.get(content_type__app_label="studies", codename="add_generationjob")
    (user.user_permissions.add if held else user.user_permissions.remove)(permission)


def _job(source, dataset, *, user, name):
    return generation_job_create(kind="quark", source=source, dataset=dataset, split="train", enqueue=False,
                                 user=user, params={"reward": "marker:is", "checkpoint_every": 2,
                                                    "max_accuracy_drop": 1.0, "register_without_gain": True,
                                                    "output_name": name, "settings": {**TINY, "steps": 6}})


def _nothing_published(job: GenerationJob, name: str) -> None:
    assert not {"output_source_id", "checkpoint", "report"} & set(job.params)
    assert not RationaleSource.objects.filter(name=name).exists()
    assert not [p.name for p in settings.RL_MODEL_DIR.iterdir() if p.name.startswith(name)]


def _losses(job: GenerationJob) -> list:
    return [(h["step"], h["loss"], h["kl"]) for h in job.params["history"]]


@pytest.fixture
def at_step(monkeypatch):
    """Run ``hooks[n]`` right after the trainer's step ``n`` (before that step is reported)."""
    hooks = {}
    advance = quark.QuarkTrainer.advance

    def stepped(self, *args, **kwargs):
        stats = advance(self, *args, **kwargs)
        hook = hooks.pop(self.step, None)
        if hook is not None:
            hook()
        return stats

    monkeypatch.setattr(quark.QuarkTrainer, "advance", stepped)
    return hooks


@pytest.mark.parametrize("how", ["permission removed", "deactivated"])
def test_a_quark_job_stops_at_the_next_step_once_its_researcher_loses_the_right_even_in_its_last_batch(
        t5_source, strategyqa_dataset, splits, at_step, how):
    straight = generation_job_run(job_id=_job(t5_source, strategyqa_dataset, user=None, name="operators-run").pk)
    assert straight.status == "done" and straight.params["report"]["registered_source"] is not None

    bob = _researcher("bob")
    name = f"bobs-quark-{how.split()[0]}"
    job = _job(t5_source, strategyqa_dataset, user=bob, name=name)
    # 6 steps in batches of 2: Bob loses the right during step 5, in the last batch (checked at its start).
    at_step[5] = lambda: _set_right(bob, how, held=False)
    job = generation_job_run(job_id=job.pk)

    assert (job.status, job.cancel_requested, job.done) == ("cancelled", True, 5)  # not 6, not finished
    assert job.error == f"Cancelled: bob who started this job may no longer start LM jobs ({WHY[how]})."
    assert job.params["checkpoint_step"] == 5 and job.finished_at is not None
    assert (quark_service.run_folder(job.pk) / "last" / quark.STATE_FILE).is_file()  # the run's own, whole
    assert not [p for p in quark_service.run_folder(job.pk).iterdir() if p.name.endswith((".partial", ".old"))]
    _nothing_published(job, name)

    # The right comes back and Bob resumes: the run goes on from step 5 as the same run, and registers.
    _set_right(bob, how, held=True)
    generation_job_resume(job=job, user=get_user_model().objects.get(pk=bob.pk), enqueue=False)
    resumed = generation_job_run(job_id=job.pk)
    assert (resumed.status, resumed.done, resumed.error) == ("done", 6, "")
    assert _losses(resumed) == _losses(straight)
    assert resumed.params["report"]["selected_step"] == straight.params["report"]["selected_step"]
    source = RationaleSource.objects.get(pk=resumed.params["output_source_id"])
    assert source.name == name and resumed.params["report"]["registered_source"]["name"] == name


def test_a_quark_job_rechecks_the_right_right_before_registering_its_checkpoint(
        t5_source, strategyqa_dataset, splits, monkeypatch):
    bob = _researcher("bob")
    job = _job(t5_source, strategyqa_dataset, user=bob, name="bobs-quark-last-minute")
    heldout = job.params["heldout_item_ids"]
    evaluate = quark_service.evaluate

    def heldout_after(trainer, prompts, reward, item_ids, **kwargs):
        result = evaluate(trainer, prompts, reward, item_ids, **kwargs)
        if item_ids == heldout and kwargs.get("reference") is False:  # the selected checkpoint, as the run ends
            _set_right(bob, "deactivated", held=False)
        return result

    # Every step was reported while Bob held the right; he loses it while the selected checkpoint is
    # evaluated on the held-out items, before it is published.
    monkeypatch.setattr(quark_service, "evaluate", heldout_after)
    job = generation_job_run(job_id=job.pk)

    assert (job.status, job.done, job.params["checkpoint_step"]) == ("cancelled", 6, 6)
    assert job.error == "Cancelled: bob who started this job may no longer start LM jobs (their account was deactivated)."
    _nothing_published(job, "bobs-quark-last-minute")

    monkeypatch.setattr(quark_service, "evaluate", evaluate)
    _set_right(bob, "deactivated", held=True)
    quark_service.forget_runs()  # and a fresh worker finishes it
    generation_job_resume(job=job, user=get_user_model().objects.get(pk=bob.pk), enqueue=False)
    resumed = generation_job_run(job_id=job.pk)
    assert (resumed.status, resumed.done) == ("done", 6)
    assert RationaleSource.objects.filter(name="bobs-quark-last-minute", pk=resumed.params["output_source_id"]).exists()
