"""What every job kind shares once it runs (studies.services.generation.lifecycle): step progress
and cancel, finish, the crash-safe model-folder publish and the output-name check; and how the
package is wired: jobs are queued by a task name every process knows, with no import cycle."""
import os
import subprocess
import sys

import grimp
import pytest

from studies.models import GenerationJob, RationaleSource
from studies.services.generation import GenerationError, generation_job_cancel, generation_job_create
from studies.services.generation.jobs import RUN_TASK
from studies.services.generation.lifecycle import StepProgress, generation_job_finish, model_folder_publish
from tests.conftest import ROOT
from tests.studies.lm.conftest import make_items


@pytest.fixture
def finetune_job(strategyqa_dataset, strategyqa_train_rows):
    make_items(strategyqa_dataset, strategyqa_train_rows[:8], "train")
    return generation_job_create(kind="finetune", dataset=strategyqa_dataset, enqueue=False,
                                 params={"mode": "answer_i", "base_model": "t5-base", "preset": "quick", "steps": 10})


def running(job: GenerationJob) -> GenerationJob:
    """The job as the worker's first batch leaves it (``generation_job_run_batch`` starts it)."""
    GenerationJob.STATUS.move(job, GenerationJob.Status.RUNNING)
    return job


def test_step_progress_stores_steps_rate_and_eta_and_stops_once_the_job_is_cancelled(finetune_job, admin_user):
    progress = StepProgress(finetune_job.pk, total=10, every=2)
    assert progress.report(1) is True
    finetune_job.refresh_from_db()
    assert (finetune_job.done, finetune_job.rate) == (0, None)  # one step in two is reported

    assert progress.report(2) is True
    finetune_job.refresh_from_db()
    assert finetune_job.done == 2 and finetune_job.rate > 0
    assert finetune_job.eta_seconds == pytest.approx(8 / finetune_job.rate)

    generation_job_cancel(job=finetune_job, user=admin_user)
    assert progress.report(4) is False
    finetune_job.refresh_from_db()
    assert finetune_job.done == 4 and finetune_job.status == "cancelled"


def test_finish_moves_a_running_job_to_done_with_its_params_and_every_step_counted(finetune_job):
    running(finetune_job)
    generation_job_finish(job_id=finetune_job.pk, params={"output_source_id": 7})
    finetune_job.refresh_from_db()
    assert (finetune_job.status, finetune_job.done, finetune_job.eta_seconds) == ("done", finetune_job.total, 0.0)
    assert finetune_job.finished_at is not None
    assert finetune_job.params["output_source_id"] == 7 and finetune_job.params["mode"] == "answer_i"


def test_finish_leaves_a_job_cancelled_meanwhile_cancelled_but_keeps_what_it_made(finetune_job, admin_user):
    running(finetune_job)
    generation_job_cancel(job=finetune_job, user=admin_user)
    generation_job_finish(job_id=finetune_job.pk, params={"checkpoint": "somewhere"})
    finetune_job.refresh_from_db()
    assert finetune_job.status == "cancelled" and finetune_job.params["checkpoint"] == "somewhere"


def saving(name: str, text: str):
    """A ``write`` that saves as ``save_pretrained`` does: it makes the folder, then its files."""
    def write(partial):
        partial.mkdir()
        (partial / name).write_text(text)
    return write


def test_publishing_a_model_folder_replaces_it_whole_and_a_failed_write_leaves_the_old_one(tmp_path):
    folder = tmp_path / "models" / "my-model"
    model_folder_publish(folder, saving("weights.bin", "one"))
    model_folder_publish(folder, saving("config.json", "two"))
    assert sorted(p.name for p in folder.iterdir()) == ["config.json"]  # nothing of the old folder is left

    def crash(partial):
        saving("config.json", "half")(partial)
        raise OSError("disk full")

    with pytest.raises(OSError):
        model_folder_publish(folder, crash)
    assert (folder / "config.json").read_text() == "two"  # the worker died mid-write: the old model stands
    model_folder_publish(folder, saving("config.json", "three"))
    assert (folder / "config.json").read_text() == "three"
    assert sorted(p.name for p in folder.parent.iterdir()) == ["my-model"]  # no partial or old copy left


def test_a_training_job_may_not_take_the_name_of_a_source_that_is_not_a_model(
        strategyqa_dataset, strategyqa_train_rows, strategyqa_dev_rows):
    make_items(strategyqa_dataset, strategyqa_train_rows[:8], "train")
    make_items(strategyqa_dataset, strategyqa_dev_rows[:4], "dev")
    make_items(strategyqa_dataset, strategyqa_dev_rows[4:8], "test")
    policy = RationaleSource.objects.create(name="t5 policy", kind=RationaleSource.Kind.LM, backend="seq2seq",
                                            model_name_or_path="t5-base")
    RationaleSource.objects.create(name="gold", kind=RationaleSource.Kind.GOLD)
    for kind, source, params in (("finetune", None, {"mode": "answer_i", "base_model": "t5-base"}),
                                 ("quark", policy, {"reward": "marker:is"})):
        with pytest.raises(GenerationError, match="a non-LM rationale source is already named 'gold'"):
            generation_job_create(kind=kind, source=source, dataset=strategyqa_dataset, enqueue=False,
                                  params={**params, "output_name": "gold"})
        generation_job_create(kind=kind, source=source, dataset=strategyqa_dataset, enqueue=False,
                              params={**params, "output_name": "t5 policy"})  # an LM source's name: updated


def test_every_process_knows_the_task_that_jobs_are_queued_by():
    """A web process never imports studies.tasks itself: were the task unknown there, a job would
    go to the broker by name even where tasks run inline (CELERY_TASK_ALWAYS_EAGER)."""
    code = ("import django; django.setup(); from celery import current_app; "
            f"print({RUN_TASK!r} in current_app.tasks)")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.test"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "True"


def test_no_generation_module_imports_itself_back():
    """The package builds in one direction (errors < lifecycle < common < kinds < jobs < training),
    and the tasks that call it are above it (a module that imported studies.tasks would be found
    here: the tasks import the package)."""
    graph = grimp.build_graph("studies", cache_dir=None)
    package = "studies.services.generation"
    modules = {package, *graph.find_descendants(package)}
    cycles = [(module, chain) for module in sorted(modules) for imported in graph.find_modules_directly_imported_by(module)
              if (chain := graph.find_shortest_chain(importer=imported, imported=module))]
    assert cycles == []
