"""Who may start an LM job, and what becomes of a job whose researcher loses that right: starting
one needs ``studies.add_generationjob``, checked by ``generation_job_create`` itself, so the admin's
actions (which need only ``change`` on the source, generator or dataset) get the same answer as the
API. A job whose researcher may no longer start jobs (the permission removed, the account
deactivated) is cancelled, with that reason, when it would next run; the operator's jobs are
never stopped so."""
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import ProtectedError
from django.urls import reverse
from django.utils import timezone

from studies.models import GenerationJob, Item, QuestionGenerator, Rationale, RationaleSource
from studies.services.generation import (
    GenerationError,
    generation_job_cancel,
    generation_job_create,
    generation_job_resume,
    generation_job_run,
    generation_job_run_batch,
    generation_jobs_resume_stalled,
)
from tests.api.conftest import grant
from tests.factories import DatasetFactory, ItemFactory, staff

from .openai_server import OpenAIServer, completion
from .test_job_rights import RATIONALE_REPLY, _hosted_source, _train_pool

pytestmark = pytest.mark.django_db
RESEARCHER = ("studies.view_generationjob", "studies.add_generationjob", "studies.view_dataset", "studies.view_item", "studies.view_rationalesource")
REFUSED = "you may not start LM jobs (it needs the permission studies.add_generationjob)."


def _user(name, *perms, active=True):
    user = get_user_model().objects.create_user(username=name, password="pw", is_staff=True, is_active=active)
    return grant(user, *perms)


def _fresh(user):
    return get_user_model().objects.get(pk=user.pk)  # permissions are cached on the instance


def _without_job_start(user):
    user.user_permissions.remove(Permission.objects.get(content_type__app_label="studies",
                                                        codename="add_generationjob"))
    return _fresh(user)


@pytest.fixture
def dev_items():
    dataset = DatasetFactory(name="strategyqa")
    items = [ItemFactory(dataset=dataset, split="dev") for _ in range(3)]
    _train_pool(dataset)
    return items


@pytest.fixture
def server():
    with OpenAIServer(lambda path, body: (200, completion([RATIONALE_REPLY]), {})) as running:
        yield running


def _job(source, items, user, **kw):
    return generation_job_create(kind="rationales", source=source, dataset=items[0].dataset, split="dev", user=user,
                                 enqueue=False, **kw)


# --- starting a job ------------------------------------------------------------------------------
def test_the_service_refuses_a_user_who_may_not_start_jobs(dev_items):
    source = RationaleSource.objects.create(name="t5", kind="lm", backend="seq2seq", model_name_or_path="/m/t5")
    viewer = _user("vic", "studies.view_generationjob", "studies.change_rationalesource")
    gone = _user("gil", *RESEARCHER, active=False)  # an inactive account holds no permission
    for user in (viewer, gone):
        with pytest.raises(GenerationError) as refused:
            _job(source, dev_items, user)
        assert str(refused.value) == REFUSED
    assert not GenerationJob.objects.exists()

    assert _job(source, dev_items, _user("rae", *RESEARCHER)).created_by.username == "rae"
    assert _job(source, dev_items, None).by_operator  # the operator (a command) is never refused


def _admin_actions(dataset):
    lm = RationaleSource.objects.create(name="t5", kind="lm", backend="seq2seq", model_name_or_path="/m/t5")
    generator = QuestionGenerator.objects.create(name="gen", backend="seq2seq", model_name_or_path="/m/g")
    job = {"dataset": dataset.pk, "split": "dev", "batch_size": 2}
    return {
        "generate_rationales": ("rationalesource", lm, job),
        "generate_genu_answers": ("rationalesource", lm, {**job, "answerer_i": lm.pk, "answerer_ir": lm.pk}),
        "generate_faithfulness": ("rationalesource", lm, job),
        "generate_questions": ("questiongenerator", generator, job),
        "finetune_on_dataset": ("dataset", dataset, {"mode": "rationalizer", "base_model": "t5-small",
                                                     "split": "train"}),
    }


@pytest.mark.parametrize("action", ["generate_rationales", "generate_genu_answers", "generate_faithfulness",
                                    "generate_questions", "finetune_on_dataset"])
def test_the_admins_start_actions_refuse_a_researcher_without_the_job_permission(dev_items, action):
    # Every permission of the apps (change on sources, generators and datasets included) but
    # studies.add_generationjob: the admin's action is there, the job is not started.
    user, client = staff("rex")
    user = _without_job_start(user)
    assert user.has_perm("studies.change_rationalesource") and not user.has_perm("studies.add_generationjob")
    model, obj, data = _admin_actions(dev_items[0].dataset)[action]
    url = reverse(f"admin:studies_{model}_changelist")
    post = {"action": action, "_selected_action": [obj.pk]}
    for body in (post, {**post, "apply": "1", **data}):  # the form, then its submission
        page = client.post(url, body, follow=True)
        assert page.status_code == 200
        assert REFUSED in [str(m) for m in page.context["messages"]]
    assert not GenerationJob.objects.exists()


