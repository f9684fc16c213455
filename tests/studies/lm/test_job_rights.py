"""Who may cancel and resume an LM job: the check sits in the services, so the admin's actions (and
any other caller) get the same answer. A researcher acts on the jobs they started while they may
start jobs; another researcher's job needs ``studies.change_generationjob``."""
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from studies.models import RationaleSource
from studies.services.generation import GenerationError, generation_job_cancel, generation_job_create
from tests.api.conftest import grant
from tests.factories import DatasetFactory, ItemFactory

pytestmark = pytest.mark.django_db
RESEARCHER = ("studies.view_generationjob", "studies.add_generationjob")


def staff(name, *perms):
    user = get_user_model().objects.create_user(username=name, password="pw", is_staff=True)
    return grant(user, *perms)


@pytest.fixture
def world():
    dataset = DatasetFactory(name="strategyqa")
    for _ in range(3):
        ItemFactory(dataset=dataset, split="dev")
    source = RationaleSource.objects.create(name="t5-local", kind="lm", backend="seq2seq", model_name_or_path="/m/t5")
    alice, bob = staff("alice", *RESEARCHER), staff("bob", *RESEARCHER)

    def job_of(user, **kw):
        return generation_job_create(kind="rationales", source=source, dataset=dataset, split="dev", user=user,
                                     enqueue=False, **kw)

    return alice, bob, job_of


def _post_action(user, action, job):
    client = Client()
    client.force_login(user)
    return client.post(reverse("admin:studies_generationjob_changelist"),
                       {"action": action, "_selected_action": [job.pk]}, follow=True)


def _messages(page) -> list[str]:
    return [str(m) for m in page.context["messages"]]


def test_a_researcher_cannot_cancel_another_researchers_job_through_the_admin(world):
    alice, bob, job_of = world
    bobs = job_of(bob)
    page = _post_action(alice, "cancel_jobs", bobs)
    bobs.refresh_from_db()
    assert (bobs.status, bobs.cancel_requested) == ("queued", False)
    assert f"job {bobs.pk}: not found or not yours to cancel" in _messages(page)


def test_a_researcher_cannot_resume_another_researchers_job_through_the_admin(world):
    alice, bob, job_of = world
    bobs = job_of(bob)
    generation_job_cancel(job=bobs, user=bob)
    page = _post_action(alice, "resume_jobs", bobs)
    bobs.refresh_from_db()
    assert bobs.status == "cancelled"
    assert f"job {bobs.pk}: not found or not yours to resume" in _messages(page)


def test_a_researcher_cancels_and_resumes_their_own_job_through_the_admin(world):
    alice, _, job_of = world
    mine = job_of(alice)
    _post_action(alice, "cancel_jobs", mine)
    mine.refresh_from_db()
    assert mine.status == "cancelled"
    _post_action(alice, "resume_jobs", mine)
    mine.refresh_from_db()
    assert mine.status == "queued"


def test_the_service_refuses_without_the_right_to_start_jobs_and_allows_the_change_permission(world):
    alice, bob, job_of = world
    mine = job_of(alice)
    alice.user_permissions.clear()
    alice = get_user_model().objects.get(pk=alice.pk)  # permissions are cached on the instance
    with pytest.raises(GenerationError, match="not found or not yours to cancel"):
        generation_job_cancel(job=mine, user=alice)
    operator = staff("olga", "studies.change_generationjob")
    assert generation_job_cancel(job=mine, user=operator).status == "cancelled"
    with pytest.raises(GenerationError, match="not found or not yours"):
        generation_job_cancel(job=job_of(bob), user=None)


def test_internal_job_parameters_are_refused_naming_the_key(world):
    alice, _, job_of = world
    with pytest.raises(GenerationError, match=r"params\.cursor, params\.usage: not a parameter of rationales jobs"):
        job_of(alice, params={"cursor": 10**9, "usage": {"used_requests": 0}})
    assert job_of(alice, params={"max_requests": 5}).params["max_requests"] == 5