def test_the_admin_starts_a_job_for_a_researcher_with_the_job_permission(dev_items):
    _, client = staff("ria")
    source = RationaleSource.objects.create(name="t5", kind="lm", backend="seq2seq", model_name_or_path="/m/t5")
    client.post(reverse("admin:studies_rationalesource_changelist"), {
        "action": "generate_rationales", "_selected_action": [source.pk], "apply": "1",
        "dataset": dev_items[0].dataset.pk, "split": "dev", "batch_size": 2})
    assert GenerationJob.objects.get().created_by.username == "ria"


# --- a job whose researcher lost the right -------------------------------------------------------
def _take_right(user, how: str):
    if how == "deactivated":
        user.is_active = False
        user.save(update_fields=["is_active"])
        return _fresh(user)
    return _without_job_start(user)


@pytest.mark.parametrize("how", ["permission removed", "deactivated"])
def test_a_job_whose_researcher_may_no_longer_start_jobs_is_cancelled_when_it_runs(dev_items, server, how):
    bob = _user("bob", *RESEARCHER)
    source = _hosted_source(server)
    queued = _job(source, dev_items, bob, batch_size=1)
    running = _job(source, dev_items, bob, batch_size=1)
    assert generation_job_run_batch(job_id=running.pk)  # one item generated while Bob may start jobs
    assert Rationale.objects.filter(source=source).count() == 1
    asked = len(server.requests)

    _take_right(bob, how)
    why = "they no longer hold studies.add_generationjob" if how == "permission removed" else \
        "their account was deactivated"
    for job in (queued, running):
        job = generation_job_run(job_id=job.pk)
        assert (job.status, job.cancel_requested) == ("cancelled", True)
        assert job.error == f"Cancelled: bob who started this job may no longer start LM jobs ({why})."
        assert job.finished_at is not None
    assert len(server.requests) == asked and Rationale.objects.filter(source=source).count() == 1

    # Nobody queues it again for him: not an admin holding studies.change_generationjob ...
    admin = _user("olga", "studies.change_generationjob")
    with pytest.raises(GenerationError, match=f"job {queued.pk} cannot be resumed: bob who started it may no longer"):
        generation_job_resume(job=queued, user=admin, enqueue=False)
    assert GenerationJob.objects.get(pk=queued.pk).status == "cancelled"


def test_the_operators_jobs_and_a_deleted_researchers_run_as_before(dev_items, server):
    bob = _user("bob", *RESEARCHER)
    source = _hosted_source(server)
    orphan = _job(source, dev_items, bob)
    with pytest.raises(ProtectedError):  # the account of a researcher who started a job is kept
        bob.delete()
    # A job left without its researcher before that (SET_NULL) acts for nobody (stores only what no
    # study shows), and is not stopped.
    GenerationJob.objects.filter(pk=orphan.pk).update(created_by=None)
    assert generation_job_run(job_id=orphan.pk).status == "done"
    assert generation_job_run(job_id=_job(source, dev_items, None).pk).status == "done"


def test_beat_cancels_a_stalled_job_whose_researcher_lost_the_right_and_queues_the_others(dev_items, server):
    bob, ann = _user("bob", *RESEARCHER), _user("ann", *RESEARCHER)
    source = _hosted_source(server)
    bobs, anns, operators = (_job(source, dev_items, user) for user in (bob, ann, None))
    GenerationJob.objects.update(updated_at=timezone.now() - timedelta(hours=1))
    _take_right(bob, "permission removed")

    assert sorted(generation_jobs_resume_stalled(stalled_after=timedelta(minutes=5), enqueue=False)) == \
        sorted([anns.pk, operators.pk])
    bobs.refresh_from_db()
    assert bobs.status == "cancelled" and "bob who started this job may no longer start LM jobs" in bobs.error
    assert set(GenerationJob.objects.filter(status="queued").values_list("pk", flat=True)) == {anns.pk, operators.pk}


def test_a_researcher_who_may_start_jobs_again_resumes_the_cancelled_job(dev_items, server):
    bob = _user("bob", *RESEARCHER)
    source = _hosted_source(server)
    job = _job(source, dev_items, bob)
    _take_right(bob, "permission removed")
    assert generation_job_run(job_id=job.pk).status == "cancelled"

    bob = grant(_fresh(bob), "studies.add_generationjob")
    generation_job_resume(job=job, user=bob, enqueue=False)
    job = generation_job_run(job_id=job.pk)
    assert (job.status, job.error) == ("done", "")
    assert Rationale.objects.filter(source=source).count() == len(Item.objects.filter(split="dev"))
    with pytest.raises(GenerationError, match="only queued or running jobs can be cancelled"):
        generation_job_cancel(job=job, user=bob)
